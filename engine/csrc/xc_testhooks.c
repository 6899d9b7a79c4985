/*
 * xc_testhooks.c -- TEST HOOKS ONLY: break one field of a live cache so that
 * xc_cache_check() must name the invariant it guards.
 *
 * Why this file exists.  xc_cache_check() (xc_cache.c) has one failure arm
 * per INV-* id, and a correct cache never reaches any of them, so without a
 * way to corrupt a cache on purpose the invariant checker itself would go
 * untested: a check that can never fail proves nothing.  The hook below
 * corrupts exactly one field, runs the checker, and puts every field back,
 * so the cache stays usable (and closable) afterwards.
 *
 * The cache's private types come from xc_core.h, the header
 * xc_cache.c itself uses, so the hook always sees the real layout.
 *
 * Not for production use: the hook is not thread safe against concurrent
 * readers of the read-ahead ring (use a cache with io_threads = 0 for the
 * XC_TH_QUEUE_* corruptions, where no reader thread exists).
 */
#ifndef XC_TEST_SEAMS
#error "xc_testhooks.c is a test seam: it is compiled into the instrumented build only (-DXC_TEST_SEAMS; engine/_build.py SEAM_SOURCES)"
#endif
#include "xc_core.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A slot index argument in range, else -1. */
static int slot_arg(const xc_cache *c, int a)
{
    return a >= 0 && (size_t)a < c->n_slots ? a : -1;
}

int xc_testhook_break_check(xc_cache *pub, int what, int a, int b)
{
    xc_cache *c = pub;
    slot *saved_slots;
    int32_t *saved_index;
    xc_stats saved_stats;
    xc_policy saved_pol;
    aitem saved_aq[2];
    uint32_t saved_reads, saved_count0 = 0;
    uint64_t saved_ev, saved_req;
    size_t saved_aq_n, saved_aq_head, nk;
    int32_t saved_oq_first, saved_oq_last;
    uint32_t saved_oq_n;
    int rc, sa, sb, bad = 0;

    if (pub == NULL)
        return xc_fail(XC_E_MISUSE, -1, -1, -1, "test hook: NULL cache");
    sa = slot_arg(c, a);
    sb = slot_arg(c, b);
    nk = c->ld.n_keys;
    saved_slots = malloc(c->n_slots * sizeof *saved_slots);
    saved_index = malloc(nk * sizeof *saved_index);
    if (saved_slots == NULL || saved_index == NULL) {
        free(saved_slots);
        free(saved_index);
        return xc_fail(XC_E_NOMEM, -1, -1, -1, "test hook: no memory");
    }

    pthread_mutex_lock(&c->mu);
    memcpy(saved_slots, c->slots, c->n_slots * sizeof *saved_slots);
    memcpy(saved_index, c->index, nk * sizeof *saved_index);
    saved_stats = c->stats;
    saved_pol = c->pol;
    if (c->pol.count != NULL)
        saved_count0 = c->pol.count[0];
    saved_reads = c->n_reads;
    saved_ev = c->evictions_since_open;
    saved_req = c->requests_since_open;
    saved_aq_n = c->aq_n;
    saved_aq_head = c->aq_head;
    memcpy(saved_aq, c->aq, c->aq_cap >= 2 ? sizeof saved_aq : 0);
    saved_oq_first = c->oq_first;
    saved_oq_last = c->oq_last;
    saved_oq_n = c->oq_n;

    switch (what) {
    case XC_TH_SLOT_STATE:      /* a: a READY slot */
        if (sa < 0) bad = 1; else c->slots[sa].state = 7;
        break;
    case XC_TH_SLOT_KEY_RANGE:  /* a: a READY slot */
        if (sa < 0) bad = 1; else c->slots[sa].key = c->ld.n_keys;
        break;
    case XC_TH_KEY_TWICE:       /* a, b: READY slots; b gets a's key */
        if (sa < 0 || sb < 0) bad = 1;
        else c->slots[sb].key = c->slots[sa].key;
        break;
    case XC_TH_INDEX:           /* a: a READY slot; its key maps nowhere */
        if (sa < 0) bad = 1; else c->index[c->slots[sa].key] = -1;
        break;
    case XC_TH_EMPTY_FIELD:     /* a: an EMPTY slot; b: 0 holds 1 pins
                                 * 2 unused prefetch 3 unused spec */
    case XC_TH_INFLIGHT_FIELD:  /* a: an unheld READY slot, made INFLIGHT */
        if (sa < 0 || b < 0 || b > 3) {
            bad = 1;
            break;
        }
        if (what == XC_TH_INFLIGHT_FIELD) {
            c->slots[sa].state = XC_SLOT_INFLIGHT;
            c->n_reads++;
        }
        if (b == 0) c->slots[sa].holds = 1;
        else if (b == 1) c->slots[sa].pins = 1;
        else if (b == 2) c->slots[sa].unused_prefetch = 1;
        else c->slots[sa].unused_spec = 1;
        break;
    case XC_TH_READS:
        c->n_reads++;
        break;
    case XC_TH_CLOCK:           /* a: READY slot; b: 0 future 1 inverted
                                 * 2 zero */
        if (sa < 0 || b < 0 || b > 2) bad = 1;
        else if (b == 0) c->slots[sa].last_use = c->tick + 1;
        else if (b == 1) c->slots[sa].insert_tick = c->slots[sa].last_use + 1;
        else c->slots[sa].last_use = c->slots[sa].insert_tick = 0;
        break;
    case XC_TH_CLOCK_SHARED:    /* a, b: READY slots; a takes b's ticks */
        if (sa < 0 || sb < 0) {
            bad = 1;
        } else {
            c->slots[sa].last_use = c->slots[sb].last_use;
            c->slots[sa].insert_tick = c->slots[sb].insert_tick;
        }
        break;
    case XC_TH_COUNTERS:        /* b: which of the five relations to break */
        if (b == 0) c->stats.hits++;
        else if (b == 1) c->stats.short_reads++;
        else if (b == 2)
            c->stats.prefetch_evicted_unused = c->stats.evictions + 1;
        else if (b == 3) c->stats.payload_bytes++;
        else if (b == 4) c->stats.payload_bytes += 1000 * c->ld.expert_bytes;
        else bad = 1;
        break;
    case XC_TH_PREFETCH:
        c->stats.prefetch_loads++;
        break;
    case XC_TH_POLICY_COUNT:    /* b: 0 evictions 1 requests */
        if (b == 0) c->evictions_since_open++;
        else c->requests_since_open++;
        break;
    case XC_TH_POLICY_STATE:    /* the policy's own check must fail */
        if (c->pol.count != NULL)
            c->pol.count[0] += (uint32_t)c->pol.n_requests + 1;
        else if (c->pol.priv != NULL)
            c->pol.priv = NULL;
        else
            bad = 1;
        break;
    case XC_TH_QUEUE_DEPTH:
        c->aq_n = c->aq_cap + 1;
        break;
    case XC_TH_QUEUE_SLOT:      /* a: an unheld READY slot made the queued
                                 * read; the ring's entry names slot b */
        if (sa < 0 || c->aq_cap < 2) { bad = 1; break; }
        c->slots[sa].state = XC_SLOT_INFLIGHT;
        c->slots[sa].owner = OWNER_QUEUED;
        c->n_reads++;
        c->aq_head = 0;
        c->aq_n = 1;
        c->aq[0].slot = b;
        c->aq[0].key = c->slots[sa].key;
        break;
    case XC_TH_QUEUE_STATE:     /* a: a READY slot the entry names; b: another
                                 * unheld READY slot made the queued read */
        if (sa < 0 || sb < 0 || sa == sb || c->aq_cap < 2) { bad = 1; break; }
        c->slots[sb].state = XC_SLOT_INFLIGHT;
        c->slots[sb].owner = OWNER_QUEUED;
        c->n_reads++;
        c->aq_head = 0;
        c->aq[0].slot = sa;
        c->aq[0].key = c->slots[sa].key;
        c->aq_n = 1;
        break;
    case XC_TH_QUEUE_TWICE:     /* a, b: unheld READY slots made queued reads;
                                 * both ring entries name a */
        if (sa < 0 || sb < 0 || sa == sb || c->aq_cap < 2) { bad = 1; break; }
        c->slots[sa].state = c->slots[sb].state = XC_SLOT_INFLIGHT;
        c->slots[sa].owner = c->slots[sb].owner = OWNER_QUEUED;
        c->n_reads += 2;
        c->aq_head = 0;
        c->aq[0].slot = sa;
        c->aq[0].key = c->slots[sa].key;
        c->aq[1] = c->aq[0];
        c->aq_n = 2;
        break;
    case XC_TH_SPEC:            /* b: 0 spec loads 1 load sources */
        if (b == 0) c->stats.spec_loads++;
        else c->stats.unknown_loads++;
        break;
    case XC_TH_OWNER_STRAY:     /* a: a READY slot that names a read owner */
        if (sa < 0) bad = 1; else c->slots[sa].owner = OWNER_DEMAND;
        break;
    case XC_TH_OWNER_NONE:      /* a: an unheld READY slot in flight, owned
                                 * by no read */
    case XC_TH_OWNER_ORPHAN:    /* a: ... owned by a stream that is not open */
        if (sa < 0) { bad = 1; break; }
        c->slots[sa].state = XC_SLOT_INFLIGHT;
        c->n_reads++;
        if (what == XC_TH_OWNER_NONE) {
            c->slots[sa].owner = OWNER_NONE;
        } else {
            c->slots[sa].owner = OWNER_STREAM;
            c->slots[sa].owner_stream = NULL;
            c->slots[sa].owner_item = 0;
        }
        break;
    case XC_TH_ORDER:           /* a: an unheld READY slot, the order list
                                 * empty; b: 0 untold, unlisted; 1 listed,
                                 * told; 2 listed, untold; 3 in flight with
                                 * its stamp, listed, next out of range; 4 the
                                 * same, listed after itself; 5 count +1;
                                 * 6 last names a; 7 in flight, no stamp,
                                 * unlisted (sound) */
        if (sa < 0 || b < 0 || b > 7 || c->oq_first >= 0) {
            bad = 1;
            break;
        }
        if (b == 0 || b == 2)
            c->slots[sa].insert_pending = 1;
        if (b == 3 || b == 4 || b == 7) {
            c->slots[sa].state = XC_SLOT_INFLIGHT;
            c->slots[sa].owner = OWNER_DEMAND;
            c->n_reads++;
        }
        if (b == 7)
            c->slots[sa].last_use = 0;
        if (b >= 1 && b <= 4) {
            c->oq_first = c->oq_last = sa;
            c->oq_n = 1;
            c->slots[sa].onext = b == 3 ? (int32_t)c->n_slots
                               : b == 4 ? sa : -1;
        }
        if (b == 5)
            c->oq_n++;
        if (b == 6)
            c->oq_last = sa;
        break;
    default:
        bad = 1;
    }
    pthread_mutex_unlock(&c->mu);

    rc = bad ? xc_fail(XC_E_MISUSE, -1, -1, -1, "test hook: bad corruption "
                       "%d (a %d, b %d) for this cache", what, a, b)
             : xc_cache_check(pub);

    pthread_mutex_lock(&c->mu);
    memcpy(c->slots, saved_slots, c->n_slots * sizeof *saved_slots);
    memcpy(c->index, saved_index, nk * sizeof *saved_index);
    c->stats = saved_stats;
    c->pol = saved_pol;
    if (c->pol.count != NULL)
        c->pol.count[0] = saved_count0;
    c->n_reads = saved_reads;
    c->evictions_since_open = saved_ev;
    c->requests_since_open = saved_req;
    c->aq_n = saved_aq_n;
    c->aq_head = saved_aq_head;
    memcpy(c->aq, saved_aq, c->aq_cap >= 2 ? sizeof saved_aq : 0);
    c->oq_first = saved_oq_first;
    c->oq_last = saved_oq_last;
    c->oq_n = saved_oq_n;
    pthread_mutex_unlock(&c->mu);
    free(saved_slots);
    free(saved_index);
    return rc;
}

int xc_testhook_halving_work(xc_cache *c, uint64_t *out)
{
    const xc_hset *h;
    if (c == NULL || out == NULL)
        return xc_fail(XC_E_MISUSE, -1, -1, -1,
                       "test hook: NULL cache or output");
    pthread_mutex_lock(&c->mu);
    h = xc_policy_hotness_set(&c->pol);
    if (h != NULL) {
        out[0] = h->halvings;
        out[1] = h->halve_relabels;
        out[2] = h->halve_steps;
    }
    pthread_mutex_unlock(&c->mu);
    if (h == NULL)
        return xc_fail(XC_E_MISUSE, -1, -1, -1,
                       "test hook: the cache's policy is %s, not hotness",
                       c->pol.ops->name);
    return XC_OK;
}

/* ------------------------------------------------------------------ */
/* Where a call waiting for a read under way blocks (the gate's stalls) */
/* ------------------------------------------------------------------ */

/* Every call that waits for another thread's read -- a get of a key in
 * flight, a stream's next over a key another read holds, hold_layer, a
 * stream's end, drain -- blocks on one condition, c->ended.  A test that
 * holds a read under way (a stall, xc_fault.c) and makes such a call on a
 * thread of its own needs to know the call has got there before it lets
 * the read go, or the call may find the read ended and never wait: so it
 * asks the kernel where that thread is blocked (Linux:
 * /proc/self/task/TID/syscall names the futex word) and compares it with
 * the span this returns.  Changes nothing. */
int xc_testhook_wait_span(const xc_cache *c, uint64_t *addr, uint64_t *bytes)
{
    if (c == NULL || addr == NULL || bytes == NULL)
        return xc_fail(XC_E_MISUSE, -1, -1, -1,
                       "test hook: NULL cache or output");
    *addr = (uint64_t)(uintptr_t)&c->ended;
    *bytes = sizeof c->ended;
    return XC_OK;
}
