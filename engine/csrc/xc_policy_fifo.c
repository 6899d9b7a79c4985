/*
 * xc_policy_fifo.c -- first in, first out.
 *
 * The victim is the candidate published earliest (smallest insert_tick).
 * Hits do not rescue an expert.  insert_tick is a tick, so ties cannot
 * happen.  The keys the policy holds sit on one list in ascending
 * insert_tick (an insert goes in by its tick: a read stamped at
 * reservation may end after newer ones); the victim is the first candidate
 * from the front.  The simplest policy: copy this file to start a new one.
 */
#include "xc_internal.h"
#include "xc_policy.h"

typedef struct fifo {
    xc_klinks kl;
    xc_klist q;
    uint64_t *tick;  /* per key: insert_tick while on q */
    uint8_t *on;     /* per key: on q */
} fifo;

static void fifo_free(fifo *s)
{
    if (s == NULL)
        return;
    xc_kl_free(&s->kl);
    xc_free(s->tick);
    xc_free(s->on);
    xc_free(s);
}

static int fifo_init(xc_policy *p)
{
    size_t nk = p->n_keys ? p->n_keys : 1;
    fifo *s = xc_calloc(1, sizeof *s);
    if (s == NULL || xc_kl_alloc(&s->kl, p->n_keys, "fifo") != XC_OK ||
        (s->tick = xc_calloc(nk, sizeof *s->tick)) == NULL ||
        (s->on = xc_calloc(nk, 1)) == NULL) {
        fifo_free(s);
        return xc_fail(XC_E_NOMEM, -1, -1, -1,
                       "policy fifo: no memory for %u keys", p->n_keys);
    }
    xc_kl_init(&s->q);
    p->priv = s;
    return XC_OK;
}

static void fifo_fini(xc_policy *p)
{
    fifo_free(p->priv);
    p->priv = NULL;
}

static int64_t fifo_to_evict(const xc_policy *p, const xc_pview *v)
{
    const fifo *s = p->priv;
    xc_pcand row;
    uint32_t k;
    for (k = s->q.head; k != XC_KNIL; k = s->kl.next[k])
        if (v->row(v->ctx, k, &row))
            return k;
    return -1;
}

static void fifo_on_evict(xc_policy *p, uint32_t key)
{
    fifo *s = p->priv;
    if (!s->on[key])
        return;
    xc_kl_remove(&s->kl, &s->q, key);
    s->on[key] = 0;
}

static int fifo_check(const xc_policy *p)
{
    const fifo *s = p->priv;
    size_t n = 0;
    uint32_t k;
    if (s == NULL)
        return xc_fail(XC_E_MISUSE, -1, -1, -1, "fifo: no state");
    for (k = 0; k < p->n_keys; k++)
        n += s->on[k];
    if (n != s->q.n)
        return xc_fail(XC_E_MISUSE, -1, -1, -1,
                       "fifo: %zu keys marked, the list holds %zu", n,
                       s->q.n);
    return xc_kl_check(&s->kl, &s->q, s->on, 1, s->tick, "fifo");
}

/* An insert goes in by its insert_tick; a hit changes nothing. */
static void fifo_on_insert(xc_policy *p, const xc_pcand *row)
{
    fifo *s = p->priv;
    if (s->on[row->key])
        xc_kl_remove(&s->kl, &s->q, row->key);
    s->tick[row->key] = row->insert_tick;
    xc_kl_insert_by(&s->kl, &s->q, row->key, s->tick);
    s->on[row->key] = 1;
}

const xc_policy_ops xc_policy_fifo_ops = {
    "fifo", {NULL}, {0}, fifo_init, fifo_fini, fifo_to_evict,
    xc_policy_nop, xc_policy_row_nop, fifo_on_insert, fifo_on_evict,
    fifo_check, XC_POLICY_ORDER_INSERT, 0, xc_policy_row_nop, 0,
};

/* TEST HOOKS ONLY (xc_policy.h): the state fifo_check tests. */
#ifdef XC_TEST_SEAMS
void xc_policy_fifo_test_view(xc_policy *p, xc_ptest *out)
{
    fifo *s = p->priv;
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
