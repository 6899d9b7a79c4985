/*
 * xc_cache.c -- the expert cache: slots, victims, holds, pins, counters.
 *
 * One slot's life
 * ---------------
 * A slot is a fixed piece of one arena.  It starts EMPTY.  A get() that
 * misses, or a getmany() that reserves, takes it and marks it INFLIGHT with
 * the key it is about to hold; from then on the key is "in the cache" for
 * lookup purposes, so a second get() of the same key waits for this read
 * instead of starting another one into another slot.  The read runs with
 * the lock released.  When every byte has arrived the slot becomes READY:
 * the key is served, its bytes never change again until the slot is chosen
 * as a victim.  A failed or short read turns the slot back to EMPTY, the
 * waiters wake, look up again, miss, and load the key themselves.  A READY
 * slot that nobody holds or pins can be chosen as a victim; it goes straight
 * to INFLIGHT for its new key (there is no "evicted" state in between).
 *
 *          reserve (miss, batch)        payload whole
 *   EMPTY -----------------------> INFLIGHT ---------> READY
 *     ^                               |                 |
 *     +--------- read failed ---------+                 |
 *                                     ^  victim, unprotected
 *                                     +-----------------+
 *
 * Slot memory
 * -----------
 *   arena (one XC_ALIGN-aligned allocation, n_slots x stride bytes)
 *   +---------------------------+---------------------------+-- ...
 *   | slot 0                    | slot 1                    |
 *   | pad | w1 | s1 | w2 | ...  | pad | payload  |  spare   |
 *   +---------------------------+---------------------------+-- ...
 *   ^ slot * stride    ^ payload_off from the slot start (0 unless reads
 *                        are widened for O_DIRECT)
 *   stride = round_up(expert_bytes + 2 * XC_ALIGN, XC_ALIGN): a widened
 *   read starts up to XC_ALIGN - 1 bytes early and ends up to XC_ALIGN - 1
 *   bytes late, and every slot starts aligned.
 *
 * Why each rule exists
 * --------------------
 * - INFLIGHT is never a victim, never served, never given to a second read:
 *   otherwise two reads could race into one slot, or a consumer could see a
 *   half-written expert that looks resident.  That is the silent bug this
 *   cache exists to rule out.
 * - READY only after the whole payload arrived (chunk by chunk, each
 *   verified whole): a short read published as resident is a wrong token.
 * - "Protected" is one predicate, holds + pins > 0 (SLOT_PROTECTED).  A
 *   getmany() protects the residents it names by taking a hold of its own
 *   for the rest of the call, so there is still only one predicate.
 * - The clock is logical and unique per touch, so every recency rule is a
 *   total order and the numpy oracle reproduces every victim exactly.
 * - The policy sees only candidates (xc_policy.h), never this file's
 *   structures, so an offline simulator runs the same policy code.
 * - Counters change only under the lock and only together with the state
 *   they describe, so check() can relate them (INV-COUNTERS, INV-PREFETCH)
 *   at any call boundary, even with other threads mid-call.
 *
 * Locking: one mutex guards every slot field, the index, the clock, the
 * counters and the policy.  Reads run without it.  `ended` is broadcast
 * whenever an INFLIGHT slot ends (published or failed).  The batch readers
 * have their own mutex (pool_mu) that is never held together with mu.
 */
#include "xc_internal.h"
#include "xc_load.h"
#include "xc_policy.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct slot {
    uint8_t state;        /* XC_SLOT_* */
    uint8_t mark;         /* unused-prefetch mark */
    uint32_t key;         /* valid unless EMPTY */
    uint32_t holds, pins;
    uint32_t generation;  /* bumped at each publish */
    uint64_t last_use, insert_tick, freq;
    uint64_t payload_off;
} slot;

#define SLOT_PROTECTED(s) ((s)->holds != 0 || (s)->pins != 0)

/* One reservation of a getmany(): filled under mu, read without it. */
typedef struct resv {
    int32_t slot;
    uint32_t key;
    int rc;
    uint64_t payload_off, asked_bytes, ns;
} resv;

/* A batch handed to the readers; lives on the caller's stack. */
typedef struct job {
    struct job *next;
    resv *items;
    size_t n, next_item, n_done;
} job;

struct xc_cache {
    pthread_mutex_t mu;
    pthread_cond_t ended;
    xc_loader ld;
    xc_policy pol;
    size_t n_slots;
    int top_k;
    uint8_t *arena;
    slot *slots;
    int32_t *index;        /* key -> slot, -1 when not in the cache */
    xc_pcand *cand;        /* scratch for victim choice and check() */
    int32_t *scratch;      /* per key, for check() */
    uint64_t *seen;        /* per key: batch number that last named it */
    uint64_t batch_seq;
    uint64_t tick;
    uint32_t n_reads;      /* reads under way == INFLIGHT slots */
    uint64_t evictions_since_open, requests_since_open;
    xc_stats st;           /* prefetch_unused_resident unused here */

    pthread_mutex_t pool_mu;
    pthread_cond_t pool_work, pool_done;
    job *jobs;
    int pool_stop;
    int n_workers;
    pthread_t *workers;
};

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static uint8_t *slot_mem(const xc_cache *c, int32_t s)
{
    return c->arena + (size_t)s * c->ld.stride;
}

static void touch(xc_cache *c, slot *s)
{
    s->last_use = ++c->tick;
}

/* ------------------------------------------------------------------ */
/* Victims                                                              */
/* ------------------------------------------------------------------ */

/* docs/CACHE.md "Victim choice": the lowest EMPTY slot, else the policy's
 * pick among READY unprotected slots, else -1.  Pure. */
static int32_t choose_victim(xc_cache *c)
{
    size_t i, n = 0;
    for (i = 0; i < c->n_slots; i++)
        if (c->slots[i].state == XC_SLOT_EMPTY)
            return (int32_t)i;
    for (i = 0; i < c->n_slots; i++) {
        const slot *s = &c->slots[i];
        if (s->state != XC_SLOT_READY || SLOT_PROTECTED(s))
            continue;
        c->cand[n].slot = (int32_t)i;
        c->cand[n].key = s->key;
        c->cand[n].last_use = s->last_use;
        c->cand[n].insert_tick = s->insert_tick;
        c->cand[n].freq = s->freq;
        n++;
    }
    if (n == 0)
        return -1;
    return c->cand[c->pol.ops->to_evict(&c->pol, c->cand, n)].slot;
}

/* Takes victim s for key: counts the eviction if it held a key, and leaves
 * the slot INFLIGHT, owned by the caller's read. */
static void reserve(xc_cache *c, int32_t si, uint32_t key)
{
    slot *s = &c->slots[si];
    if (s->state == XC_SLOT_READY) {
        c->st.evictions++;
        c->evictions_since_open++;
        if (s->mark)
            c->st.prefetch_evicted_unused++;
        c->index[s->key] = -1;
        xc_policy_evict(&c->pol, s->key);
    }
    s->state = XC_SLOT_INFLIGHT;
    s->key = key;
    s->mark = 0;
    c->index[key] = si;
    c->n_reads++;
}

/* Ends the read of INFLIGHT slot si.  Success publishes it (demand: freq 1;
 * batch: freq 0 and the unused mark); failure empties it and counts why. */
static void finish(xc_cache *c, int32_t si, int rc, uint64_t payload_off,
                   uint64_t asked_bytes, uint64_t ns, int demand)
{
    slot *s = &c->slots[si];
    c->st.io_bytes += asked_bytes;
    c->st.load_ns += ns;
    c->n_reads--;
    if (rc == XC_OK) {
        s->state = XC_SLOT_READY;
        s->freq = demand ? 1 : 0;
        touch(c, s);
        s->insert_tick = s->last_use;
        s->generation++;
        s->payload_off = payload_off;
        c->st.payload_bytes += c->ld.expert_bytes;
        if (!demand) {
            s->mark = 1;
            c->st.prefetch_loads++;
        }
        xc_policy_insert(&c->pol, s->key);
    } else {
        c->index[s->key] = -1;
        s->state = XC_SLOT_EMPTY;
        s->key = 0;
        c->st.load_failures++;
        if (rc == XC_E_SHORT_READ)
            c->st.short_reads++;
        else
            c->st.io_errors++;
    }
}

static void fill_ref(const xc_cache *c, int32_t si, xc_ref *out)
{
    const slot *s = &c->slots[si];
    out->slot = si;
    out->generation = s->generation;
    out->data = slot_mem(c, si) + s->payload_off;
    out->nbytes = c->ld.expert_bytes;
}

/* ------------------------------------------------------------------ */
/* get                                                                  */
/* ------------------------------------------------------------------ */

/* Steps (4)-(6) of get, with mu held on entry and on return. */
static int get_miss(xc_cache *c, uint32_t key, int32_t layer, int32_t expert,
                    xc_ref *out)
{
    uint64_t payload_off = 0, asked = 0, t0, ns;
    int32_t si;
    int rc;

    /* (4) choose a victim; none leaves everything as it was */
    si = choose_victim(c);
    if (si < 0)
        return xc_fail(XC_E_ALL_PINNED, -1, layer, expert,
                       "layer %d expert %d: all %zu slots are held, pinned "
                       "or in flight", (int)layer, (int)expert, c->n_slots);
    c->st.requests++;
    c->st.misses++;
    c->requests_since_open++;
    xc_policy_request(&c->pol, key);
    reserve(c, si, key);

    /* (5) read, lock released: the slot is INFLIGHT and ours alone */
    pthread_mutex_unlock(&c->mu);
    t0 = now_ns();
    rc = xc_load_read(&c->ld, key, slot_mem(c, si), &payload_off, &asked);
    ns = now_ns() - t0;
    pthread_mutex_lock(&c->mu);

    /* (6) publish, or return the slot to EMPTY */
    finish(c, si, rc, payload_off, asked, ns, 1);
    pthread_cond_broadcast(&c->ended);
    if (rc != XC_OK)
        return rc; /* the loader recorded the error with layer and expert */
    c->slots[si].holds = 1;
    fill_ref(c, si, out);
    return XC_OK;
}

/*
 * get: (1) validate the key, (2) look up: READY is a hit -- hold and
 * return, (3) INFLIGHT: wait for that read to end and look up again,
 * (4) choose a victim, (5) read, (6) publish.  (4)-(6) are get_miss().
 */
int xc_cache_get(xc_cache *c, int32_t layer, int32_t expert, xc_ref *out)
{
    uint32_t key;
    int32_t si;
    int rc;

    /* (1) validate */
    if ((rc = xc_load_key(&c->ld, layer, expert, &key)) != XC_OK)
        return rc;
    pthread_mutex_lock(&c->mu);
    for (;;) {
        /* (2) look up */
        si = c->index[key];
        if (si < 0)
            break;
        if (c->slots[si].state == XC_SLOT_READY) {
            slot *s = &c->slots[si];
            c->st.requests++;
            c->st.hits++;
            c->requests_since_open++;
            if (s->mark) {
                s->mark = 0;
                c->st.prefetch_first_uses++;
            }
            s->freq++;
            touch(c, s);
            s->holds++;
            xc_policy_request(&c->pol, key);
            xc_policy_hit(&c->pol, key);
            fill_ref(c, si, out);
            pthread_mutex_unlock(&c->mu);
            return XC_OK;
        }
        /* (3) in flight: wait, then look up again */
        pthread_cond_wait(&c->ended, &c->mu);
    }
    rc = get_miss(c, key, layer, expert, out);
    pthread_mutex_unlock(&c->mu);
    return rc;
}

int xc_cache_release(xc_cache *c, const xc_ref *ref)
{
    slot *s;
    if (ref == NULL || ref->slot < 0 || (size_t)ref->slot >= c->n_slots)
        return xc_fail(XC_E_MISUSE, -1, -1, -1,
                       "release: not a reference of this cache");
    pthread_mutex_lock(&c->mu);
    s = &c->slots[ref->slot];
    if (s->state != XC_SLOT_READY || s->generation != ref->generation ||
        ref->data != slot_mem(c, ref->slot) + s->payload_off ||
        s->holds == 0) {
        pthread_mutex_unlock(&c->mu);
        return xc_fail(XC_E_MISUSE, -1, -1, -1,
                       "release: slot %d holds no reference of generation "
                       "%u at that address (released twice, or a reference "
                       "of another cache)", (int)ref->slot,
                       (unsigned)ref->generation);
    }
    s->holds--;
    pthread_mutex_unlock(&c->mu);
    return XC_OK;
}

/* ------------------------------------------------------------------ */
/* pin / unpin                                                          */
/* ------------------------------------------------------------------ */

int xc_cache_pin(xc_cache *c, int32_t layer, int32_t expert)
{
    uint32_t key;
    int32_t si;
    int rc;
    if ((rc = xc_load_key(&c->ld, layer, expert, &key)) != XC_OK)
        return rc;
    pthread_mutex_lock(&c->mu);
    si = c->index[key];
    if (si < 0 || c->slots[si].state != XC_SLOT_READY) {
        pthread_mutex_unlock(&c->mu);
        return xc_fail(XC_E_NOT_FOUND, -1, layer, expert,
                       "pin: layer %d expert %d is not resident", (int)layer,
                       (int)expert);
    }
    c->slots[si].pins++;
    pthread_mutex_unlock(&c->mu);
    return XC_OK;
}

int xc_cache_unpin(xc_cache *c, int32_t layer, int32_t expert)
{
    uint32_t key;
    int32_t si;
    int rc;
    if ((rc = xc_load_key(&c->ld, layer, expert, &key)) != XC_OK)
        return rc;
    pthread_mutex_lock(&c->mu);
    si = c->index[key];
    if (si < 0 || c->slots[si].state != XC_SLOT_READY) {
        pthread_mutex_unlock(&c->mu);
        return xc_fail(XC_E_NOT_FOUND, -1, layer, expert,
                       "unpin: layer %d expert %d is not resident", (int)layer,
                       (int)expert);
    }
    if (c->slots[si].pins == 0) {
        pthread_mutex_unlock(&c->mu);
        return xc_fail(XC_E_MISUSE, -1, layer, expert,
                       "unpin: layer %d expert %d is not pinned", (int)layer,
                       (int)expert);
    }
    c->slots[si].pins--;
    pthread_mutex_unlock(&c->mu);
    return XC_OK;
}

/* ------------------------------------------------------------------ */
/* getmany and its readers                                              */
/* ------------------------------------------------------------------ */

static void read_one(const xc_cache *c, resv *r)
{
    uint64_t t0 = now_ns();
    r->rc = xc_load_read(&c->ld, r->key, slot_mem(c, r->slot),
                         &r->payload_off, &r->asked_bytes);
    r->ns = now_ns() - t0;
}

/* Claims the next item of j (pool_mu held); unlinks j when it has none
 * left.  Returns NULL when every item is claimed. */
static resv *claim(xc_cache *c, job *j)
{
    resv *r;
    if (j->next_item == j->n)
        return NULL;
    r = &j->items[j->next_item++];
    if (j->next_item == j->n) {
        job **pp = &c->jobs;
        while (*pp != j)
            pp = &(*pp)->next;
        *pp = j->next;
    }
    return r;
}

static void done_one(xc_cache *c, job *j)
{
    if (++j->n_done == j->n)
        pthread_cond_broadcast(&c->pool_done);
}

static void *worker_main(void *arg)
{
    xc_cache *c = arg;
    pthread_mutex_lock(&c->pool_mu);
    for (;;) {
        job *j;
        resv *r;
        while (c->jobs == NULL && !c->pool_stop)
            pthread_cond_wait(&c->pool_work, &c->pool_mu);
        if (c->jobs == NULL)
            break; /* stopping, nothing queued */
        j = c->jobs;
        r = claim(c, j);
        pthread_mutex_unlock(&c->pool_mu);
        read_one(c, r);
        pthread_mutex_lock(&c->pool_mu);
        done_one(c, j);
    }
    pthread_mutex_unlock(&c->pool_mu);
    return NULL;
}

/* Step (2) of getmany: reads every item, the caller reading beside the
 * workers, and returns when all have ended. */
static void read_batch(xc_cache *c, resv *items, size_t n)
{
    job j = {NULL, items, n, 0, 0};
    resv *r;
    if (n == 0)
        return;
    if (c->n_workers == 0 || n == 1) {
        size_t i;
        for (i = 0; i < n; i++)
            read_one(c, &items[i]);
        return;
    }
    pthread_mutex_lock(&c->pool_mu);
    {
        job **pp = &c->jobs;
        while (*pp)
            pp = &(*pp)->next;
        *pp = &j;
    }
    pthread_cond_broadcast(&c->pool_work);
    while ((r = claim(c, &j)) != NULL) {
        pthread_mutex_unlock(&c->pool_mu);
        read_one(c, r);
        pthread_mutex_lock(&c->pool_mu);
        done_one(c, &j);
    }
    while (j.n_done < j.n)
        pthread_cond_wait(&c->pool_done, &c->pool_mu);
    pthread_mutex_unlock(&c->pool_mu);
}

/*
 * getmany: (1) validate every key, then reserve serially in the order
 * given, (2) read in parallel, (3) publish serially in reservation order
 * and drop the protections taken in (1).
 */
int xc_cache_getmany(xc_cache *c, const int32_t *layers,
                     const int32_t *experts, size_t n, size_t *published)
{
    uint32_t *keys = NULL;
    int32_t *prot = NULL;
    resv *rv = NULL;
    size_t i, n_resv = 0, n_prot = 0, n_pub = 0;
    uint64_t seq;
    int rc;

    if (n > 0 && (layers == NULL || experts == NULL))
        return xc_fail(XC_E_MISUSE, -1, -1, -1, "getmany: NULL key arrays");
    keys = xc_malloc(n * sizeof *keys);
    prot = xc_malloc(n * sizeof *prot);
    rv = xc_malloc(n * sizeof *rv);
    if (!keys || !prot || !rv) {
        rc = xc_fail(XC_E_NOMEM, -1, -1, -1,
                     "getmany: no memory for a batch of %zu keys", n);
        goto out;
    }
    /* (1) validate everything before changing anything */
    for (i = 0; i < n; i++)
        if ((rc = xc_load_key(&c->ld, layers[i], experts[i], &keys[i])) !=
            XC_OK)
            goto out;

    /* (1) reserve, serially, in the order given */
    pthread_mutex_lock(&c->mu);
    seq = ++c->batch_seq;
    for (i = 0; i < n; i++) {
        uint32_t key = keys[i];
        int32_t si = c->index[key];
        if (c->seen[key] == seq)
            continue; /* named earlier in this batch */
        c->seen[key] = seq;
        if (si >= 0 && c->slots[si].state == XC_SLOT_READY) {
            c->slots[si].holds++; /* protected for the rest of this call */
            touch(c, &c->slots[si]);
            prot[n_prot++] = si;
            continue;
        }
        if (si >= 0)
            continue; /* another read of it is under way */
        if ((si = choose_victim(c)) < 0)
            continue; /* no slot: a short count */
        reserve(c, si, key);
        rv[n_resv].slot = si;
        rv[n_resv].key = key;
        n_resv++;
    }
    pthread_mutex_unlock(&c->mu);

    /* (2) read in parallel */
    read_batch(c, rv, n_resv);

    /* (3) publish, serially, in reservation order */
    pthread_mutex_lock(&c->mu);
    for (i = 0; i < n_resv; i++) {
        finish(c, rv[i].slot, rv[i].rc, rv[i].payload_off,
               rv[i].asked_bytes, rv[i].ns, 0);
        n_pub += rv[i].rc == XC_OK;
    }
    for (i = 0; i < n_prot; i++)
        c->slots[prot[i]].holds--;
    if (n_resv)
        pthread_cond_broadcast(&c->ended);
    pthread_mutex_unlock(&c->mu);
    if (published)
        *published = n_pub;
    rc = XC_OK;
out:
    xc_free(keys);
    xc_free(prot);
    xc_free(rv);
    return rc;
}

/* ------------------------------------------------------------------ */
/* Counters, introspection, check                                       */
/* ------------------------------------------------------------------ */

static uint64_t unused_resident(const xc_cache *c)
{
    uint64_t n = 0;
    size_t i;
    for (i = 0; i < c->n_slots; i++)
        n += c->slots[i].state == XC_SLOT_READY && c->slots[i].mark;
    return n;
}

void xc_cache_stats(xc_cache *c, xc_stats *out)
{
    pthread_mutex_lock(&c->mu);
    *out = c->st;
    out->prefetch_unused_resident = unused_resident(c);
    pthread_mutex_unlock(&c->mu);
}

void xc_cache_reset_stats(xc_cache *c)
{
    size_t i;
    pthread_mutex_lock(&c->mu);
    memset(&c->st, 0, sizeof c->st);
    for (i = 0; i < c->n_slots; i++)
        c->slots[i].mark = 0;
    pthread_mutex_unlock(&c->mu);
}

int xc_cache_slot(xc_cache *c, size_t i, int *state, int32_t *layer,
                  int32_t *expert, uint32_t *holds, uint32_t *pins,
                  int *unused_mark)
{
    slot s;
    int32_t l = -1, e = -1;
    if (i >= c->n_slots)
        return xc_fail(XC_E_MISUSE, -1, -1, -1,
                       "slot %zu out of range (%zu slots)", i, c->n_slots);
    pthread_mutex_lock(&c->mu);
    s = c->slots[i];
    pthread_mutex_unlock(&c->mu);
    if (s.state != XC_SLOT_EMPTY)
        xc_load_unkey(&c->ld, s.key, &l, &e);
    if (state) *state = s.state;
    if (layer) *layer = l;
    if (expert) *expert = e;
    if (holds) *holds = s.holds;
    if (pins) *pins = s.pins;
    if (unused_mark) *unused_mark = s.mark;
    return XC_OK;
}

size_t xc_cache_n_slots(const xc_cache *c) { return c->n_slots; }
uint64_t xc_cache_stride(const xc_cache *c) { return c->ld.stride; }
uint64_t xc_cache_expert_bytes(const xc_cache *c)
{
    return c->ld.expert_bytes;
}
size_t xc_cache_n_tensors(const xc_cache *c) { return c->ld.n_tensors; }

int xc_cache_tensor(const xc_cache *c, size_t i, xc_slot_tensor *out)
{
    if (i >= c->ld.n_tensors)
        return xc_fail(XC_E_MISUSE, -1, -1, -1,
                       "tensor %zu out of range (%zu tensors)", i,
                       c->ld.n_tensors);
    *out = c->ld.tensors[i];
    return XC_OK;
}

int xc_cache_contiguous(const xc_cache *c, int32_t layer, int32_t expert)
{
    uint32_t key;
    int rc = xc_load_key(&c->ld, layer, expert, &key);
    return rc != XC_OK ? rc : c->ld.contiguous[key];
}

static int by_last_use(const void *a, const void *b)
{
    uint64_t x = ((const xc_pcand *)a)->last_use;
    uint64_t y = ((const xc_pcand *)b)->last_use;
    return x < y ? -1 : x > y;
}

#define BROKEN(inv, ...) \
    do { rc = xc_fail(inv, -1, -1, -1, __VA_ARGS__); goto out; } while (0)

int xc_cache_check(xc_cache *c)
{
    const xc_stats *st = &c->st;
    size_t i, n = 0;
    uint32_t k, n_inflight = 0;
    uint64_t eb = c->ld.expert_bytes;
    int rc = 0;

    pthread_mutex_lock(&c->mu);
    /* INV-KEY-UNIQUE */
    for (k = 0; k < c->ld.n_keys; k++)
        c->scratch[k] = -1;
    for (i = 0; i < c->n_slots; i++) {
        const slot *s = &c->slots[i];
        if (s->state == XC_SLOT_EMPTY)
            continue;
        if (s->state != XC_SLOT_INFLIGHT && s->state != XC_SLOT_READY)
            BROKEN(XC_INV_KEY_UNIQUE, "INV-KEY-UNIQUE: slot %zu has state "
                   "%d", i, s->state);
        if (s->key >= c->ld.n_keys)
            BROKEN(XC_INV_KEY_UNIQUE, "INV-KEY-UNIQUE: slot %zu key %u out "
                   "of range", i, s->key);
        if (c->scratch[s->key] >= 0)
            BROKEN(XC_INV_KEY_UNIQUE, "INV-KEY-UNIQUE: key %u in slots %d "
                   "and %zu", s->key, (int)c->scratch[s->key], i);
        c->scratch[s->key] = (int32_t)i;
    }
    /* INV-INDEX */
    for (k = 0; k < c->ld.n_keys; k++)
        if (c->index[k] != c->scratch[k])
            BROKEN(XC_INV_INDEX, "INV-INDEX: key %u maps to slot %d but is "
                   "in slot %d", k, (int)c->index[k], (int)c->scratch[k]);
    /* INV-EMPTY */
    for (i = 0; i < c->n_slots; i++) {
        const slot *s = &c->slots[i];
        if (s->state == XC_SLOT_EMPTY && (s->holds || s->pins || s->mark))
            BROKEN(XC_INV_EMPTY, "INV-EMPTY: empty slot %zu has holds %u "
                   "pins %u mark %d", i, s->holds, s->pins, s->mark);
    }
    /* INV-INFLIGHT */
    for (i = 0; i < c->n_slots; i++) {
        const slot *s = &c->slots[i];
        if (s->state != XC_SLOT_INFLIGHT)
            continue;
        n_inflight++;
        if (s->holds || s->pins || s->mark)
            BROKEN(XC_INV_INFLIGHT, "INV-INFLIGHT: slot %zu in flight has "
                   "holds %u pins %u mark %d", i, s->holds, s->pins,
                   s->mark);
    }
    if (n_inflight != c->n_reads)
        BROKEN(XC_INV_INFLIGHT, "INV-INFLIGHT: %u slots in flight but %u "
               "reads under way", n_inflight, c->n_reads);
    /* INV-CLOCK */
    for (i = 0; i < c->n_slots; i++) {
        const slot *s = &c->slots[i];
        if (s->state != XC_SLOT_READY)
            continue;
        if (s->last_use > c->tick || s->insert_tick > s->last_use ||
            s->last_use == 0)
            BROKEN(XC_INV_CLOCK, "INV-CLOCK: slot %zu last_use %llu "
                   "insert_tick %llu tick %llu", i,
                   (unsigned long long)s->last_use,
                   (unsigned long long)s->insert_tick,
                   (unsigned long long)c->tick);
        c->cand[n].slot = (int32_t)i;
        c->cand[n++].last_use = s->last_use;
    }
    qsort(c->cand, n, sizeof *c->cand, by_last_use);
    for (i = 1; i < n; i++)
        if (c->cand[i].last_use == c->cand[i - 1].last_use)
            BROKEN(XC_INV_CLOCK, "INV-CLOCK: slots %d and %d share last_use "
                   "%llu", (int)c->cand[i - 1].slot, (int)c->cand[i].slot,
                   (unsigned long long)c->cand[i].last_use);
    /* INV-COUNTERS */
    if (st->hits + st->misses != st->requests ||
        st->short_reads + st->io_errors != st->load_failures ||
        st->prefetch_evicted_unused > st->evictions ||
        st->payload_bytes % eb != 0 ||
        st->payload_bytes / eb > st->misses + st->prefetch_loads)
        BROKEN(XC_INV_COUNTERS, "INV-COUNTERS: requests %llu hits %llu "
               "misses %llu failures %llu short %llu io %llu evictions %llu "
               "evicted unused %llu payload %llu prefetch %llu",
               (unsigned long long)st->requests,
               (unsigned long long)st->hits, (unsigned long long)st->misses,
               (unsigned long long)st->load_failures,
               (unsigned long long)st->short_reads,
               (unsigned long long)st->io_errors,
               (unsigned long long)st->evictions,
               (unsigned long long)st->prefetch_evicted_unused,
               (unsigned long long)st->payload_bytes,
               (unsigned long long)st->prefetch_loads);
    /* INV-PREFETCH */
    if (st->prefetch_first_uses + st->prefetch_evicted_unused +
            unused_resident(c) != st->prefetch_loads)
        BROKEN(XC_INV_PREFETCH, "INV-PREFETCH: first uses %llu + evicted "
               "unused %llu + unused resident %llu != prefetch loads %llu",
               (unsigned long long)st->prefetch_first_uses,
               (unsigned long long)st->prefetch_evicted_unused,
               (unsigned long long)unused_resident(c),
               (unsigned long long)st->prefetch_loads);
    /* INV-POLICY */
    if (c->pol.n_evicted != c->evictions_since_open ||
        c->pol.n_requests != c->requests_since_open)
        BROKEN(XC_INV_POLICY, "INV-POLICY: policy saw %llu evictions and "
               "%llu requests, the cache made %llu and %llu",
               (unsigned long long)c->pol.n_evicted,
               (unsigned long long)c->pol.n_requests,
               (unsigned long long)c->evictions_since_open,
               (unsigned long long)c->requests_since_open);
    if (c->pol.ops->check(&c->pol) != 0) {
        char msg[sizeof xc_last_error()->message];
        memcpy(msg, xc_last_error()->message, sizeof msg);
        BROKEN(XC_INV_POLICY, "INV-POLICY: %s", msg);
    }
out:
    pthread_mutex_unlock(&c->mu);
    return rc;
}

/* ------------------------------------------------------------------ */
/* open / close                                                         */
/* ------------------------------------------------------------------ */

static void stop_workers(xc_cache *c, int n_started)
{
    int i;
    pthread_mutex_lock(&c->pool_mu);
    c->pool_stop = 1;
    pthread_cond_broadcast(&c->pool_work);
    pthread_mutex_unlock(&c->pool_mu);
    for (i = 0; i < n_started; i++)
        pthread_join(c->workers[i], NULL);
}

/* Frees everything open() allocated; the sync objects when inited. */
static void destroy(xc_cache *c, int synced)
{
    if (synced) {
        pthread_mutex_destroy(&c->mu);
        pthread_cond_destroy(&c->ended);
        pthread_mutex_destroy(&c->pool_mu);
        pthread_cond_destroy(&c->pool_work);
        pthread_cond_destroy(&c->pool_done);
    }
    xc_policy_close(&c->pol);
    xc_load_close(&c->ld);
    xc_free(c->arena);
    xc_free(c->slots);
    xc_free(c->index);
    xc_free(c->cand);
    xc_free(c->scratch);
    xc_free(c->seen);
    xc_free(c->workers);
    xc_free(c);
}

/* Turns the budget into n_slots; XC_E_BUDGET saying what works. */
static int size_budget(const xc_cache_opts *o, uint64_t stride,
                       size_t *n_slots)
{
    uint64_t need = (uint64_t)o->top_k + 1;
    uint64_t have = o->n_slots ? o->n_slots : o->budget_bytes / stride;
    if (have < need) {
        if (o->n_slots)
            return xc_fail(XC_E_BUDGET, -1, -1, -1,
                           "cache budget too small: top_k %d needs at least "
                           "%llu slots, n_slots gives %llu; n_slots=%llu or "
                           "budget_bytes=%llu (stride %llu bytes) works",
                           o->top_k, (unsigned long long)need,
                           (unsigned long long)have,
                           (unsigned long long)need,
                           (unsigned long long)(need * stride),
                           (unsigned long long)stride);
        return xc_fail(XC_E_BUDGET, -1, -1, -1,
                       "cache budget too small: top_k %d needs at least %llu "
                       "slots, budget_bytes=%llu holds %llu slots of %llu "
                       "bytes; the smallest budget_bytes that works is %llu",
                       o->top_k, (unsigned long long)need,
                       (unsigned long long)o->budget_bytes,
                       (unsigned long long)have, (unsigned long long)stride,
                       (unsigned long long)(need * stride));
    }
    if (have > SIZE_MAX / stride || have > INT32_MAX)
        return xc_fail(XC_E_BUDGET, -1, -1, -1,
                       "cache budget of %llu slots of %llu bytes is too "
                       "large for this machine", (unsigned long long)have,
                       (unsigned long long)stride);
    *n_slots = (size_t)have;
    return XC_OK;
}

int xc_cache_open(xc_st *st, const xc_cache_opts *o, xc_cache **out)
{
    xc_cache *c;
    size_t i;
    int rc, started = 0;

    if (st == NULL || o == NULL || out == NULL)
        return xc_fail(XC_E_MISUSE, -1, -1, -1,
                       "cache open: NULL container, options or out");
    if (o->top_k < 1 || o->batch_threads < 1 || o->batch_threads > 256)
        return xc_fail(XC_E_MISUSE, -1, -1, -1,
                       "cache open: top_k must be >= 1 (got %d) and "
                       "batch_threads 1..256 (got %d)", o->top_k,
                       o->batch_threads);
    if ((c = xc_calloc(1, sizeof *c)) == NULL)
        return xc_fail(XC_E_NOMEM, -1, -1, -1, "cache open: no memory");
    if ((rc = xc_load_open(&c->ld, st, o)) != XC_OK) {
        xc_free(c);
        return rc;
    }
    if ((rc = size_budget(o, c->ld.stride, &c->n_slots)) != XC_OK ||
        (rc = xc_policy_open(&c->pol, o->policy, c->ld.n_keys)) != XC_OK) {
        destroy(c, 0);
        return rc;
    }
    c->top_k = o->top_k;
    c->arena = xc_aligned_alloc(XC_ALIGN, c->n_slots * c->ld.stride);
    c->slots = xc_calloc(c->n_slots, sizeof *c->slots);
    c->cand = xc_calloc(c->n_slots, sizeof *c->cand);
    c->index = xc_malloc(c->ld.n_keys * sizeof *c->index);
    c->scratch = xc_malloc(c->ld.n_keys * sizeof *c->scratch);
    c->seen = xc_calloc(c->ld.n_keys, sizeof *c->seen);
    c->n_workers = o->batch_threads - 1;
    c->workers = xc_calloc((size_t)c->n_workers + 1, sizeof *c->workers);
    if (!c->arena || !c->slots || !c->cand || !c->index || !c->scratch ||
        !c->seen || !c->workers) {
        destroy(c, 0);
        return xc_fail(XC_E_NOMEM, -1, -1, -1,
                       "cache open: no memory for %zu slots of %llu bytes",
                       c->n_slots, (unsigned long long)c->ld.stride);
    }
    for (i = 0; i < c->ld.n_keys; i++)
        c->index[i] = -1;
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->ended, NULL);
    pthread_mutex_init(&c->pool_mu, NULL);
    pthread_cond_init(&c->pool_work, NULL);
    pthread_cond_init(&c->pool_done, NULL);
    for (started = 0; started < c->n_workers; started++) {
        int err = pthread_create(&c->workers[started], NULL, worker_main, c);
        if (err != 0) {
            stop_workers(c, started);
            destroy(c, 1);
            return xc_fail(XC_E_NOMEM, -1, -1, -1,
                           "cache open: cannot start reader thread %d of %d "
                           "(error %d)", started + 1, o->batch_threads - 1,
                           err);
        }
    }
    *out = c;
    return XC_OK;
}

void xc_cache_close(xc_cache *c)
{
    if (c == NULL)
        return;
    stop_workers(c, c->n_workers);
    destroy(c, 1);
}
