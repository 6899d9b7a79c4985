/*
 * xc_policy_lfu.c -- least frequently used, ties least recently used.
 *
 * freq counts demand accesses since the slot's publish (a batch publish
 * starts at 0, so an unconsumed prefetch is the first to go).  The rule is
 * min (freq, last_use); last_use is unique, so the order is total.  The
 * keys the policy holds sit in frequency buckets (ascending freq), each a
 * list in ascending last_use: a hit moves its key one bucket up, to the
 * back; the victim is the first candidate from the front of the lowest
 * bucket on.
 */
#include "xc_internal.h"
#include "xc_policy.h"

static int lfu_init(xc_policy *p)
{
    xc_bset *s = xc_calloc(1, sizeof *s);
    if (s == NULL)
        return xc_fail(XC_E_NOMEM, -1, -1, -1,
                       "policy lfu: no memory for %u keys", p->n_keys);
    if (xc_bset_alloc(s, p->n_keys, "lfu") != XC_OK) {
        xc_free(s);
        return XC_E_NOMEM;
    }
    p->priv = s;
    return XC_OK;
}

static void lfu_fini(xc_policy *p)
{
    if (p->priv != NULL)
        xc_bset_free(p->priv);
    xc_free(p->priv);
    p->priv = NULL;
}

static int64_t lfu_to_evict(const xc_policy *p, const xc_pview *v)
{
    return xc_bset_first(p->priv, v);
}

/* Insert and hit: the key goes to (freq, last_use) of its row. */
static void lfu_place(xc_policy *p, const xc_pcand *row)
{
    xc_bset_place(p->priv, row->key, row->freq, row->last_use);
}

static void lfu_on_evict(xc_policy *p, uint32_t key)
{
    xc_bset_remove(p->priv, key);
}

static int lfu_check(const xc_policy *p)
{
    if (p->priv == NULL)
        return xc_fail(XC_E_MISUSE, -1, -1, -1, "[lfu.none] lfu: no state");
    return xc_bset_check(p->priv, "lfu");
}

#ifdef XC_TEST_SEAMS
static void lfu_test_view(xc_policy *p, xc_ptest *out);
#endif

const xc_policy_ops xc_policy_lfu_ops = {
    "lfu", {NULL}, {0}, lfu_init, lfu_fini, lfu_to_evict,
    xc_policy_nop, lfu_place, lfu_place, lfu_on_evict,
    lfu_check, XC_POLICY_ORDER_NONE, 0, lfu_place, 0,
    XC_PTEST(lfu_test_view),
};
XC_POLICY_REGISTER(xc_policy_lfu_ops, 30);

/* TEST HOOKS ONLY (xc_policy.h): the state lfu_check tests. */
#ifdef XC_TEST_SEAMS
static void lfu_test_view(xc_policy *p, xc_ptest *out)
{
    *out = (xc_ptest){0};
    out->bset = p->priv;
}
#endif /* XC_TEST_SEAMS */
