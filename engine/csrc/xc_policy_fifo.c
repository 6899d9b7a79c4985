/*
 * xc_policy_fifo.c -- first in, first out.
 *
 * The victim is the candidate published earliest (smallest insert_tick).
 * Hits do not rescue an expert.  insert_tick is a tick, so ties cannot
 * happen.  The simplest policy: copy this file to start a new one.
 */
#include "xc_internal.h"
#include "xc_policy.h"

static int fifo_init(xc_policy *p) { (void)p; return XC_OK; }
static void fifo_fini(xc_policy *p) { (void)p; }

static size_t fifo_to_evict(const xc_policy *p, const xc_pcand *c, size_t n)
{
    size_t i, best = 0;
    (void)p;
    for (i = 1; i < n; i++)
        if (c[i].insert_tick < c[best].insert_tick)
            best = i;
    return best;
}

const xc_policy_ops xc_policy_fifo_ops = {
    "fifo", {NULL}, {0}, fifo_init, fifo_fini, fifo_to_evict,
    xc_policy_nop, xc_policy_nop, xc_policy_nop, xc_policy_nop,
    xc_policy_check_nop, XC_POLICY_ORDER_INSERT,
};
