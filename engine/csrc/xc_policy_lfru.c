/*
 * xc_policy_lfru.c -- sampled LFU with recency tie-break ("LFRU").
 *
 * Scanning every candidate is cheap at a few dozen slots but not at
 * thousands; sampling s of them (repeats allowed) bounds the cost, as redis
 * does with maxmemory-samples.  The sample must be reproducible by the
 * oracle, so it is a pure function of (seed, e, i): index
 * h(seed, e*s + i) % m into the candidates in slot order, where e counts the
 * policy's evictions since open and h is splitmix64 of (seed << 32) ^ x.
 * Among the sample the victim is min (freq, last_use), as in LFU.  It
 * keeps no state: the view lists the candidates in slot order (count,
 * nth), so a choice costs s lookups there.
 */
#include "xc_internal.h"
#include "xc_policy.h"

enum { P_SAMPLE = 0, P_SEED = 1 };

static uint64_t splitmix64(uint64_t z)
{
    z += 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static int lfru_init(xc_policy *p)
{
    if (p->param[P_SAMPLE] == 0)
        return xc_fail(XC_E_MISUSE, -1, -1, -1,
                       "policy lfru: sample must be at least 1");
    return XC_OK;
}
static void lfru_fini(xc_policy *p) { (void)p; }

static int better(const xc_pcand *a, const xc_pcand *b)
{
    return a->freq < b->freq ||
           (a->freq == b->freq && a->last_use < b->last_use);
}

static int64_t lfru_to_evict(const xc_policy *p, const xc_pview *v)
{
    uint64_t s = p->param[P_SAMPLE], seed = p->param[P_SEED], i;
    size_t n = v->count(v->ctx), j;
    xc_pcand best, c;
    if (n == 0)
        return -1;
    if (s >= n) {
        v->nth(v->ctx, 0, &best);
        for (j = 1; j < n; j++) {
            v->nth(v->ctx, j, &c);
            if (better(&c, &best))
                best = c;
        }
        return best.key;
    }
    for (i = 0; i < s; i++) {
        uint64_t x = p->n_evicted * s + i;
        j = (size_t)(splitmix64((seed << 32) ^ x) % n);
        v->nth(v->ctx, j, &c);
        if (i == 0 || better(&c, &best))
            best = c;
    }
    return best.key;
}

const xc_policy_ops xc_policy_lfru_ops = {
    "lfru", {"sample", "seed", NULL}, {4, 0}, lfru_init, lfru_fini,
    lfru_to_evict, xc_policy_nop, xc_policy_row_nop, xc_policy_row_nop,
    xc_policy_nop, xc_policy_check_nop, XC_POLICY_ORDER_NONE, 0,
    xc_policy_row_nop, 1,
    NULL,
};
XC_POLICY_REGISTER(xc_policy_lfru_ops, 40);
