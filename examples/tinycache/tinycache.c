/*
 * tinycache.c -- a small LRU expert cache (see tinycache.h).
 *
 * One mutex guards everything; a miss reads under it (simple, and slow under
 * contention, which is not what this cache is for) into a spare buffer that
 * trades places with the victim's only once the read is whole, so a failed
 * read leaves every resident as it was.  A slot is empty
 * (key < 0) or holds one expert; an expert is resident in at most one slot,
 * found through where[key].  A slot may be chosen as a victim only when it
 * has no holds and no pin flag.
 *
 * TC_DEFECT selects one planted bug (0: none), so that the conformance
 * suite can show each one turning exactly its own contract from PASS to
 * FAIL.  The defects are real mistakes an expert cache makes:
 *   1 a prefetch load is counted as a demand hit
 *   2 a prefetch may evict an expert the same call names
 *   3 keys are not bounds-checked (expert E of layer l aliases layer l+1)
 *   4 a read or open interrupted by a signal (EINTR) is not retried
 *   5 a short read is published as a resident expert
 *   6 a held expert may be chosen as a victim
 *   7 resetting the counters leaves the misses counting on
 */
#include "tinycache.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifndef TC_DEFECT
#define TC_DEFECT 0
#endif

typedef struct slot {
    int key;        /* layer * n_experts + expert, or -1 when empty */
    int holds;
    int pinned;     /* a flag, not a count */
    uint64_t used;  /* tick of the last get or load */
    size_t len;
    unsigned char *data;
} slot;

struct tc_cache {
    pthread_mutex_t mu;
    int n_layers, n_experts, n_slots;
    size_t slot_bytes;
    tc_loc *locs;   /* copied; paths point into names */
    char *names;
    int *fds;       /* one per key (files opened once, shared) */
    int *where;     /* key -> slot index, or -1 */
    slot *slots;
    unsigned char *spare;  /* a miss reads here, then trades with its slot */
    uint64_t tick;
    tc_counts n;
};

static int key_of(const tc_cache *c, int layer, int expert)
{
#if TC_DEFECT == 3
    if (layer < 0 || expert < 0)
        return -1;
    int k = layer * c->n_experts + expert;
    return k < c->n_layers * c->n_experts ? k : -1;
#else
    if (layer < 0 || layer >= c->n_layers || expert < 0 ||
        expert >= c->n_experts)
        return -1;
    return layer * c->n_experts + expert;
#endif
}

/* Interrupted reads in a row after which a read gives up (a signal storm
 * must not hang the caller). */
#define TC_MAX_RETRIES 1000

static int read_all(int fd, unsigned char *buf, uint64_t len, uint64_t off)
{
    uint64_t done = 0;
    unsigned tries = 0;
    while (done < len) {
        ssize_t got = pread(fd, buf + done, len - done, (off_t)(off + done));
        if (got < 0) {
#if TC_DEFECT != 4
            if (errno == EINTR && ++tries < TC_MAX_RETRIES)
                continue;
#else
            (void)tries;
#endif
            return TC_EIO;
        }
        tries = 0;
        if (got == 0) {
#if TC_DEFECT == 5
            return TC_OK;
#else
            return TC_EIO;
#endif
        }
        done += (uint64_t)got;
    }
    return TC_OK;
}

int tc_open(const tc_loc *locs, int n_layers, int n_experts, int n_slots,
            size_t slot_bytes, tc_cache **out)
{
    if (!locs || !out || n_layers < 1 || n_experts < 1 || n_slots < 1 ||
        slot_bytes == 0 || n_layers > (1 << 20) / n_experts)
        return TC_EINVAL;
    int n_keys = n_layers * n_experts;
    size_t name_bytes = 0;
    for (int k = 0; k < n_keys; k++) {
        if (!locs[k].path || locs[k].length > slot_bytes)
            return TC_EINVAL;
        name_bytes += strlen(locs[k].path) + 1;
    }
    tc_cache *c = calloc(1, sizeof *c);
    if (!c)
        return TC_ENOMEM;
    c->n_layers = n_layers;
    c->n_experts = n_experts;
    c->n_slots = n_slots;
    c->slot_bytes = slot_bytes;
    c->locs = calloc((size_t)n_keys, sizeof *c->locs);
    c->names = malloc(name_bytes);
    c->fds = malloc((size_t)n_keys * sizeof *c->fds);
    c->where = malloc((size_t)n_keys * sizeof *c->where);
    c->slots = calloc((size_t)n_slots, sizeof *c->slots);
    if (!c->locs || !c->names || !c->fds || !c->where || !c->slots) {
        tc_close(c);
        return TC_ENOMEM;
    }
    pthread_mutex_init(&c->mu, NULL);
    char *name = c->names;
    for (int k = 0; k < n_keys; k++) {
        c->fds[k] = -1;
        c->where[k] = -1;
    }
    for (int k = 0; k < n_keys; k++) {
        size_t len = strlen(locs[k].path) + 1;
        memcpy(name, locs[k].path, len);
        c->locs[k] = locs[k];
        c->locs[k].path = name;
        name += len;
        for (int j = 0; j < k; j++)
            if (strcmp(c->locs[j].path, c->locs[k].path) == 0) {
                c->fds[k] = c->fds[j];
                break;
            }
        if (c->fds[k] < 0) {
            do
                c->fds[k] = open(c->locs[k].path, O_RDONLY | O_CLOEXEC);
            while (c->fds[k] < 0 && errno == EINTR && TC_DEFECT != 4);
            if (c->fds[k] < 0) {
                tc_close(c);
                return TC_EOPEN;
            }
        }
    }
    c->spare = malloc(slot_bytes);
    if (!c->spare) {
        tc_close(c);
        return TC_ENOMEM;
    }
    for (int s = 0; s < n_slots; s++) {
        c->slots[s].key = -1;
        c->slots[s].data = malloc(slot_bytes);
        if (!c->slots[s].data) {
            tc_close(c);
            return TC_ENOMEM;
        }
    }
    *out = c;
    return TC_OK;
}

void tc_close(tc_cache *c)
{
    if (!c)
        return;
    if (c->fds)
        for (int k = 0; k < c->n_layers * c->n_experts; k++) {
            int shared = 0;
            for (int j = 0; j < k && !shared; j++)
                shared = c->fds[j] == c->fds[k];
            if (c->fds[k] >= 0 && !shared)
                close(c->fds[k]);
        }
    if (c->slots)
        for (int s = 0; s < c->n_slots; s++)
            free(c->slots[s].data);
    if (c->slots)
        pthread_mutex_destroy(&c->mu);
    free(c->slots);
    free(c->spare);
    free(c->where);
    free(c->fds);
    free(c->names);
    free(c->locs);
    free(c);
}

/* The least recently used slot that may be taken, skipping the keys in
 * avoid[0..n_avoid); -1 when there is none. */
static int victim(tc_cache *c, const int *avoid, int n_avoid)
{
    int best = -1;
    for (int s = 0; s < c->n_slots; s++) {
        slot *sl = &c->slots[s];
        if (sl->key < 0)
            return s;
#if TC_DEFECT != 6
        if (sl->holds > 0)
            continue;
#endif
        if (sl->pinned)
            continue;
        int named = 0;
        for (int i = 0; i < n_avoid && !named; i++)
            named = avoid[i] == sl->key;
        if (named)
            continue;
        if (best < 0 || sl->used < c->slots[best].used)
            best = s;
    }
    return best;
}

/* Reads key into a free or victim slot; returns the slot or a TC_E* code. */
static int load(tc_cache *c, int key, const int *avoid, int n_avoid)
{
    int s = victim(c, avoid, n_avoid);
    if (s < 0)
        return TC_EFULL;
    slot *sl = &c->slots[s];
    const tc_loc *at = &c->locs[key];
    int rc = read_all(c->fds[key], c->spare, at->length, at->offset);
    c->n.bytes_read += at->length;
    if (rc != TC_OK)
        return rc;  /* the victim keeps its expert, untouched */
    unsigned char *fresh = c->spare;
    c->spare = sl->data;
    sl->data = fresh;
    if (sl->key >= 0) {
        c->where[sl->key] = -1;
        c->n.evictions++;
    }
    sl->key = key;
    sl->holds = 0;
    sl->pinned = 0;
    sl->len = at->length;
    sl->used = ++c->tick;
    c->where[key] = s;
    return s;
}

int tc_get(tc_cache *c, int layer, int expert, const void **data, size_t *len)
{
    if (!c || !data || !len)
        return TC_EINVAL;
    pthread_mutex_lock(&c->mu);
    int key = key_of(c, layer, expert), rc = TC_OK;
    if (key < 0) {
        rc = TC_EINVAL;
        goto out;
    }
    c->n.lookups++;
    int s = c->where[key];
    if (s >= 0) {
        c->n.hits++;
    } else {
        c->n.misses++;
        s = load(c, key, NULL, 0);
        if (s < 0) {
            rc = s;
            goto out;
        }
    }
    c->slots[s].holds++;
    c->slots[s].used = ++c->tick;
    *data = c->slots[s].data;
    *len = c->slots[s].len;
out:
    pthread_mutex_unlock(&c->mu);
    return rc;
}

int tc_release(tc_cache *c, int layer, int expert)
{
    if (!c)
        return TC_EINVAL;
    pthread_mutex_lock(&c->mu);
    int key = key_of(c, layer, expert), rc = TC_OK;
    if (key < 0)
        rc = TC_EINVAL;
    else if (c->where[key] < 0 || c->slots[c->where[key]].holds == 0)
        rc = TC_ENOTRES;
    else
        c->slots[c->where[key]].holds--;
    pthread_mutex_unlock(&c->mu);
    return rc;
}

int tc_prefetch(tc_cache *c, const int *keys, int n)
{
    if (!c || (!keys && n > 0) || n < 0)
        return TC_EINVAL;
    pthread_mutex_lock(&c->mu);
    int rc = 0, *named = malloc(((size_t)n + 1) * sizeof *named);
    if (!named) {
        rc = TC_ENOMEM;
        goto out;
    }
    for (int i = 0; i < n; i++) {
        named[i] = key_of(c, keys[2 * i], keys[2 * i + 1]);
        if (named[i] < 0) {
            rc = TC_EINVAL;
            goto out;
        }
    }
    /* first every resident the call names counts as used (the router chose
     * it), then the others load, each in the order named, once */
    for (int i = 0; i < n; i++) {
        int seen = 0;
        for (int j = 0; j < i && !seen; j++)
            seen = named[j] == named[i];
        if (seen)
            named[i] = -1;  /* named before: once is enough */
        else if (c->where[named[i]] >= 0)
            c->slots[c->where[named[i]]].used = ++c->tick;
    }
    for (int i = 0; i < n; i++) {
        if (named[i] < 0 || c->where[named[i]] >= 0)
            continue;
#if TC_DEFECT == 2
        int s = load(c, named[i], NULL, 0);
#else
        int s = load(c, named[i], named, n);
#endif
        if (s < 0)  /* no slot, or the read failed: the rest still load */
            continue;
#if TC_DEFECT == 1
        c->n.lookups++;
        c->n.hits++;
#endif
        rc++;
    }
out:
    free(named);
    pthread_mutex_unlock(&c->mu);
    return rc;
}

static int set_pin(tc_cache *c, int layer, int expert, int on)
{
    if (!c)
        return TC_EINVAL;
    pthread_mutex_lock(&c->mu);
    int key = key_of(c, layer, expert), rc = TC_OK;
    if (key < 0)
        rc = TC_EINVAL;
    else if (c->where[key] < 0)
        rc = TC_ENOTRES;
    else
        c->slots[c->where[key]].pinned = on;
    pthread_mutex_unlock(&c->mu);
    return rc;
}

int tc_pin(tc_cache *c, int layer, int expert)
{
    return set_pin(c, layer, expert, 1);
}

int tc_unpin(tc_cache *c, int layer, int expert)
{
    return set_pin(c, layer, expert, 0);
}

int tc_resident(tc_cache *c, int layer, int expert)
{
    if (!c)
        return 0;
    pthread_mutex_lock(&c->mu);
    int key = key_of(c, layer, expert);
    int yes = key >= 0 && c->where[key] >= 0;
    pthread_mutex_unlock(&c->mu);
    return yes;
}

void tc_counts_get(tc_cache *c, tc_counts *out)
{
    pthread_mutex_lock(&c->mu);
    *out = c->n;
    pthread_mutex_unlock(&c->mu);
}

void tc_reset_counts(tc_cache *c)
{
    pthread_mutex_lock(&c->mu);
#if TC_DEFECT == 7
    uint64_t misses = c->n.misses;
    memset(&c->n, 0, sizeof c->n);
    c->n.misses = misses;
#else
    memset(&c->n, 0, sizeof c->n);
#endif
    pthread_mutex_unlock(&c->mu);
}
