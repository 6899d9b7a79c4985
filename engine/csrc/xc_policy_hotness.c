/*
 * xc_policy_hotness.c -- per-key request counts with periodic halving.
 *
 * Routing in MoE models is skewed and drifts: a few experts are hot for a
 * while.  Counting every demand request per key (not per slot, so the count
 * survives eviction) remembers hot experts across reloads; halving every
 * count each `period` requests lets yesterday's heat fade.  The victim is
 * min (count[key], last_use).  Counts are kept across reset_stats: they are
 * policy state, not statistics.
 */
#include "xc_internal.h"
#include "xc_policy.h"

enum { P_PERIOD = 0 };

static int hot_init(xc_policy *p)
{
    if (p->param[P_PERIOD] == 0)
        return xc_fail(XC_E_MISUSE, -1, -1, -1,
                       "policy hotness: period must be at least 1");
    p->count = xc_calloc(p->n_keys ? p->n_keys : 1, sizeof *p->count);
    if (p->count == NULL)
        return xc_fail(XC_E_NOMEM, -1, -1, -1,
                       "policy hotness: no memory for %u key counts",
                       p->n_keys);
    return XC_OK;
}

static void hot_fini(xc_policy *p)
{
    xc_free(p->count);
    p->count = NULL;
}

static size_t hot_to_evict(const xc_policy *p, const xc_pcand *c, size_t n)
{
    size_t i, best = 0;
    for (i = 1; i < n; i++) {
        uint32_t a = p->count[c[i].key], b = p->count[c[best].key];
        if (a < b || (a == b && c[i].last_use < c[best].last_use))
            best = i;
    }
    return best;
}

/* Called after xc_policy_request() counted the request in n_requests. */
static void hot_on_request(xc_policy *p, uint32_t key)
{
    uint32_t k;
    if (p->count[key] < UINT32_MAX)
        p->count[key]++;
    if (p->n_requests % p->param[P_PERIOD] == 0)
        for (k = 0; k < p->n_keys; k++)
            p->count[k] >>= 1;
}

static int hot_check(const xc_policy *p)
{
    uint64_t sum = 0;
    uint32_t k;
    if (p->count == NULL)
        return xc_fail(XC_E_MISUSE, -1, -1, -1, "hotness: no count table");
    for (k = 0; k < p->n_keys; k++)
        sum += p->count[k];
    if (sum > p->n_requests)
        return xc_fail(XC_E_MISUSE, -1, -1, -1,
                       "hotness: counts sum to %llu > %llu requests",
                       (unsigned long long)sum,
                       (unsigned long long)p->n_requests);
    return 0;
}

const xc_policy_ops xc_policy_hotness_ops = {
    "hotness", {"period", NULL}, {256}, hot_init, hot_fini, hot_to_evict,
    hot_on_request, xc_policy_nop, xc_policy_nop, xc_policy_nop, hot_check, XC_POLICY_ORDER_NONE,
};
