/*
 * xc_policy_s3fifo.c -- S3-FIFO: a small probation FIFO, a main FIFO with
 * lazy second chances, and a ghost FIFO of recently dropped keys.
 *
 * Most routed experts of a long tail are used once and never again within
 * a window; S3-FIFO (Yang et al., SOSP'23) lets such one-hit keys leave
 * through the small queue S quickly, while keys that were hit while in S,
 * or come back soon after leaving it (they are in the ghost queue G), live
 * in the main queue M.  Exact rules (docs/CACHE.md "S3-FIFO"):
 *
 * - s = max(1, n_slots * small / 100); G holds at most max(1, n_slots - s)
 *   keys (oldest dropped first).
 * - insert: a key in G leaves G and enters M's back with freq 0; any other
 *   key enters S's back with freq 0.  hit: freq = min(freq + 1, 3).
 * - victim, one eviction: if |S| < s and M is not empty, the M pass runs
 *   first and ends the search when M holds a candidate.  The S pass walks S
 *   from the front: an entry with freq >= 1 moves to M's back with freq 0
 *   (protected or not), the first candidate with freq 0 is the victim (it
 *   enters G), a protected entry with freq 0 stays.  If S gave no victim,
 *   the M pass runs over M (now with the promoted keys at its back).
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
 */
#include "xc_internal.h"
#include "xc_policy.h"

#include <string.h>

enum { P_SMALL = 0 };
enum { W_NONE = 0, W_S = 1, W_M = 2, W_G = 3 };

typedef struct s3 {
    uint32_t *sq, *mq, *gq;   /* oldest first */
    size_t ns, nm, ng, s_target, g_cap;
    uint8_t *where, *freq;    /* per key */
} s3;

static void s3_free(s3 *q)
{
    if (q == NULL)
        return;
    xc_free(q->sq);
    xc_free(q->mq);
    xc_free(q->gq);
    xc_free(q->where);
    xc_free(q->freq);
    xc_free(q);
}

static int s3_init(xc_policy *p)
{
    size_t nk = p->n_keys ? p->n_keys : 1;
    s3 *q;
    if (p->param[P_SMALL] > 100)
        return xc_fail(XC_E_MISUSE, -1, -1, -1,
                       "policy s3fifo: small is a percentage 0..100");
    q = xc_calloc(1, sizeof *q);
    if (q != NULL) {
        q->sq = xc_calloc(nk, sizeof *q->sq);
        q->mq = xc_calloc(nk, sizeof *q->mq);
        q->gq = xc_calloc(nk, sizeof *q->gq);
        q->where = xc_calloc(nk, 1);
        q->freq = xc_calloc(nk, 1);
        p->scratch = xc_calloc(nk, sizeof *p->scratch);
    }
    if (q == NULL || !q->sq || !q->mq || !q->gq || !q->where || !q->freq ||
        !p->scratch) {
        s3_free(q);
        xc_free(p->scratch);
        p->scratch = NULL;
        return xc_fail(XC_E_NOMEM, -1, -1, -1,
                       "policy s3fifo: no memory for %u keys", p->n_keys);
    }
    q->s_target = p->n_slots * p->param[P_SMALL] / 100;
    if (q->s_target < 1)
        q->s_target = 1;
    q->g_cap = p->n_slots > q->s_target ? p->n_slots - q->s_target : 1;
    if (q->g_cap > nk)
        q->g_cap = nk;
    p->priv = q;
    return XC_OK;
}

static void s3_fini(xc_policy *p)
{
    s3_free(p->priv);
    xc_free(p->scratch);
    p->priv = NULL;
    p->scratch = NULL;
}

/* The M pass over mq (then, when promoted, S's entries with freq >= 1 at
 * freq 0): the first candidate of least freq, or UINT32_MAX. */
static uint32_t m_pass(const s3 *q, const uint32_t *is_cand, int promoted)
{
    uint32_t best = UINT32_MAX, best_f = 4;
    size_t i;
    for (i = 0; i < q->nm; i++) {
        uint32_t k = q->mq[i];
        if (is_cand[k] && q->freq[k] < best_f) {
            best = k;
            best_f = q->freq[k];
        }
    }
    if (promoted && best_f > 0)
        for (i = 0; i < q->ns; i++) {
            uint32_t k = q->sq[i];
            if (q->freq[k] >= 1 && is_cand[k])
                return k;
        }
    return best;
}

static size_t s3_to_evict(const xc_policy *p, const xc_pcand *c, size_t n)
{
    const s3 *q = p->priv;
    uint32_t *is_cand = p->scratch, v = UINT32_MAX;
    size_t i;
    for (i = 0; i < n; i++)
        is_cand[c[i].key] = (uint32_t)i + 1;
    if (q->ns < q->s_target && q->nm > 0)
        v = m_pass(q, is_cand, 0);
    if (v == UINT32_MAX)
        for (i = 0; i < q->ns; i++) {
            uint32_t k = q->sq[i];
            if (q->freq[k] == 0 && is_cand[k]) {
                v = k;
                break;
            }
        }
    if (v == UINT32_MAX)
        v = m_pass(q, is_cand, 1);
    /* n >= 1 candidates, each in S or M, so some pass found one. */
    i = v == UINT32_MAX ? 0 : is_cand[v] - 1;
    for (size_t j = 0; j < n; j++)
        is_cand[c[j].key] = 0;
    return i;
}

/* Moves S's entries with freq >= 1 at positions < end to M's back. */
static void promote(s3 *q, size_t end)
{
    size_t i = 0;
    while (i < end && i < q->ns) {
        uint32_t k = q->sq[i];
        if (q->freq[k] >= 1) {
            xc_pq_remove_at(q->sq, &q->ns, i);
            end--;
            q->freq[k] = 0;
            q->where[k] = W_M;
            q->mq[q->nm++] = k;
        } else {
            i++;
        }
    }
}

static void ghost_add(s3 *q, uint32_t key)
{
    if (q->ng == q->g_cap) {
        q->where[q->gq[0]] = W_NONE;
        xc_pq_remove_at(q->gq, &q->ng, 0);
    }
    q->gq[q->ng++] = key;
    q->where[key] = W_G;
}

static void s3_on_evict(xc_policy *p, uint32_t v)
{
    s3 *q = p->priv;
    int m_first = q->ns < q->s_target && q->nm > 0;
    size_t j, i, nm;
    uint8_t f;
    if (q->where[v] == W_S && q->freq[v] == 0) {
        /* found by the S pass */
        j = xc_pq_find(q->sq, q->ns, v);
        promote(q, j);
        j = xc_pq_find(q->sq, q->ns, v);
        xc_pq_remove_at(q->sq, &q->ns, j);
        q->freq[v] = 0;
        ghost_add(q, v);
        return;
    }
    if (!(m_first && q->where[v] == W_M))
        promote(q, q->ns); /* the S pass ran through without a victim */
    /* found by the M pass: rotate M past it */
    j = xc_pq_find(q->mq, q->nm, v);
    f = q->freq[v];
    nm = q->nm;
    for (i = 0; i < nm; i++) {
        uint32_t k = q->mq[i];
        unsigned loss = i < j ? f + 1u : f;
        q->freq[k] = q->freq[k] > loss ? (uint8_t)(q->freq[k] - loss) : 0;
    }
    if (j < nm) {
        /* new order: after v, then before v */
        memcpy(p->scratch, q->mq, j * sizeof *q->mq);
        memmove(q->mq, q->mq + j + 1, (nm - j - 1) * sizeof *q->mq);
        memcpy(q->mq + (nm - j - 1), p->scratch, j * sizeof *q->mq);
        memset(p->scratch, 0, j * sizeof *p->scratch);
        q->nm = nm - 1;
    }
    q->where[v] = W_NONE;
    q->freq[v] = 0;
}

static void s3_on_insert(xc_policy *p, uint32_t key)
{
    s3 *q = p->priv;
    if (q->where[key] == W_G) {
        xc_pq_remove_at(q->gq, &q->ng, xc_pq_find(q->gq, q->ng, key));
        q->mq[q->nm++] = key;
        q->where[key] = W_M;
    } else {
        q->sq[q->ns++] = key;
        q->where[key] = W_S;
    }
    q->freq[key] = 0;
}

static void s3_on_hit(xc_policy *p, uint32_t key)
{
    s3 *q = p->priv;
    if (q->freq[key] < 3)
        q->freq[key]++;
}

static int s3_check(const xc_policy *p)
{
    const s3 *q = p->priv;
    size_t i, n[4] = {0, 0, 0, 0};
    if (q == NULL)
        return xc_fail(XC_E_MISUSE, -1, -1, -1, "s3fifo: no state");
    for (i = 0; i < p->n_keys; i++)
        n[q->where[i] & 3]++;
    if (n[W_S] != q->ns || n[W_M] != q->nm || n[W_G] != q->ng ||
        q->ns + q->nm > p->n_slots || q->ng > q->g_cap)
        return xc_fail(XC_E_MISUSE, -1, -1, -1,
                       "s3fifo: queues hold %zu/%zu/%zu keys, marks say "
                       "%zu/%zu/%zu (slots %zu, ghost cap %zu)", q->ns, q->nm,
                       q->ng, n[W_S], n[W_M], n[W_G], p->n_slots, q->g_cap);
    return 0;
}

const xc_policy_ops xc_policy_s3fifo_ops = {
    "s3fifo", {"small", NULL}, {10}, s3_init, s3_fini, s3_to_evict,
    xc_policy_nop, s3_on_hit, s3_on_insert, s3_on_evict, s3_check,
    XC_POLICY_ORDER_NONE,
};
