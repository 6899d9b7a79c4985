/*
 * xc_policy_lru.c -- least recently used (the default).
 *
 * The victim is the candidate with the smallest last_use.  Ticks are unique,
 * so there is never a tie and no tie-break to agree on with the oracle.
 */
#include "xc_internal.h"
#include "xc_policy.h"

static int lru_init(xc_policy *p) { (void)p; return XC_OK; }
static void lru_fini(xc_policy *p) { (void)p; }

static size_t lru_to_evict(const xc_policy *p, const xc_pcand *c, size_t n)
{
    size_t i, best = 0;
    (void)p;
    for (i = 1; i < n; i++)
        if (c[i].last_use < c[best].last_use)
            best = i;
    return best;
}

const xc_policy_ops xc_policy_lru_ops = {
    "lru", {NULL}, {0}, lru_init, lru_fini, lru_to_evict,
    xc_policy_nop, xc_policy_nop, xc_policy_nop, xc_policy_nop,
    xc_policy_check_nop, XC_POLICY_ORDER_LAST_USE,
};
