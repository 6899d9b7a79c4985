/*
 * xc_policy_list.c -- the one-list state policies share (xc_plist).
 *
 * lru, fifo and sieve keep the keys they hold on one list (xc_order_list.c)
 * with a per-key mark of being on it, and some a per-key tick the list is
 * ordered by.  Their allocation, their check() and their test view are the
 * same code, here, so a new policy built on one list writes none of them
 * and check()'s tests of that state are the ones the gate already breaks
 * (gate/check_probe.py BREAKS, through lru and fifo).  Not a policy: it
 * registers nothing.
 */
#include "xc_internal.h"
#include "xc_policy.h"

#include <assert.h>

int xc_plist_init(xc_policy *p, size_t size, int with_tick)
{
    size_t nk = p->n_keys ? p->n_keys : 1;
    xc_plist *s;
    assert(size >= sizeof(xc_plist));
    s = xc_calloc(1, size);
    if (s == NULL || xc_kl_alloc(&s->kl, p->n_keys, p->ops->name) != XC_OK ||
        (with_tick && (s->tick = xc_calloc(nk, sizeof *s->tick)) == NULL) ||
        (s->on = xc_calloc(nk, 1)) == NULL) {
        p->priv = s;
        xc_plist_fini(p);
        return xc_fail(XC_E_NOMEM, -1, -1, -1,
                       "policy %s: no memory for %u keys", p->ops->name,
                       p->n_keys);
    }
    xc_kl_init(&s->q);
    p->priv = s;
    return XC_OK;
}

void xc_plist_fini(xc_policy *p)
{
    xc_plist *s = p->priv;
    if (s != NULL) {
        xc_kl_free(&s->kl);
        xc_free(s->tick);
        xc_free(s->on);
        xc_free(s);
    }
    p->priv = NULL;
}

int xc_plist_check(const xc_policy *p)
{
    const xc_plist *l = p->priv;
    size_t n = 0;
    uint32_t k;
    if (l == NULL)
        return xc_fail(XC_E_MISUSE, -1, -1, -1, "[plist.none] %s: no state",
                       p->ops->name);
    for (k = 0; k < p->n_keys; k++)
        n += l->on[k];
    if (n != l->q.n)
        return xc_fail(XC_E_MISUSE, -1, -1, -1,
                       "[plist.count] %s: %zu keys marked, the list holds "
                       "%zu", p->ops->name, n, l->q.n);
    return xc_kl_check(&l->kl, &l->q, l->on, 1, l->tick, p->ops->name);
}

/* TEST HOOKS ONLY (xc_policy.h): the state xc_plist_check tests. */
#ifdef XC_TEST_SEAMS
void xc_plist_test_view(xc_policy *p, xc_ptest *out)
{
    xc_plist *s = p->priv;
    *out = (xc_ptest){0};
    out->kl = &s->kl;
    out->lists = &s->q;
    out->n_lists = 1;
    out->list_mark = 1;
    out->mark = s->on;
    out->mark_none = 0;
    out->own_marks = 1;
    out->tick = s->tick;
}
#endif /* XC_TEST_SEAMS */
