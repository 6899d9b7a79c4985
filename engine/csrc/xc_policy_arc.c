/*
 * xc_policy_arc.c -- ARC: recency list T1, frequency list T2, and their
 * ghosts B1, B2 steering an adaptive target p for T1.
 *
 * Megiddo and Modha's ARC balances "used once lately" against "used at
 * least twice" by learning from misses on recently evicted keys.  The rules
 * are libCacheSim's ARC (cache/eviction/ARC.c), so that both give the same
 * misses on any trace: a demand miss on a ghost key adapts p before its
 * victim is chosen, which is why the cache names the key it chooses for
 * (xc_policy.want).  Exact rules (docs/CACHE.md "ARC"), c = n_slots, all
 * lists oldest first, p a double starting at 0:
 *
 * - hit: the key moves to T2's back.
 * - adapt(x): x in B1: p = min(c, p + max(1, |B2| / |B1|)), as
 *   doubles; x in B2: p = max(0, p - max(1, |B1| / |B2|)).
 * - replace(p, from_b2): T1 if |T1| > 0 and (|T1| > p, or |T1| == p and
 *   from_b2), or if T2 is empty; else T2.  The victim is that list's oldest
 *   candidate, else the other list's.
 * - victim for a demand miss on x in B1/B2: replace(adapt(x), x in B2);
 *   for any other load: if |T1| + |B1| >= c and B1 is empty, T1's oldest
 *   candidate (else T2's); otherwise replace(p, 0).
 * - request(x) (every demand get, before the eviction): x in B1/B2 adapts
 *   p and leaves its list, marked returning.
 * - evict(v), unless it serves a returning key's miss: if |T1| + |B1| >= c,
 *   drop B1's oldest, or when B1 is empty drop v outright (no ghost); else
 *   if |T1| + |T2| + |B1| + |B2| >= 2c, drop B2's oldest (if any).  Then a
 *   T1 victim goes to B1's back, a T2 victim to B2's back.
 * - insert(x): returning -> T2's back; in B1/B2 (a batch load: no request
 *   came) -> adapt(x), T2's back; else T1's back.
 *
 * The four lists are key lists (xc_klist), so every move is O(1) and the
 * victim walk steps only over protected keys.
 */
#include <assert.h>

#include "xc_internal.h"
#include "xc_policy.h"

enum { W_NONE = 0, W_T1 = 1, W_T2 = 2, W_B1 = 3, W_B2 = 4, W_RET = 5 };

/* The four lists share one link set: a key is on at most one.  A key a
 * demand miss took out of a ghost list is W_RET until published. */
typedef struct arc {
    xc_klinks kl;
    xc_klist l[5];      /* l[W_T1] .. l[W_B2], oldest first */
    double p;
    uint8_t *where;
    uint32_t ret;       /* the key the last request took out of a ghost */
    int ret_set;
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
    if (w != W_NONE && w != W_RET)
        xc_kl_remove(&a->kl, &a->l[w], key);
    a->where[key] = W_NONE;
}

static void put(arc *a, int w, uint32_t key)
{
    xc_kl_push(&a->kl, &a->l[w], key);
    a->where[key] = (uint8_t)w;
}

/* p after a ghost hit on a key of ghost list w (W_B1 or W_B2). */
static double adapted(const arc *a, const xc_policy *p, int w)
{
    double nb1 = (double)a->l[W_B1].n, nb2 = (double)a->l[W_B2].n, d;
    if (w == W_B1) {
        d = nb2 / nb1;
        d = d < 1.0 ? 1.0 : d;
        return a->p + d < (double)p->n_slots ? a->p + d : (double)p->n_slots;
    }
    d = nb1 / nb2;
    d = d < 1.0 ? 1.0 : d;
    return a->p - d > 0.0 ? a->p - d : 0.0;
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

/* The oldest candidate of list `first`, else of the other resident list. */
static int64_t oldest_of(const arc *a, int first, const xc_pview *v)
{
    int64_t t = oldest(a, first, v);
    return t >= 0 ? t : oldest(a, first == W_T1 ? W_T2 : W_T1, v);
}

/* REPLACE's choice with target tp. */
static int64_t replace(const arc *a, double tp, int from_b2,
                       const xc_pview *v)
{
    double n1 = (double)a->l[W_T1].n;
    int t1 = (a->l[W_T1].n > 0 && (n1 > tp || (n1 == tp && from_b2))) ||
             a->l[W_T2].n == 0;
    return oldest_of(a, t1 ? W_T1 : W_T2, v);
}

static int64_t arc_to_evict(const xc_policy *p, const xc_pview *v)
{
    const arc *a = p->priv;
    int w;
    assert(!p->want_set || p->want < p->n_keys);
    w = p->want_set ? a->where[p->want] : W_NONE;
    if (w == W_B1 || w == W_B2)
        return replace(a, adapted(a, p, w), w == W_B2, v);
    if (a->l[W_T1].n + a->l[W_B1].n >= p->n_slots && a->l[W_B1].n == 0)
        return oldest_of(a, W_T1, v);
    return replace(a, a->p, 0, v);
}

static void arc_on_request(xc_policy *p, uint32_t key)
{
    arc *a = p->priv;
    int w = a->where[key];
    a->ret_set = 0;
    if (w == W_B1 || w == W_B2) {
        a->p = adapted(a, p, w);
        take(a, key);
        a->where[key] = W_RET;
        a->ret = key;
        a->ret_set = 1;
    }
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
    int w = a->where[key];
    if (w == W_B1 || w == W_B2)
        a->p = adapted(a, p, w); /* a batch load: no request came */
    take(a, key);
    put(a, w == W_NONE ? W_T1 : W_T2, key);
}

static void arc_on_evict(xc_policy *p, uint32_t key)
{
    arc *a = p->priv;
    uint64_t c = p->n_slots;
    int w = a->where[key];
    if (!(p->want_set && a->ret_set && a->ret == p->want)) {
        size_t n1 = a->l[W_T1].n, nb1 = a->l[W_B1].n;
        if (n1 + nb1 >= c) {
            if (nb1 == 0) {
                take(a, key); /* T1 fills the cache: no ghost */
                return;
            }
            take(a, a->l[W_B1].head);
        } else if (n1 + a->l[W_T2].n + nb1 + a->l[W_B2].n >= 2 * c &&
                   a->l[W_B2].n > 0) {
            take(a, a->l[W_B2].head);
        }
    }
    take(a, key);
    if (w == W_T1)
        put(a, W_B1, key);
    else if (w == W_T2)
        put(a, W_B2, key);
}

static int arc_check(const xc_policy *p)
{
    const arc *a = p->priv;
    size_t i, n[6] = {0, 0, 0, 0, 0, 0};
    if (a == NULL)
        return xc_fail(XC_E_MISUSE, -1, -1, -1, "[arc.none] arc: no state");
    for (i = 0; i < p->n_keys; i++)
        if (a->where[i] < 6)
            n[a->where[i]]++;
    for (i = 1; i < 5; i++)
        if (n[i] != a->l[i].n)
            return xc_fail(XC_E_MISUSE, -1, -1, -1,
                           "[arc.count] arc: list %zu holds %zu keys, marks "
                           "say %zu", i, a->l[i].n, n[i]);
#define SIZES(id) \
    xc_fail(XC_E_MISUSE, -1, -1, -1, "[" id "] arc: %zu + %zu resident in " \
            "%zu slots, p %g", a->l[W_T1].n, a->l[W_T2].n, p->n_slots, a->p)
    if (a->l[W_T1].n + a->l[W_T2].n > p->n_slots)
        return SIZES("arc.resident");
    if (!(a->p >= 0.0 && a->p <= (double)p->n_slots))
        return SIZES("arc.p");
#undef SIZES
    for (i = 1; i < 5; i++)
        if (xc_kl_check(&a->kl, &a->l[i], a->where, (uint8_t)i, NULL,
                        "arc") != 0)
            return -1;
    return 0;
}

#ifdef XC_TEST_SEAMS
static void arc_test_view(xc_policy *p, xc_ptest *out);
#endif

const xc_policy_ops xc_policy_arc_ops = {
    "arc", {NULL}, {0}, arc_init, arc_fini, arc_to_evict, arc_on_request,
    arc_on_hit, arc_on_insert, arc_on_evict, arc_check, XC_POLICY_ORDER_NONE,
    1, xc_policy_row_nop, 0,
    XC_PTEST(arc_test_view),
};
XC_POLICY_REGISTER(xc_policy_arc_ops, 70);

/* TEST HOOKS ONLY (xc_policy.h): the state arc_check tests. */
#ifdef XC_TEST_SEAMS
static void arc_test_view(xc_policy *p, xc_ptest *out)
{
    arc *a = p->priv;
    *out = (xc_ptest){0};
    out->own_marks = 1;
    out->kl = &a->kl;
    out->lists = &a->l[W_T1];
    out->n_lists = 4;
    out->list_mark = W_T1;
    out->mark = a->where;
    out->mark_none = W_NONE;
    out->arc_p = &a->p;
}
#endif /* XC_TEST_SEAMS */
