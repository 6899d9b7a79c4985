/*
 * xc_check.c -- what the cache tells about itself: the counter snapshot
 * and window reset, slot snapshots and geometry, and xc_cache_check(), the
 * walk over every structure that names the first broken invariant.
 */
#include "xc_core.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ */
/* Names of the slot states and invariants (xc.h)                       */
/* ------------------------------------------------------------------ */

const char *xc_slot_state_name(int state)
{
    static const char *const names[] = {"empty", "inflight", "ready"};
    _Static_assert(XC_SLOT_EMPTY == 0 && XC_SLOT_INFLIGHT == 1 &&
                   XC_SLOT_READY == 2, "names[] follows the XC_SLOT_* order");
    return state >= 0 && state < (int)(sizeof names / sizeof names[0])
               ? names[state] : NULL;
}

const char *xc_invariant_name(int inv)
{
    /* indexed by XC_INV_*, in the order check() walks them */
    static const char *const names[] = {
        NULL, "INV-KEY-UNIQUE", "INV-INDEX", "INV-EMPTY", "INV-INFLIGHT",
        "INV-CLOCK", "INV-COUNTERS", "INV-PREFETCH", "INV-POLICY",
        "INV-QUEUE", "INV-SPEC",
    };
    _Static_assert(sizeof names / sizeof names[0] == XC_INV_SPEC + 1,
                   "one name per XC_INV_* number");
    return inv > 0 && inv < (int)(sizeof names / sizeof names[0])
               ? names[inv] : NULL;
}

/* ------------------------------------------------------------------ */
/* Counters and snapshots                                               */
/* ------------------------------------------------------------------ */

static uint64_t unused_resident(const xc_cache *c)
{
    uint64_t n = 0;
    size_t i;
    for (i = 0; i < c->n_slots; i++)
        n += c->slots[i].state == XC_SLOT_READY && c->slots[i].unused_prefetch;
    return n;
}

static uint64_t spec_resident(const xc_cache *c)
{
    uint64_t n = 0;
    size_t i;
    for (i = 0; i < c->n_slots; i++)
        n += c->slots[i].state == XC_SLOT_READY && c->slots[i].unused_spec;
    return n;
}

void xc_cache_stats(xc_cache *c, xc_stats *out)
{
    pthread_mutex_lock(&c->mu);
    *out = c->stats;
    out->prefetch_unused_resident = unused_resident(c);
    out->spec_unused_resident = spec_resident(c);
    pthread_mutex_unlock(&c->mu);
}

void xc_cache_reset_stats(xc_cache *c)
{
    size_t i;
    pthread_mutex_lock(&c->mu);
    memset(&c->stats, 0, sizeof c->stats);
    c->window++; /* loads reserved before now belong to the closed window */
    for (i = 0; i < c->n_slots; i++) {
        c->slots[i].unused_prefetch = 0;
        c->slots[i].unused_spec = 0;
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
    if (unused_mark) *unused_mark = s.unused_prefetch;
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

/* Every failing branch of check() reports through BROKEN with a message
 * "INV-NAME: [id] text": the id (a string literal, lower-case words joined
 * by '.') names the one test that failed and appears in no other branch;
 * the gate judges a break by it, never by the text (docs/CACHE.md "How
 * check() names a broken test"; tests/cache/test_check_ids.py holds every
 * id to one branch).  A compound test is one branch per condition, each
 * with its own id; branches of one group share their text. */
#define BROKEN(inv, ...) \
    do { rc = xc_fail(inv, -1, -1, -1, __VA_ARGS__); goto out; } while (0)

int xc_cache_check(xc_cache *c)
{
    const xc_stats *stats = &c->stats;
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
            BROKEN(XC_INV_KEY_UNIQUE, "INV-KEY-UNIQUE: [key.state] slot %zu "
                   "has state %d", i, s->state);
        if (s->key >= c->ld.n_keys)
            BROKEN(XC_INV_KEY_UNIQUE, "INV-KEY-UNIQUE: [key.range] slot %zu "
                   "key %u out of range", i, s->key);
        if (c->scratch[s->key] >= 0)
            BROKEN(XC_INV_KEY_UNIQUE, "INV-KEY-UNIQUE: [key.twice] key %u in "
                   "slots %d and %zu", s->key, (int)c->scratch[s->key], i);
        c->scratch[s->key] = (int32_t)i;
    }
    /* INV-INDEX */
    for (k = 0; k < c->ld.n_keys; k++)
        if (c->index[k] != c->scratch[k])
            BROKEN(XC_INV_INDEX, "INV-INDEX: [index.slot] key %u maps to slot "
                   "%d but is in slot %d", k, (int)c->index[k],
                   (int)c->scratch[k]);
    /* INV-EMPTY */
#define EMPTY(id) \
    BROKEN(XC_INV_EMPTY, "INV-EMPTY: [" id "] empty slot %zu has holds %u " \
           "pins %u mark %d spec %d", i, s->holds, s->pins, \
           s->unused_prefetch, s->unused_spec)
    for (i = 0; i < c->n_slots; i++) {
        const slot *s = &c->slots[i];
        if (s->state != XC_SLOT_EMPTY)
            continue;
        if (s->holds)
            EMPTY("empty.holds");
        if (s->pins)
            EMPTY("empty.pins");
        if (s->unused_prefetch)
            EMPTY("empty.prefetch_mark");
        if (s->unused_spec)
            EMPTY("empty.spec_mark");
    }
#undef EMPTY
    /* INV-INFLIGHT */
#define INFLIGHT(id) \
    BROKEN(XC_INV_INFLIGHT, "INV-INFLIGHT: [" id "] slot %zu in flight has " \
           "holds %u pins %u mark %d spec %d", i, s->holds, s->pins, \
           s->unused_prefetch, s->unused_spec)
    for (i = 0; i < c->n_slots; i++) {
        const slot *s = &c->slots[i];
        if (s->state != XC_SLOT_INFLIGHT)
            continue;
        n_inflight++;
        if (s->holds)
            INFLIGHT("inflight.holds");
        if (s->pins)
            INFLIGHT("inflight.pins");
        if (s->unused_prefetch)
            INFLIGHT("inflight.prefetch_mark");
        if (s->unused_spec)
            INFLIGHT("inflight.spec_mark");
    }
#undef INFLIGHT
    if (n_inflight != c->n_reads)
        BROKEN(XC_INV_INFLIGHT, "INV-INFLIGHT: [inflight.reads] %u slots in "
               "flight but %u reads under way", n_inflight, c->n_reads);
    /* every INFLIGHT slot is owned by exactly one read, and the owner
     * knows it: ring entries, readers, and open streams' items */
    {
        size_t n_q = 0, n_a = 0;
        const xc_stream *o;
#define ORPHAN(id) \
    BROKEN(XC_INV_INFLIGHT, "INV-INFLIGHT: [" id "] slot %zu in flight for " \
           "a stream that does not own it (orphaned reservation)", i)
        for (i = 0; i < c->n_slots; i++) {
            const slot *s = &c->slots[i];
            if (s->state != XC_SLOT_INFLIGHT) {
                if (s->owner != OWNER_NONE)
                    BROKEN(XC_INV_INFLIGHT, "INV-INFLIGHT: [owner.stray] slot "
                           "%zu not in flight has read owner %d", i, s->owner);
                continue;
            }
            n_q += s->owner == OWNER_QUEUED;
            n_a += s->owner == OWNER_ACTIVE;
            if (s->owner == OWNER_NONE)
                BROKEN(XC_INV_INFLIGHT, "INV-INFLIGHT: [owner.none] slot %zu "
                       "in flight has no read owner (%d)", i, s->owner);
            if (s->owner > OWNER_CLAIMED)
                BROKEN(XC_INV_INFLIGHT, "INV-INFLIGHT: [owner.range] slot %zu "
                       "in flight has no read owner (%d)", i, s->owner);
            if (s->owner == OWNER_STREAM || s->owner == OWNER_CLAIMED) {
                for (o = c->streams; o != NULL && o != s->owner_stream;
                     o = o->next_open)
                    ;
                if (o == NULL)
                    ORPHAN("owner.orphan");
                if (s->owner_item >= o->n)
                    ORPHAN("owner.item_range");
                if (o->slot[s->owner_item] != (int32_t)i)
                    ORPHAN("owner.item_slot");
                if (o->keys[s->owner_item] != s->key)
                    ORPHAN("owner.item_key");
                if (o->state[s->owner_item] !=
                    (s->owner == OWNER_STREAM ? STREAM_ITEM_LOCAL
                                              : STREAM_ITEM_READING))
                    ORPHAN("owner.item_state");
            }
        }
#undef ORPHAN
#define RING(id) \
    BROKEN(XC_INV_INFLIGHT, "INV-INFLIGHT: [" id "] %zu slots queued and " \
           "%zu being read ahead, the ring has %zu and %zu", n_q, n_a, \
           c->aq_n, c->aq_active)
        if (n_q != c->aq_n)
            RING("ring.queued");
        if (n_a != c->aq_active)
            RING("ring.active");
#undef RING
        for (o = c->streams; o != NULL; o = o->next_open) {
            size_t j, pending = 0;
            for (j = 0; j < o->n; j++) {
                const slot *s;
                int want;
                if (o->state[j] == STREAM_ITEM_LOCAL)
                    want = OWNER_STREAM;
                else if (o->state[j] == STREAM_ITEM_READING)
                    want = OWNER_CLAIMED;
                else if (o->state[j] == STREAM_ITEM_QUEUED)
                    want = OWNER_QUEUED;
                else
                    continue;
                pending += want != OWNER_STREAM;
                s = o->slot[j] >= 0 && (size_t)o->slot[j] < c->n_slots
                        ? &c->slots[o->slot[j]] : NULL;
#define ITEM(id) \
    BROKEN(XC_INV_INFLIGHT, "INV-INFLIGHT: [" id "] a stream's item %zu " \
           "(state %d) names slot %d, not in flight for it", j, o->state[j], \
           (int)o->slot[j])
                if (s == NULL)
                    ITEM("stream.slot");
                if (s->state != XC_SLOT_INFLIGHT)
                    ITEM("stream.state");
                if (s->key != o->keys[j])
                    ITEM("stream.key");
                if (want == OWNER_QUEUED
                        ? s->owner != OWNER_QUEUED && s->owner != OWNER_ACTIVE
                        : s->owner != want)
                    ITEM("stream.owner");
                if (want != OWNER_QUEUED && s->owner_stream != o)
                    ITEM("stream.owner_stream");
                if (want != OWNER_QUEUED && s->owner_item != j)
                    ITEM("stream.owner_item");
#undef ITEM
            }
            if (pending != o->n_queued)
                BROKEN(XC_INV_INFLIGHT, "INV-INFLIGHT: [stream.pending] a "
                       "stream has %zu reads pending but counts %zu", pending,
                       o->n_queued);
        }
    }
    /* INV-CLOCK */
#define CLOCK(id) \
    BROKEN(XC_INV_CLOCK, "INV-CLOCK: [" id "] slot %zu last_use %llu " \
           "insert_tick %llu tick %llu", i, (unsigned long long)s->last_use, \
           (unsigned long long)s->insert_tick, (unsigned long long)c->tick)
    for (i = 0; i < c->n_slots; i++) {
        const slot *s = &c->slots[i];
        if (s->state == XC_SLOT_EMPTY ||
            (s->state == XC_SLOT_INFLIGHT && s->last_use == 0))
            continue; /* an INFLIGHT slot's stamped tick counts too */
        if (s->last_use > c->tick)
            CLOCK("clock.future");
        if (s->state == XC_SLOT_READY && s->insert_tick > s->last_use)
            CLOCK("clock.insert_after_use");
        if (s->state == XC_SLOT_READY && s->last_use == 0)
            CLOCK("clock.unstamped");
        c->cand[n].slot = (int32_t)i;
        c->cand[n++].last_use = s->last_use;
    }
#undef CLOCK
    qsort(c->cand, n, sizeof *c->cand, by_last_use);
    for (i = 1; i < n; i++)
        if (c->cand[i].last_use == c->cand[i - 1].last_use)
            BROKEN(XC_INV_CLOCK, "INV-CLOCK: [clock.shared] slots %d and %d "
                   "share last_use %llu", (int)c->cand[i - 1].slot,
                   (int)c->cand[i].slot,
                   (unsigned long long)c->cand[i].last_use);
    /* INV-COUNTERS */
#define COUNTERS(id) \
    BROKEN(XC_INV_COUNTERS, "INV-COUNTERS: [" id "] requests %llu hits %llu " \
           "misses %llu failures %llu short %llu io %llu evictions %llu " \
           "evicted unused %llu payload %llu prefetch %llu", \
           (unsigned long long)stats->requests, \
           (unsigned long long)stats->hits, \
           (unsigned long long)stats->misses, \
           (unsigned long long)stats->load_failures, \
           (unsigned long long)stats->short_reads, \
           (unsigned long long)stats->io_errors, \
           (unsigned long long)stats->evictions, \
           (unsigned long long)stats->prefetch_evicted_unused, \
           (unsigned long long)stats->payload_bytes, \
           (unsigned long long)stats->prefetch_loads)
    if (stats->hits + stats->misses != stats->requests)
        COUNTERS("counters.requests");
    if (stats->short_reads + stats->io_errors != stats->load_failures)
        COUNTERS("counters.failures");
    if (stats->prefetch_evicted_unused > stats->evictions)
        COUNTERS("counters.evicted_unused");
    if (stats->payload_bytes % eb != 0)
        COUNTERS("counters.payload_whole");
    if (stats->payload_bytes / eb >
            stats->misses + stats->prefetch_loads + stats->spec_loads)
        COUNTERS("counters.payload_loads");
#undef COUNTERS
    /* INV-PREFETCH */
    if (stats->prefetch_first_uses + stats->prefetch_evicted_unused +
            unused_resident(c) != stats->prefetch_loads)
        BROKEN(XC_INV_PREFETCH, "INV-PREFETCH: [prefetch.loads] first uses "
               "%llu + evicted unused %llu + unused resident %llu != prefetch "
               "loads %llu",
               (unsigned long long)stats->prefetch_first_uses,
               (unsigned long long)stats->prefetch_evicted_unused,
               (unsigned long long)unused_resident(c),
               (unsigned long long)stats->prefetch_loads);
    /* INV-POLICY */
#define POLICY_COUNT(id) \
    BROKEN(XC_INV_POLICY, "INV-POLICY: [" id "] policy saw %llu evictions " \
           "and %llu requests, the cache made %llu and %llu", \
           (unsigned long long)c->pol.n_evicted, \
           (unsigned long long)c->pol.n_requests, \
           (unsigned long long)c->evictions_since_open, \
           (unsigned long long)c->requests_since_open)
    if (c->pol.n_evicted != c->evictions_since_open)
        POLICY_COUNT("policy.evictions");
    if (c->pol.n_requests != c->requests_since_open)
        POLICY_COUNT("policy.requests");
#undef POLICY_COUNT
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
            n_want += s->insert_pending || (c->ordered &&
                                    s->state == XC_SLOT_INFLIGHT &&
                                    s->last_use != 0);
        }
#define ENTRY(id) \
    BROKEN(XC_INV_POLICY, "INV-POLICY: [" id "] order list entry %u (slot " \
           "%d, state %d, untold %d, stamp %llu after %llu) is not a stamped " \
           "read the policy waits for", n_list, (int)si, s->state, \
           s->insert_pending, (unsigned long long)t, (unsigned long long)prev)
        for (si = c->oq_first; si >= 0 && (size_t)si < c->n_slots;
             si = c->slots[si].onext) {
            const slot *s = &c->slots[si];
            uint64_t t = s->insert_pending ? s->insert_tick : s->last_use;
            if (s->state != (s->insert_pending ? XC_SLOT_READY
                                               : XC_SLOT_INFLIGHT))
                ENTRY("order.state");
            if (t <= prev)
                ENTRY("order.stamp");
            if (n_list == 0 && s->insert_pending)
                ENTRY("order.first_untold");
            prev = t;
            last = si;
            n_list++;
        }
#undef ENTRY
#define ORDER(id) \
    BROKEN(XC_INV_POLICY, "INV-POLICY: [" id "] order list: %u entries " \
           "(counted %u, last slot %d, recorded %d, stops at %d), stamped " \
           "reads untold: %u", n_list, c->oq_n, (int)last, (int)c->oq_last, \
           (int)si, n_want)
        if (si >= 0)
            ORDER("order.stop");
        if (n_list != n_want)
            ORDER("order.untold");
        if (n_list != c->oq_n)
            ORDER("order.count");
        if (last != c->oq_last)
            ORDER("order.last");
#undef ORDER
    }
    /* the policy's own check() reports "[id] text" (xc_policy.h): its id
     * comes after "INV-POLICY: " like every id of this function */
    if (c->pol.ops->check(&c->pol) != 0) {
        char msg[sizeof xc_last_error()->message];
        memcpy(msg, xc_last_error()->message, sizeof msg);
        BROKEN(XC_INV_POLICY, "INV-POLICY: %s", msg);
    }
    /* INV-QUEUE */
    if (c->aq_n + c->aq_active > c->aq_cap)
        BROKEN(XC_INV_QUEUE, "INV-QUEUE: [queue.depth] %zu queued + %zu "
               "under way > depth %zu", c->aq_n, c->aq_active, c->aq_cap);
    for (k = 0; k < c->ld.n_keys; k++)
        c->scratch[k] = -1;
    for (i = 0; i < c->aq_n; i++) {
        const aitem *it = &c->aq[(c->aq_head + i) % c->aq_cap];
        const slot *s;
#define ENTRY_SLOT(id) \
    BROKEN(XC_INV_QUEUE, "INV-QUEUE: [" id "] entry %zu names slot %d", i, \
           (int)it->slot)
        if (it->slot < 0)
            ENTRY_SLOT("queue.slot_low");
        if ((size_t)it->slot >= c->n_slots)
            ENTRY_SLOT("queue.slot_high");
#undef ENTRY_SLOT
        s = &c->slots[it->slot];
#define ENTRY(id) \
    BROKEN(XC_INV_QUEUE, "INV-QUEUE: [" id "] entry %zu: slot %d is state " \
           "%d key %u, not in flight for key %u", i, (int)it->slot, \
           s->state, s->key, it->key)
        if (s->state != XC_SLOT_INFLIGHT)
            ENTRY("queue.state");
        if (s->key != it->key)
            ENTRY("queue.key");
        if (s->owner != OWNER_QUEUED)
            ENTRY("queue.owner");
#undef ENTRY
        if (c->scratch[it->key] >= 0)
            BROKEN(XC_INV_QUEUE, "INV-QUEUE: [queue.twice] key %u queued "
                   "twice", it->key);
        c->scratch[it->key] = it->slot;
    }
    /* INV-SPEC */
#define SPEC(id) \
    BROKEN(XC_INV_SPEC, "INV-SPEC: [" id "] spec used %llu + evicted unused " \
           "%llu + unused resident %llu vs loads %llu; page cache %llu + " \
           "device %llu + unknown %llu vs %llu loads published", \
           (unsigned long long)stats->spec_used, \
           (unsigned long long)stats->spec_evicted_unused, \
           (unsigned long long)spec_resident(c), \
           (unsigned long long)stats->spec_loads, \
           (unsigned long long)stats->page_cache_loads, \
           (unsigned long long)stats->device_loads, \
           (unsigned long long)stats->unknown_loads, \
           (unsigned long long)(stats->payload_bytes / eb))
    if (stats->spec_used + stats->spec_evicted_unused + spec_resident(c) !=
            stats->spec_loads)
        SPEC("spec.loads");
    if (stats->page_cache_loads + stats->device_loads + stats->unknown_loads !=
            stats->payload_bytes / eb)
        SPEC("spec.sources");
#undef SPEC
out:
    pthread_mutex_unlock(&c->mu);
    return rc;
}

