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

/* One list (xc_policy_list.c): tick[k] is last_use while k is on q. */
typedef xc_plist lru;

static int lru_init(xc_policy *p)
{
    return xc_plist_init(p, sizeof(lru), 1);
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

const xc_policy_ops xc_policy_lru_ops = {
    "lru", {NULL}, {0}, lru_init, xc_plist_fini, lru_to_evict,
    xc_policy_nop, lru_place, lru_place, lru_on_evict,
    xc_plist_check, XC_POLICY_ORDER_LAST_USE, 0, lru_place, 0,
    XC_PTEST(xc_plist_test_view),
};
XC_POLICY_REGISTER(xc_policy_lru_ops, 10);
