/*
 * xc_policy_s3fifo.c -- S3-FIFO: a small probation FIFO, a main FIFO with
 * lazy second chances, and a ghost FIFO of recently dropped keys.
 *
 * Most routed experts of a long tail are used once and never again within
 * a window; S3-FIFO (Yang et al., SOSP'23) lets such one-hit keys leave
 * through the small queue S quickly, while keys that were hit while in S,
 * or come back soon after leaving it (they are in the ghost queue G), live
 * in the main queue M.  The rules are libCacheSim's S3FIFO
 * (cache/eviction/S3FIFO.c), so that both give the same misses on any
 * trace it runs; exact rules (docs/CACHE.md "S3-FIFO"), c = n_slots:
 *
 * - s = max(1, c * small / 100); G holds at most c * ghost / 100 keys
 *   (oldest dropped first; none when that is 0).
 * - request (every demand get, before its eviction): a key in G leaves G,
 *   marked returning.
 * - insert: a returning key, or a key in G (a batch load: no request
 *   came), enters M's back; before the first eviction, with |S| >= s, any
 *   other key enters M's back too (warm-up); else S's back.  freq 0.
 *   hit: freq = min(freq + 1, 3).
 * - victim, one eviction: if |M| > c - s or S is empty, the M pass runs
 *   first and ends the search when M holds a candidate.  The S pass walks S
 *   from the front: an entry with freq >= promote moves to M's back with
 *   freq 0 (protected or not), the first candidate below promote is the
 *   victim (it enters G), a protected entry below promote stays.  If S gave
 *   no victim, the M pass runs over M (now with the promoted keys at its
 *   back).
 * - the M pass walks M from the front round and round: a candidate with
 *   freq 0 is the victim (dropped, not ghosted); any other entry moves to
 *   the back with freq - 1 (floored at 0).  In closed form: the victim is the
 *   first candidate with the smallest freq f; entries before it lose f + 1,
 *   those after it lose f, and the entries before it end up at the back.
 *
 * to_evict computes the victim from that closed form without moving
 * anything; on_evict(victim) re-derives the same moves from the state and
 * the victim alone (which pass found it follows from where it is and its
 * freq), so choosing stays pure and protection only limits who may go.
 *
 * Cost: the queues are key lists (xc_klist), so every move is O(1).  A
 * pass stops at the first candidate of freq 0; everything it steps over
 * before that is a protected key (few) or a key whose freq the eviction
 * then lowers (a promotion or a loss of at least 1), and freq only rises by
 * hits, so the walks cost O(1) amortised per access, as CLOCK's hand does.
 */
#include "xc_internal.h"
#include "xc_policy.h"

enum { P_SMALL = 0, P_GHOST = 1, P_PROMOTE = 2 };
enum { W_NONE = 0, W_S = 1, W_M = 2, W_G = 3, W_R = 4 };

/* S, M and G share one link set: a key is on at most one.  A key a demand
 * miss took out of G is W_R (returning) until published. */
typedef struct s3 {
    xc_klinks kl;
    xc_klist q[4];            /* q[W_S], q[W_M], q[W_G], oldest first */
    size_t s_target, m_target, g_cap;
    unsigned promote;         /* hits in S that move a key to M */
    int evicted;              /* an eviction happened (ends the warm-up) */
    uint8_t *where, *freq;    /* per key */
} s3;

static void s3_free(s3 *q)
{
    if (q == NULL)
        return;
    xc_kl_free(&q->kl);
    xc_free(q->where);
    xc_free(q->freq);
    xc_free(q);
}

static int s3_init(xc_policy *p)
{
    size_t nk = p->n_keys ? p->n_keys : 1;
    int i;
    s3 *q;
    if (p->param[P_SMALL] > 100)
        return xc_fail(XC_E_MISUSE, -1, -1, -1,
                       "policy s3fifo: small is a percentage 0..100");
    if (p->param[P_GHOST] > 100)
        return xc_fail(XC_E_MISUSE, -1, -1, -1,
                       "policy s3fifo: ghost is a percentage 0..100");
    if (p->param[P_PROMOTE] < 1 || p->param[P_PROMOTE] > 3)
        return xc_fail(XC_E_MISUSE, -1, -1, -1,
                       "policy s3fifo: promote is a hit count 1..3");
    q = xc_calloc(1, sizeof *q);
    if (q == NULL || xc_kl_alloc(&q->kl, p->n_keys, "s3fifo") != XC_OK ||
        (q->where = xc_calloc(nk, 1)) == NULL ||
        (q->freq = xc_calloc(nk, 1)) == NULL) {
        s3_free(q);
        return xc_fail(XC_E_NOMEM, -1, -1, -1,
                       "policy s3fifo: no memory for %u keys", p->n_keys);
    }
    for (i = 0; i < 4; i++)
        xc_kl_init(&q->q[i]);
    q->s_target = p->n_slots * p->param[P_SMALL] / 100;
    if (q->s_target < 1)
        q->s_target = 1;
    q->m_target = p->n_slots - q->s_target;
    q->g_cap = p->n_slots * p->param[P_GHOST] / 100;
    if (q->g_cap > nk)
        q->g_cap = nk;
    q->promote = (unsigned)p->param[P_PROMOTE];
    p->priv = q;
    return XC_OK;
}

static void s3_fini(xc_policy *p)
{
    s3_free(p->priv);
    p->priv = NULL;
}

static int is_cand(const xc_pview *v, uint32_t key)
{
    xc_pcand row;
    return v->row(v->ctx, key, &row);
}

#define NEXT(q, k) ((q)->kl.next[k])

/* The M pass over M (then, when promoted, S's entries with freq >= promote
 * at freq 0): the first candidate of least freq, or -1.  It stops at a
 * candidate of freq 0: none can come before it. */
static int64_t m_pass(const s3 *q, const xc_pview *v, int promoted)
{
    int64_t best = -1;
    uint32_t best_f = 4, k;
    for (k = q->q[W_M].head; k != XC_KNIL && best_f > 0; k = NEXT(q, k))
        if (q->freq[k] < best_f && is_cand(v, k)) {
            best = k;
            best_f = q->freq[k];
        }
    if (promoted && best_f > 0)
        for (k = q->q[W_S].head; k != XC_KNIL; k = NEXT(q, k))
            if (q->freq[k] >= q->promote && is_cand(v, k))
                return k;
    return best;
}

/* Whether one eviction starts with the M pass. */
static int m_first(const s3 *q)
{
    return q->q[W_M].n > q->m_target || q->q[W_S].n == 0;
}

static int64_t s3_to_evict(const xc_policy *p, const xc_pview *v)
{
    const s3 *q = p->priv;
    int64_t vk = -1;
    uint32_t k;
    if (m_first(q))
        vk = m_pass(q, v, 0);
    if (vk < 0)
        for (k = q->q[W_S].head; k != XC_KNIL; k = NEXT(q, k)) {
            if (q->freq[k] < q->promote && is_cand(v, k)) {
                vk = k;
                break;
            }
        }
    if (vk < 0)
        vk = m_pass(q, v, 1);
    return vk;
}

/* Moves S's entries with freq >= promote in front of `end` (XC_KNIL: all)
 * to M's back. */
static void promote(s3 *q, uint32_t end)
{
    uint32_t k = q->q[W_S].head, nx;
    for (; k != XC_KNIL && k != end; k = nx) {
        nx = NEXT(q, k);
        if (q->freq[k] >= q->promote) {
            xc_kl_remove(&q->kl, &q->q[W_S], k);
            q->freq[k] = 0;
            q->where[k] = W_M;
            xc_kl_push(&q->kl, &q->q[W_M], k);
        }
    }
}

static void ghost_add(s3 *q, uint32_t key)
{
    if (q->g_cap == 0) {
        q->where[key] = W_NONE;
        return;
    }
    if (q->q[W_G].n == q->g_cap) {
        uint32_t old = q->q[W_G].head;
        xc_kl_remove(&q->kl, &q->q[W_G], old);
        q->where[old] = W_NONE;
    }
    xc_kl_push(&q->kl, &q->q[W_G], key);
    q->where[key] = W_G;
}

static void s3_on_evict(xc_policy *p, uint32_t v)
{
    s3 *q = p->priv;
    int mf = m_first(q);
    uint32_t k, nx;
    unsigned f;
    q->evicted = 1;
    if (q->where[v] == W_S && q->freq[v] < q->promote) {
        /* found by the S pass */
        promote(q, v);
        xc_kl_remove(&q->kl, &q->q[W_S], v);
        q->freq[v] = 0;
        ghost_add(q, v);
        return;
    }
    if (!(mf && q->where[v] == W_M))
        promote(q, XC_KNIL); /* the S pass ran through without a victim */
    if (q->where[v] != W_M)
        return; /* not a key the passes could choose: nothing moves */
    /* found by the M pass: the entries before v lose f + 1 and go to the
     * back, in order; those after it lose f */
    f = q->freq[v];
    if (f > 0)
        for (k = NEXT(q, v); k != XC_KNIL; k = NEXT(q, k))
            q->freq[k] = q->freq[k] > f ? (uint8_t)(q->freq[k] - f) : 0;
    for (k = q->q[W_M].head; k != v; k = nx) {
        nx = NEXT(q, k);
        q->freq[k] = q->freq[k] > f + 1 ? (uint8_t)(q->freq[k] - f - 1) : 0;
        xc_kl_remove(&q->kl, &q->q[W_M], k);
        xc_kl_push(&q->kl, &q->q[W_M], k);
    }
    xc_kl_remove(&q->kl, &q->q[W_M], v);
    q->where[v] = W_NONE;
    q->freq[v] = 0;
}

static void s3_on_request(xc_policy *p, uint32_t key)
{
    s3 *q = p->priv;
    if (q->where[key] == W_G) {
        xc_kl_remove(&q->kl, &q->q[W_G], key);
        q->where[key] = W_R;
    }
}

static void s3_on_insert(xc_policy *p, const xc_pcand *row)
{
    s3 *q = p->priv;
    uint32_t key = row->key;
    if (q->where[key] == W_G)
        xc_kl_remove(&q->kl, &q->q[W_G], key); /* a batch load */
    if (q->where[key] == W_G || q->where[key] == W_R ||
        (!q->evicted && q->q[W_S].n >= q->s_target)) {
        xc_kl_push(&q->kl, &q->q[W_M], key);
        q->where[key] = W_M;
    } else {
        xc_kl_push(&q->kl, &q->q[W_S], key);
        q->where[key] = W_S;
    }
    q->freq[key] = 0;
}

static void s3_on_hit(xc_policy *p, const xc_pcand *row)
{
    s3 *q = p->priv;
    if (q->freq[row->key] < 3)
        q->freq[row->key]++;
}

static int s3_check(const xc_policy *p)
{
    const s3 *q = p->priv;
    size_t i, n[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    if (q == NULL)
        return xc_fail(XC_E_MISUSE, -1, -1, -1, "[s3fifo.none] s3fifo: no "
                       "state");
    for (i = 0; i < p->n_keys; i++)
        n[q->where[i] & 7]++;
#define QUEUES(id) \
    xc_fail(XC_E_MISUSE, -1, -1, -1, "[" id "] s3fifo: queues hold " \
            "%zu/%zu/%zu keys, marks say %zu/%zu/%zu (slots %zu, ghost cap " \
            "%zu)", q->q[W_S].n, q->q[W_M].n, q->q[W_G].n, n[W_S], n[W_M], \
            n[W_G], p->n_slots, q->g_cap)
    if (n[W_S] != q->q[W_S].n)
        return QUEUES("s3fifo.small");
    if (n[W_M] != q->q[W_M].n)
        return QUEUES("s3fifo.main");
    if (n[W_G] != q->q[W_G].n)
        return QUEUES("s3fifo.ghost");
    if (q->q[W_S].n + q->q[W_M].n > p->n_slots)
        return QUEUES("s3fifo.resident");
    if (q->q[W_G].n > q->g_cap)
        return QUEUES("s3fifo.ghost_cap");
#undef QUEUES
    for (i = W_S; i <= W_G; i++)
        if (xc_kl_check(&q->kl, &q->q[i], q->where, (uint8_t)i, NULL,
                        "s3fifo") != 0)
            return -1;
    return 0;
}

#ifdef XC_TEST_SEAMS
static void s3_test_view(xc_policy *p, xc_ptest *out);
#endif

const xc_policy_ops xc_policy_s3fifo_ops = {
    "s3fifo", {"small", "ghost", "promote", NULL}, {10, 90, 2}, s3_init,
    s3_fini, s3_to_evict, s3_on_request, s3_on_hit, s3_on_insert,
    s3_on_evict, s3_check, XC_POLICY_ORDER_NONE, 1, xc_policy_row_nop, 0,
    XC_PTEST(s3_test_view),
};
XC_POLICY_REGISTER(xc_policy_s3fifo_ops, 60);

/* TEST HOOKS ONLY (xc_policy.h): the state s3_check tests. */
#ifdef XC_TEST_SEAMS
static void s3_test_view(xc_policy *p, xc_ptest *out)
{
    s3 *q = p->priv;
    *out = (xc_ptest){0};
    out->own_marks = 3;
    out->kl = &q->kl;
    out->lists = &q->q[W_S];
    out->n_lists = 3;
    out->list_mark = W_S;
    out->mark = q->where;
    out->mark_none = W_NONE;
    out->g_cap = &q->g_cap;
}
#endif /* XC_TEST_SEAMS */
