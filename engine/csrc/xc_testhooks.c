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
 * Why a mirror.  struct xc_cache is private to xc_cache.c, and xc_cache.c is
 * not edited for tests; so this file repeats its layout (XC_TH_MIRROR below).
 * A mirror can drift when xc_cache.c changes, so before touching anything
 * the hook compares what it reads through the mirror with what the public
 * accessors report (slot count, stride, every slot's state, key, holds and
 * pins, the request counter).  Any difference is XC_E_MISUSE "layout drift"
 * and nothing is written: a stale mirror fails the tests loudly instead of
 * scribbling over memory.  Update the mirror together with struct xc_cache.
 *
 * Not for production use: the hook is not thread safe against concurrent
 * readers of the read-ahead ring (use a cache with io_threads = 0 for the
 * XC_TH_QUEUE_* corruptions, where no reader thread exists).
 */
#include "xc.h"
#include "xc_internal.h"
#include "xc_load.h"
#include "xc_policy.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- XC_TH_MIRROR: keep identical to the private types of xc_cache.c ---- */
typedef struct th_slot {
    uint8_t state, mark, spec;
    uint32_t key;
    uint32_t holds, pins;
    uint32_t generation;
    uint64_t last_use, insert_tick, freq;
    uint64_t payload_off;
} th_slot;

typedef struct th_aitem {
    int32_t slot;
    uint32_t key;
    int kind;
    void *st;
    size_t idx;
} th_aitem;

typedef struct th_cache {
    pthread_mutex_t mu;
    pthread_cond_t ended;
    xc_loader ld;
    xc_policy pol;
    size_t n_slots;
    int top_k;
    uint8_t *arena;
    th_slot *slots;
    int32_t *index;
    xc_pcand *cand;
    int32_t *scratch;
    uint64_t *seen;
    uint64_t batch_seq;
    uint64_t tick;
    uint32_t n_reads;
    uint64_t evictions_since_open, requests_since_open;
    xc_stats st;
    pthread_cond_t aq_work;
    th_aitem *aq;
    size_t aq_cap, aq_head, aq_n, aq_active;
    /* the rest of struct xc_cache is not touched here */
} th_cache;
/* ---- end of XC_TH_MIRROR ---- */

/* The mirror agrees with the public accessors, or XC_E_MISUSE (recorded). */
static int mirror_ok(xc_cache *pub, const th_cache *c)
{
    xc_stats s;
    size_t i;
    if (c->n_slots != xc_cache_n_slots(pub) ||
        c->ld.stride != xc_cache_stride(pub) || c->slots == NULL)
        goto drift;
    for (i = 0; i < c->n_slots; i++) {
        int state;
        int32_t layer, expert;
        uint32_t holds, pins;
        if (xc_cache_slot(pub, i, &state, &layer, &expert, &holds, &pins,
                               NULL) != XC_OK)
            return XC_E_MISUSE;
        if (state != c->slots[i].state || holds != c->slots[i].holds ||
            pins != c->slots[i].pins)
            goto drift;
        if (state != XC_SLOT_EMPTY &&
            c->index[c->slots[i].key] != (int32_t)i)
            goto drift;
    }
    xc_cache_stats(pub, &s);
    if (s.requests != c->st.requests || s.hits != c->st.hits)
        goto drift;
    return XC_OK;
drift:
    return xc_fail(XC_E_MISUSE, -1, -1, -1, "test hook layout drift: the "
                   "mirror of struct xc_cache in xc_testhooks.c no longer "
                   "matches xc_cache.c");
}

/* A slot index argument in range, else -1. */
static int slot_arg(const th_cache *c, int a)
{
    return a >= 0 && (size_t)a < c->n_slots ? a : -1;
}

int xc_testhook_break_check(xc_cache *pub, int what, int a, int b)
{
    th_cache *c = (th_cache *)(void *)pub;
    th_slot *saved_slots;
    int32_t *saved_index;
    xc_stats saved_st;
    xc_policy saved_pol;
    th_aitem saved_aq[2];
    uint32_t saved_reads, saved_count0 = 0;
    uint64_t saved_ev, saved_req;
    size_t saved_aq_n, saved_aq_head, nk;
    int rc, sa, sb, bad = 0;

    if (pub == NULL)
        return xc_fail(XC_E_MISUSE, -1, -1, -1, "test hook: NULL cache");
    if ((rc = mirror_ok(pub, c)) != XC_OK)
        return rc;
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
    saved_st = c->st;
    saved_pol = c->pol;
    if (c->pol.count != NULL)
        saved_count0 = c->pol.count[0];
    saved_reads = c->n_reads;
    saved_ev = c->evictions_since_open;
    saved_req = c->requests_since_open;
    saved_aq_n = c->aq_n;
    saved_aq_head = c->aq_head;
    memcpy(saved_aq, c->aq, c->aq_cap >= 2 ? sizeof saved_aq : 0);

    switch (what) {
    case XC_TH_SLOT_STATE:      /* a: a READY slot */
        if (sa < 0) bad = 1; else c->slots[sa].state = 7;
        break;
    case XC_TH_SLOT_KEY_RANGE:  /* a: a READY slot */
        if (sa < 0) bad = 1; else c->slots[sa].key = c->ld.n_keys;
        break;
    case XC_TH_KEY_TWICE:       /* a, b: READY slots; b gets a's key */
        if (sa < 0 || sb < 0) bad = 1; else c->slots[sb].key = c->slots[sa].key;
        break;
    case XC_TH_INDEX:           /* a: a READY slot; its key maps nowhere */
        if (sa < 0) bad = 1; else c->index[c->slots[sa].key] = -1;
        break;
    case XC_TH_EMPTY_FIELD:     /* a: an EMPTY slot; b: 0 holds 1 pins 2 mark 3 spec */
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
        else if (b == 2) c->slots[sa].mark = 1;
        else c->slots[sa].spec = 1;
        break;
    case XC_TH_READS:
        c->n_reads++;
        break;
    case XC_TH_CLOCK:           /* a: READY slot; b: 0 future 1 inverted 2 zero */
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
        if (b == 0) c->st.hits++;
        else if (b == 1) c->st.short_reads++;
        else if (b == 2) c->st.prefetch_evicted_unused = c->st.evictions + 1;
        else if (b == 3) c->st.payload_bytes++;
        else if (b == 4) c->st.payload_bytes += 1000 * c->ld.expert_bytes;
        else bad = 1;
        break;
    case XC_TH_PREFETCH:
        c->st.prefetch_loads++;
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
    case XC_TH_QUEUE_SLOT:      /* one queued item naming slot b (out of range) */
        if (c->aq_cap < 2) { bad = 1; break; }
        c->aq_head = 0;
        c->aq_n = 1;
        c->aq[0].slot = b;
        c->aq[0].key = 0;
        break;
    case XC_TH_QUEUE_STATE:     /* a: a READY slot queued as if in flight */
    case XC_TH_QUEUE_TWICE:     /* a: an unheld READY slot, in flight, queued twice */
        if (sa < 0 || c->aq_cap < 2) { bad = 1; break; }
        c->aq_head = 0;
        c->aq[0].slot = sa;
        c->aq[0].key = c->slots[sa].key;
        c->aq_n = 1;
        if (what == XC_TH_QUEUE_TWICE) {
            c->slots[sa].state = XC_SLOT_INFLIGHT;
            c->n_reads++;
            c->aq[1] = c->aq[0];
            c->aq_n = 2;
        }
        break;
    case XC_TH_SPEC:            /* b: 0 spec loads 1 load sources */
        if (b == 0) c->st.spec_loads++;
        else c->st.unknown_loads++;
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
    c->st = saved_st;
    c->pol = saved_pol;
    if (c->pol.count != NULL)
        c->pol.count[0] = saved_count0;
    c->n_reads = saved_reads;
    c->evictions_since_open = saved_ev;
    c->requests_since_open = saved_req;
    c->aq_n = saved_aq_n;
    c->aq_head = saved_aq_head;
    memcpy(c->aq, saved_aq, c->aq_cap >= 2 ? sizeof saved_aq : 0);
    pthread_mutex_unlock(&c->mu);
    free(saved_slots);
    free(saved_index);
    return rc;
}
