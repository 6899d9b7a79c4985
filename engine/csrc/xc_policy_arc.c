/*
 * xc_policy_arc.c -- ARC: recency list T1, frequency list T2, and their
 * ghosts B1, B2 steering an adaptive target p for T1.
 *
 * Megiddo and Modha's ARC balances "used once lately" against "used at
 * least twice" by learning from misses on recently evicted keys.  The cache
 * chooses a victim before it reads, and a policy sees a key only when it is
 * published, so here the ghost hit adapts p when the key is published
 * (on_insert), one step later than in the paper; the victim of that very
 * miss is chosen with the old p, and the paper's "x in B2 and |T1| == p"
 * tie term is dropped.  Exact rules (docs/CACHE.md "ARC"), c = n_slots,
 * all lists oldest first, integer arithmetic:
 *
 * - hit: the key moves to T2's back.
 * - insert of a key in B1: p = min(c, p + max(1, |B2| / |B1|)), the key
 *   leaves B1 for T2's back; in B2: p = max(0, p - max(1, |B1| / |B2|)),
 *   B2 -> T2's back; otherwise T1's back.  Then drop B1's oldest while
 *   |T1| + |B1| > c and B1 is not empty, then B2's oldest (B1's when B2 is
 *   empty) while |T1| + |T2| + |B1| + |B2| > 2c.
 * - victim: t1 = the oldest candidate in T1, t2 = the oldest in T2; t1 if
 *   it exists and (|T1| > p or there is no t2), else t2.  |T1| counts
 *   protected entries too.
 * - evict: a T1 victim goes to B1's back, a T2 victim to B2's back.
 *
 * The four lists are key lists (xc_klist), so every move is O(1) and the
 * victim walk steps only over protected keys.
 */
#include "xc_internal.h"
#include "xc_policy.h"

enum { W_NONE = 0, W_T1 = 1, W_T2 = 2, W_B1 = 3, W_B2 = 4 };

/* The four lists share one link set: a key is on at most one. */
typedef struct arc {
    xc_klinks kl;
    xc_klist l[5];      /* l[W_T1] .. l[W_B2], oldest first */
    uint64_t p;
    uint8_t *where;
} arc;

static void arc_free(arc *a)
{
    if (a == NULL)
        return;
    xc_kl_free(&a->kl);
    xc_free(a->where);
    xc_free(a);
}

static int arc_init(xc_policy *p)
{
    size_t nk = p->n_keys ? p->n_keys : 1;
    int i;
    arc *a = xc_calloc(1, sizeof *a);
    if (a == NULL || xc_kl_alloc(&a->kl, p->n_keys, "arc") != XC_OK ||
        (a->where = xc_calloc(nk, 1)) == NULL) {
        arc_free(a);
        return xc_fail(XC_E_NOMEM, -1, -1, -1,
                       "policy arc: no memory for %u keys", p->n_keys);
    }
    for (i = 0; i < 5; i++)
        xc_kl_init(&a->l[i]);
    p->priv = a;
    return XC_OK;
}

static void arc_fini(xc_policy *p)
{
    arc_free(p->priv);
    p->priv = NULL;
}

static void take(arc *a, uint32_t key)
{
    int w = a->where[key];
    if (w != W_NONE)
        xc_kl_remove(&a->kl, &a->l[w], key);
    a->where[key] = W_NONE;
}

static void put(arc *a, int w, uint32_t key)
{
    xc_kl_push(&a->kl, &a->l[w], key);
    a->where[key] = (uint8_t)w;
}

/* The oldest key of list w that v shows as a candidate, or -1. */
static int64_t oldest(const arc *a, int w, const xc_pview *v)
{
    xc_pcand row;
    uint32_t k;
    for (k = a->l[w].head; k != XC_KNIL; k = a->kl.next[k])
        if (v->row(v->ctx, k, &row))
            return k;
    return -1;
}

static int64_t arc_to_evict(const xc_policy *p, const xc_pview *v)
{
    const arc *a = p->priv;
    int64_t t;
    if (a->l[W_T1].n > a->p && (t = oldest(a, W_T1, v)) >= 0)
        return t;
    if ((t = oldest(a, W_T2, v)) >= 0)
        return t;
    return oldest(a, W_T1, v);
}

static void arc_on_hit(xc_policy *p, const xc_pcand *row)
{
    arc *a = p->priv;
    take(a, row->key);
    put(a, W_T2, row->key);
}

static void arc_on_insert(xc_policy *p, const xc_pcand *row)
{
    arc *a = p->priv;
    uint32_t key = row->key;
    uint64_t c = p->n_slots, d;
    size_t *n1 = &a->l[W_T1].n, *n2 = &a->l[W_T2].n, *nb1 = &a->l[W_B1].n,
           *nb2 = &a->l[W_B2].n;
    if (a->where[key] == W_B1) {
        d = *nb2 / *nb1;
        d = d < 1 ? 1 : d;
        a->p = a->p + d < c ? a->p + d : c;
        take(a, key);
        put(a, W_T2, key);
    } else if (a->where[key] == W_B2) {
        d = *nb1 / *nb2;
        d = d < 1 ? 1 : d;
        a->p = a->p > d ? a->p - d : 0;
        take(a, key);
        put(a, W_T2, key);
    } else {
        take(a, key);
        put(a, W_T1, key);
    }
    while (*n1 + *nb1 > c && *nb1 > 0)
        take(a, a->l[W_B1].head);
    while (*n1 + *n2 + *nb1 + *nb2 > 2 * c && *nb1 + *nb2 > 0)
        take(a, *nb2 ? a->l[W_B2].head : a->l[W_B1].head);
}

static void arc_on_evict(xc_policy *p, uint32_t key)
{
    arc *a = p->priv;
    int w = a->where[key];
    take(a, key);
    if (w == W_T1)
        put(a, W_B1, key);
    else if (w == W_T2)
        put(a, W_B2, key);
}

static int arc_check(const xc_policy *p)
{
    const arc *a = p->priv;
    size_t i, n[5] = {0, 0, 0, 0, 0};
    if (a == NULL)
        return xc_fail(XC_E_MISUSE, -1, -1, -1, "arc: no state");
    for (i = 0; i < p->n_keys; i++)
        if (a->where[i] < 5)
            n[a->where[i]]++;
    for (i = 1; i < 5; i++)
        if (n[i] != a->l[i].n)
            return xc_fail(XC_E_MISUSE, -1, -1, -1,
                           "arc: list %zu holds %zu keys, marks say %zu", i,
                           a->l[i].n, n[i]);
    if (a->l[W_T1].n + a->l[W_T2].n > p->n_slots || a->p > p->n_slots)
        return xc_fail(XC_E_MISUSE, -1, -1, -1,
                       "arc: %zu + %zu resident in %zu slots, p %llu",
                       a->l[W_T1].n, a->l[W_T2].n, p->n_slots,
                       (unsigned long long)a->p);
    for (i = 1; i < 5; i++)
        if (xc_kl_check(&a->kl, &a->l[i], a->where, (uint8_t)i, NULL,
                        "arc") != 0)
            return -1;
    return 0;
}

const xc_policy_ops xc_policy_arc_ops = {
    "arc", {NULL}, {0}, arc_init, arc_fini, arc_to_evict, xc_policy_nop,
    arc_on_hit, arc_on_insert, arc_on_evict, arc_check, XC_POLICY_ORDER_NONE,
    1, xc_policy_row_nop, 0,
};
