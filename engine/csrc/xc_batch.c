/*
 * xc_batch.c -- reads of many keys at once: getmany() on the batch pool
 * (the caller reading beside batch_threads - 1 workers), and prefetch() on
 * the read-ahead ring and its io_threads readers (xc_cache.c explains why
 * a read-ahead leaves the cache exactly as getmany would).
 */
#include "xc_core.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

/* How long a batch reader keeps polling for work before it sleeps on a
 * condition variable, and how long getmany's caller polls for the last
 * item of its batch.  A 768 KiB page-cache read takes ~30-200 us here; a
 * condvar wake-up on this 2-vCPU VM took 50-150 us, so a sleeping reader
 * joined a batch of four after the caller had read most of it (2 threads:
 * 0.40 of the C pread floor, 1 thread: ~1.0).  Polling for 100 us keeps the
 * reader hot across back-to-back batches (bench/load_throughput.py,
 * 2026-11-29) and costs at most that much CPU after the last batch.
 *
 * Both waits also cover the read in progress on the other side: a reader
 * that ends its last item while the caller still reads one waits for the
 * rest of that read before the next batch can come, and a caller whose
 * items are done waits for a reader's last one; either ends within about
 * one read.  So the poll lasts POOL_SPIN_NS plus the waiter's own last read
 * time, that addition capped at POOL_SPIN_READ_MAX_NS (a read slower than
 * that is a device read, next to which a wake-up is small).  Without it, a
 * reader slept between two batches in 2 of 3 batches on a loaded VM (perf
 * futex trace, 2026-12-01). */
#define POOL_SPIN_NS 100000u
#define POOL_SPIN_READ_MAX_NS 400000u

/* The poll budget of a waiter whose own last read took read_ns. */
static uint64_t spin_budget(uint64_t read_ns)
{
    return POOL_SPIN_NS + (read_ns < POOL_SPIN_READ_MAX_NS
                               ? read_ns : POOL_SPIN_READ_MAX_NS);
}

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

/* Polls *v without a lock until it equals target (want_equal) or differs
 * from it (!want_equal), for at most about budget_ns.  Returns 1 if it
 * did, 0 on timeout.  The acquire load pairs with the release updates. */
static int spin_until(_Atomic size_t *v, size_t target, int want_equal,
                      uint64_t budget_ns)
{
    uint64_t t0 = 0;
    for (unsigned i = 1;; i++) {
        size_t x = atomic_load_explicit(v, memory_order_acquire);
        if (want_equal ? x == target : x != target)
            return 1;
        cpu_relax();
        if ((i & 63) == 0) {
            uint64_t t = xc_now_ns();
            if (t0 == 0)
                t0 = t;
            else if (t - t0 > budget_ns)
                return 0;
        }
    }
}

/* Tries for pool_mu this many times, a pause apart, before blocking on
 * it.  Every hold of pool_mu is a few instructions (queue a job, claim an
 * item, count one done), so a reader that finds it taken -- typically a
 * polling reader that saw a batch arrive while its caller was still
 * queueing it -- gets it sooner by polling: a futex sleep and wake-up cost
 * 20-60 us on a VM, against a 30-200 us read, and the holder's unlock then
 * pays a system call too. */
#define POOL_LOCK_TRIES 256u

/* Locks pool_mu, polling a moment before sleeping (POOL_LOCK_TRIES). */
static void pool_lock(xc_cache *c)
{
    for (unsigned i = 0; i < POOL_LOCK_TRIES; i++) {
        if (pthread_mutex_trylock(&c->pool_mu) == 0)
            return;
        cpu_relax();
    }
    pthread_mutex_lock(&c->pool_mu);
}

/* Claims the next item of j (pool_mu held); unlinks j when it has none
 * left.  Returns NULL when every item is claimed. */
static resv *claim(xc_cache *c, job *j)
{
    resv *r;
    assert(xc_locked(&c->pool_mu) && j != NULL && j->next_item <= j->n);
    if (j->next_item == j->n)
        return NULL;
    r = &j->items[j->next_item++];
    atomic_fetch_sub_explicit(&c->pool_unclaimed, 1, memory_order_relaxed);
    if (j->next_item == j->n) {
        job **pp = &c->jobs;
        while (*pp != j)
            pp = &(*pp)->next;
        *pp = j->next;
    }
    return r;
}

/* One item of j ended (pool_mu held).  The caller may be polling n_done
 * without the lock and return as soon as it reaches n, so j is not touched
 * after the increment. */
static void done_one(xc_cache *c, job *j)
{
    size_t n = j->n;
    /* an item claimed, so not every item has ended yet */
    assert(xc_locked(&c->pool_mu) && atomic_load(&j->n_done) < n);
    if (atomic_fetch_add_explicit(&j->n_done, 1, memory_order_release) + 1 ==
        n)
        pthread_cond_broadcast(&c->pool_done);
}

void *xc_pool_main(void *arg)
{
    xc_cache *c = arg;
    uint64_t last_ns = 0; /* this reader's last read */
    pool_lock(c);
    for (;;) {
        job *j;
        resv *r;
        if (c->jobs == NULL && !c->pool_stop) {
            /* poll a while before sleeping (spin_budget) */
            pthread_mutex_unlock(&c->pool_mu);
            spin_until(&c->pool_unclaimed, 0, 0, spin_budget(last_ns));
            pool_lock(c);
        }
        while (c->jobs == NULL && !c->pool_stop)
            pthread_cond_wait(&c->pool_work, &c->pool_mu);
        if (c->jobs == NULL)
            break; /* stopping, nothing queued */
        j = c->jobs;
        r = claim(c, j);
        pthread_mutex_unlock(&c->pool_mu);
        xc_slot_read(c, r);
        last_ns = r->ns; /* before done_one: r is the caller's after it */
        pool_lock(c);
        done_one(c, j);
    }
    pthread_mutex_unlock(&c->pool_mu);
    return NULL;
}

/* Step (2) of getmany: reads every item, the caller reading beside the
 * workers, and returns when all have ended. */
static void read_batch(xc_cache *c, resv *items, size_t n)
{
    job j;
    resv *r;
    uint64_t last_ns = 0; /* the caller's last read */
    if (n == 0)
        return;
    if (c->n_workers == 0 || n == 1) {
        size_t i;
        for (i = 0; i < n; i++)
            xc_slot_read(c, &items[i]);
        return;
    }
    j.next = NULL;
    j.items = items;
    j.n = n;
    j.next_item = 0;
    atomic_init(&j.n_done, 0);
    pool_lock(c);
    {
        job **pp = &c->jobs;
        while (*pp)
            pp = &(*pp)->next;
        *pp = &j;
    }
    atomic_fetch_add_explicit(&c->pool_unclaimed, n, memory_order_release);
    r = claim(c, &j); /* n >= 2: the caller's first item */
    pthread_mutex_unlock(&c->pool_mu);
    /* Woken after the unlock, a sleeping reader does not find pool_mu
     * held; it cannot miss the job, which was queued under the lock it
     * checks the queue under. */
    pthread_cond_broadcast(&c->pool_work);
    while (r != NULL) {
        xc_slot_read(c, r);
        last_ns = r->ns;
        pool_lock(c);
        done_one(c, &j);
        r = claim(c, &j);
        pthread_mutex_unlock(&c->pool_mu);
    }
    /* a reader may still have our last item: poll before sleeping */
    if (spin_until(&j.n_done, j.n, 1, spin_budget(last_ns)))
        return; /* done_one touches j no more after its increment, and its
                   release orders the item's results */
    pool_lock(c);
    while (atomic_load(&j.n_done) < j.n)
        pthread_cond_wait(&c->pool_done, &c->pool_mu);
    pthread_mutex_unlock(&c->pool_mu);
}

/* Appends a read to the read-ahead ring (mu held).  0 when it is full. */
int xc_readahead_push(xc_cache *c, int32_t si, uint32_t key, int kind,
                      xc_stream *stream, size_t idx)
{
    aitem *it;
    assert(xc_locked(&c->mu) && si >= 0 && (size_t)si < c->n_slots &&
           key < c->ld.n_keys && kind >= 0 && kind < XC_N_KINDS);
    /* a stream's item is pushed with its stream, anything else without */
    assert(stream == NULL ? kind != XC_KIND_STREAM
                          : kind == XC_KIND_STREAM && idx < stream->n);
    if (c->n_io == 0 || c->aq_n + c->aq_active >= c->aq_cap)
        return 0;
    assert(c->slots[si].state == XC_SLOT_INFLIGHT);
    it = &c->aq[(c->aq_head + c->aq_n) % c->aq_cap];
    it->slot = si;
    it->key = key;
    it->kind = kind;
    it->stream = stream;
    it->idx = idx;
    c->aq_n++;
    c->slots[si].owner = OWNER_QUEUED;
    return 1;
}

/* A read-ahead reader: dequeue, read without the lock, publish under it.
 * At stop it finishes everything still queued before leaving, so close
 * never frees a slot a read is writing into. */
void *xc_readahead_main(void *arg)
{
    xc_cache *c = arg;
    pthread_mutex_lock(&c->mu);
    for (;;) {
        aitem it;
        resv r;
        while (c->aq_n == 0 && !c->aq_stop)
            pthread_cond_wait(&c->aq_work, &c->mu);
        if (c->aq_n == 0)
            break; /* stopping, nothing queued */
        it = c->aq[c->aq_head];
        c->aq_head = (c->aq_head + 1) % c->aq_cap;
        c->aq_n--;
        c->aq_active++;
        assert(c->slots[it.slot].owner == OWNER_QUEUED);
        c->slots[it.slot].owner = OWNER_ACTIVE;
        pthread_mutex_unlock(&c->mu);
        r.slot = it.slot;
        r.key = it.key;
        r.err = NULL;
        xc_slot_read(c, &r);
        pthread_mutex_lock(&c->mu);
        xc_slot_finish(c, it.slot, r.rc, r.payload_off, r.asked_bytes, r.ns,
                       it.kind, r.src);
        if (it.stream != NULL) {
            xc_slot_stream_done(c, it.stream, it.idx, r.rc);
            it.stream->n_queued--;
        }
        c->aq_active--;
        pthread_cond_broadcast(&c->ended);
    }
    pthread_mutex_unlock(&c->mu);
    return NULL;
}

/*
 * getmany and prefetch: (1) validate every key, protect every key resident
 * at the call, then reserve serially in the order given, (2) read -- in parallel on the batch pool, or, for an
 * asynchronous prefetch, on the read-ahead readers (what the ring cannot
 * take, on the batch pool here and now), (3) publish serially in
 * reservation order (the readers publish as they complete, with the ticks
 * stamped in reservation order at the end of (1)) and drop the
 * protections taken in (1).
 */
static int batch(xc_cache *c, const int32_t *layers, const int32_t *experts,
                 size_t n, int kind, int async, size_t *out_count)
{
    uint32_t *keys = NULL;
    int32_t *prot = NULL;
    resv *rv = NULL;
    size_t i, n_resv = 0, n_prot = 0, n_pub = 0, n_local = 0;
    uint64_t seq;
    int rc;

    if (n > 0 && (layers == NULL || experts == NULL))
        return xc_fail(XC_E_MISUSE, -1, -1, -1, "getmany: NULL key arrays");
    if (n > SIZE_MAX / sizeof *rv) /* the largest per-key array below */
        return xc_fail(XC_E_MISUSE, -1, -1, -1,
                       "getmany: %zu keys is more than memory can index", n);
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

    pthread_mutex_lock(&c->mu);
    /* (1) protect every key resident at the call first, so that no miss of
     * this batch can evict a resident the same batch names (it would be read
     * again: one eviction and one read wasted); they are touched below, in
     * the order given */
    seq = ++c->batch_seq;
    for (i = 0; i < n; i++) {
        int32_t si = c->index[keys[i]];
        if (c->seen[keys[i]] == seq || si < 0 ||
            c->slots[si].state != XC_SLOT_READY)
            continue;
        c->seen[keys[i]] = seq;
        c->slots[si].holds++; /* protected for the rest of this call */
        xc_slot_note(c, &c->slots[si]); /* no longer a policy candidate */
        prot[n_prot++] = si;
    }
    /* (1) reserve, serially, in the order given */
    seq = ++c->batch_seq;
    for (i = 0; i < n; i++) {
        uint32_t key = keys[i];
        int32_t si = c->index[key];
        if (c->seen[key] == seq) {
            xc_trace_put(c, kind, XC_OUT_DUPLICATE, key);
            continue; /* named earlier in this batch */
        }
        c->seen[key] = seq;
        if (si >= 0 && c->slots[si].state == XC_SLOT_READY) {
            xc_slot_touch(c, &c->slots[si]); /* protected above */
            xc_trace_put(c, kind, XC_OUT_RESIDENT, key);
            continue;
        }
        if (si >= 0) {
            xc_trace_put(c, kind, XC_OUT_INFLIGHT, key);
            continue; /* another read of it is under way */
        }
        if ((si = xc_slot_victim(c)) < 0) {
            xc_trace_put(c, kind, XC_OUT_NO_SLOT, key);
            continue; /* no slot: a short count */
        }
        xc_slot_reserve(c, si, key);
        c->slots[si].owner = OWNER_BATCH;
        xc_trace_put(c, kind, XC_OUT_ISSUED, key);
        rv[n_resv].slot = si;
        rv[n_resv].key = key;
        rv[n_resv].err = NULL;
        n_resv++;
    }
    if (kind == XC_KIND_SPEC)
        c->stats.spec_issued += n_resv;
    if (async) {
        /* stamp the publish ticks now, in reservation order, and queue */
        for (i = 0; i < n_resv; i++) {
            xc_slot_stamp(c, rv[i].slot);
            if (!xc_readahead_push(c, rv[i].slot, rv[i].key, kind, NULL, 0)) {
                c->stats.queue_fallbacks++;
                rv[n_local++] = rv[i];
            }
        }
        if (n_local < n_resv)
            pthread_cond_broadcast(&c->aq_work);
    } else {
        n_local = n_resv;
    }
    pthread_mutex_unlock(&c->mu);

    /* (2) read in parallel what is ours to read */
    read_batch(c, rv, n_local);

    /* (3) publish, serially, in reservation order */
    pthread_mutex_lock(&c->mu);
    for (i = 0; i < n_local; i++) {
        xc_slot_finish(c, rv[i].slot, rv[i].rc, rv[i].payload_off,
                       rv[i].asked_bytes, rv[i].ns, kind, rv[i].src);
        n_pub += rv[i].rc == XC_OK;
    }
    for (i = 0; i < n_prot; i++) {
        assert(c->slots[prot[i]].holds > 0); /* ours, taken in (1) */
        c->slots[prot[i]].holds--;
    }
    if (n_local)
        pthread_cond_broadcast(&c->ended);
    pthread_mutex_unlock(&c->mu);
    if (out_count)
        *out_count = async ? n_resv : n_pub;
    rc = XC_OK;
out:
    xc_free(keys);
    xc_free(prot);
    xc_free(rv);
    return rc;
}

int xc_cache_getmany(xc_cache *c, const int32_t *layers,
                     const int32_t *experts, size_t n, size_t *published)
{
    return batch(c, layers, experts, n, XC_KIND_PREFETCH, 0, published);
}

int xc_cache_prefetch(xc_cache *c, const int32_t *layers,
                      const int32_t *experts, size_t n, int speculative,
                      size_t *issued)
{
    return batch(c, layers, experts, n,
                 speculative ? XC_KIND_SPEC : XC_KIND_PREFETCH, c->n_io > 0, issued);
}

void xc_cache_drain(xc_cache *c)
{
    if (xc_cache_forked(c))
        return; /* a child after fork(): no reader will ever signal */
    pthread_mutex_lock(&c->mu);
    while (c->aq_n + c->aq_active > 0)
        pthread_cond_wait(&c->ended, &c->mu);
    pthread_mutex_unlock(&c->mu);
}

void xc_readahead_stop(xc_cache *c, int n_started)
{
    int i;
    pthread_mutex_lock(&c->mu);
    c->aq_stop = 1;
    pthread_cond_broadcast(&c->aq_work);
    pthread_mutex_unlock(&c->mu);
    for (i = 0; i < n_started; i++)
        pthread_join(c->io[i], NULL);
}

void xc_pool_stop(xc_cache *c, int n_started)
{
    int i;
    pthread_mutex_lock(&c->pool_mu);
    c->pool_stop = 1;
    pthread_cond_broadcast(&c->pool_work);
    pthread_mutex_unlock(&c->pool_mu);
    for (i = 0; i < n_started; i++)
        pthread_join(c->workers[i], NULL);
}

/* ------------------------------------------------------------------ */
/* hold_layer: one layer's experts held in one call                     */
/* ------------------------------------------------------------------ */

/* Keys a hold_layer call keeps on the stack; more are allocated.  A
 * layer's top-k is far below this in practice (single digits to 16), so
 * the hit path never allocates. */
#define HOLD_STACK_KEYS 64

/* Records the error of a failed read of item r (mu not needed): the
 * reading thread's record when it was kept, else one naming the key. */
static int hold_read_failed(const xc_cache *c, const resv *r)
{
    int32_t layer, expert;
    assert(r != NULL && r->rc != XC_OK);
    if (r->err != NULL && r->err->code == r->rc)
        return xc_fail_copy(r->err);
    xc_load_unkey(&c->ld, r->key, &layer, &expert);
    return xc_fail(r->rc, -1, layer, expert,
                   "layer %d expert %d: read failed (%s)", (int)layer,
                   (int)expert, xc_status_name(r->rc));
}

/*
 * hold_layer (docs/CACHE.md "hold_layer"): (1) validate every key and
 * refuse a repeat, (2) wait until none of them is in flight (a stream's
 * unread reservation is read here instead, as get does), (3) in the order
 * given: READY is a hit (counted, touched, held), missing is a miss
 * reserved with its tick stamped now -- a stream's bookkeeping -- and a
 * key that finds no slot ends the pass, (4) read the reserved misses in
 * parallel on the batch pool, (5) publish them in the order given, each
 * held, (6) on any failure give back every hold (1)-(5) took, else return
 * the handles.
 */
int xc_cache_hold_layer(xc_cache *c, int32_t layer, const int32_t *experts,
                        size_t n, int64_t *handles, uint64_t *offsets)
{
    uint32_t kstack[HOLD_STACK_KEYS], *keys = kstack;
    resv rstack[HOLD_STACK_KEYS], *rv = rstack;
    xc_error *errs = NULL;
    size_t i, j, n_done = 0, n_resv = 0;
    int32_t pinned_expert = -1;
    uint64_t seq;
    int rc = XC_OK;

    if (n > 0 && (experts == NULL || handles == NULL || offsets == NULL))
        return xc_fail(XC_E_MISUSE, -1, layer, -1,
                       "hold_layer: NULL experts, handles or offsets");
    if (n > c->n_slots)
        return xc_fail(XC_E_MISUSE, -1, layer, -1,
                       "hold_layer: %zu experts cannot be held at once in "
                       "%zu slots", n, c->n_slots);
    if (n > HOLD_STACK_KEYS) {
        keys = xc_malloc(n * sizeof *keys);
        rv = xc_malloc(n * sizeof *rv);
        if (keys == NULL || rv == NULL) {
            rc = xc_fail(XC_E_NOMEM, -1, layer, -1,
                         "hold_layer: no memory for %zu keys", n);
            goto out;
        }
    }
    /* (1) validate */
    for (i = 0; i < n; i++)
        if ((rc = xc_load_key(&c->ld, layer, experts[i], &keys[i])) != XC_OK)
            goto out;

    pthread_mutex_lock(&c->mu);
    seq = ++c->batch_seq;
    for (i = 0; i < n; i++) {
        if (c->seen[keys[i]] == seq) {
            pthread_mutex_unlock(&c->mu);
            rc = xc_fail(XC_E_MISUSE, -1, layer, experts[i],
                         "hold_layer: layer %d expert %d is named twice",
                         (int)layer, (int)experts[i]);
            goto out;
        }
        c->seen[keys[i]] = seq;
    }
    /* (2) nothing changed yet: wait out every read of our keys */
    for (i = 0; i < n;) {
        int32_t si = c->index[keys[i]];
        if (si < 0 || c->slots[si].state != XC_SLOT_INFLIGHT) {
            i++;
            continue;
        }
        if (c->slots[si].owner == OWNER_STREAM)
            xc_slot_claim_read(c, c->slots[si].owner_stream,
                                 c->slots[si].owner_item);
        else
            pthread_cond_wait(&c->ended, &c->mu);
        i = 0; /* the lock was let go: look at every key again */
    }
    /* (3) hits and reservations in the order given */
    for (n_done = 0; n_done < n; n_done++) {
        uint32_t key = keys[n_done];
        int32_t si = c->index[key];
        if (si >= 0) { /* READY: (2) left nothing of ours in flight */
            xc_slot_hit(c, si, key);
            xc_trace_put(c, XC_KIND_STREAM, XC_OUT_HIT, key);
            continue;
        }
        if ((si = xc_slot_miss_reserve(c, key)) < 0) {
            pinned_expert = experts[n_done];
            break; /* no slot: nothing changed for this key */
        }
        xc_trace_put(c, XC_KIND_STREAM, XC_OUT_MISS, key);
        xc_slot_stamp(c, si);
        c->slots[si].owner = OWNER_BATCH;
        rv[n_resv].slot = si;
        rv[n_resv].key = key;
        rv[n_resv].err = NULL;
        n_resv++;
    }
    pthread_mutex_unlock(&c->mu);

    /* (4) read the misses in parallel; a record per read when memory
     * allows (without one, a failure is reported by key alone) */
    if (n_resv > 0) {
        errs = xc_malloc(n_resv * sizeof *errs);
        for (j = 0; errs != NULL && j < n_resv; j++) {
            errs[j].code = XC_OK;
            rv[j].err = &errs[j];
        }
    }
    read_batch(c, rv, n_resv);

    /* (5) publish in the order given, each held */
    pthread_mutex_lock(&c->mu);
    for (j = 0; j < n_resv; j++) {
        xc_slot_finish(c, rv[j].slot, rv[j].rc, rv[j].payload_off,
                       rv[j].asked_bytes, rv[j].ns, XC_KIND_STREAM, rv[j].src);
        if (rv[j].rc == XC_OK)
            c->slots[rv[j].slot].holds = 1;
        else if (rc == XC_OK)
            rc = rv[j].rc; /* the first failure in the order given */
    }
    if (n_resv)
        pthread_cond_broadcast(&c->ended);
    if (rc == XC_OK && n_done < n)
        rc = XC_E_ALL_PINNED;
    /* (6) all held, or none */
    for (i = 0, j = 0; i < n_done; i++) {
        int32_t si = c->index[keys[i]];
        int is_miss = j < n_resv && rv[j].key == keys[i];
        int ok = !is_miss || rv[j].rc == XC_OK;
        j += is_miss;
        if (!ok)
            continue; /* emptied by its failed read: holds nothing */
        assert(si >= 0 && c->slots[si].state == XC_SLOT_READY &&
               c->slots[si].holds > 0);
        if (rc != XC_OK) {
            c->slots[si].holds--;
            continue;
        }
        handles[i] = xc_handle_of(c, si);
        offsets[i] = (uint64_t)si * c->ld.stride + c->slots[si].payload_off;
    }
    pthread_mutex_unlock(&c->mu);
    if (rc == XC_E_ALL_PINNED)
        rc = xc_fail(XC_E_ALL_PINNED, -1, layer, pinned_expert,
                     "hold_layer: layer %d expert %d: all %zu slots are "
                     "held, pinned or in flight", (int)layer,
                     (int)pinned_expert, c->n_slots);
    else if (rc != XC_OK)
        for (j = 0; j < n_resv; j++)
            if (rv[j].rc != XC_OK) {
                hold_read_failed(c, &rv[j]);
                break;
            }
out:
    xc_free(errs);
    if (keys != kstack)
        xc_free(keys);
    if (rv != rstack)
        xc_free(rv);
    return rc;
}

int xc_cache_unhold_many(xc_cache *c, int64_t *handles, size_t n)
{
    size_t i;
    if (n > 0 && handles == NULL)
        return xc_fail(XC_E_MISUSE, -1, -1, -1,
                       "release: NULL handles");
    pthread_mutex_lock(&c->mu);
    for (i = 0; i < n; i++) {
        slot *s = xc_held_slot(c, handles[i]);
        if (s == NULL) {
            int64_t bad = handles[i];
            while (i-- > 0) /* put back what this call gave back */
                c->slots[handles[i] & 0xffffffff].holds++;
            pthread_mutex_unlock(&c->mu);
            return xc_fail(XC_E_MISUSE, -1, -1, -1,
                           "release: handle %lld holds no reference "
                           "(released twice, republished since, or of "
                           "another cache)", (long long)bad);
        }
        s->holds--;
    }
    pthread_mutex_unlock(&c->mu);
    /* spent: the same array given back again is MISUSE even while other
     * holds of the same publishes keep the slots held */
    for (i = 0; i < n; i++)
        handles[i] = -1;
    return XC_OK;
}
