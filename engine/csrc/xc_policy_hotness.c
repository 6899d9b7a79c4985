/*
 * xc_policy_hotness.c -- per-key request counts with periodic halving.
 *
 * Routing in MoE models is skewed and drifts: a few experts are hot for a
 * while.  Counting every demand request per key (not per slot, so the count
 * survives eviction) remembers hot experts across reloads; halving every
 * count each `period` requests lets yesterday's heat fade.  The victim is
 * min (count[key], last_use).  Counts are kept across reset_stats: they are
 * policy state, not statistics.
 *
 * Halving is lazy: a key's count is stored with the epoch (number of
 * halvings) it was last brought up to date at, and read as count >> (epochs
 * since); so a halving costs nothing per key.  The keys the policy holds
 * sit in count buckets, each a heap in last_use order (xc_hset); a halving
 * maps every bucket value v to v >> 1 and melds the pairs of buckets that
 * meet, so it costs amortised O(log n) per request whatever the period and
 * the counts (xc_order_heaps.c gives the argument).  A request of a held key
 * takes it off its bucket and the hit that follows puts it back at
 * (count, last_use).
 */
#include "xc_internal.h"
#include "xc_policy.h"

enum { P_PERIOD = 0 };

typedef struct hot {
    xc_hset bs;
    uint32_t *epoch;   /* per key: the epoch count[key] is up to date at */
    uint32_t now;      /* halvings so far */
    uint64_t to_halve; /* requests left until the next halving: the same
                        * as n_requests % period == 0, with no division */
    uint8_t *held;     /* per key: inserted and not evicted */
} hot;

/* count[key] brought up to date (its halvings since applied). */
static uint32_t cnt(const xc_policy *p, uint32_t key)
{
    const hot *h = p->priv;
    uint32_t d = h->now - h->epoch[key];
    return d >= 32 ? 0 : p->count[key] >> d;
}

static void hot_free(xc_policy *p)
{
    hot *h = p->priv;
    if (h != NULL) {
        if (h->bs.b != NULL)
            xc_hset_free(&h->bs);
        xc_free(h->epoch);
        xc_free(h->held);
        xc_free(h);
    }
    xc_free(p->count);
    p->count = NULL;
    p->priv = NULL;
}

static int hot_init(xc_policy *p)
{
    size_t nk = p->n_keys ? p->n_keys : 1;
    hot *h;
    if (p->param[P_PERIOD] == 0)
        return xc_fail(XC_E_MISUSE, -1, -1, -1,
                       "policy hotness: period must be at least 1");
    p->count = xc_calloc(nk, sizeof *p->count);
    p->priv = h = xc_calloc(1, sizeof *h);
    if (p->count == NULL || h == NULL ||
        (h->epoch = xc_calloc(nk, sizeof *h->epoch)) == NULL ||
        (h->held = xc_calloc(nk, 1)) == NULL ||
        xc_hset_alloc(&h->bs, p->n_keys, "hotness") != XC_OK) {
        hot_free(p);
        return xc_fail(XC_E_NOMEM, -1, -1, -1,
                       "policy hotness: no memory for %u key counts",
                       p->n_keys);
    }
    h->to_halve = p->param[P_PERIOD];
    return XC_OK;
}

static void hot_fini(xc_policy *p) { hot_free(p); }

static int64_t hot_to_evict(const xc_policy *p, const xc_pview *v)
{
    const hot *h = p->priv;
    return xc_hset_first(&h->bs, v);
}

/* Called after xc_policy_request() counted the request in n_requests. */
static void hot_on_request(xc_policy *p, uint32_t key)
{
    hot *h = p->priv;
    uint32_t n = cnt(p, key);
    p->count[key] = n < UINT32_MAX ? n + 1 : n;
    h->epoch[key] = h->now;
    if (h->held[key])
        xc_hset_remove(&h->bs, key); /* its hit puts it back */
    if (--h->to_halve == 0) {
        h->to_halve = p->param[P_PERIOD];
        h->now++;
        xc_hset_halve(&h->bs);
    }
}

/* Insert and hit: the key goes to (count, last_use). */
static void hot_place(xc_policy *p, const xc_pcand *row)
{
    hot *h = p->priv;
    h->held[row->key] = 1;
    xc_hset_place(&h->bs, row->key, cnt(p, row->key), row->last_use);
}

static void hot_on_evict(xc_policy *p, uint32_t key)
{
    hot *h = p->priv;
    h->held[key] = 0;
    xc_hset_remove(&h->bs, key);
}

static int hot_check(const xc_policy *p)
{
    const hot *h = p->priv;
    uint64_t sum = 0;
    uint32_t k;
    if (p->count == NULL)
        return xc_fail(XC_E_MISUSE, -1, -1, -1, "[hotness.count_table] "
                       "hotness: no count table");
    if (h == NULL)
        return xc_fail(XC_E_MISUSE, -1, -1, -1, "[hotness.none] hotness: no "
                       "count table");
    for (k = 0; k < p->n_keys; k++)
        sum += cnt(p, k);
#define HALVING(id) \
    xc_fail(XC_E_MISUSE, -1, -1, -1, "[" id "] hotness: %llu requests to " \
            "the next halving after %llu requests (period %llu)", \
            (unsigned long long)h->to_halve, \
            (unsigned long long)p->n_requests, \
            (unsigned long long)p->param[P_PERIOD])
    if (h->to_halve == 0)
        return HALVING("hotness.halving_zero");
    if (h->to_halve > p->param[P_PERIOD])
        return HALVING("hotness.halving_over");
    if ((p->param[P_PERIOD] - h->to_halve) !=
            p->n_requests % p->param[P_PERIOD])
        return HALVING("hotness.halving_phase");
#undef HALVING
    if (sum > p->n_requests)
        return xc_fail(XC_E_MISUSE, -1, -1, -1,
                       "[hotness.sum] hotness: counts sum to %llu > %llu "
                       "requests", (unsigned long long)sum,
                       (unsigned long long)p->n_requests);
#define HELD(id) \
    xc_fail(XC_E_MISUSE, -1, -1, -1, "[" id "] hotness: key %u (held %d, " \
            "count %u) is out of its bucket", k, h->held[k], cnt(p, k))
    for (k = 0; k < p->n_keys; k++) {
        if (h->held[k] != (h->bs.bucket_of[k] != XC_KNIL))
            return HELD("hotness.held");
        if (h->held[k] && h->bs.b[h->bs.bucket_of[k]].v != cnt(p, k))
            return HELD("hotness.bucket_value");
    }
#undef HELD
    return xc_hset_check(&h->bs, "hotness");
}

#ifdef XC_TEST_SEAMS
static void hot_test_view(xc_policy *p, xc_ptest *out);
#endif

const xc_policy_ops xc_policy_hotness_ops = {
    "hotness", {"period", NULL}, {256}, hot_init, hot_fini, hot_to_evict,
    hot_on_request, hot_place, hot_place, hot_on_evict, hot_check,
    XC_POLICY_ORDER_NONE, 0, hot_place, 0,
    XC_PTEST(hot_test_view),
};
XC_POLICY_REGISTER(xc_policy_hotness_ops, 50);

/* TEST HOOKS ONLY (xc_policy.h): the state hot_check tests. */
#ifdef XC_TEST_SEAMS
/* The buckets, for xc_testhook_halving_work (xc_testhooks.c). */
const xc_hset *xc_policy_hotness_set(const xc_policy *p)
{
    return p->ops == &xc_policy_hotness_ops ? &((const hot *)p->priv)->bs
                                            : NULL;
}

static void hot_test_view(xc_policy *p, xc_ptest *out)
{
    hot *h = p->priv;
    *out = (xc_ptest){0};
    out->to_halve = &h->to_halve;
    out->held = h->held;
    out->hset = &h->bs;
}
#endif /* XC_TEST_SEAMS */
