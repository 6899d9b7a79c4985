/*
 * xc_slot.c -- one slot's life: reserve, read, publish, hit, victim
 * choice, the order list, and a key's demand read through them.
 *
 * These are the primitives the cache's other files share
 * (xc_core.h): get (xc_cache.c), getmany, prefetch and hold_layer
 * (xc_batch.c) and streams (xc_stream.c) all move slots only through the
 * functions here, and this file calls none of theirs, so the calls run one
 * way, down to this file (xc_cache.c draws them).  A stream's
 * reservation that somebody else needs is claimed here too
 * (xc_slot_claim_read), because a get, a hold_layer and a stream all claim
 * it the same way.  The design of the whole cache -- read-ahead, streams,
 * speculation, locking -- opens xc_cache.c.
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
 */
#include "xc_core.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ */
/* The order list: inserts reach the policy in stamp order              */
/* ------------------------------------------------------------------ */

/* Stamps reserved slot si with its publish tick (mu held) and, when the
 * policy is told inserts, appends it to the order list: ticks only grow,
 * so appending keeps the list in stamp order. */
void xc_slot_stamp(xc_cache *c, int32_t si)
{
    assert(xc_locked(&c->mu) && si >= 0 && (size_t)si < c->n_slots);
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
    assert(c->ordered && s >= c->slots && s < c->slots + c->n_slots);
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
    assert(c->ordered); /* no list is kept otherwise */
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
    assert(c->ordered);
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
    assert(s != NULL);
    if (s->state != XC_SLOT_READY || SLOT_PROTECTED(s))
        return 0;
    if (s->insert_pending)
        return 0;
    return 1;
}

static int view_row(const void *ctx, uint32_t key, xc_pcand *out)
{
    const xc_cache *c = ((const vctx *)ctx)->c;
    int32_t si;
    assert(key < c->ld.n_keys && out != NULL); /* a key the policy knows */
    si = c->index[key];
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
    assert(c->nc != NULL); /* kept for a policy sampling by position */
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
    assert(j < v->c->n_slots - v->n); /* j-th of view_count()'s candidates */
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
    assert(xc_locked(&c->mu) && c->empty_lo <= c->n_slots);
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
    slot *s;
    assert(xc_locked(&c->mu) && si >= 0 && (size_t)si < c->n_slots &&
           key < c->ld.n_keys);
    s = &c->slots[si];
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
    slot *s;
    xc_stats dropped, *cs = &c->stats;
    int listed;
    assert(xc_locked(&c->mu) && si >= 0 && (size_t)si < c->n_slots);
    assert(kind >= 0 && kind < XC_N_KINDS);
    assert(rc != XC_OK || src == XC_SRC_UNKNOWN ||
           src == XC_SRC_PAGE_CACHE || src == XC_SRC_DEVICE);
    s = &c->slots[si];
    listed = c->ordered && s->last_use != 0; /* stamped: on the list */
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
        s->freq = kind == XC_KIND_GET || kind == XC_KIND_STREAM ? 1 : 0;
        if (s->last_use == 0)
            xc_slot_touch(c, s);
        s->insert_tick = s->last_use;
        s->generation++;
        s->payload_off = payload_off;
        cs->payload_bytes += c->ld.expert_bytes;
        if (kind == XC_KIND_PREFETCH && cs == &c->stats) {
            s->unused_prefetch = 1;
            cs->prefetch_loads++;
        } else if (kind == XC_KIND_SPEC && cs == &c->stats) {
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
    slot *s;
    /* the hit path: mu held is not asserted (xc_locked) */
    assert(si >= 0 && (size_t)si < c->n_slots && key < c->ld.n_keys);
    s = &c->slots[si];
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
    /* a miss: the key is neither resident nor in flight */
    assert(xc_locked(&c->mu) && key < c->ld.n_keys && c->index[key] < 0 &&
           !c->pol.want_set);
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
    const slot *s;
    /* the hit path: mu held is not asserted (xc_locked) */
    assert(si >= 0 && (size_t)si < c->n_slots && out != NULL);
    s = &c->slots[si];
    assert(s->state == XC_SLOT_READY && s->holds > 0); /* a held reference */
    out->slot = si;
    out->generation = s->generation;
    out->data = xc_slot_mem(c, si) + s->payload_off;
    out->nbytes = c->ld.expert_bytes;
}

/* ------------------------------------------------------------------ */
/* Reads: in the caller, and a stream's reservation claimed              */
/* ------------------------------------------------------------------ */

/* Reads r's key into r's slot, filling r's results, with no lock: the
 * slot is INFLIGHT and owned by the caller. */
void xc_slot_read(const xc_cache *c, resv *r)
{
    uint64_t t0;
    /* the caller's own INFLIGHT reservation of r's key: nobody else
     * writes these fields until it is finished */
    assert(r != NULL && r->slot >= 0 && (size_t)r->slot < c->n_slots &&
           r->key < c->ld.n_keys);
    assert(c->slots[r->slot].state == XC_SLOT_INFLIGHT &&
           c->slots[r->slot].key == r->key);
    t0 = xc_now_ns();
    r->rc = xc_load_read_src(&c->ld, r->key, xc_slot_mem(c, r->slot),
                             &r->payload_off, &r->asked_bytes, &r->src);
    r->ns = xc_now_ns() - t0;
    if (r->rc != XC_OK && r->err != NULL)
        *r->err = *xc_last_error(); /* this thread's: file, byte, cause */
}

/* A stream's read ended (mu held), in the thread that read it: hold the
 * expert for the consumer, or keep this thread's error record (the
 * loader's, naming file and byte) for next() to report, and put the item
 * on the stream's completion list. */
void xc_slot_stream_done(xc_cache *c, xc_stream *stream, size_t idx, int rc)
{
    assert(xc_locked(&c->mu) && stream != NULL && stream->c == c &&
           idx < stream->n && stream->n_done < stream->n);
    /* our read of the item (from the ring, or claimed), just finished:
     * published and not held yet, or failed */
    assert(stream->state[idx] == STREAM_ITEM_QUEUED ||
           stream->state[idx] == STREAM_ITEM_READING);
    assert(rc != XC_OK ||
           (c->slots[stream->slot[idx]].state == XC_SLOT_READY &&
            c->slots[stream->slot[idx]].key == stream->keys[idx] &&
            c->slots[stream->slot[idx]].holds == 0));
    if (rc == XC_OK)
        c->slots[stream->slot[idx]].holds = 1;
    else
        stream->err[idx] = *xc_last_error();
    stream->rc[idx] = rc;
    stream->state[idx] = STREAM_ITEM_DONE;
    stream->done[stream->n_done++] = idx;
}

/* Claims stream item i (STREAM_ITEM_LOCAL: reserved, nobody reading it)
 * and reads it in the calling thread -- the consumer's next() or end(), or
 * any get() or other stream that needs the key -- then publishes it for
 * the stream (its hold, its completion list) exactly as a reader thread
 * would.  mu held on entry and on return, released for the read; end()
 * waits for the read through n_queued, so the stream outlives it. */
void xc_slot_claim_read(xc_cache *c, xc_stream *stream, size_t i)
{
    resv r;
    assert(xc_locked(&c->mu) && stream != NULL && stream->c == c &&
           i < stream->n);
    r.slot = stream->slot[i];
    r.key = stream->keys[i];
    r.err = NULL;
    /* a reservation nobody reads yet: claiming it twice would be two
     * reads into one slot */
    assert(stream->state[i] == STREAM_ITEM_LOCAL &&
           c->slots[r.slot].owner == OWNER_STREAM);
    stream->state[i] = STREAM_ITEM_READING; /* claimed: nobody else reads it */
    stream->n_queued++;
    c->slots[r.slot].owner = OWNER_CLAIMED;
    pthread_mutex_unlock(&c->mu);
    xc_slot_read(c, &r);
    pthread_mutex_lock(&c->mu);
    xc_slot_finish(c, r.slot, r.rc, r.payload_off, r.asked_bytes, r.ns,
                   XC_KIND_STREAM, r.src);
    xc_slot_stream_done(c, stream, i, r.rc);
    stream->n_queued--;
    pthread_cond_broadcast(&c->ended);
}

/* ------------------------------------------------------------------ */
/* get                                                                  */
/* ------------------------------------------------------------------ */

/* Steps (4)-(6) of get, with mu held on entry and on return. */
static int get_miss(xc_cache *c, uint32_t key, int32_t layer, int32_t expert,
                    int kind, xc_ref *out)
{
    uint64_t payload_off = 0, asked = 0, t0, ns;
    int32_t si;
    int rc, src;

    assert(xc_locked(&c->mu) && out != NULL &&
           (kind == XC_KIND_GET || kind == XC_KIND_STREAM));

    /* (4) choose a victim; none leaves everything as it was */
    si = xc_slot_miss_reserve(c, key);
    if (si < 0)
        return xc_fail(XC_E_ALL_PINNED, -1, layer, expert,
                       "layer %d expert %d: all %zu slots are held, pinned "
                       "or in flight", (int)layer, (int)expert, c->n_slots);
    xc_trace_put(c, kind, XC_OUT_MISS, key);

    /* (5) read, lock released: the slot is INFLIGHT and ours alone */
    pthread_mutex_unlock(&c->mu);
    t0 = xc_now_ns();
    rc = xc_load_read_src(&c->ld, key, xc_slot_mem(c, si), &payload_off,
                          &asked, &src);
    ns = xc_now_ns() - t0;
    pthread_mutex_lock(&c->mu);

    /* (6) publish, or return the slot to EMPTY */
    xc_slot_finish(c, si, rc, payload_off, asked, ns, kind, src);
    pthread_cond_broadcast(&c->ended);
    if (rc != XC_OK)
        return rc; /* the loader recorded the error with layer and expert */
    c->slots[si].holds = 1;
    xc_slot_ref(c, si, out);
    return XC_OK;
}

/* get with mu held (steps 2-6); kind is the read kind (XC_KIND_GET, or
 * XC_KIND_STREAM) its records and its publish carry. */
int xc_get_locked(xc_cache *c, uint32_t key, int32_t layer, int32_t expert,
                  int kind, xc_ref *out)
{
    int waited = 0;
    int32_t si;
    /* the hit path: mu held is not asserted (xc_locked) */
    assert(key < c->ld.n_keys && out != NULL &&
           (kind == XC_KIND_GET || kind == XC_KIND_STREAM));
    for (;;) {
        /* (2) look up */
        si = c->index[key];
        if (si < 0)
            break;
        if (c->slots[si].state == XC_SLOT_READY) {
            xc_slot_hit(c, si, key);
            if (c->tr != NULL) /* the common case skips the call */
                xc_trace_put(c, kind, waited ? XC_OUT_WAIT_HIT
                                              : XC_OUT_HIT, key);
            xc_slot_ref(c, si, out);
            return XC_OK;
        }
        /* (3) in flight: wait, then look up again.  A stream's
         * reservation nobody is reading yet is read here instead (for the
         * stream, which keeps its hold): waiting for its consumer could be
         * waiting for ourselves. */
        waited = 1;
        if (c->slots[si].owner == OWNER_STREAM)
            xc_slot_claim_read(c, c->slots[si].owner_stream,
                                 c->slots[si].owner_item);
        else
            pthread_cond_wait(&c->ended, &c->mu);
    }
    return get_miss(c, key, layer, expert, kind, out);
}
