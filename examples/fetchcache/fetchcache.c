/* fetchcache.c - a thread-safe cache of MoE experts (see fetchcache.h).
 *
 * A slot's life.
 *
 * The cache is n_slots buffers of expert_bytes each, plus a little record per
 * slot: the key it serves (layer * n_experts + expert), a state, a hold count
 * and the tick of its last use.  A table indexed by key gives the slot that
 * serves each key, or -1; it is the only way in, so a key never has two slots.
 *
 * Every slot starts EMPTY.  When a get misses, or a prefetch asks for a key
 * not yet in the cache, a slot is chosen: the lowest-numbered EMPTY slot if
 * there is one, else a victim.  The victim is picked Redis-style: list every
 * slot that may be evicted (READY or FAILED, no hold), draw 16 of them at
 * random with replacement from a seeded xorshift64* generator, and take the
 * one whose last use is oldest.  If nothing may be evicted the get answers
 * FC_EBUSY (the prefetch skips the key) and nothing changes.
 *
 * The chosen slot is given the key and becomes FETCHING.  For a get, the
 * calling thread then drops the lock and calls fetch into the slot's buffer;
 * for a prefetch the slot goes on the queue, and a reader thread (or the
 * prefetching thread itself when there are no readers) pops it and does the
 * same.  No one else writes a FETCHING slot and it cannot be evicted, so the
 * buffer is safe to fill unlocked; other gets of the key wait on a condition
 * variable until the read ends.
 *
 * A read that delivers every byte makes the slot READY: resident, handed out
 * by get, which holds it.  A held slot is never a victim; holds are counted
 * per slot and the slots with holds are listed, so release_all can zero them
 * in one sweep.  A read that fails or comes back short makes the slot FAILED
 * and records the code.  The failure is sticky: the next get of that key
 * returns the code without fetching and frees the slot (EMPTY again), and
 * only the get after that fetches anew.  This keeps a failing prefetch from
 * being silently retried by the demand path, and tells the engine once.
 *
 * READY and FAILED slots, when not held, may be evicted: the key's table
 * entry is cleared (a FAILED slot's error is forgotten) and the slot is
 * reused for the new key at once.  So: EMPTY -> FETCHING -> READY or FAILED
 * -> (evicted, or FAILED reported) -> EMPTY or FETCHING for another key.
 *
 * One mutex guards all of this; fetch is always called without it.
 */
#include "fetchcache.h"

#include <assert.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FC_SAMPLES 16     /* draws per eviction */
#define FC_MAX_READERS 64

typedef struct {
    int key;                  /* -1 when EMPTY */
    unsigned char state;      /* fc_slot_state */
    unsigned char prefetched; /* READY from a prefetch, no get has used it */
    int err;                  /* FAILED: the code to report */
    unsigned holds;           /* gets since the last release_all */
    uint64_t last_use;        /* tick of the last get or load */
} fc_slot;

struct fc_cache {
    fc_options o;
    int n_keys;
    unsigned char *data; /* n_slots * expert_bytes */
    fc_slot *slots;
    int *map;    /* key -> slot, or -1 */
    int *cand;   /* scratch: eviction candidates, check marks */
    int *held;   /* slots that have holds, n_held of them */
    int n_held;
    int *queue;  /* ring of slots waiting for a prefetch read */
    int q_head, q_len;
    uint64_t tick, rng;
    fc_stats st;
    pthread_mutex_t mu;
    pthread_cond_t work; /* queue not empty, or stop */
    pthread_cond_t done; /* a read ended */
    pthread_t *readers;
    int n_started;
    int stop;
};

/* ---- small helpers (lock held) ---------------------------------------- */

static uint64_t rng_next(fc_cache *c)
{
    uint64_t x = c->rng; /* xorshift64*, never zero */
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    c->rng = x;
    return x * UINT64_C(0x2545F4914F6CDD1D);
}

static unsigned char *slot_data(fc_cache *c, int s)
{
    return c->data + (size_t)s * c->o.expert_bytes;
}

static int key_of(const fc_cache *c, int layer, int expert)
{
    if (layer < 0 || layer >= c->o.n_layers || expert < 0 || expert >= c->o.n_experts)
        return -1;
    return layer * c->o.n_experts + expert;
}

static int *gauge(fc_cache *c, int state)
{
    switch (state) {
    case FC_SLOT_FETCHING: return &c->st.in_flight;
    case FC_SLOT_READY: return &c->st.resident;
    case FC_SLOT_FAILED: return &c->st.failed;
    default: return NULL;
    }
}

static void set_state(fc_cache *c, int s, int state)
{
    int *g = gauge(c, c->slots[s].state);
    if (g)
        (*g)--;
    c->slots[s].state = (unsigned char)state;
    g = gauge(c, state);
    if (g)
        (*g)++;
}

static void free_slot(fc_cache *c, int s)
{
    fc_slot *sl = &c->slots[s];
    assert(sl->state == FC_SLOT_READY || sl->state == FC_SLOT_FAILED);
    c->map[sl->key] = -1;
    sl->key = -1;
    sl->prefetched = 0;
    sl->err = 0;
    set_state(c, s, FC_SLOT_EMPTY);
}

/* An EMPTY slot for a new key: the lowest-numbered empty one, else the
 * sampled-LRU victim among READY/FAILED slots without holds, or -1. */
static int pick_slot(fc_cache *c)
{
    int n = 0;
    for (int s = 0; s < c->o.n_slots; s++) {
        const fc_slot *sl = &c->slots[s];
        if (sl->state == FC_SLOT_EMPTY)
            return s;
#ifdef FETCHCACHE_DEFECT_EVICT_HELD
        if (sl->state == FC_SLOT_READY || sl->state == FC_SLOT_FAILED)
#else
        if ((sl->state == FC_SLOT_READY || sl->state == FC_SLOT_FAILED) && sl->holds == 0)
#endif
            c->cand[n++] = s;
    }
    if (n == 0)
        return -1;
    int victim = -1;
    for (int i = 0; i < FC_SAMPLES; i++) {
        int s = c->cand[rng_next(c) % (uint64_t)n];
        if (victim < 0 || c->slots[s].last_use < c->slots[victim].last_use)
            victim = s;
    }
    c->st.evictions++;
    free_slot(c, victim);
    return victim;
}

static void claim(fc_cache *c, int s, int key)
{
    fc_slot *sl = &c->slots[s];
    assert(sl->state == FC_SLOT_EMPTY);
    sl->key = key;
    sl->last_use = ++c->tick;
    c->map[key] = s;
    set_state(c, s, FC_SLOT_FETCHING);
}

static void hold(fc_cache *c, int s)
{
    fc_slot *sl = &c->slots[s];
    assert(sl->state == FC_SLOT_READY && sl->holds < UINT_MAX);
    if (sl->holds++ == 0) {
        c->held[c->n_held++] = s;
        c->st.held++;
    }
    sl->last_use = ++c->tick;
}

/* Publish the end of slot s's read, whose fetch returned r. */
static int finish(fc_cache *c, int s, ssize_t r, int from_prefetch)
{
    fc_slot *sl = &c->slots[s];
    size_t len = c->o.expert_bytes;
    int rc;
#ifdef FETCHCACHE_DEFECT_SHORT_AS_READY
    rc = (r < 0 || (size_t)r > len) ? FC_EFETCH : FC_OK;
#else
    rc = (r < 0 || (size_t)r > len) ? FC_EFETCH : (size_t)r < len ? FC_ESHORT : FC_OK;
#endif
    assert(sl->state == FC_SLOT_FETCHING);
    sl->last_use = ++c->tick;
    if (rc == FC_OK) {
        set_state(c, s, FC_SLOT_READY);
#ifdef FETCHCACHE_DEFECT_PREFETCH_HIT_PLAIN
        (void)from_prefetch; /* the mark is never set */
#else
        sl->prefetched = (unsigned char)from_prefetch;
#endif
    } else {
        c->st.failures++;
        sl->err = rc;
        set_state(c, s, FC_SLOT_FAILED);
#ifdef FETCHCACHE_DEFECT_STICKY_NEVER
        free_slot(c, s);
#endif
    }
    pthread_cond_broadcast(&c->done);
    return rc;
}

/* Pop one queued slot and read it; drops the lock around fetch. */
static void serve_one(fc_cache *c)
{
    assert(c->q_len > 0);
    int s = c->queue[c->q_head];
    c->q_head = (c->q_head + 1) % c->o.n_slots;
    c->q_len--;
    c->st.prefetch_loads++;
    int key = c->slots[s].key;
    pthread_mutex_unlock(&c->mu);
    ssize_t r = c->o.fetch(c->o.user, key / c->o.n_experts, key % c->o.n_experts,
                           slot_data(c, s), c->o.expert_bytes);
    pthread_mutex_lock(&c->mu);
    finish(c, s, r, 1);
}

static void *reader_main(void *arg)
{
    fc_cache *c = arg;
    pthread_mutex_lock(&c->mu);
    for (;;) {
        while (c->q_len == 0 && !c->stop)
            pthread_cond_wait(&c->work, &c->mu);
        if (c->q_len == 0)
            break; /* stopping, nothing left */
        serve_one(c);
    }
    pthread_mutex_unlock(&c->mu);
    return NULL;
}

/* ---- public functions ------------------------------------------------- */

static void free_all(fc_cache *c)
{
    free(c->data);
    free(c->slots);
    free(c->map);
    free(c->cand);
    free(c->held);
    free(c->queue);
    free(c->readers);
    free(c);
}

int fc_create(const fc_options *opts, fc_cache **out)
{
    assert(opts && out);
    *out = NULL;
    const fc_options *o = opts;
    if (o->n_layers <= 0 || o->n_experts <= 0 || o->expert_bytes == 0 || o->n_slots <= 0 ||
        o->n_readers < 0 || o->n_readers > FC_MAX_READERS || o->fetch == NULL)
        return FC_EINVAL;
    if (o->n_layers > INT_MAX / o->n_experts || (size_t)o->n_slots > SIZE_MAX / o->expert_bytes ||
        o->expert_bytes > (size_t)SSIZE_MAX)
        return FC_EINVAL;
    fc_cache *c = calloc(1, sizeof *c);
    if (!c)
        return FC_ENOMEM;
    c->o = *o;
    c->n_keys = o->n_layers * o->n_experts;
    size_t ns = (size_t)o->n_slots;
    void *data = NULL;
    if (posix_memalign(&data, 64, ns * o->expert_bytes) != 0)
        data = NULL;
    c->data = data;
    c->slots = calloc(ns, sizeof *c->slots);
    c->map = malloc((size_t)c->n_keys * sizeof *c->map);
    c->cand = malloc(ns * sizeof *c->cand);
    c->held = malloc(ns * sizeof *c->held);
    c->queue = malloc(ns * sizeof *c->queue);
    c->readers = calloc((size_t)o->n_readers + 1, sizeof *c->readers);
    if (!c->data || !c->slots || !c->map || !c->cand || !c->held || !c->queue || !c->readers) {
        free_all(c);
        return FC_ENOMEM;
    }
    for (int k = 0; k < c->n_keys; k++)
        c->map[k] = -1;
    for (int s = 0; s < o->n_slots; s++)
        c->slots[s].key = -1;
    c->rng = o->seed ? o->seed : UINT64_C(0x9E3779B97F4A7C15);
    if (pthread_mutex_init(&c->mu, NULL) != 0) {
        free_all(c);
        return FC_ENOMEM;
    }
    if (pthread_cond_init(&c->work, NULL) != 0) {
        pthread_mutex_destroy(&c->mu);
        free_all(c);
        return FC_ENOMEM;
    }
    if (pthread_cond_init(&c->done, NULL) != 0) {
        pthread_cond_destroy(&c->work);
        pthread_mutex_destroy(&c->mu);
        free_all(c);
        return FC_ENOMEM;
    }
    for (int i = 0; i < o->n_readers; i++) {
        if (pthread_create(&c->readers[i], NULL, reader_main, c) != 0) {
            fc_destroy(c); /* joins the ones started */
            return FC_ETHREAD;
        }
        c->n_started++;
    }
    *out = c;
    return FC_OK;
}

void fc_destroy(fc_cache *c)
{
    if (!c)
        return;
    fc_drain(c);
    pthread_mutex_lock(&c->mu);
    c->stop = 1;
    pthread_cond_broadcast(&c->work);
    pthread_mutex_unlock(&c->mu);
    for (int i = 0; i < c->n_started; i++)
        pthread_join(c->readers[i], NULL);
    pthread_cond_destroy(&c->done);
    pthread_cond_destroy(&c->work);
    pthread_mutex_destroy(&c->mu);
    free_all(c);
}

int fc_get(fc_cache *c, int layer, int expert, const void **out)
{
    assert(c && out);
    *out = NULL;
    int key = key_of(c, layer, expert);
    if (key < 0)
        return FC_EINVAL;
    pthread_mutex_lock(&c->mu);
    for (;;) {
        int s = c->map[key];
        if (s < 0)
            break;
        fc_slot *sl = &c->slots[s];
        if (sl->state == FC_SLOT_FETCHING) {
            /* Someone is reading it; the slot may be reused after, so look
             * the key up again once woken. */
            pthread_cond_wait(&c->done, &c->mu);
            continue;
        }
        if (sl->state == FC_SLOT_READY) {
            c->st.requests++;
            c->st.hits++;
            if (sl->prefetched) {
                sl->prefetched = 0;
                c->st.prefetch_hits++;
            }
            hold(c, s);
            *out = slot_data(c, s);
            pthread_mutex_unlock(&c->mu);
            return FC_OK;
        }
        /* FAILED: report the sticky error once and free the slot. */
        int err = sl->err;
        c->st.requests++;
        c->st.misses++;
        free_slot(c, s);
        pthread_mutex_unlock(&c->mu);
        return err;
    }
    c->st.requests++; /* counted with the outcome: hits + misses == requests */
    c->st.misses++;
    int s = pick_slot(c);
    if (s < 0) {
        pthread_mutex_unlock(&c->mu);
        return FC_EBUSY;
    }
    claim(c, s, key);
    pthread_mutex_unlock(&c->mu);
    ssize_t r = c->o.fetch(c->o.user, layer, expert, slot_data(c, s), c->o.expert_bytes);
    pthread_mutex_lock(&c->mu);
    int rc = finish(c, s, r, 0);
    if (rc == FC_OK) {
        hold(c, s);
        *out = slot_data(c, s);
    }
    pthread_mutex_unlock(&c->mu);
    return rc;
}

void fc_release_all(fc_cache *c)
{
    assert(c);
    pthread_mutex_lock(&c->mu);
#ifdef FETCHCACHE_DEFECT_RELEASE_KEEPS_LAST
    for (int i = 0; i + 1 < c->n_held; i++) {
#else
    for (int i = 0; i < c->n_held; i++) {
#endif
        c->slots[c->held[i]].holds = 0;
        c->st.held--;
    }
    c->n_held = 0;
    pthread_mutex_unlock(&c->mu);
}

void fc_prefetch(fc_cache *c, const int *layers, const int *experts, int n)
{
    assert(c && n >= 0 && (n == 0 || (layers && experts)));
    pthread_mutex_lock(&c->mu);
    int queued = 0;
    for (int i = 0; i < n; i++) {
        int key = key_of(c, layers[i], experts[i]);
        if (key < 0 || c->map[key] >= 0)
            continue;
        int s = pick_slot(c);
        if (s < 0)
            continue;
        claim(c, s, key);
        assert(c->q_len < c->o.n_slots);
        c->queue[(c->q_head + c->q_len) % c->o.n_slots] = s;
        c->q_len++;
        queued++;
    }
    if (c->o.n_readers == 0) {
        while (c->q_len > 0)
            serve_one(c);
    } else if (queued > 0) {
        pthread_cond_broadcast(&c->work);
    }
    pthread_mutex_unlock(&c->mu);
}

void fc_drain(fc_cache *c)
{
    assert(c);
    pthread_mutex_lock(&c->mu);
    while (c->st.in_flight > 0)
        pthread_cond_wait(&c->done, &c->mu);
    pthread_mutex_unlock(&c->mu);
}

int fc_peek(fc_cache *c, int layer, int expert)
{
    assert(c);
    int key = key_of(c, layer, expert);
    if (key < 0)
        return FC_EINVAL;
    pthread_mutex_lock(&c->mu);
    int s = c->map[key];
    int st = s < 0 ? FC_SLOT_EMPTY : c->slots[s].state;
    pthread_mutex_unlock(&c->mu);
    return st;
}

void fc_stats_get(fc_cache *c, fc_stats *out)
{
    assert(c && out);
    pthread_mutex_lock(&c->mu);
    *out = c->st;
    pthread_mutex_unlock(&c->mu);
}

void fc_stats_reset(fc_cache *c)
{
    assert(c);
    pthread_mutex_lock(&c->mu);
    fc_stats g = c->st;
    memset(&c->st, 0, sizeof c->st);
    c->st.resident = g.resident;
    c->st.in_flight = g.in_flight;
    c->st.failed = g.failed;
    c->st.held = g.held;
    pthread_mutex_unlock(&c->mu);
}

/* ---- check ------------------------------------------------------------ */

static int bad(char *msg, size_t len, const char *fmt, ...)
{
    if (msg && len > 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, len, fmt, ap);
        va_end(ap);
    }
    return FC_ECORRUPT;
}

static int check_locked(fc_cache *c, char *msg, size_t len)
{
    int count[4] = {0, 0, 0, 0}, n_holding = 0, ne = c->o.n_experts;
    for (int s = 0; s < c->o.n_slots; s++) {
        const fc_slot *sl = &c->slots[s];
        int k = sl->key;
        if (sl->state > FC_SLOT_FAILED)
            return bad(msg, len, "slot %d: unknown state %d", s, sl->state);
        count[sl->state]++;
        if (sl->state == FC_SLOT_EMPTY) {
            if (k != -1 || sl->holds || sl->prefetched)
                return bad(msg, len, "slot %d: EMPTY but has key %d, %u holds or prefetch mark",
                           s, k, sl->holds);
            continue;
        }
        if (k < 0 || k >= c->n_keys)
            return bad(msg, len, "slot %d: key %d outside the layout", s, k);
        if (c->map[k] != s)
            return bad(msg, len, "slot %d: serves layer %d expert %d but the key maps to slot %d",
                       s, k / ne, k % ne, c->map[k]);
        if (sl->holds && sl->state != FC_SLOT_READY)
            return bad(msg, len, "slot %d (layer %d, expert %d): held but not resident (state %d)",
                       s, k / ne, k % ne, sl->state);
        if (sl->prefetched && sl->state != FC_SLOT_READY)
            return bad(msg, len, "slot %d: prefetch mark but not resident", s);
        if (sl->state == FC_SLOT_FAILED && sl->err >= 0)
            return bad(msg, len, "slot %d: FAILED with code %d", s, sl->err);
        if (sl->last_use > c->tick)
            return bad(msg, len, "slot %d: last use after the clock", s);
        n_holding += sl->holds > 0;
    }
    for (int k = 0; k < c->n_keys; k++) {
        int s = c->map[k];
        if (s != -1 && (s < 0 || s >= c->o.n_slots || c->slots[s].key != k))
            return bad(msg, len, "layer %d expert %d: maps to slot %d which serves another key",
                       k / ne, k % ne, s);
    }
    if (count[FC_SLOT_READY] != c->st.resident || count[FC_SLOT_FETCHING] != c->st.in_flight ||
        count[FC_SLOT_FAILED] != c->st.failed)
        return bad(msg, len, "gauges resident %d in_flight %d failed %d, slots say %d %d %d",
                   c->st.resident, c->st.in_flight, c->st.failed, count[FC_SLOT_READY],
                   count[FC_SLOT_FETCHING], count[FC_SLOT_FAILED]);
    if (n_holding != c->n_held || c->st.held != c->n_held)
        return bad(msg, len, "%d slots held, hold list has %d, gauge says %d", n_holding,
                   c->n_held, c->st.held);
    memset(c->cand, 0, (size_t)c->o.n_slots * sizeof *c->cand);
    for (int i = 0; i < c->n_held; i++) {
        int s = c->held[i];
        if (s < 0 || s >= c->o.n_slots || c->slots[s].holds == 0 || c->cand[s]++)
            return bad(msg, len, "hold list entry %d (slot %d): not held or listed twice", i, s);
    }
    if (c->q_len > c->st.in_flight)
        return bad(msg, len, "%d queued but only %d slots in flight", c->q_len, c->st.in_flight);
    memset(c->cand, 0, (size_t)c->o.n_slots * sizeof *c->cand);
    for (int i = 0; i < c->q_len; i++) {
        int s = c->queue[(c->q_head + i) % c->o.n_slots];
        if (c->slots[s].state != FC_SLOT_FETCHING || c->cand[s]++)
            return bad(msg, len, "queue entry %d (slot %d): not FETCHING or queued twice", i, s);
    }
    if (msg && len > 0)
        msg[0] = '\0';
    return 0;
}

int fc_check(fc_cache *c, char *msg, size_t msg_len)
{
    assert(c && (msg || msg_len == 0));
    pthread_mutex_lock(&c->mu);
    int rc = check_locked(c, msg, msg_len);
    pthread_mutex_unlock(&c->mu);
    return rc;
}

const char *fc_strerror(int code)
{
    switch (code) {
    case FC_OK: return "FC_OK: success";
    case FC_EINVAL: return "FC_EINVAL: bad argument (key outside the layout or bad option)";
    case FC_ENOMEM: return "FC_ENOMEM: out of memory";
    case FC_EBUSY: return "FC_EBUSY: no empty slot and no slot may be evicted";
    case FC_EFETCH: return "FC_EFETCH: the fetch callback failed";
    case FC_ESHORT: return "FC_ESHORT: the fetch callback delivered fewer bytes than an expert";
    case FC_ETHREAD: return "FC_ETHREAD: a reader thread could not be started";
    case FC_ECORRUPT: return "FC_ECORRUPT: the cache's state is inconsistent";
    default: return "unknown fetchcache status";
    }
}
