/*
 * xc_cache.c -- the expert cache's public face: get/release, integer
 * handles, pin/unpin, the arena, open/close; and the design of the whole.
 *
 * The cache is one object in several files sharing the private types of
 * xc_core.h, each with one job, and the calls between them run one
 * way (no file calls back into one that calls it):
 *
 *   xc_cache.c   get, handles, pins, the arena, open/close
 *                  -> xc_batch.c (the thread bodies it starts and stops),
 *                     xc_slot.c
 *   xc_stream.c  layer streams
 *                  -> xc_batch.c (the read-ahead ring), xc_slot.c
 *   xc_batch.c   getmany, prefetch, hold_layer; the batch pool and the
 *                read-ahead ring with their thread bodies
 *                  -> xc_slot.c
 *   xc_slot.c    one slot's life: reserve, read, publish, hit, victim
 *                choice, the order list, a key's demand read, a stream's
 *                reservation claimed
 *                  -> xc_trace.c, xc_load.c, the policy (xc_policy.h)
 *
 * xc_check.c (counters, snapshots, check()) reads the structures and
 * calls none of these.  One slot's life, its memory and why each of its
 * rules exists open xc_slot.c; what follows is the design the files share.
 *
 * Read-ahead, streams, speculation
 * --------------------------------
 * prefetch() reserves exactly like getmany()'s step 1, then hands the reads
 * to io_threads reader threads through a ring of io_depth entries and
 * returns.  Each reader publishes what it read under mu, so the publish
 * rules are getmany's.  What getmany decides by publishing serially -- the
 * tick each new expert gets -- a prefetch decides at reservation instead:
 * the reserved slot's last_use is stamped then, in reservation order, and
 * the publish keeps it.  The other thing getmany's serial publish decides
 * is the order in which the policy hears of the inserts, and the queue
 * policies (s3fifo, arc) keep that order in their queues.  So a stamped
 * reservation also joins the order list (oq_first, slot.onext), in stamp
 * order; a publish is told to the policy only once every reservation
 * stamped before it has ended, else it is held back (insert_pending,
 * "untold": READY and served, but no victim candidate, since the policy
 * does not know the key; hits on it are told after its insert).  Each publish or failure then
 * tells the untold slots at the front of the list.  Thus whatever order
 * the reads complete in, a drained read-ahead leaves the clock, every
 * victim, every counter and the policy's queues exactly as getmany would,
 * and io_threads = 0 can simply *be* getmany.  Policies that ignore
 * inserts (the tick policies) keep no list: nothing is held back for them.
 * A full ring is not a reason to drop a read: the caller reads it itself.
 *
 *   prefetch():  reserve ... stamp ticks ... enqueue  -> return
 *   reader:      dequeue -> read (no lock) -> publish under mu, broadcast
 *   get() of an INFLIGHT key: waits on `ended` until *that* slot ends
 *
 * A stream is one layer's keys seen as a batch of gets that hold: at begin
 * the resident keys are hits (held at once), the missing ones are misses
 * reserved in the order given, each with its tick stamped then -- the same
 * clock a run of get()s would leave, and the order list gives the policy
 * their inserts in the order given -- and their reads queued.  next()
 * yields the hits in order, then reads as they complete (a reader pushes
 * its item onto the stream's completion list), reading in the consumer
 * itself what the queue could not take.  Such a kept miss is INFLIGHT with
 * nobody reading it, so waiting for it would be waiting for the consumer
 * -- forever, if the waiter *is* the consumer (a get of that key from its
 * own thread).  So every INFLIGHT slot carries an owner tag (slot.owner),
 * and a kept miss (OWNER_STREAM) is claimable: the first get() or stream
 * that needs the key reads it itself and publishes it for the stream (the
 * stream's hold, its completion list), then carries on as after a wait.
 * Nothing ever waits on a read that nobody is doing.
 *
 * A speculative prefetch is a prefetch whose loads carry their own mark
 * (unused_spec), so guesses that were never used are counted apart from
 * prefetches that were asked for.
 *
 * Locking: one mutex guards every slot field, the index, the clock, the
 * counters, the policy, the order list, the read-ahead ring, every
 * stream's state and the trace buffer.  Reads run without it.  `ended` is
 * broadcast whenever an INFLIGHT slot ends (published or failed);
 * `aq_work` wakes the read-ahead readers.  The batch readers have their
 * own mutex (pool_mu) that is never held together with mu.
 */
#include "xc_core.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>

/* The key of (layer, expert) when the layers are consecutive (layers
 * strictly ascend, so first and last tell): one subtraction instead of the
 * loader's binary search, the same key.  0 when it does not apply or the
 * pair is not a key (xc_load_key then says why). */
static inline int fast_key(const xc_loader *ld, int32_t layer, int32_t expert,
                           uint32_t *key)
{
    int64_t pos;
    assert(ld->n_layers > 0 && ld->layers != NULL && key != NULL); /* open */
    pos = (int64_t)layer - ld->layers[0];
    if ((int64_t)ld->layers[ld->n_layers - 1] - ld->layers[0] !=
            (int64_t)ld->n_layers - 1 ||
        pos < 0 || pos >= (int64_t)ld->n_layers || expert < 0 ||
        expert >= ld->n_experts)
        return 0;
    *key = (uint32_t)((uint64_t)pos * (uint64_t)ld->n_experts +
                      (uint64_t)expert);
    return 1;
}

/*
 * get: (1) validate the key, (2) look up: READY is a hit -- hold and
 * return, (3) INFLIGHT: wait for that read to end and look up again,
 * (4) choose a victim, (5) read, (6) publish.  (2)-(6) are xc_get_locked()
 * in xc_slot.c ((4)-(6) its get_miss()), which a stream's plain gets share.
 */
int xc_cache_get(xc_cache *c, int32_t layer, int32_t expert, xc_ref *out)
{
    uint32_t key;
    int rc;

    /* (1) validate */
    if (!fast_key(&c->ld, layer, expert, &key) &&
        (rc = xc_load_key(&c->ld, layer, expert, &key)) != XC_OK)
        return rc;
    pthread_mutex_lock(&c->mu);
    rc = xc_get_locked(c, key, layer, expert, XC_KIND_GET, out);
    pthread_mutex_unlock(&c->mu);
    return rc;
}

int xc_cache_release(xc_cache *c, xc_ref *ref)
{
    slot *s;
    if (ref == NULL || ref->slot < 0 || (size_t)ref->slot >= c->n_slots)
        return xc_fail(XC_E_MISUSE, -1, -1, -1,
                       "release: not a reference of this cache");
    pthread_mutex_lock(&c->mu);
    s = &c->slots[ref->slot];
    if (s->state != XC_SLOT_READY || s->generation != ref->generation ||
        ref->data != xc_slot_mem(c, ref->slot) + s->payload_off ||
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
    /* spent: this reference given back again is MISUSE even while another
     * hold of the same publish keeps the slot held */
    ref->data = NULL;
    return XC_OK;
}

/* ------------------------------------------------------------------ */
/* Integer handles (xc.h: xc_cache_hold)                                */
/* ------------------------------------------------------------------ */

int64_t xc_cache_hold(xc_cache *c, int32_t layer, int32_t expert)
{
    xc_ref ref;
    int rc = xc_cache_get(c, layer, expert, &ref);
    if (rc != XC_OK)
        return rc;
    return (int64_t)(ref.generation & XC_HANDLE_GEN_MASK) << 32 |
           (int64_t)ref.slot;
}

int xc_cache_unhold(xc_cache *c, int64_t handle)
{
    slot *s;
    pthread_mutex_lock(&c->mu);
    if ((s = xc_held_slot(c, handle)) == NULL) {
        pthread_mutex_unlock(&c->mu);
        return xc_fail(XC_E_MISUSE, -1, -1, -1,
                       "release: handle %lld holds no reference (released "
                       "twice, republished since, or of another cache)",
                       (long long)handle);
    }
    s->holds--;
    pthread_mutex_unlock(&c->mu);
    return XC_OK;
}

const uint8_t *xc_cache_hold_data(xc_cache *c, int64_t handle)
{
    const uint8_t *p = NULL;
    slot *s;
    pthread_mutex_lock(&c->mu);
    if ((s = xc_held_slot(c, handle)) != NULL)
        p = xc_slot_mem(c, (int32_t)(handle & 0xffffffff)) + s->payload_off;
    pthread_mutex_unlock(&c->mu);
    if (p == NULL)
        xc_fail(XC_E_MISUSE, -1, -1, -1, "handle %lld holds no reference",
                (long long)handle);
    return p;
}

/* ------------------------------------------------------------------ */
/* pin / unpin                                                          */
/* ------------------------------------------------------------------ */

/* Changes the pin count of a READY key by delta (+1 or -1), under the lock.
 * NOT_FOUND when the key is not resident, MISUSE when unpinning a key with
 * no pin; nothing changes on failure.  `what` names the call in messages. */
static int repin_key(xc_cache *c, int32_t layer, int32_t expert, int delta,
                     const char *what)
{
    uint32_t key;
    int32_t si;
    int rc;
    assert((delta == 1 || delta == -1) && what != NULL);
    if ((rc = xc_load_key(&c->ld, layer, expert, &key)) != XC_OK)
        return rc;
    pthread_mutex_lock(&c->mu);
    si = c->index[key];
    if (si < 0 || c->slots[si].state != XC_SLOT_READY)
        rc = xc_fail(XC_E_NOT_FOUND, -1, layer, expert,
                     "%s: layer %d expert %d is not resident", what,
                     (int)layer, (int)expert);
    else if (delta < 0 && c->slots[si].pins == 0)
        rc = xc_fail(XC_E_MISUSE, -1, layer, expert,
                     "%s: layer %d expert %d is not pinned", what,
                     (int)layer, (int)expert);
    else if (delta > 0) {
        c->slots[si].pins++;
        xc_slot_note(c, &c->slots[si]);
    }
    else
        c->slots[si].pins--;
    pthread_mutex_unlock(&c->mu);
    return rc;
}

int xc_cache_pin(xc_cache *c, int32_t layer, int32_t expert)
{
    return repin_key(c, layer, expert, +1, "pin");
}

int xc_cache_unpin(xc_cache *c, int32_t layer, int32_t expert)
{
    return repin_key(c, layer, expert, -1, "unpin");
}

/* ------------------------------------------------------------------ */
/* open / close                                                         */
/* ------------------------------------------------------------------ */

/* A new arena of bytes bytes with one reference (the cache's), or NULL. */
static struct xc_arena *arena_new(size_t bytes)
{
    struct xc_arena *a;
    assert(bytes > 0 && bytes % XC_ALIGN == 0); /* n_slots x stride */
    if ((a = xc_calloc(1, sizeof *a)) == NULL)
        return NULL;
    if ((a->data = xc_aligned_alloc(XC_ALIGN, bytes)) == NULL) {
        xc_free(a);
        return NULL;
    }
    a->bytes = bytes;
    atomic_init(&a->refs, 1);
    return a;
}

xc_arena *xc_cache_arena(xc_cache *c)
{
    atomic_fetch_add(&c->arena_ref->refs, 1);
    return c->arena_ref;
}

const uint8_t *xc_arena_data(const xc_arena *a) { return a->data; }
uint64_t xc_arena_bytes(const xc_arena *a) { return a->bytes; }

void xc_arena_release(xc_arena *a)
{
    if (a == NULL || atomic_fetch_sub(&a->refs, 1) != 1)
        return;
    if (a->mlocked)
        munlock(a->data, a->bytes);
    xc_free(a->data);
    xc_free(a);
}

/* Frees everything open() allocated; the sync objects when inited. */
static void destroy(xc_cache *c, int synced)
{
    /* every thread joined (or none started): nothing else touches c */
    assert(c != NULL && c->aq_n == 0 && c->aq_active == 0 && c->jobs == NULL);
    if (synced) {
        pthread_mutex_destroy(&c->mu);
        pthread_cond_destroy(&c->ended);
        pthread_mutex_destroy(&c->pool_mu);
        pthread_cond_destroy(&c->pool_work);
        pthread_cond_destroy(&c->pool_done);
        pthread_cond_destroy(&c->aq_work);
    }
    if (c->tr != NULL) {
        (void)xc_trace_write(c);
        fclose(c->tr);
    }
    xc_policy_close(&c->pol);
    xc_load_close(&c->ld);
    xc_arena_release(c->arena_ref); /* freed here unless a caller has it */
    xc_free(c->slots);
    xc_free(c->index);
    xc_free(c->cand);
    xc_free(c->nc);
    xc_free(c->scratch);
    xc_free(c->seen);
    xc_free(c->workers);
    xc_free(c->io);
    xc_free(c->aq);
    xc_free(c->tr_buf);
    xc_free(c);
}

/* Thread i of a pool of n (pool names it in the message) did not start
 * with error number err: records XC_E_NOMEM saying so (before destroy(),
 * while c is alive), joins the n_workers batch pool and n_io read-ahead
 * threads already running, frees everything and returns the code. */
static int start_failed(xc_cache *c, const char *pool, int i, int n, int err,
                        int n_workers, int n_io)
{
    int rc;
    assert(c != NULL && pool != NULL && i >= 0 && i < n && err != 0);
    assert(n_workers >= 0 && n_workers <= c->n_workers && n_io >= 0 &&
           n_io <= c->n_io);
    rc = xc_fail(XC_E_NOMEM, -1, -1, -1, "cache open: cannot start %s "
                     "thread %d of %d: %s (errno %d); joined the %d "
                     "thread(s) already running", pool, i + 1, n,
                     strerror(err), err, n_workers + n_io);
    xc_readahead_stop(c, n_io);
    xc_pool_stop(c, n_workers);
    destroy(c, 1);
    return rc;
}

/* mlock()s the arena when asked; a refusal is reported, never fatal. */
static void lock_arena(xc_cache *c, int want)
{
    size_t bytes = c->n_slots * c->ld.stride;
    struct rlimit rl;
    int e;
    assert(c->arena != NULL && bytes > 0 && !c->mlocked);
    if (!want) {
        snprintf(c->mlock_note, sizeof c->mlock_note, "mlock not requested");
        return;
    }
    if (mlock(c->arena, bytes) == 0) {
        c->mlocked = 1;
        snprintf(c->mlock_note, sizeof c->mlock_note,
                 "mlock active on %zu bytes", bytes);
        return;
    }
    e = errno;
    if (getrlimit(RLIMIT_MEMLOCK, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY)
        snprintf(c->mlock_note, sizeof c->mlock_note,
                 "mlock of %zu bytes refused: %s (errno %d); RLIMIT_MEMLOCK "
                 "is %llu bytes", bytes, strerror(e), e,
                 (unsigned long long)rl.rlim_cur);
    else
        snprintf(c->mlock_note, sizeof c->mlock_note,
                 "mlock of %zu bytes refused: %s (errno %d)", bytes,
                 strerror(e), e);
}

/* Turns the budget into n_slots; XC_E_BUDGET saying what works. */
static int size_budget(const xc_cache_opts *o, uint64_t stride,
                       size_t *n_slots)
{
    uint64_t need, need_bytes, have;
    /* top_k checked by open, stride made by the loader (never 0) */
    assert(o != NULL && n_slots != NULL && o->top_k >= 1 && stride > 0);
    need = (uint64_t)o->top_k + 1;
    have = o->n_slots ? o->n_slots : o->budget_bytes / stride;
    if (__builtin_mul_overflow(need, stride, &need_bytes))
        need_bytes = UINT64_MAX; /* only ever printed */
    if (have < need) {
        if (o->n_slots)
            return xc_fail(XC_E_BUDGET, -1, -1, -1,
                           "cache budget too small: top_k %d needs at least "
                           "%llu slots, n_slots gives %llu; n_slots=%llu or "
                           "budget_bytes=%llu (stride %llu bytes) works",
                           o->top_k, (unsigned long long)need,
                           (unsigned long long)have,
                           (unsigned long long)need,
                           (unsigned long long)need_bytes,
                           (unsigned long long)stride);
        return xc_fail(XC_E_BUDGET, -1, -1, -1,
                       "cache budget too small: top_k %d needs at least %llu "
                       "slots, budget_bytes=%llu holds %llu slots of %llu "
                       "bytes; the smallest budget_bytes that works is %llu",
                       o->top_k, (unsigned long long)need,
                       (unsigned long long)o->budget_bytes,
                       (unsigned long long)have, (unsigned long long)stride,
                       (unsigned long long)need_bytes);
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
    int rc, err, started = 0;

    if (st == NULL || o == NULL || out == NULL)
        return xc_fail(XC_E_MISUSE, -1, -1, -1,
                       "cache open: NULL container, options or out");
    if (o->top_k < 1 || o->batch_threads < 1 ||
        o->batch_threads > XC_MAX_BATCH_THREADS)
        return xc_fail(XC_E_MISUSE, -1, -1, -1,
                       "cache open: top_k must be >= 1 (got %d) and "
                       "batch_threads 1..%d (got %d)", o->top_k,
                       XC_MAX_BATCH_THREADS, o->batch_threads);
    if (o->io_threads < 0 || o->io_threads > XC_MAX_IO_THREADS ||
        o->io_depth < 0 || o->split_min_misses < 0)
        return xc_fail(XC_E_MISUSE, -1, -1, -1,
                       "cache open: io_threads must be 0..%d (got %d), "
                       "io_depth and split_min_misses >= 0 (got %d, %d)",
                       XC_MAX_IO_THREADS, o->io_threads, o->io_depth,
                       o->split_min_misses);
    /* every size computed from an option must fit (trace ring: records x
     * TRACE_RECORD_BYTES; the arena is checked in size_budget) */
    if (o->trace_path != NULL &&
        o->trace_ring_records > SIZE_MAX / TRACE_RECORD_BYTES)
        return xc_fail(XC_E_MISUSE, -1, -1, -1,
                       "cache open: trace_ring_records %zu is too large "
                       "(at most %zu records of %u bytes)",
                       o->trace_ring_records,
                       (size_t)(SIZE_MAX / TRACE_RECORD_BYTES),
                       TRACE_RECORD_BYTES);
    if ((c = xc_calloc(1, sizeof *c)) == NULL)
        return xc_fail(XC_E_NOMEM, -1, -1, -1, "cache open: no memory");
    if ((rc = xc_load_open(&c->ld, st, o)) != XC_OK) {
        xc_free(c);
        return rc;
    }
    if ((rc = size_budget(o, c->ld.stride, &c->n_slots)) != XC_OK ||
        (rc = xc_policy_open(&c->pol, o->policy, c->ld.n_keys,
                             c->n_slots)) != XC_OK) {
        destroy(c, 0);
        return rc;
    }
    c->top_k = o->top_k;
    c->owner_pid = getpid();
    if ((c->arena_ref = arena_new(c->n_slots * c->ld.stride)) != NULL)
        c->arena = c->arena_ref->data;
    c->slots = xc_calloc(c->n_slots, sizeof *c->slots);
    c->cand = xc_calloc(c->n_slots, sizeof *c->cand);
    if (c->pol.ops->by_position)
        c->nc = xc_malloc(c->n_slots * sizeof *c->nc);
    c->index = xc_malloc(c->ld.n_keys * sizeof *c->index);
    c->scratch = xc_malloc(c->ld.n_keys * sizeof *c->scratch);
    c->seen = xc_calloc(c->ld.n_keys, sizeof *c->seen);
    c->n_workers = o->batch_threads - 1;
    c->workers = xc_calloc((size_t)c->n_workers + 1, sizeof *c->workers);
    c->n_io = o->io_threads;
    c->aq_cap = o->io_depth > 0 ? (size_t)o->io_depth
                                : XC_IO_DEPTH_DEFAULT;
    c->split_min = o->split_min_misses > 0 ? o->split_min_misses : 1;
    c->io = xc_calloc((size_t)c->n_io + 1, sizeof *c->io);
    c->aq = xc_calloc(c->aq_cap, sizeof *c->aq);
    if (o->trace_path != NULL) {
        c->tr_cap = o->trace_ring_records ? o->trace_ring_records
                                          : XC_TRACE_RING_DEFAULT;
        c->tr_buf = xc_malloc(c->tr_cap * TRACE_RECORD_BYTES);
        if (c->tr_buf == NULL) {
            /* the ring is the caller's option: name it, not the slots */
            rc = xc_fail(XC_E_NOMEM, -1, -1, -1,
                         "cache open: no memory for the trace ring of %zu "
                         "records of %u bytes (%llu bytes; "
                         "trace_ring_records)", c->tr_cap, TRACE_RECORD_BYTES,
                         (unsigned long long)c->tr_cap * TRACE_RECORD_BYTES);
            destroy(c, 0);
            return rc;
        }
    }
    if (!c->arena || !c->slots || !c->cand || !c->index || !c->scratch ||
        (c->pol.ops->by_position && !c->nc) ||
        !c->seen || !c->workers || !c->io || !c->aq) {
        /* record before destroy(): the message reads c; with a trace it
         * names the ring too, the other table the caller sized */
        if (o->trace_path != NULL)
            rc = xc_fail(XC_E_NOMEM, -1, -1, -1,
                         "cache open: no memory for %zu slots of %llu bytes "
                         "and a trace ring of %zu records (%llu bytes)",
                         c->n_slots, (unsigned long long)c->ld.stride,
                         c->tr_cap,
                         (unsigned long long)c->tr_cap * TRACE_RECORD_BYTES);
        else
            rc = xc_fail(XC_E_NOMEM, -1, -1, -1,
                         "cache open: no memory for %zu slots of %llu bytes",
                         c->n_slots, (unsigned long long)c->ld.stride);
        destroy(c, 0);
        return rc;
    }
    for (i = 0; i < c->ld.n_keys; i++)
        c->index[i] = -1;
    c->ordered = c->pol.ops->stamp_order;
    c->oq_first = c->oq_last = -1;
    lock_arena(c, o->lock_memory);
    c->arena_ref->mlocked = c->mlocked;
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->aq_work, NULL);
    pthread_cond_init(&c->ended, NULL);
    pthread_mutex_init(&c->pool_mu, NULL);
    pthread_cond_init(&c->pool_work, NULL);
    pthread_cond_init(&c->pool_done, NULL);
    /* Threads start through the seam (xc_alloc.c) so that a test can fail
     * the k-th start; the batch pool first, then the read-ahead readers. */
    for (started = 0; started < c->n_workers; started++)
        if ((err = xc_thread_start(&c->workers[started], xc_pool_main, c)))
            return start_failed(c, "batch pool", started, c->n_workers, err,
                                started, 0);
    for (started = 0; started < c->n_io; started++)
        if ((err = xc_thread_start(&c->io[started], xc_readahead_main, c)))
            return start_failed(c, "read-ahead", started, c->n_io, err,
                                c->n_workers, started);
    if (o->trace_path != NULL &&
        (rc = xc_trace_open(c, o->trace_path)) != XC_OK) {
        xc_readahead_stop(c, c->n_io);
        xc_pool_stop(c, c->n_workers);
        destroy(c, 1);
        return rc;
    }
    *out = c;
    return XC_OK;
}

void xc_cache_close(xc_cache *c)
{
    if (c == NULL)
        return;
    if (xc_cache_forked(c))
        return; /* a child after fork(): no threads to join; leaked */
    xc_readahead_stop(c, c->n_io);
    xc_pool_stop(c, c->n_workers);
    destroy(c, 1);
}

int xc_cache_mlock_active(const xc_cache *c) { return c->mlocked; }
const char *xc_cache_mlock_note(const xc_cache *c) { return c->mlock_note; }
