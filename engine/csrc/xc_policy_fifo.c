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

/* One list (xc_policy_list.c): tick[k] is insert_tick while k is on q. */
typedef xc_plist fifo;

static int fifo_init(xc_policy *p)
{
    return xc_plist_init(p, sizeof(fifo), 1);
}

static void fifo_fini(xc_policy *p)
{
    xc_plist_fini(p);
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
    xc_plist_check, XC_POLICY_ORDER_INSERT, 0, xc_policy_row_nop, 0,
    XC_PTEST(xc_plist_test_view),
};
XC_POLICY_REGISTER(xc_policy_fifo_ops, 20);
