/*
 * xc_policy_lfu.c -- least frequently used, ties least recently used.
 *
 * freq counts demand accesses since the slot's publish (a batch publish
 * starts at 0, so an unconsumed prefetch is the first to go).  The rule is
 * min (freq, last_use); last_use is unique, so the order is total.
 */
#include "xc_internal.h"
#include "xc_policy.h"

static int lfu_init(xc_policy *p) { (void)p; return XC_OK; }
static void lfu_fini(xc_policy *p) { (void)p; }

static size_t lfu_to_evict(const xc_policy *p, const xc_pcand *c, size_t n)
{
    size_t i, best = 0;
    (void)p;
    for (i = 1; i < n; i++)
        if (c[i].freq < c[best].freq ||
            (c[i].freq == c[best].freq && c[i].last_use < c[best].last_use))
            best = i;
    return best;
}

const xc_policy_ops xc_policy_lfu_ops = {
    "lfu", {NULL}, {0}, lfu_init, lfu_fini, lfu_to_evict,
    xc_policy_nop, xc_policy_nop, xc_policy_nop, xc_policy_nop,
    xc_policy_check_nop, XC_POLICY_ORDER_NONE,
};
