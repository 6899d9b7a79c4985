/*
 * xc_cache.c -- the expert cache: slots, victims, holds, pins, counters.
 *
 * This file holds one slot's life (reserve, publish, hit, victim choice,
 * the order list), get/release and their handle face, pin/unpin, and
 * open/close.  The other seams of the same object -- the batch pool and
 * read-ahead (xc_batch.c), streams (xc_stream.c), counters, snapshots and
 * check() (xc_check.c) and the trace (xc_trace.c) -- share the private
 * types and functions of xc_cache_impl.h.  The design below is the whole
 * cache's.
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
 *                        are widened for O_DIRECT; 2 * XC_ALIGN for a
 *                        scattered fused expert read O_DIRECT, xc_load.c)
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
 * - The policy sees keys, their rows and a view that says which are
 *   candidates (xc_policy.h), never this file's structures, so an offline
 *   simulator runs the same policy code.
 * - Counters change only under the lock and only together with the state
 *   they describe, so check() can relate them (INV-COUNTERS, INV-PREFETCH)
 *   at any call boundary, even with other threads mid-call.
 *
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
#include "xc_cache_impl.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>

/* ------------------------------------------------------------------ */
/* The order list: inserts reach the policy in stamp order              */
/* ------------------------------------------------------------------ */

/* Stamps reserved slot si with its publish tick (mu held) and, when the
 * policy is told inserts, appends it to the order list: ticks only grow,
 * so appending keeps the list in stamp order. */
void xc_slot_stamp(xc_cache *c, int32_t si)
{
    /* only a fresh reservation is stamped, once */
    assert(c->slots[si].state == XC_SLOT_INFLIGHT &&
           c->slots[si].last_use == 0);
    xc_slot_touch(c, &c->slots[si]);
    if (!c->ordered)
        return;
    c->slots[si].onext = -1;
    if (c->oq_last >= 0)
        c->slots[c->oq_last].onext = si;
    else
        c->oq_first = si;
    c->oq_last = si;
    c->oq_n++;
}

/* Tells the policy the insert of untold slot s, then the demand hits it
 * had meanwhile, so the policy sees them in the order a synchronous
 * publish would have given (insert first). */
static void tell(xc_cache *c, slot *s)
{
    xc_pcand row;
    assert(s->state == XC_SLOT_READY && s->insert_pending);
    s->insert_pending = 0;
    xc_slot_row(c, s, &row);
    xc_policy_insert(&c->pol, &row);
    for (; s->pending_hits > 0; s->pending_hits--)
        xc_policy_hit(&c->pol, &row);
}

/* Tells the untold inserts at the front of the order list, up to the
 * first read that has not ended (mu held). */
static void tell_ready(xc_cache *c)
{
    while (c->oq_first >= 0 &&
           c->slots[c->oq_first].state == XC_SLOT_READY) {
        slot *s = &c->slots[c->oq_first];
        c->oq_first = s->onext;
        c->oq_n--;
        tell(c, s);
    }
    if (c->oq_first < 0)
        c->oq_last = -1;
}

/* Walks the order list (mu held): drops the entry of a read that just
 * failed (its slot is EMPTY again) and, with all, tells every untold
 * insert, in stamp order, leaving only the reads under way. */
static void oq_sweep(xc_cache *c, int all)
{
    int32_t *link = &c->oq_first, si;
    c->oq_last = -1;
    while ((si = *link) >= 0) {
        slot *s = &c->slots[si];
        if (s->state == XC_SLOT_INFLIGHT ||
            (s->state == XC_SLOT_READY && !all)) {
            c->oq_last = si;
            link = &s->onext;
            continue;
        }
        *link = s->onext;
        c->oq_n--;
        if (s->state == XC_SLOT_READY)
            tell(c, s);
    }
}

/* ------------------------------------------------------------------ */
/* Victims                                                              */
/* ------------------------------------------------------------------ */

/* The view a policy chooses through (xc_policy.h).  A slot is a candidate
 * when it is READY, unprotected and its insert was told. */
typedef struct vctx {
    xc_cache *c;
    size_t n;      /* non-candidate slots at the front of c->nc, once listed */
    int listed;
} vctx;

static int is_candidate(const slot *s)
{
    if (s->state != XC_SLOT_READY || SLOT_PROTECTED(s))
        return 0;
    if (s->insert_pending)
        return 0;
    return 1;
}

static int view_row(const void *ctx, uint32_t key, xc_pcand *out)
{
    const xc_cache *c = ((const vctx *)ctx)->c;
    int32_t si = c->index[key];
    if (si < 0 || !is_candidate(&c->slots[si]))
        return 0;
    xc_slot_row(c, &c->slots[si], out);
    return 1;
}

static int by_slot(const void *a, const void *b)
{
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return x < y ? -1 : x > y;
}

/* Once per choice, for a policy that samples by position: drops the noted
 * slots that are candidates again, and sorts the rest (the slots that are
 * not candidates: few).  Every slot is non-EMPTY here, so the candidates
 * are the other slots. */
static void view_list(vctx *v)
{
    xc_cache *c = v->c;
    size_t i, n = 0;
    if (v->listed)
        return;
    for (i = 0; i < c->nc_n; i++) {
        slot *s = &c->slots[c->nc[i]];
        if (is_candidate(s))
            s->noted = 0;
        else
            c->nc[n++] = c->nc[i];
    }
    c->nc_n = v->n = n;
    qsort(c->nc, n, sizeof *c->nc, by_slot);
    v->listed = 1;
}

static size_t view_count(const void *ctx)
{
    vctx *v = (vctx *)(uintptr_t)ctx;
    view_list(v);
    return v->c->n_slots - v->n;
}

/* The j-th candidate: slot j moved past every non-candidate at or below
 * it (c->nc ascending). */
static void view_nth(const void *ctx, size_t j, xc_pcand *out)
{
    vctx *v = (vctx *)(uintptr_t)ctx;
    size_t i, s = j;
    view_list(v);
    for (i = 0; i < v->n && (size_t)v->c->nc[i] <= s; i++)
        s++;
    xc_slot_row(v->c, &v->c->slots[s], out);
}

/* The first untold slot on the order list that is READY and unprotected,
 * or -1. */
static int32_t untold_candidate(const xc_cache *c)
{
    int32_t si;
    for (si = c->oq_first; si >= 0; si = c->slots[si].onext)
        if (c->slots[si].state == XC_SLOT_READY &&
            !SLOT_PROTECTED(&c->slots[si]))
            return si;
    return -1;
}

/* docs/CACHE.md "Victim choice": the lowest EMPTY slot, else the policy's
 * pick among READY unprotected slots whose insert it has been told, else
 * -1.  An untold slot is not a candidate (the policy does not know its
 * key yet); only when the untold ones are the only unprotected READY
 * slots are all untold inserts told first, in stamp order.  to_evict is
 * pure, and -1 changes nothing.  The EMPTY search starts at empty_lo (no
 * EMPTY slot lies below it), so it is O(1) amortised: slots fill upwards
 * and only a failed read lowers it. */
int32_t xc_slot_victim(xc_cache *c)
{
    vctx v = {c, 0, 0};
    xc_pview view = {view_row, view_count, view_nth, &v};
    size_t i;
    int64_t k;
    for (i = c->empty_lo; i < c->n_slots; i++)
        if (c->slots[i].state == XC_SLOT_EMPTY)
            break;
    c->empty_lo = i;
    if (i < c->n_slots)
        return (int32_t)i;
    k = c->pol.ops->to_evict(&c->pol, &view);
    if (k >= 0)
        return c->index[k];
    if (untold_candidate(c) < 0)
        return -1;
    oq_sweep(c, 1); /* no untold slot is left: this recurses once */
    return xc_slot_victim(c);
}

/* ------------------------------------------------------------------ */
/* Reserve, publish, hit                                                */
/* ------------------------------------------------------------------ */

/* Takes victim s for key: counts the eviction if it held a key, and leaves
 * the slot INFLIGHT, owned by the caller's read, with no tick stamped
 * (last_use 0: xc_slot_finish() touches) unless the caller stamps one. */
void xc_slot_reserve(xc_cache *c, int32_t si, uint32_t key)
{
    slot *s = &c->slots[si];
    /* never a read under way, never a held or pinned expert */
    assert(s->state != XC_SLOT_INFLIGHT && !SLOT_PROTECTED(s));
    assert(c->index[key] < 0);
    if (s->state == XC_SLOT_READY) {
        c->stats.evictions++;
        c->evictions_since_open++;
        if (s->unused_prefetch)
            c->stats.prefetch_evicted_unused++;
        if (s->unused_spec)
            c->stats.spec_evicted_unused++;
        c->index[s->key] = -1;
        xc_policy_evict(&c->pol, s->key);
    }
    s->state = XC_SLOT_INFLIGHT;
    xc_slot_note(c, s);
    s->key = key;
    s->unused_prefetch = 0;
    s->unused_spec = 0;
    s->last_use = 0;
    s->owner = OWNER_DEMAND;
    s->owner_stream = NULL;
    s->owner_item = 0;
    s->window = c->window;
    c->index[key] = si;
    c->n_reads++;
}

/* Ends the read of INFLIGHT slot si.  Success publishes it (demand and
 * stream: freq 1; prefetch: freq 0 and the unused mark; speculative: freq
 * 0 and the spec mark) with the tick stamped at reservation, or a fresh
 * touch when none was; failure empties it and counts why.  A load belongs
 * to the window that counted its reservation (its miss, spec_issued):
 * when reset_stats closed that window meanwhile, its io, payload, source,
 * prefetch/spec and failure counters and its mark go nowhere, so the new
 * window holds only loads it reserved (docs/CACHE.md "reset_stats"). */
void xc_slot_finish(xc_cache *c, int32_t si, int rc, uint64_t payload_off,
                    uint64_t asked_bytes, uint64_t ns, int kind, int src)
{
    slot *s = &c->slots[si];
    xc_stats dropped, *cs = &c->stats;
    int listed = c->ordered && s->last_use != 0; /* stamped: on the list */
    /* only a read under way is published (or emptied), once */
    assert(s->state == XC_SLOT_INFLIGHT && c->n_reads > 0);
    if (s->window != c->window) {
        memset(&dropped, 0, sizeof dropped);
        cs = &dropped; /* the closed window's counters are gone */
    }
    cs->io_bytes += asked_bytes;
    cs->load_ns += ns;
    c->n_reads--;
    s->owner = OWNER_NONE;
    s->owner_stream = NULL;
    if (rc == XC_OK) {
        s->state = XC_SLOT_READY;
        s->freq = kind == KIND_DEMAND || kind == KIND_STREAM ? 1 : 0;
        if (s->last_use == 0)
            xc_slot_touch(c, s);
        s->insert_tick = s->last_use;
        s->generation++;
        s->payload_off = payload_off;
        cs->payload_bytes += c->ld.expert_bytes;
        if (kind == KIND_PREFETCH && cs == &c->stats) {
            s->unused_prefetch = 1;
            cs->prefetch_loads++;
        } else if (kind == KIND_SPEC && cs == &c->stats) {
            s->unused_spec = 1;
            cs->spec_loads++;
        }
        if (src == XC_SRC_PAGE_CACHE) {
            cs->page_cache_loads++;
            cs->page_cache_bytes += asked_bytes;
        } else if (src == XC_SRC_DEVICE) {
            cs->device_loads++;
            cs->device_bytes += asked_bytes;
        } else {
            cs->unknown_loads++;
        }
        if (!listed) {
            xc_pcand row;
            xc_slot_row(c, s, &row);
            xc_policy_insert(&c->pol, &row);
            return;
        }
        /* told now if no earlier stamped read is under way */
        s->insert_pending = 1;
    } else {
        c->index[s->key] = -1;
        s->state = XC_SLOT_EMPTY;
        s->key = 0;
        s->last_use = 0;
        if ((size_t)si < c->empty_lo)
            c->empty_lo = (size_t)si;
        cs->load_failures++;
        if (rc == XC_E_SHORT_READ)
            cs->short_reads++;
        else
            cs->io_errors++;
        if (!listed)
            return;
        oq_sweep(c, 0); /* off the list; later inserts may go now */
    }
    tell_ready(c);
}

/* get step (2) on READY slot si (mu held): count the hit, clear the marks
 * (first use), bump freq, touch, hold. */
void xc_slot_hit(xc_cache *c, int32_t si, uint32_t key)
{
    slot *s = &c->slots[si];
    assert(s->state == XC_SLOT_READY && s->key == key);
    c->stats.requests++;
    c->stats.hits++;
    c->requests_since_open++;
    if (s->unused_prefetch) {
        s->unused_prefetch = 0;
        c->stats.prefetch_first_uses++;
    }
    if (s->unused_spec) {
        s->unused_spec = 0;
        c->stats.spec_used++;
    }
    s->freq++;
    s->last_use = ++c->tick; /* the hit below tells the policy */
    s->holds++;
    xc_slot_note(c, s);
    xc_policy_request(&c->pol, key);
    if (s->insert_pending) {
        s->pending_hits++; /* told after its insert (tell) */
    } else {
        xc_pcand row;
        xc_slot_row(c, s, &row);
        xc_policy_hit(&c->pol, &row);
    }
}

/* get step (4) up to the reservation (mu held): choose a victim, count the
 * miss and reserve.  Returns the slot, or -1 (nothing changed). */
int32_t xc_slot_miss_reserve(xc_cache *c, uint32_t key)
{
    int32_t si;
    c->pol.want = key; /* xc_policy.h: the victim is chosen for key */
    c->pol.want_set = 1;
    si = xc_slot_victim(c);
    if (si < 0) {
        c->pol.want_set = 0;
        return -1;
    }
    c->stats.requests++;
    c->stats.misses++;
    c->requests_since_open++;
    xc_policy_request(&c->pol, key);
    xc_slot_reserve(c, si, key);
    c->pol.want_set = 0;
    return si;
}

void xc_slot_ref(const xc_cache *c, int32_t si, xc_ref *out)
{
    const slot *s = &c->slots[si];
    out->slot = si;
    out->generation = s->generation;
    out->data = xc_slot_mem(c, si) + s->payload_off;
    out->nbytes = c->ld.expert_bytes;
}

/* ------------------------------------------------------------------ */
/* get                                                                  */
/* ------------------------------------------------------------------ */

/* Steps (4)-(6) of get, with mu held on entry and on return. */
static int get_miss(xc_cache *c, uint32_t key, int32_t layer, int32_t expert,
                    int tkind, xc_ref *out)
{
    uint64_t payload_off = 0, asked = 0, t0, ns;
    int32_t si;
    int rc, src;

    /* (4) choose a victim; none leaves everything as it was */
    si = xc_slot_miss_reserve(c, key);
    if (si < 0)
        return xc_fail(XC_E_ALL_PINNED, -1, layer, expert,
                       "layer %d expert %d: all %zu slots are held, pinned "
                       "or in flight", (int)layer, (int)expert, c->n_slots);
    xc_trace_put(c, tkind, TRACE_OUT_MISS, key);

    /* (5) read, lock released: the slot is INFLIGHT and ours alone */
    pthread_mutex_unlock(&c->mu);
    t0 = xc_now_ns();
    rc = xc_load_read_src(&c->ld, key, xc_slot_mem(c, si), &payload_off,
                          &asked, &src);
    ns = xc_now_ns() - t0;
    pthread_mutex_lock(&c->mu);

    /* (6) publish, or return the slot to EMPTY */
    xc_slot_finish(c, si, rc, payload_off, asked, ns, KIND_DEMAND, src);
    pthread_cond_broadcast(&c->ended);
    if (rc != XC_OK)
        return rc; /* the loader recorded the error with layer and expert */
    c->slots[si].holds = 1;
    xc_slot_ref(c, si, out);
    return XC_OK;
}

/* get with mu held (steps 2-6); tkind is the trace kind to record. */
int xc_get_locked(xc_cache *c, uint32_t key, int32_t layer, int32_t expert,
                  int tkind, xc_ref *out)
{
    int waited = 0;
    int32_t si;
    for (;;) {
        /* (2) look up */
        si = c->index[key];
        if (si < 0)
            break;
        if (c->slots[si].state == XC_SLOT_READY) {
            xc_slot_hit(c, si, key);
            if (c->tr != NULL) /* the common case skips the call */
                xc_trace_put(c, tkind, waited ? TRACE_OUT_WAIT_HIT
                                              : TRACE_OUT_HIT, key);
            xc_slot_ref(c, si, out);
            return XC_OK;
        }
        /* (3) in flight: wait, then look up again.  A stream's
         * reservation nobody is reading yet is read here instead (for the
         * stream, which keeps its hold): waiting for its consumer could be
         * waiting for ourselves. */
        waited = 1;
        if (c->slots[si].owner == OWNER_STREAM)
            xc_stream_claim_read(c, c->slots[si].owner_stream,
                                 c->slots[si].owner_item);
        else
            pthread_cond_wait(&c->ended, &c->mu);
    }
    return get_miss(c, key, layer, expert, tkind, out);
}

/* The key of (layer, expert) when the layers are consecutive (layers
 * strictly ascend, so first and last tell): one subtraction instead of the
 * loader's binary search, the same key.  0 when it does not apply or the
 * pair is not a key (xc_load_key then says why). */
static inline int fast_key(const xc_loader *ld, int32_t layer, int32_t expert,
                           uint32_t *key)
{
    int64_t pos = (int64_t)layer - ld->layers[0];
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
 * (4) choose a victim, (5) read, (6) publish.  (2)-(3) are xc_get_locked(),
 * (4)-(6) get_miss().
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
    rc = xc_get_locked(c, key, layer, expert, TRACE_KIND_GET, out);
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
    struct xc_arena *a = xc_calloc(1, sizeof *a);
    if (a == NULL)
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
    int rc = xc_fail(XC_E_NOMEM, -1, -1, -1, "cache open: cannot start %s "
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
    uint64_t need = (uint64_t)o->top_k + 1, need_bytes;
    uint64_t have = o->n_slots ? o->n_slots : o->budget_bytes / stride;
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
    if (o->top_k < 1 || o->batch_threads < 1 || o->batch_threads > 256)
        return xc_fail(XC_E_MISUSE, -1, -1, -1,
                       "cache open: top_k must be >= 1 (got %d) and "
                       "batch_threads 1..256 (got %d)", o->top_k,
                       o->batch_threads);
    if (o->io_threads < 0 || o->io_threads > 64 || o->io_depth < 0 ||
        o->split_min_misses < 0)
        return xc_fail(XC_E_MISUSE, -1, -1, -1,
                       "cache open: io_threads must be 0..64 (got %d), "
                       "io_depth and split_min_misses >= 0 (got %d, %d)",
                       o->io_threads, o->io_depth, o->split_min_misses);
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
    c->aq_cap = o->io_depth > 0 ? (size_t)o->io_depth : 64;
    c->split_min = o->split_min_misses > 0 ? o->split_min_misses : 1;
    c->io = xc_calloc((size_t)c->n_io + 1, sizeof *c->io);
    c->aq = xc_calloc(c->aq_cap, sizeof *c->aq);
    if (o->trace_path != NULL) {
        c->tr_cap = o->trace_ring_records ? o->trace_ring_records : 4096;
        c->tr_buf = xc_malloc(c->tr_cap * TRACE_RECORD_BYTES);
    }
    if (!c->arena || !c->slots || !c->cand || !c->index || !c->scratch ||
        (c->pol.ops->by_position && !c->nc) ||
        !c->seen || !c->workers || !c->io || !c->aq ||
        (o->trace_path != NULL && !c->tr_buf)) {
        /* record before destroy(): the message reads c */
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
