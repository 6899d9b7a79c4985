/*
 * xc_policy_lru.c -- least recently used (the default).
 *
 * The victim is the candidate with the smallest last_use.  Ticks are unique,
 * so there is never a tie and no tie-break to agree on with the oracle.
 * The keys the policy holds sit on one list in ascending last_use: a hit
 * moves its key to the back (its tick is the newest), an insert goes in by
 * its tick (a read stamped at reservation may end after newer touches), and
 * the victim is the first candidate from the front.
 */
#include "xc_internal.h"
#include "xc_policy.h"

typedef struct lru {
    xc_klinks kl;
    xc_klist q;
    uint64_t *tick;  /* per key: last_use while on q */
    uint8_t *on;     /* per key: on q */
} lru;

static void lru_free(lru *s)
{
    if (s == NULL)
        return;
    xc_kl_free(&s->kl);
    xc_free(s->tick);
    xc_free(s->on);
    xc_free(s);
}

static int lru_init(xc_policy *p)
{
    size_t nk = p->n_keys ? p->n_keys : 1;
    lru *s = xc_calloc(1, sizeof *s);
    if (s == NULL || xc_kl_alloc(&s->kl, p->n_keys, "lru") != XC_OK ||
        (s->tick = xc_calloc(nk, sizeof *s->tick)) == NULL ||
        (s->on = xc_calloc(nk, 1)) == NULL) {
        lru_free(s);
        return xc_fail(XC_E_NOMEM, -1, -1, -1,
                       "policy lru: no memory for %u keys", p->n_keys);
    }
    xc_kl_init(&s->q);
    p->priv = s;
    return XC_OK;
}

static void lru_fini(xc_policy *p)
{
    lru_free(p->priv);
    p->priv = NULL;
}

static int64_t lru_to_evict(const xc_policy *p, const xc_pview *v)
{
    const lru *s = p->priv;
    xc_pcand row;
    uint32_t k;
    for (k = s->q.head; k != XC_KNIL; k = s->kl.next[k])
        if (v->row(v->ctx, k, &row))
            return k;
    return -1;
}

/* Puts the row's key on the list by its last_use (off it first). */
static void lru_place(xc_policy *p, const xc_pcand *row)
{
    lru *s = p->priv;
    if (s->on[row->key])
        xc_kl_remove(&s->kl, &s->q, row->key);
    s->tick[row->key] = row->last_use;
    xc_kl_insert_by(&s->kl, &s->q, row->key, s->tick);
    s->on[row->key] = 1;
}

static void lru_on_evict(xc_policy *p, uint32_t key)
{
    lru *s = p->priv;
    if (!s->on[key])
        return;
    xc_kl_remove(&s->kl, &s->q, key);
    s->on[key] = 0;
}

static int lru_check(const xc_policy *p)
{
    const lru *s = p->priv;
    size_t n = 0;
    uint32_t k;
    if (s == NULL)
        return xc_fail(XC_E_MISUSE, -1, -1, -1, "lru: no state");
    for (k = 0; k < p->n_keys; k++)
        n += s->on[k];
    if (n != s->q.n)
        return xc_fail(XC_E_MISUSE, -1, -1, -1,
                       "lru: %zu keys marked, the list holds %zu", n, s->q.n);
    return xc_kl_check(&s->kl, &s->q, s->on, 1, s->tick, "lru");
}

const xc_policy_ops xc_policy_lru_ops = {
    "lru", {NULL}, {0}, lru_init, lru_fini, lru_to_evict,
    xc_policy_nop, lru_place, lru_place, lru_on_evict,
    lru_check, XC_POLICY_ORDER_LAST_USE, 0, lru_place, 0,
};

/* TEST HOOKS ONLY (xc_policy.h): the state lru_check tests. */
#ifdef XC_TEST_SEAMS
void xc_policy_lru_test_view(xc_policy *p, xc_ptest *out)
{
    lru *s = p->priv;
    *out = (xc_ptest){0};
    out->kl = &s->kl;
    out->lists = &s->q;
    out->n_lists = 1;
    out->list_mark = 1;
    out->mark = s->on;
    out->mark_none = 0;
    out->tick = s->tick;
}
#endif /* XC_TEST_SEAMS */
