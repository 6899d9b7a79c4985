/*
 * xc_order_buckets.c -- keys in buckets of equal value: the order of lfu.
 *
 * Buckets ascend by value (lfu: a key's freq); each bucket is a key list
 * (xc_order_list.c) in ascending tick, so the victim is the front key of
 * the first bucket that the view shows as a candidate.  A hit moves a key
 * from bucket v to v + 1 at the newest tick: place walks from the key's
 * current bucket, so that move is O(1) (the next bucket exists or is made
 * right after it).  Buckets come from a free stack of n_keys + 1 entries,
 * enough for every key in a bucket of its own plus the one being made.
 */
#include "xc_internal.h"
#include "xc_policy.h"

#include <string.h>

int xc_bset_alloc(xc_bset *s, uint32_t n_keys, const char *who)
{
    size_t nk = n_keys ? n_keys : 1, i;
    memset(s, 0, sizeof *s);
    s->n_keys = n_keys;
    s->first = XC_KNIL;
    if (xc_kl_alloc(&s->kl, n_keys, who) != XC_OK)
        return XC_E_NOMEM;
    s->b = xc_calloc(nk + 1, sizeof *s->b);
    s->free_b = xc_malloc((nk + 1) * sizeof *s->free_b);
    s->bucket_of = xc_malloc(nk * sizeof *s->bucket_of);
    s->tick = xc_calloc(nk, sizeof *s->tick);
    if (!s->b || !s->free_b || !s->bucket_of || !s->tick) {
        xc_bset_free(s);
        return xc_fail(XC_E_NOMEM, -1, -1, -1,
                       "policy %s: no memory for %u keys", who, n_keys);
    }
    for (i = 0; i < nk; i++)
        s->bucket_of[i] = XC_KNIL;
    for (i = 0; i <= nk; i++)
        s->free_b[i] = (uint32_t)(nk - i);
    s->n_free = (uint32_t)(nk + 1);
    return XC_OK;
}

void xc_bset_free(xc_bset *s)
{
    xc_kl_free(&s->kl);
    xc_free(s->b);
    xc_free(s->free_b);
    xc_free(s->bucket_of);
    xc_free(s->tick);
    memset(s, 0, sizeof *s);
}

/* Unlinks empty bucket bi from the bucket list and frees it. */
static void bucket_drop(xc_bset *s, uint32_t bi)
{
    xc_bucket *b = &s->b[bi];
    if (b->prev != XC_KNIL)
        s->b[b->prev].next = b->next;
    else
        s->first = b->next;
    if (b->next != XC_KNIL)
        s->b[b->next].prev = b->prev;
    s->free_b[s->n_free++] = bi;
}

/* A new empty bucket of value v right after bucket `after` (first when
 * XC_KNIL). */
static uint32_t bucket_new(xc_bset *s, uint32_t after, uint64_t v)
{
    uint32_t bi = s->free_b[--s->n_free];
    xc_bucket *b = &s->b[bi];
    b->v = v;
    xc_kl_init(&b->l);
    b->prev = after;
    b->next = after != XC_KNIL ? s->b[after].next : s->first;
    if (after != XC_KNIL)
        s->b[after].next = bi;
    else
        s->first = bi;
    if (b->next != XC_KNIL)
        s->b[b->next].prev = bi;
    return bi;
}

void xc_bset_remove(xc_bset *s, uint32_t key)
{
    uint32_t bi = s->bucket_of[key];
    if (bi == XC_KNIL)
        return;
    xc_kl_remove(&s->kl, &s->b[bi].l, key);
    s->bucket_of[key] = XC_KNIL;
    s->n--;
    if (s->b[bi].l.n == 0)
        bucket_drop(s, bi);
}

void xc_bset_place(xc_bset *s, uint32_t key, uint64_t v, uint64_t tick)
{
    uint32_t at = s->bucket_of[key], bi;
    if (at != XC_KNIL) {
        /* start the walk next to the key's bucket, which may go away */
        if (s->b[at].l.n == 1)
            at = s->b[at].prev;
        xc_bset_remove(s, key);
    }
    /* at: the last bucket known to have a value <= v, or XC_KNIL */
    if (at != XC_KNIL && s->b[at].v > v)
        while (at != XC_KNIL && s->b[at].v > v)
            at = s->b[at].prev;
    for (;;) {
        uint32_t nx = at != XC_KNIL ? s->b[at].next : s->first;
        if (nx == XC_KNIL || s->b[nx].v > v)
            break;
        at = nx;
    }
    bi = at != XC_KNIL && s->b[at].v == v ? at : bucket_new(s, at, v);
    s->tick[key] = tick;
    xc_kl_insert_by(&s->kl, &s->b[bi].l, key, s->tick);
    s->bucket_of[key] = bi;
    s->n++;
}

int64_t xc_bset_first(const xc_bset *s, const xc_pview *v)
{
    xc_pcand row;
    uint32_t bi, k;
    for (bi = s->first; bi != XC_KNIL; bi = s->b[bi].next)
        for (k = s->b[bi].l.head; k != XC_KNIL; k = s->kl.next[k])
            if (v->row(v->ctx, k, &row))
                return k;
    return -1;
}

int xc_bset_check(const xc_bset *s, const char *who)
{
    uint32_t bi, k, last = XC_KNIL;
    size_t n = 0, nb = 0;
    if (s->b == NULL)
        return xc_fail(XC_E_MISUSE, -1, -1, -1, "[buckets.none] %s: no state",
                       who);
#define PLACE(id) \
    xc_fail(XC_E_MISUSE, -1, -1, -1, "[" id "] %s: bucket %zu (value %llu) " \
            "is out of place", who, nb, (unsigned long long)b->v)
    for (bi = s->first; bi != XC_KNIL && nb <= s->n; bi = s->b[bi].next) {
        const xc_bucket *b = &s->b[bi];
        if (b->prev != last)
            return PLACE("buckets.prev");
        if (last != XC_KNIL && s->b[last].v >= b->v)
            return PLACE("buckets.order");
        if (b->l.n == 0)
            return PLACE("buckets.empty");
        if (xc_kl_check(&s->kl, &b->l, NULL, 0, s->tick, who) != 0)
            return -1;
        for (k = b->l.head; k != XC_KNIL; k = s->kl.next[k])
            if (s->bucket_of[k] != bi)
                return xc_fail(XC_E_MISUSE, -1, -1, -1,
                               "[buckets.key_bucket] %s: key %u sits in "
                               "bucket %zu it does not name", who, k, nb);
        n += b->l.n;
        last = bi;
        nb++;
    }
#undef PLACE
#define COUNT(id) \
    xc_fail(XC_E_MISUSE, -1, -1, -1, "[" id "] %s: buckets hold %zu keys in " \
            "%zu buckets, counts say %zu keys and %u free buckets", who, n, \
            nb, s->n, s->n_free)
    if (n != s->n)
        return COUNT("buckets.count");
    if (nb + s->n_free != (size_t)(s->n_keys ? s->n_keys : 1) + 1)
        return COUNT("buckets.free");
#undef COUNT
    return 0;
}
