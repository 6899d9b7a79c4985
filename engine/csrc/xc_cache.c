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
 * stamped before it has ended, else it is held back ("untold": READY and
 * served, but no victim candidate, since the policy does not know the key;
 * hits on it are told after its insert).  Each publish or failure then
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
 * and a kept miss (OWN_STREAM) is claimable: the first get() or stream
 * that needs the key reads it itself and publishes it for the stream (the
 * stream's hold, its completion list), then carries on as after a wait.
 * Nothing ever waits on a read that nobody is doing.
 *
 * A speculative prefetch is a prefetch whose loads carry their own mark
 * (spec), so guesses that were never used are counted apart from
 * prefetches that were asked for.
 *
 * Locking: one mutex guards every slot field, the index, the clock, the
 * counters, the policy, the order list, the read-ahead ring, every
 * stream's state and the trace buffer.  Reads run without it.  `ended` is
 * broadcast whenever an INFLIGHT slot ends (published or failed);
 * `aq_work` wakes the read-ahead readers.  The batch readers have their
 * own mutex (pool_mu) that is never held together with mu.
 */
#include "xc_internal.h"
#include "xc_load.h"
#include "xc_policy.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "xc_cache_impl.h"

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
/* The order list: inserts reach the policy in stamp order              */
/* ------------------------------------------------------------------ */

/* Stamps reserved slot si with its publish tick (mu held) and, when the
 * policy is told inserts, appends it to the order list: ticks only grow,
 * so appending keeps the list in stamp order. */
static void stamp(xc_cache *c, int32_t si)
{
    touch(c, &c->slots[si]);
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
    s->untold = 0;
    xc_policy_insert(&c->pol, s->key);
    for (; s->untold_hits > 0; s->untold_hits--)
        xc_policy_hit(&c->pol, s->key);
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

/* docs/CACHE.md "Victim choice": the lowest EMPTY slot, else the policy's
 * pick among READY unprotected slots whose insert it has been told, else
 * -1.  An untold slot is not a candidate (the policy does not know its
 * key yet); only when the untold ones are the only unprotected READY
 * slots are all untold inserts told first, in stamp order.  to_evict is
 * pure, and -1 changes nothing. */
static int32_t choose_victim(xc_cache *c)
{
    size_t i, n = 0, n_untold = 0;
    for (i = 0; i < c->n_slots; i++)
        if (c->slots[i].state == XC_SLOT_EMPTY)
            return (int32_t)i;
    for (i = 0; i < c->n_slots; i++) {
        const slot *s = &c->slots[i];
        if (s->state != XC_SLOT_READY || SLOT_PROTECTED(s))
            continue;
        if (s->untold) {
            n_untold++;
            continue;
        }
        c->cand[n].slot = (int32_t)i;
        c->cand[n].key = s->key;
        c->cand[n].last_use = s->last_use;
        c->cand[n].insert_tick = s->insert_tick;
        c->cand[n].freq = s->freq;
        n++;
    }
    if (n == 0 && n_untold > 0) {
        oq_sweep(c, 1); /* no untold slot is left: this recurses once */
        return choose_victim(c);
    }
    if (n == 0)
        return -1;
    return c->cand[c->pol.ops->to_evict(&c->pol, c->cand, n)].slot;
}

/* ------------------------------------------------------------------ */
/* Trace                                                                */
/* ------------------------------------------------------------------ */

static void put_le(uint8_t *p, uint64_t v, unsigned n)
{
    unsigned i;
    for (i = 0; i < n; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

/* Writes the buffered records (mu held, or the cache not shared yet). */
static int trace_write(xc_cache *c)
{
    if (c->tr == NULL || c->tr_failed || c->tr_n == 0)
        return XC_OK;
    if (fwrite(c->tr_buf, TRACE_RECORD_BYTES, c->tr_n, c->tr) != c->tr_n ||
        fflush(c->tr) != 0) {
        int e = errno;
        c->tr_failed = 1;
        snprintf(c->tr_note, sizeof c->tr_note,
                 "trace write failed, recording stopped: %s (errno %d)",
                 strerror(e), e);
    }
    c->tr_n = 0;
    return c->tr_failed ? XC_E_IO : XC_OK;
}

/* Appends one record (mu held): step, layer, expert, kind, outcome. */
static void trace_put(xc_cache *c, int kind, int outcome, uint32_t key)
{
    uint8_t *r;
    int32_t layer, expert;
    if (c->tr == NULL || c->tr_failed)
        return;
    xc_load_unkey(&c->ld, key, &layer, &expert);
    r = c->tr_buf + c->tr_n * TRACE_RECORD_BYTES;
    memset(r, 0, TRACE_RECORD_BYTES);
    put_le(r, c->tr_step, 8);
    put_le(r + 8, (uint32_t)layer, 4);
    put_le(r + 12, (uint32_t)expert, 4);
    r[16] = (uint8_t)kind;
    r[17] = (uint8_t)outcome;
    if (++c->tr_n == c->tr_cap)
        (void)trace_write(c);
}

/* ------------------------------------------------------------------ */
/* Reserve, publish, hit                                                */
/* ------------------------------------------------------------------ */

/* Takes victim s for key: counts the eviction if it held a key, and leaves
 * the slot INFLIGHT, owned by the caller's read, with no tick stamped
 * (last_use 0: finish() touches) unless the caller stamps one. */
static void reserve(xc_cache *c, int32_t si, uint32_t key)
{
    slot *s = &c->slots[si];
    if (s->state == XC_SLOT_READY) {
        c->st.evictions++;
        c->evictions_since_open++;
        if (s->mark)
            c->st.prefetch_evicted_unused++;
        if (s->spec)
            c->st.spec_evicted_unused++;
        c->index[s->key] = -1;
        xc_policy_evict(&c->pol, s->key);
    }
    s->state = XC_SLOT_INFLIGHT;
    s->key = key;
    s->mark = 0;
    s->spec = 0;
    s->last_use = 0;
    s->owner = OWN_DEMAND;
    s->ost = NULL;
    s->oidx = 0;
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
static void finish(xc_cache *c, int32_t si, int rc, uint64_t payload_off,
                   uint64_t asked_bytes, uint64_t ns, int kind, int src)
{
    slot *s = &c->slots[si];
    xc_stats dropped, *cs = &c->st;
    int listed = c->ordered && s->last_use != 0; /* stamped: on the list */
    if (s->window != c->window) {
        memset(&dropped, 0, sizeof dropped);
        cs = &dropped; /* the closed window's counters are gone */
    }
    cs->io_bytes += asked_bytes;
    cs->load_ns += ns;
    c->n_reads--;
    s->owner = OWN_NONE;
    s->ost = NULL;
    if (rc == XC_OK) {
        s->state = XC_SLOT_READY;
        s->freq = kind == K_DEMAND || kind == K_STREAM ? 1 : 0;
        if (s->last_use == 0)
            touch(c, s);
        s->insert_tick = s->last_use;
        s->generation++;
        s->payload_off = payload_off;
        cs->payload_bytes += c->ld.expert_bytes;
        if (kind == K_PREFETCH && cs == &c->st) {
            s->mark = 1;
            cs->prefetch_loads++;
        } else if (kind == K_SPEC && cs == &c->st) {
            s->spec = 1;
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
            xc_policy_insert(&c->pol, s->key);
            return;
        }
        s->untold = 1; /* told now if no earlier stamped read is under way */
    } else {
        c->index[s->key] = -1;
        s->state = XC_SLOT_EMPTY;
        s->key = 0;
        s->last_use = 0;
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
static void hit(xc_cache *c, int32_t si, uint32_t key)
{
    slot *s = &c->slots[si];
    c->st.requests++;
    c->st.hits++;
    c->requests_since_open++;
    if (s->mark) {
        s->mark = 0;
        c->st.prefetch_first_uses++;
    }
    if (s->spec) {
        s->spec = 0;
        c->st.spec_used++;
    }
    s->freq++;
    touch(c, s);
    s->holds++;
    xc_policy_request(&c->pol, key);
    if (s->untold)
        s->untold_hits++; /* told after its insert (tell) */
    else
        xc_policy_hit(&c->pol, key);
}

/* get step (4) up to the reservation (mu held): choose a victim, count the
 * miss and reserve.  Returns the slot, or -1 (nothing changed). */
static int32_t miss_reserve(xc_cache *c, uint32_t key)
{
    int32_t si = choose_victim(c);
    if (si < 0)
        return -1;
    c->st.requests++;
    c->st.misses++;
    c->requests_since_open++;
    xc_policy_request(&c->pol, key);
    reserve(c, si, key);
    return si;
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
                    int tkind, xc_ref *out)
{
    uint64_t payload_off = 0, asked = 0, t0, ns;
    int32_t si;
    int rc, src;

    /* (4) choose a victim; none leaves everything as it was */
    si = miss_reserve(c, key);
    if (si < 0)
        return xc_fail(XC_E_ALL_PINNED, -1, layer, expert,
                       "layer %d expert %d: all %zu slots are held, pinned "
                       "or in flight", (int)layer, (int)expert, c->n_slots);
    trace_put(c, tkind, TO_MISS, key);

    /* (5) read, lock released: the slot is INFLIGHT and ours alone */
    pthread_mutex_unlock(&c->mu);
    t0 = now_ns();
    rc = xc_load_read_src(&c->ld, key, slot_mem(c, si), &payload_off, &asked,
                          &src);
    ns = now_ns() - t0;
    pthread_mutex_lock(&c->mu);

    /* (6) publish, or return the slot to EMPTY */
    finish(c, si, rc, payload_off, asked, ns, K_DEMAND, src);
    pthread_cond_broadcast(&c->ended);
    if (rc != XC_OK)
        return rc; /* the loader recorded the error with layer and expert */
    c->slots[si].holds = 1;
    fill_ref(c, si, out);
    return XC_OK;
}

static void stream_claim_read(xc_cache *c, struct xc_stream *st, size_t i);

/* get with mu held (steps 2-6); tkind is the trace kind to record. */
static int get_locked(xc_cache *c, uint32_t key, int32_t layer,
                      int32_t expert, int tkind, xc_ref *out)
{
    int waited = 0;
    int32_t si;
    for (;;) {
        /* (2) look up */
        si = c->index[key];
        if (si < 0)
            break;
        if (c->slots[si].state == XC_SLOT_READY) {
            hit(c, si, key);
            trace_put(c, tkind, waited ? TO_WAIT_HIT : TO_HIT, key);
            fill_ref(c, si, out);
            return XC_OK;
        }
        /* (3) in flight: wait, then look up again.  A stream's
         * reservation nobody is reading yet is read here instead (for the
         * stream, which keeps its hold): waiting for its consumer could be
         * waiting for ourselves. */
        waited = 1;
        if (c->slots[si].owner == OWN_STREAM)
            stream_claim_read(c, c->slots[si].ost, c->slots[si].oidx);
        else
            pthread_cond_wait(&c->ended, &c->mu);
    }
    return get_miss(c, key, layer, expert, tkind, out);
}

/*
 * get: (1) validate the key, (2) look up: READY is a hit -- hold and
 * return, (3) INFLIGHT: wait for that read to end and look up again,
 * (4) choose a victim, (5) read, (6) publish.  (2)-(3) are get_locked(),
 * (4)-(6) get_miss().
 */
int xc_cache_get(xc_cache *c, int32_t layer, int32_t expert, xc_ref *out)
{
    uint32_t key;
    int rc;

    /* (1) validate */
    if ((rc = xc_load_key(&c->ld, layer, expert, &key)) != XC_OK)
        return rc;
    pthread_mutex_lock(&c->mu);
    rc = get_locked(c, key, layer, expert, TK_GET, out);
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
/* Integer handles (xc.h: xc_cache_hold)                                */
/* ------------------------------------------------------------------ */

#define GEN_MASK 0x7fffffffu

/* The slot a handle names if it is a held READY reference (mu held), or
 * NULL. */
static slot *held_slot(xc_cache *c, int64_t handle)
{
    int64_t si = handle & 0xffffffff;
    slot *s;
    if (handle < 0 || (uint64_t)si >= c->n_slots)
        return NULL;
    s = &c->slots[si];
    if (s->state != XC_SLOT_READY || s->holds == 0 ||
        (s->generation & GEN_MASK) != (uint32_t)(handle >> 32))
        return NULL;
    return s;
}

int64_t xc_cache_hold(xc_cache *c, int32_t layer, int32_t expert)
{
    xc_ref ref;
    int rc = xc_cache_get(c, layer, expert, &ref);
    if (rc != XC_OK)
        return rc;
    return (int64_t)(ref.generation & GEN_MASK) << 32 | (int64_t)ref.slot;
}

int xc_cache_unhold(xc_cache *c, int64_t handle)
{
    slot *s;
    pthread_mutex_lock(&c->mu);
    if ((s = held_slot(c, handle)) == NULL) {
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
    if ((s = held_slot(c, handle)) != NULL)
        p = slot_mem(c, (int32_t)(handle & 0xffffffff)) + s->payload_off;
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
    else if (delta > 0)
        c->slots[si].pins++;
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
/* getmany and its readers                                              */
/* ------------------------------------------------------------------ */

static void read_one(const xc_cache *c, resv *r)
{
    uint64_t t0 = now_ns();
    r->rc = xc_load_read_src(&c->ld, r->key, slot_mem(c, r->slot),
                             &r->payload_off, &r->asked_bytes, &r->src);
    r->ns = now_ns() - t0;
}

/* How long a batch reader keeps polling for work before it sleeps on a
 * condition variable, and how long getmany's caller polls for the last
 * item of its batch.  A 768 KiB page-cache read takes ~30-60 us here; a
 * condvar wake-up on this 2-vCPU VM took 50-150 us, so a sleeping reader
 * joined a batch of four after the caller had read most of it (2 threads:
 * 0.40 of the C pread floor, 1 thread: ~1.0).  Polling for 100 us keeps the
 * reader hot across back-to-back batches (bench/load_throughput.py,
 * 2026-11-29) and costs at most that much CPU after the last batch. */
#define POOL_SPIN_NS 100000u

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

/* Polls *v without a lock until it equals target (want_equal) or differs
 * from it (!want_equal), for at most about POOL_SPIN_NS.  Returns 1 if it
 * did, 0 on timeout.  The acquire load pairs with the release updates. */
static int spin_until(_Atomic size_t *v, size_t target, int want_equal)
{
    uint64_t t0 = 0;
    for (unsigned i = 1;; i++) {
        size_t x = atomic_load_explicit(v, memory_order_acquire);
        if (want_equal ? x == target : x != target)
            return 1;
        cpu_relax();
        if ((i & 63) == 0) {
            uint64_t t = now_ns();
            if (t0 == 0)
                t0 = t;
            else if (t - t0 > POOL_SPIN_NS)
                return 0;
        }
    }
}

/* Claims the next item of j (pool_mu held); unlinks j when it has none
 * left.  Returns NULL when every item is claimed. */
static resv *claim(xc_cache *c, job *j)
{
    resv *r;
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
    if (atomic_fetch_add_explicit(&j->n_done, 1, memory_order_release) + 1 ==
        n)
        pthread_cond_broadcast(&c->pool_done);
}

static void *worker_main(void *arg)
{
    xc_cache *c = arg;
    pthread_mutex_lock(&c->pool_mu);
    for (;;) {
        job *j;
        resv *r;
        if (c->jobs == NULL && !c->pool_stop) {
            /* poll a while before sleeping (POOL_SPIN_NS) */
            pthread_mutex_unlock(&c->pool_mu);
            spin_until(&c->pool_unclaimed, 0, 0);
            pthread_mutex_lock(&c->pool_mu);
        }
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
    job j;
    resv *r;
    if (n == 0)
        return;
    if (c->n_workers == 0 || n == 1) {
        size_t i;
        for (i = 0; i < n; i++)
            read_one(c, &items[i]);
        return;
    }
    j.next = NULL;
    j.items = items;
    j.n = n;
    j.next_item = 0;
    atomic_init(&j.n_done, 0);
    pthread_mutex_lock(&c->pool_mu);
    {
        job **pp = &c->jobs;
        while (*pp)
            pp = &(*pp)->next;
        *pp = &j;
    }
    atomic_fetch_add_explicit(&c->pool_unclaimed, n, memory_order_release);
    pthread_cond_broadcast(&c->pool_work);
    while ((r = claim(c, &j)) != NULL) {
        pthread_mutex_unlock(&c->pool_mu);
        read_one(c, r);
        pthread_mutex_lock(&c->pool_mu);
        done_one(c, &j);
    }
    if (atomic_load(&j.n_done) < j.n) {
        /* a reader still has our last item: poll before sleeping */
        pthread_mutex_unlock(&c->pool_mu);
        if (spin_until(&j.n_done, j.n, 1))
            return; /* done_one touches j no more after its increment,
                       and its release orders the item's results */
        pthread_mutex_lock(&c->pool_mu);
    }
    while (atomic_load(&j.n_done) < j.n)
        pthread_cond_wait(&c->pool_done, &c->pool_mu);
    pthread_mutex_unlock(&c->pool_mu);
}

/* Appends a read to the read-ahead ring (mu held).  0 when it is full. */
static int aq_push(xc_cache *c, int32_t si, uint32_t key, int kind,
                   xc_stream *st, size_t idx)
{
    aitem *it;
    if (c->n_io == 0 || c->aq_n + c->aq_active >= c->aq_cap)
        return 0;
    it = &c->aq[(c->aq_head + c->aq_n) % c->aq_cap];
    it->slot = si;
    it->key = key;
    it->kind = kind;
    it->st = st;
    it->idx = idx;
    c->aq_n++;
    c->slots[si].owner = OWN_QUEUED;
    return 1;
}

/* A stream's read ended (mu held), in the thread that read it: hold the
 * expert for the consumer, or keep this thread's error record (the
 * loader's, naming file and byte) for next() to report, and put the item
 * on the stream's completion list. */
static void stream_item_done(xc_cache *c, xc_stream *st, size_t idx, int rc)
{
    if (rc == XC_OK)
        c->slots[st->slot[idx]].holds = 1;
    else
        st->err[idx] = *xc_last_error();
    st->rc[idx] = rc;
    st->state[idx] = ST_DONE;
    st->done[st->n_done++] = idx;
}

/* A read-ahead reader: dequeue, read without the lock, publish under it.
 * At stop it finishes everything still queued before leaving, so close
 * never frees a slot a read is writing into. */
static void *io_main(void *arg)
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
        c->slots[it.slot].owner = OWN_ACTIVE;
        pthread_mutex_unlock(&c->mu);
        r.slot = it.slot;
        r.key = it.key;
        read_one(c, &r);
        pthread_mutex_lock(&c->mu);
        finish(c, it.slot, r.rc, r.payload_off, r.asked_bytes, r.ns,
               it.kind, r.src);
        if (it.st != NULL) {
            stream_item_done(c, it.st, it.idx, r.rc);
            it.st->n_queued--;
        }
        c->aq_active--;
        pthread_cond_broadcast(&c->ended);
    }
    pthread_mutex_unlock(&c->mu);
    return NULL;
}

/*
 * getmany and prefetch: (1) validate every key, then reserve serially in
 * the order given, (2) read -- in parallel on the batch pool, or, for an
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
    int tkind = kind == K_SPEC ? TK_SPEC : TK_PREFETCH;
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
        if (c->seen[key] == seq) {
            trace_put(c, tkind, TO_DUPLICATE, key);
            continue; /* named earlier in this batch */
        }
        c->seen[key] = seq;
        if (si >= 0 && c->slots[si].state == XC_SLOT_READY) {
            c->slots[si].holds++; /* protected for the rest of this call */
            touch(c, &c->slots[si]);
            prot[n_prot++] = si;
            trace_put(c, tkind, TO_RESIDENT, key);
            continue;
        }
        if (si >= 0) {
            trace_put(c, tkind, TO_INFLIGHT, key);
            continue; /* another read of it is under way */
        }
        if ((si = choose_victim(c)) < 0) {
            trace_put(c, tkind, TO_NO_SLOT, key);
            continue; /* no slot: a short count */
        }
        reserve(c, si, key);
        c->slots[si].owner = OWN_BATCH;
        trace_put(c, tkind, TO_ISSUED, key);
        rv[n_resv].slot = si;
        rv[n_resv].key = key;
        n_resv++;
    }
    if (kind == K_SPEC)
        c->st.spec_issued += n_resv;
    if (async) {
        /* stamp the publish ticks now, in reservation order, and queue */
        for (i = 0; i < n_resv; i++) {
            stamp(c, rv[i].slot);
            if (!aq_push(c, rv[i].slot, rv[i].key, kind, NULL, 0)) {
                c->st.queue_fallbacks++;
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
        finish(c, rv[i].slot, rv[i].rc, rv[i].payload_off,
               rv[i].asked_bytes, rv[i].ns, kind, rv[i].src);
        n_pub += rv[i].rc == XC_OK;
    }
    for (i = 0; i < n_prot; i++)
        c->slots[prot[i]].holds--;
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
    return batch(c, layers, experts, n, K_PREFETCH, 0, published);
}

int xc_cache_prefetch(xc_cache *c, const int32_t *layers,
                      const int32_t *experts, size_t n, int speculative,
                      size_t *issued)
{
    return batch(c, layers, experts, n, speculative ? K_SPEC : K_PREFETCH,
                 c->n_io > 0, issued);
}

void xc_cache_drain(xc_cache *c)
{
    pthread_mutex_lock(&c->mu);
    while (c->aq_n + c->aq_active > 0)
        pthread_cond_wait(&c->ended, &c->mu);
    pthread_mutex_unlock(&c->mu);
}

/* ------------------------------------------------------------------ */
/* stream                                                               */
/* ------------------------------------------------------------------ */

static void stream_free(xc_stream *st)
{
    xc_free(st->keys);
    xc_free(st->slot);
    xc_free(st->rc);
    xc_free(st->err);
    xc_free(st->state);
    xc_free(st->done);
    xc_free(st);
}

/*
 * stream begin: (1) validate the keys and refuse repeats, (2) count the
 * keys not resident; fewer than split_min_misses: plain gets in next(),
 * nothing changes here, (3) in the order given: READY is a hit (counted,
 * touched, held), INFLIGHT is left for next() to wait for, missing is a
 * miss reserved with its tick stamped now -- the clock a run of holding
 * gets would leave -- and its read queued (or kept for next() when the
 * ring is full or there are no readers); no slot: a plain get, last.
 */
int xc_cache_stream_begin(xc_cache *c, const int32_t *layers,
                          const int32_t *experts, size_t n, xc_stream **out)
{
    xc_stream *st;
    size_t i, n_missing = 0, n_queued = 0;
    uint64_t seq;
    int rc;

    if (out == NULL || (n > 0 && (layers == NULL || experts == NULL)))
        return xc_fail(XC_E_MISUSE, -1, -1, -1,
                       "stream: NULL key arrays or out");
    st = xc_calloc(1, sizeof *st);
    if (st != NULL) {
        st->keys = xc_malloc((n + 1) * sizeof *st->keys);
        st->slot = xc_malloc((n + 1) * sizeof *st->slot);
        st->rc = xc_calloc(n + 1, sizeof *st->rc);
        st->err = xc_calloc(n + 1, sizeof *st->err);
        st->state = xc_calloc(n + 1, sizeof *st->state);
        st->done = xc_malloc((n + 1) * sizeof *st->done);
    }
    if (st == NULL || !st->keys || !st->slot || !st->rc || !st->err ||
        !st->state ||
        !st->done) {
        if (st)
            stream_free(st);
        return xc_fail(XC_E_NOMEM, -1, -1, -1,
                       "stream: no memory for %zu keys", n);
    }
    st->c = c;
    st->n = n;
    /* (1) validate */
    for (i = 0; i < n; i++)
        if ((rc = xc_load_key(&c->ld, layers[i], experts[i], &st->keys[i])) !=
            XC_OK) {
            stream_free(st);
            return rc;
        }
    pthread_mutex_lock(&c->mu);
    seq = ++c->batch_seq;
    for (i = 0; i < n; i++) {
        uint32_t key = st->keys[i];
        int32_t si = c->index[key];
        if (c->seen[key] == seq) {
            pthread_mutex_unlock(&c->mu);
            stream_free(st);
            return xc_fail(XC_E_MISUSE, -1, layers[i], experts[i],
                           "stream: layer %d expert %d is named twice",
                           (int)layers[i], (int)experts[i]);
        }
        c->seen[key] = seq;
        /* (2) count what is not resident */
        n_missing += si < 0 || c->slots[si].state != XC_SLOT_READY;
    }
    st->next_open = c->streams;
    c->streams = st;
    if (n_missing < (size_t)c->split_min) {
        st->plain = 1;
        pthread_mutex_unlock(&c->mu);
        *out = st;
        return XC_OK;
    }
    /* (3) hits, waits and reservations in the order given */
    for (i = 0; i < n; i++) {
        uint32_t key = st->keys[i];
        int32_t si = c->index[key];
        if (si >= 0 && c->slots[si].state == XC_SLOT_READY) {
            hit(c, si, key);
            trace_put(c, TK_STREAM, TO_HIT, key);
            st->slot[i] = si;
            st->state[i] = ST_HIT;
        } else if (si >= 0) {
            st->state[i] = ST_FOREIGN;
        } else if ((si = miss_reserve(c, key)) < 0) {
            st->state[i] = ST_DEFER;
        } else {
            trace_put(c, TK_STREAM, TO_MISS, key);
            stamp(c, si);
            st->slot[i] = si;
            c->slots[si].owner = OWN_STREAM;
            c->slots[si].ost = st;
            c->slots[si].oidx = i;
            if (aq_push(c, si, key, K_STREAM, st, i)) {
                st->state[i] = ST_QUEUED;
                n_queued++;
            } else {
                if (c->n_io > 0)
                    c->st.queue_fallbacks++;
                st->state[i] = ST_LOCAL;
            }
        }
    }
    st->n_queued = n_queued;
    if (n_queued)
        pthread_cond_broadcast(&c->aq_work);
    pthread_mutex_unlock(&c->mu);
    *out = st;
    return XC_OK;
}

/* Claims stream item i (ST_LOCAL: reserved, nobody reading it) and reads
 * it in the calling thread -- the consumer's next() or end(), or any get()
 * or other stream that needs the key -- then publishes it for the stream
 * (its hold, its completion list) exactly as a reader thread would.  mu
 * held on entry and on return, released for the read; end() waits for the
 * read through n_queued, so st outlives it. */
static void stream_claim_read(xc_cache *c, xc_stream *st, size_t i)
{
    resv r;
    r.slot = st->slot[i];
    r.key = st->keys[i];
    st->state[i] = ST_READING; /* claimed: nobody else reads it */
    st->n_queued++;
    c->slots[r.slot].owner = OWN_CLAIMED;
    pthread_mutex_unlock(&c->mu);
    read_one(c, &r);
    pthread_mutex_lock(&c->mu);
    finish(c, r.slot, r.rc, r.payload_off, r.asked_bytes, r.ns, K_STREAM,
           r.src);
    stream_item_done(c, st, i, r.rc);
    st->n_queued--;
    pthread_cond_broadcast(&c->ended);
}

/* Yields stream item i, which is ST_DONE (mu held). */
static int stream_yield_done(xc_cache *c, xc_stream *st, size_t i,
                             xc_ref *out, size_t *index)
{
    int32_t layer, expert;
    st->state[i] = ST_YIELDED;
    if (index)
        *index = i;
    if (st->rc[i] == XC_OK) {
        fill_ref(c, st->slot[i], out);
        return XC_OK;
    }
    if (st->err[i].code == st->rc[i])
        return xc_fail_copy(&st->err[i]); /* the reader's: file, byte */
    xc_load_unkey(&c->ld, st->keys[i], &layer, &expert);
    return xc_fail(st->rc[i], -1, layer, expert,
                   "layer %d expert %d: streamed read failed (%s)",
                   (int)layer, (int)expert, xc_status_name(st->rc[i]));
}

/* Plain get of stream item i (mu held): for the plain mode, keys another
 * read had in flight, and keys that found no slot. */
static int stream_get(xc_cache *c, xc_stream *st, size_t i, xc_ref *out,
                      size_t *index)
{
    int32_t layer, expert;
    st->state[i] = ST_YIELDED;
    if (index)
        *index = i;
    xc_load_unkey(&c->ld, st->keys[i], &layer, &expert);
    return get_locked(c, st->keys[i], layer, expert, TK_STREAM, out);
}

/*
 * stream next: (1) the hits, in the order given, (2) reads that have
 * completed, in completion order, (3) keys another read had in flight at
 * begin, once that read ended (a hit then, counted then; a plain get if
 * it failed), (4) our reads the ring could not take, read here, (5) wait
 * for the next completion, (6) keys that found no slot, as plain gets.
 */
int xc_cache_stream_next(xc_stream *st, xc_ref *out, size_t *index)
{
    xc_cache *c = st->c;
    size_t i;
    int rc;

    pthread_mutex_lock(&c->mu);
    if (st->plain) {
        rc = XC_STREAM_END;
        if (st->plain_next < st->n)
            rc = stream_get(c, st, st->plain_next++, out, index);
        pthread_mutex_unlock(&c->mu);
        return rc;
    }
    for (;;) {
        int waiting = st->n_queued > 0;
        /* (1) hits in order */
        for (; st->hit_next < st->n; st->hit_next++)
            if (st->state[st->hit_next] == ST_HIT) {
                i = st->hit_next++;
                st->state[i] = ST_YIELDED;
                if (index)
                    *index = i;
                fill_ref(c, st->slot[i], out);
                pthread_mutex_unlock(&c->mu);
                return XC_OK;
            }
        /* (2) completions */
        if (st->done_next < st->n_done) {
            rc = stream_yield_done(c, st, st->done[st->done_next++], out,
                                   index);
            pthread_mutex_unlock(&c->mu);
            return rc;
        }
        /* (3) another read's keys, once that read ended */
        for (i = 0; i < st->n; i++) {
            int32_t si;
            if (st->state[i] != ST_FOREIGN)
                continue;
            si = c->index[st->keys[i]];
            if (si >= 0 && c->slots[si].owner == OWN_STREAM) {
                /* another stream's reservation nobody reads: read it */
                stream_claim_read(c, c->slots[si].ost, c->slots[si].oidx);
                si = c->index[st->keys[i]];
            }
            if (si >= 0 && c->slots[si].state != XC_SLOT_READY) {
                waiting = 1;
                continue;
            }
            rc = stream_get(c, st, i, out, index);
            pthread_mutex_unlock(&c->mu);
            return rc;
        }
        /* (4) ours to read here; it lands on the completion list */
        for (i = 0; i < st->n; i++)
            if (st->state[i] == ST_LOCAL)
                break;
        if (i < st->n) {
            stream_claim_read(c, st, i);
            continue;
        }
        /* (5) wait for a completion */
        if (waiting) {
            pthread_cond_wait(&c->ended, &c->mu);
            continue;
        }
        /* (6) no slot at begin: plain gets, last */
        for (i = 0; i < st->n; i++)
            if (st->state[i] == ST_DEFER) {
                rc = stream_get(c, st, i, out, index);
                pthread_mutex_unlock(&c->mu);
                return rc;
            }
        pthread_mutex_unlock(&c->mu);
        return XC_STREAM_END;
    }
}

void xc_cache_stream_end(xc_stream *st)
{
    xc_cache *c;
    size_t i;
    if (st == NULL)
        return;
    c = st->c;
    pthread_mutex_lock(&c->mu);
    /* reserved reads are ours: finish them, so no slot stays INFLIGHT */
    for (i = 0; i < st->n; i++)
        if (st->state[i] == ST_LOCAL)
            stream_claim_read(c, st, i);
    while (st->n_queued > 0)
        pthread_cond_wait(&c->ended, &c->mu);
    /* give back the holds of what was never yielded */
    for (i = 0; i < st->n; i++)
        if (st->state[i] == ST_HIT ||
            (st->state[i] == ST_DONE && st->rc[i] == XC_OK))
            c->slots[st->slot[i]].holds--;
    {
        xc_stream **pp = &c->streams;
        while (*pp != st)
            pp = &(*pp)->next_open;
        *pp = st->next_open;
    }
    pthread_mutex_unlock(&c->mu);
    stream_free(st);
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

static uint64_t spec_resident(const xc_cache *c)
{
    uint64_t n = 0;
    size_t i;
    for (i = 0; i < c->n_slots; i++)
        n += c->slots[i].state == XC_SLOT_READY && c->slots[i].spec;
    return n;
}

void xc_cache_stats(xc_cache *c, xc_stats *out)
{
    pthread_mutex_lock(&c->mu);
    *out = c->st;
    out->prefetch_unused_resident = unused_resident(c);
    out->spec_unused_resident = spec_resident(c);
    pthread_mutex_unlock(&c->mu);
}

void xc_cache_reset_stats(xc_cache *c)
{
    size_t i;
    pthread_mutex_lock(&c->mu);
    memset(&c->st, 0, sizeof c->st);
    c->window++; /* loads reserved before now belong to the closed window */
    for (i = 0; i < c->n_slots; i++) {
        c->slots[i].mark = 0;
        c->slots[i].spec = 0;
    }
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
        if (s->state == XC_SLOT_EMPTY &&
            (s->holds || s->pins || s->mark || s->spec))
            BROKEN(XC_INV_EMPTY, "INV-EMPTY: empty slot %zu has holds %u "
                   "pins %u mark %d spec %d", i, s->holds, s->pins, s->mark,
                   s->spec);
    }
    /* INV-INFLIGHT */
    for (i = 0; i < c->n_slots; i++) {
        const slot *s = &c->slots[i];
        if (s->state != XC_SLOT_INFLIGHT)
            continue;
        n_inflight++;
        if (s->holds || s->pins || s->mark || s->spec)
            BROKEN(XC_INV_INFLIGHT, "INV-INFLIGHT: slot %zu in flight has "
                   "holds %u pins %u mark %d spec %d", i, s->holds, s->pins,
                   s->mark, s->spec);
    }
    if (n_inflight != c->n_reads)
        BROKEN(XC_INV_INFLIGHT, "INV-INFLIGHT: %u slots in flight but %u "
               "reads under way", n_inflight, c->n_reads);
    /* every INFLIGHT slot is owned by exactly one read, and the owner
     * knows it: ring entries, readers, and open streams' items */
    {
        size_t n_q = 0, n_a = 0;
        const xc_stream *o;
        for (i = 0; i < c->n_slots; i++) {
            const slot *s = &c->slots[i];
            if (s->state != XC_SLOT_INFLIGHT) {
                if (s->owner != OWN_NONE)
                    BROKEN(XC_INV_INFLIGHT, "INV-INFLIGHT: slot %zu not in "
                           "flight has read owner %d", i, s->owner);
                continue;
            }
            n_q += s->owner == OWN_QUEUED;
            n_a += s->owner == OWN_ACTIVE;
            if (s->owner == OWN_NONE || s->owner > OWN_CLAIMED)
                BROKEN(XC_INV_INFLIGHT, "INV-INFLIGHT: slot %zu in flight "
                       "has no read owner (%d)", i, s->owner);
            if (s->owner == OWN_STREAM || s->owner == OWN_CLAIMED) {
                for (o = c->streams; o != NULL && o != s->ost;
                     o = o->next_open)
                    ;
                if (o == NULL || s->oidx >= o->n ||
                    o->slot[s->oidx] != (int32_t)i ||
                    o->keys[s->oidx] != s->key ||
                    o->state[s->oidx] != (s->owner == OWN_STREAM
                                              ? ST_LOCAL : ST_READING))
                    BROKEN(XC_INV_INFLIGHT, "INV-INFLIGHT: slot %zu in "
                           "flight for a stream that does not own it "
                           "(orphaned reservation)", i);
            }
        }
        if (n_q != c->aq_n || n_a != c->aq_active)
            BROKEN(XC_INV_INFLIGHT, "INV-INFLIGHT: %zu slots queued and %zu "
                   "being read ahead, the ring has %zu and %zu", n_q, n_a,
                   c->aq_n, c->aq_active);
        for (o = c->streams; o != NULL; o = o->next_open) {
            size_t j, pending = 0;
            for (j = 0; j < o->n; j++) {
                const slot *s;
                int want;
                if (o->state[j] == ST_LOCAL)
                    want = OWN_STREAM;
                else if (o->state[j] == ST_READING)
                    want = OWN_CLAIMED;
                else if (o->state[j] == ST_QUEUED)
                    want = OWN_QUEUED;
                else
                    continue;
                pending += want != OWN_STREAM;
                s = o->slot[j] >= 0 && (size_t)o->slot[j] < c->n_slots
                        ? &c->slots[o->slot[j]] : NULL;
                if (s == NULL || s->state != XC_SLOT_INFLIGHT ||
                    s->key != o->keys[j] ||
                    (want == OWN_QUEUED
                         ? s->owner != OWN_QUEUED && s->owner != OWN_ACTIVE
                         : s->owner != want || s->ost != o || s->oidx != j))
                    BROKEN(XC_INV_INFLIGHT, "INV-INFLIGHT: a stream's item "
                           "%zu (state %d) names slot %d, not in flight for "
                           "it", j, o->state[j], (int)o->slot[j]);
            }
            if (pending != o->n_queued)
                BROKEN(XC_INV_INFLIGHT, "INV-INFLIGHT: a stream has %zu "
                       "reads pending but counts %zu", pending, o->n_queued);
        }
    }
    /* INV-CLOCK */
    for (i = 0; i < c->n_slots; i++) {
        const slot *s = &c->slots[i];
        if (s->state == XC_SLOT_EMPTY ||
            (s->state == XC_SLOT_INFLIGHT && s->last_use == 0))
            continue; /* an INFLIGHT slot's stamped tick counts too */
        if (s->last_use > c->tick ||
            (s->state == XC_SLOT_READY &&
             (s->insert_tick > s->last_use || s->last_use == 0)))
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
        st->payload_bytes / eb >
            st->misses + st->prefetch_loads + st->spec_loads)
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
    /* ... and the order list holds exactly the stamped reads the policy
     * has not been told -- INFLIGHT with a stamp, or READY and untold --
     * in ascending stamp order, the first one a read under way (an untold
     * insert with no earlier read before it would have been told). */
    {
        uint32_t n_want = 0, n_list = 0;
        uint64_t prev = 0;
        int32_t si, last = -1;
        for (i = 0; i < c->n_slots; i++) {
            const slot *s = &c->slots[i];
            n_want += s->untold || (c->ordered &&
                                    s->state == XC_SLOT_INFLIGHT &&
                                    s->last_use != 0);
        }
        for (si = c->oq_first; si >= 0 && (size_t)si < c->n_slots;
             si = c->slots[si].onext) {
            const slot *s = &c->slots[si];
            uint64_t t = s->untold ? s->insert_tick : s->last_use;
            if (s->state != (s->untold ? XC_SLOT_READY : XC_SLOT_INFLIGHT) ||
                t <= prev || (n_list == 0 && s->untold))
                BROKEN(XC_INV_POLICY, "INV-POLICY: order list entry %u "
                       "(slot %d, state %d, untold %d, stamp %llu after "
                       "%llu) is not a stamped read the policy waits for",
                       n_list, (int)si, s->state, s->untold,
                       (unsigned long long)t, (unsigned long long)prev);
            prev = t;
            last = si;
            n_list++;
        }
        if (si >= 0 || n_list != n_want || n_list != c->oq_n ||
            last != c->oq_last)
            BROKEN(XC_INV_POLICY, "INV-POLICY: order list: %u entries "
                   "(counted %u, last slot %d, recorded %d, stops at %d), "
                   "stamped reads untold: %u", n_list, c->oq_n, (int)last,
                   (int)c->oq_last, (int)si, n_want);
    }
    if (c->pol.ops->check(&c->pol) != 0) {
        char msg[sizeof xc_last_error()->message];
        memcpy(msg, xc_last_error()->message, sizeof msg);
        BROKEN(XC_INV_POLICY, "INV-POLICY: %s", msg);
    }
    /* INV-QUEUE */
    if (c->aq_n + c->aq_active > c->aq_cap)
        BROKEN(XC_INV_QUEUE, "INV-QUEUE: %zu queued + %zu under way > depth "
               "%zu", c->aq_n, c->aq_active, c->aq_cap);
    for (k = 0; k < c->ld.n_keys; k++)
        c->scratch[k] = -1;
    for (i = 0; i < c->aq_n; i++) {
        const aitem *it = &c->aq[(c->aq_head + i) % c->aq_cap];
        const slot *s;
        if (it->slot < 0 || (size_t)it->slot >= c->n_slots)
            BROKEN(XC_INV_QUEUE, "INV-QUEUE: entry %zu names slot %d", i,
                   (int)it->slot);
        s = &c->slots[it->slot];
        if (s->state != XC_SLOT_INFLIGHT || s->key != it->key ||
            s->owner != OWN_QUEUED)
            BROKEN(XC_INV_QUEUE, "INV-QUEUE: entry %zu: slot %d is state "
                   "%d key %u, not in flight for key %u", i, (int)it->slot,
                   s->state, s->key, it->key);
        if (c->scratch[it->key] >= 0)
            BROKEN(XC_INV_QUEUE, "INV-QUEUE: key %u queued twice", it->key);
        c->scratch[it->key] = it->slot;
    }
    /* INV-SPEC */
    if (st->spec_used + st->spec_evicted_unused + spec_resident(c) !=
            st->spec_loads ||
        st->page_cache_loads + st->device_loads + st->unknown_loads !=
            st->payload_bytes / eb)
        BROKEN(XC_INV_SPEC, "INV-SPEC: spec used %llu + evicted unused %llu "
               "+ unused resident %llu vs loads %llu; page cache %llu + "
               "device %llu + unknown %llu vs %llu loads published",
               (unsigned long long)st->spec_used,
               (unsigned long long)st->spec_evicted_unused,
               (unsigned long long)spec_resident(c),
               (unsigned long long)st->spec_loads,
               (unsigned long long)st->page_cache_loads,
               (unsigned long long)st->device_loads,
               (unsigned long long)st->unknown_loads,
               (unsigned long long)(st->payload_bytes / eb));
out:
    pthread_mutex_unlock(&c->mu);
    return rc;
}

/* ------------------------------------------------------------------ */
/* open / close                                                         */
/* ------------------------------------------------------------------ */

static void stop_io(xc_cache *c, int n_started)
{
    int i;
    pthread_mutex_lock(&c->mu);
    c->aq_stop = 1;
    pthread_cond_broadcast(&c->aq_work);
    pthread_mutex_unlock(&c->mu);
    for (i = 0; i < n_started; i++)
        pthread_join(c->io[i], NULL);
}

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
        pthread_cond_destroy(&c->aq_work);
    }
    if (c->tr != NULL) {
        (void)trace_write(c);
        fclose(c->tr);
    }
    if (c->mlocked)
        munlock(c->arena, c->n_slots * c->ld.stride);
    xc_policy_close(&c->pol);
    xc_load_close(&c->ld);
    xc_free(c->arena);
    xc_free(c->slots);
    xc_free(c->index);
    xc_free(c->cand);
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
    stop_io(c, n_io);
    stop_workers(c, n_workers);
    destroy(c, 1);
    return rc;
}

/* FNV-1a 64 over little-endian u64 words. */
static uint64_t fnv_words(uint64_t h, const uint64_t *w, size_t n)
{
    size_t i;
    unsigned b;
    for (i = 0; i < n; i++)
        for (b = 0; b < 8; b++) {
            h ^= (uint8_t)(w[i] >> (8 * b));
            h *= 0x100000001b3ull;
        }
    return h;
}

/* The container fingerprint of docs/TRACE_FORMAT.md: FNV-1a 64 over
 * n_keys words [expert_bytes, n_experts, then per key its layer and the
 * file offset of its first tensor]. */
static uint64_t fingerprint(const xc_loader *ld)
{
    uint64_t h = 0xcbf29ce484222325ull, w[2];
    uint32_t k;
    w[0] = ld->expert_bytes;
    w[1] = (uint64_t)ld->n_experts;
    h = fnv_words(h, w, 2);
    for (k = 0; k < ld->n_keys; k++) {
        int32_t layer, expert;
        xc_load_unkey(ld, k, &layer, &expert);
        w[0] = (uint64_t)(uint32_t)layer;
        w[1] = ld->file_offset[(size_t)k * ld->n_tensors];
        h = fnv_words(h, w, 2);
    }
    return h;
}

/* Opens the trace file and writes its header (docs/TRACE_FORMAT.md).  It
 * is the last step of cache open, so an open that fails earlier never
 * creates or changes the file.  The path is opened as any writer would
 * (links followed; a FIFO or device written in place) without truncating
 * it; a regular file is cut to the header only once the header is
 * written.  If the header cannot be written, a file this call created is
 * removed again; a file that was there keeps its length. */
static int trace_open(xc_cache *c, const char *path)
{
    uint8_t h[TRACE_HEADER_BYTES];
    char real[PATH_MAX];
    struct stat sb;
    int e, fd, existed;
    memset(h, 0, sizeof h);
    memcpy(h, TRACE_MAGIC, 8);
    put_le(h + 8, TRACE_VERSION, 4);
    put_le(h + 12, TRACE_RECORD_BYTES, 4);
    put_le(h + 16, fingerprint(&c->ld), 8);
    put_le(h + 24, (uint32_t)(c->ld.layers[c->ld.n_layers - 1] + 1), 4);
    put_le(h + 28, (uint32_t)c->ld.n_experts, 4);
    put_le(h + 32, (uint32_t)c->top_k, 4);
    put_le(h + 36, (uint32_t)c->n_slots, 4);
    existed = stat(path, &sb) == 0;
    if ((fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0666)) < 0) {
        e = errno;
        return xc_fail(XC_E_IO, -1, -1, -1, "cache open: cannot write trace "
                       "file %s: %s (errno %d)", path, strerror(e), e);
    }
    if ((c->tr = fdopen(fd, "wb")) != NULL &&
        fwrite(h, 1, sizeof h, c->tr) == sizeof h && fflush(c->tr) == 0 &&
        (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode) ||
         ftruncate(fd, (off_t)sizeof h) == 0))
        return XC_OK;
    e = errno;
    if (c->tr != NULL)
        fclose(c->tr);
    else
        close(fd);
    c->tr = NULL;
    if (!existed && realpath(path, real) != NULL)
        unlink(real); /* what the open created, even through a link */
    return xc_fail(XC_E_IO, -1, -1, -1, "cache open: cannot write trace "
                   "file %s: %s (errno %d)", path, strerror(e), e);
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
    c->arena = xc_aligned_alloc(XC_ALIGN, c->n_slots * c->ld.stride);
    c->slots = xc_calloc(c->n_slots, sizeof *c->slots);
    c->cand = xc_calloc(c->n_slots, sizeof *c->cand);
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
    c->ordered = c->pol.ops->on_insert != xc_policy_nop;
    c->oq_first = c->oq_last = -1;
    lock_arena(c, o->lock_memory);
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->aq_work, NULL);
    pthread_cond_init(&c->ended, NULL);
    pthread_mutex_init(&c->pool_mu, NULL);
    pthread_cond_init(&c->pool_work, NULL);
    pthread_cond_init(&c->pool_done, NULL);
    /* Threads start through the seam (xc_alloc.c) so that a test can fail
     * the k-th start; the batch pool first, then the read-ahead readers. */
    for (started = 0; started < c->n_workers; started++)
        if ((err = xc_thread_start(&c->workers[started], worker_main, c)))
            return start_failed(c, "batch pool", started, c->n_workers, err,
                                started, 0);
    for (started = 0; started < c->n_io; started++)
        if ((err = xc_thread_start(&c->io[started], io_main, c)))
            return start_failed(c, "read-ahead", started, c->n_io, err,
                                c->n_workers, started);
    if (o->trace_path != NULL && (rc = trace_open(c, o->trace_path)) != XC_OK) {
        stop_io(c, c->n_io);
        stop_workers(c, c->n_workers);
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
    stop_io(c, c->n_io);
    stop_workers(c, c->n_workers);
    destroy(c, 1);
}

void xc_cache_set_step(xc_cache *c, uint64_t step)
{
    pthread_mutex_lock(&c->mu);
    c->tr_step = step;
    pthread_mutex_unlock(&c->mu);
}

int xc_cache_trace_flush(xc_cache *c)
{
    int rc;
    pthread_mutex_lock(&c->mu);
    rc = trace_write(c);
    if (rc == XC_OK && c->tr_failed)
        rc = XC_E_IO;
    if (rc != XC_OK)
        xc_fail(rc, -1, -1, -1, "%s", c->tr_note);
    pthread_mutex_unlock(&c->mu);
    return rc;
}

int xc_cache_mlock_active(const xc_cache *c) { return c->mlocked; }
const char *xc_cache_mlock_note(const xc_cache *c) { return c->mlock_note; }
