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
 */
#include "xc_internal.h"
#include "xc_policy.h"

enum { W_NONE = 0, W_T1 = 1, W_T2 = 2, W_B1 = 3, W_B2 = 4 };

typedef struct arc {
    uint32_t *l[5];     /* l[W_T1] .. l[W_B2], oldest first */
    size_t n[5];
    uint64_t p;
    uint8_t *where;
} arc;

static void arc_free(arc *a)
{
    int i;
    if (a == NULL)
        return;
    for (i = 1; i < 5; i++)
        xc_free(a->l[i]);
    xc_free(a->where);
    xc_free(a);
}

static int arc_init(xc_policy *p)
{
    size_t nk = p->n_keys ? p->n_keys : 1;
    int i, ok;
    arc *a = xc_calloc(1, sizeof *a);
    ok = a != NULL;
    for (i = 1; ok && i < 5; i++)
        ok = (a->l[i] = xc_calloc(nk, sizeof *a->l[i])) != NULL;
    if (ok)
        ok = (a->where = xc_calloc(nk, 1)) != NULL;
    if (ok)
        ok = (p->scratch = xc_calloc(nk, sizeof *p->scratch)) != NULL;
    if (!ok) {
        arc_free(a);
        return xc_fail(XC_E_NOMEM, -1, -1, -1,
                       "policy arc: no memory for %u keys", p->n_keys);
    }
    p->priv = a;
    return XC_OK;
}

static void arc_fini(xc_policy *p)
{
    arc_free(p->priv);
    xc_free(p->scratch);
    p->priv = NULL;
    p->scratch = NULL;
}

static void take(arc *a, uint32_t key)
{
    int w = a->where[key];
    if (w != W_NONE)
        xc_pq_remove_at(a->l[w], &a->n[w], xc_pq_find(a->l[w], a->n[w], key));
    a->where[key] = W_NONE;
}

static void put(arc *a, int w, uint32_t key)
{
    a->l[w][a->n[w]++] = key;
    a->where[key] = (uint8_t)w;
}

static size_t arc_to_evict(const xc_policy *p, const xc_pcand *c, size_t n)
{
    const arc *a = p->priv;
    uint32_t *is_cand = p->scratch;
    size_t i, pick = SIZE_MAX, t1 = SIZE_MAX, t2 = SIZE_MAX;
    for (i = 0; i < n; i++)
        is_cand[c[i].key] = (uint32_t)i + 1;
    for (i = 0; i < a->n[W_T1] && t1 == SIZE_MAX; i++)
        if (is_cand[a->l[W_T1][i]])
            t1 = is_cand[a->l[W_T1][i]] - 1;
    for (i = 0; i < a->n[W_T2] && t2 == SIZE_MAX; i++)
        if (is_cand[a->l[W_T2][i]])
            t2 = is_cand[a->l[W_T2][i]] - 1;
    if (t1 != SIZE_MAX && (a->n[W_T1] > a->p || t2 == SIZE_MAX))
        pick = t1;
    else
        pick = t2;
    for (i = 0; i < n; i++)
        is_cand[c[i].key] = 0;
    return pick == SIZE_MAX ? 0 : pick;
}

static void arc_on_hit(xc_policy *p, uint32_t key)
{
    arc *a = p->priv;
    take(a, key);
    put(a, W_T2, key);
}

static void arc_on_insert(xc_policy *p, uint32_t key)
{
    arc *a = p->priv;
    uint64_t c = p->n_slots, d;
    if (a->where[key] == W_B1) {
        d = a->n[W_B2] / a->n[W_B1];
        d = d < 1 ? 1 : d;
        a->p = a->p + d < c ? a->p + d : c;
        take(a, key);
        put(a, W_T2, key);
    } else if (a->where[key] == W_B2) {
        d = a->n[W_B1] / a->n[W_B2];
        d = d < 1 ? 1 : d;
        a->p = a->p > d ? a->p - d : 0;
        take(a, key);
        put(a, W_T2, key);
    } else {
        take(a, key);
        put(a, W_T1, key);
    }
    while (a->n[W_T1] + a->n[W_B1] > c && a->n[W_B1] > 0)
        take(a, a->l[W_B1][0]);
    while (a->n[W_T1] + a->n[W_T2] + a->n[W_B1] + a->n[W_B2] > 2 * c &&
           a->n[W_B1] + a->n[W_B2] > 0)
        take(a, a->n[W_B2] ? a->l[W_B2][0] : a->l[W_B1][0]);
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
        if (n[i] != a->n[i])
            return xc_fail(XC_E_MISUSE, -1, -1, -1,
                           "arc: list %zu holds %zu keys, marks say %zu", i,
                           a->n[i], n[i]);
    if (a->n[W_T1] + a->n[W_T2] > p->n_slots || a->p > p->n_slots)
        return xc_fail(XC_E_MISUSE, -1, -1, -1,
                       "arc: %zu + %zu resident in %zu slots, p %llu",
                       a->n[W_T1], a->n[W_T2], p->n_slots,
                       (unsigned long long)a->p);
    return 0;
}

const xc_policy_ops xc_policy_arc_ops = {
    "arc", {NULL}, {0}, arc_init, arc_fini, arc_to_evict, xc_policy_nop,
    arc_on_hit, arc_on_insert, arc_on_evict, arc_check, XC_POLICY_ORDER_NONE,
};
