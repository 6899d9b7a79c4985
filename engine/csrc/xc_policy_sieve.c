/*
 * xc_policy_sieve.c -- SIEVE (Zhang et al., NSDI '24), exact to
 * libCacheSim's Sieve.
 *
 * One FIFO list of the keys the policy holds, in insertion order (the
 * list's head is the oldest, SIEVE's "tail"), a visited bit per key and a
 * hand.  An insert goes to the newest end unvisited; a hit only sets the
 * key's visited bit.  To evict, the hand walks from where it stopped (the
 * oldest key when it has none) towards the newest, wrapping to the oldest
 * after the newest: a visited key it passes is cleared, an unvisited
 * candidate is the victim, and the hand stops on the key after the victim
 * (none when the victim was the newest).  A key that is not a candidate
 * now (protected, or its insert not told) is passed like any other, so
 * when every candidate was visited the walk clears a whole lap and takes
 * the first candidate of the next (docs/CACHE.md "SIEVE").
 *
 * to_evict walks without clearing: the first unvisited candidate of one
 * lap, else the first candidate of it.  on_evict re-derives the clearing
 * from the victim's key alone: the hand clears every key from its place up
 * to the victim, and all of them when the victim was visited (the walk
 * went round once).  Inserts come in stamp order (a queue policy).
 */
#include "xc_internal.h"
#include "xc_policy.h"

#include <assert.h>

typedef struct sieve {
    xc_plist l;         /* tick[k]: insert_tick while k is on the list */
    uint8_t *visited;   /* per key */
    uint32_t hand;      /* the key the next walk starts on, or XC_KNIL */
} sieve;

static int sieve_init(xc_policy *p)
{
    size_t nk = p->n_keys ? p->n_keys : 1;
    sieve *s;
    int rc = xc_plist_init(p, sizeof *s, 1);
    if (rc != XC_OK)
        return rc;
    s = p->priv;
    s->hand = XC_KNIL;
    if ((s->visited = xc_calloc(nk, 1)) == NULL) {
        xc_plist_fini(p);
        return xc_fail(XC_E_NOMEM, -1, -1, -1,
                       "policy sieve: no memory for %u keys", p->n_keys);
    }
    return XC_OK;
}

static void sieve_fini(xc_policy *p)
{
    sieve *s = p->priv;
    if (s != NULL)
        xc_free(s->visited);
    xc_plist_fini(p);
}

/* The key after k in the hand's walk: the next newer one, after the newest
 * the oldest. */
static uint32_t after(const sieve *s, uint32_t k)
{
    uint32_t n = s->l.kl.next[k];
    return n != XC_KNIL ? n : s->l.q.head;
}

static int64_t sieve_to_evict(const xc_policy *p, const xc_pview *v)
{
    const sieve *s = p->priv;
    xc_pcand row;
    uint32_t k, start;
    int64_t first = -1;
    size_t i;
    assert(s->hand == XC_KNIL || s->l.on[s->hand]);
    if (s->l.q.n == 0)
        return -1;
    start = s->hand != XC_KNIL ? s->hand : s->l.q.head;
    for (i = 0, k = start; i < s->l.q.n; i++, k = after(s, k)) {
        if (!v->row(v->ctx, k, &row))
            continue;
        if (!s->visited[k])
            return k;
        if (first < 0)
            first = k;
    }
    return first;
}

static void sieve_on_evict(xc_policy *p, uint32_t key)
{
    sieve *s = p->priv;
    uint32_t k;
    if (!s->l.on[key])
        return;
    if (s->visited[key]) {  /* the walk went round once: every bit cleared */
        for (k = s->l.q.head; k != XC_KNIL; k = s->l.kl.next[k])
            s->visited[k] = 0;
    } else {
        for (k = s->hand != XC_KNIL ? s->hand : s->l.q.head; k != key;
             k = after(s, k))
            s->visited[k] = 0;
    }
    s->hand = s->l.kl.next[key];
    xc_kl_remove(&s->l.kl, &s->l.q, key);
    s->l.on[key] = 0;
}

/* An insert goes in unvisited by its insert_tick (the newest end). */
static void sieve_on_insert(xc_policy *p, const xc_pcand *row)
{
    sieve *s = p->priv;
    if (s->l.on[row->key]) {
        if (s->hand == row->key)
            s->hand = s->l.kl.next[row->key];
        xc_kl_remove(&s->l.kl, &s->l.q, row->key);
    }
    s->l.tick[row->key] = row->insert_tick;
    xc_kl_insert_by(&s->l.kl, &s->l.q, row->key, s->l.tick);
    s->l.on[row->key] = 1;
    s->visited[row->key] = 0;
}

static void sieve_on_hit(xc_policy *p, const xc_pcand *row)
{
    sieve *s = p->priv;
    if (s->l.on[row->key])
        s->visited[row->key] = 1;
}

const xc_policy_ops xc_policy_sieve_ops = {
    "sieve", {NULL}, {0}, sieve_init, sieve_fini, sieve_to_evict,
    xc_policy_nop, sieve_on_hit, sieve_on_insert, sieve_on_evict,
    xc_plist_check, XC_POLICY_ORDER_NONE, 1, xc_policy_row_nop, 0,
    XC_PTEST(xc_plist_test_view),
};
XC_POLICY_REGISTER(xc_policy_sieve_ops, 80);
