/*
 * xc_order_heaps.c -- heap buckets: the order of hotness.
 *
 * The order of xc_order_buckets.c (buckets of equal value, ascending; the
 * keys of a bucket by tick) kept so that halving every value -- hotness
 * ages its counts every period requests -- costs amortised O(log n_keys)
 * per request instead of a walk of every key.  The structure and the
 * proof of that bound follow.
 */
#include "xc_internal.h"
#include "xc_policy.h"

#include <string.h>

/*
 * The same order as xc_bset -- buckets of equal value in ascending value,
 * the keys of a bucket in ascending tick -- but each bucket keeps its keys
 * in a leftist heap (min tick at the root; per key: left, right, up, rank
 * = null-path length <= log2(n) + 1), so that two buckets meet in
 * O(log n): the halving that maps every value v to v >> 1 melds the heaps
 * of the pairs that meet instead of walking one list into the other.
 *
 * A bucket is two heaps: `root`, a leftist heap, and a chain `head` ..
 * `tail` of keys in ascending tick linked as left children (a chain is a
 * leftist heap of rank 1), where place appends a key newer than the tail
 * in O(1) -- nearly every place, since a hit or an insert carries the
 * newest tick.  An older key is melded into `root`.  Removing a key is a
 * heap delete (its children melded into its place, the ranks above fixed
 * up to where one stays): O(1) in the chain, O(log n) in `root`.  Where
 * two buckets meet, both roots and both chains are melded into one heap
 * (a chain's right spine is its head alone) and the chain starts empty.
 *
 * Cost.  place and remove are O(log n), O(1) for the chain.  A halving walks the buckets,
 * melds each pair that meets (O(log n)) and relabels bucket_of of the
 * smaller bucket's keys.  Counts are below 2 * period before a halving and
 * at most period after it (a halving maps c + period to <= (c + period)/2),
 * so there are at most 2 * period + 1 buckets and the walk is O(1) per
 * request; a meld removes a bucket, and every bucket was made by one place,
 * so the melds are O(log n) per place.  The relabels are paid by the
 * potential Phi = sum over buckets B of |B| log2(N / |B|) (N = n_keys,
 * so Phi >= 0): a merge of sizes s <= t lowers Phi by
 * s log2((s+t)/s) + t log2((s+t)/t) >= s, the relabels it makes; adding or
 * taking one key changes one term by at most log2 N.  So, whatever the
 * period and the counts, a halving costs amortised O(log N) per request
 * (an adversary with one big bucket 0 and a bucket 1 of old keys every
 * period pays the small bucket and two right spines, never the big one).
 *
 * The victim walk takes the buckets in order and, in each, the keys in
 * tick order by a best-first walk of the heap (a frontier heap of keys in
 * `scratch`, each key stepped over adds its two children): the first
 * candidate costs O(1 + p log p) for p keys stepped over -- the victims
 * are exactly those of the list order.
 */

#define HRANK(s, k) ((k) == XC_KNIL ? 0u : (unsigned)(s)->rank[k])

int xc_hset_alloc(xc_hset *s, uint32_t n_keys, const char *who)
{
    size_t nk = n_keys ? n_keys : 1, i;
    memset(s, 0, sizeof *s);
    s->n_keys = n_keys;
    s->first = XC_KNIL;
    s->hint_key = s->hint_at = XC_KNIL;
    s->b = xc_calloc(nk + 1, sizeof *s->b);
    s->free_b = xc_malloc((nk + 1) * sizeof *s->free_b);
    s->left = xc_malloc(nk * sizeof *s->left);
    s->right = xc_malloc(nk * sizeof *s->right);
    s->up = xc_malloc(nk * sizeof *s->up);
    s->rank = xc_calloc(nk, 1);
    s->bucket_of = xc_malloc(nk * sizeof *s->bucket_of);
    s->tick = xc_calloc(nk, sizeof *s->tick);
    s->scratch = xc_malloc((nk + 1) * sizeof *s->scratch);
    if (!s->b || !s->free_b || !s->left || !s->right || !s->up ||
        !s->rank || !s->bucket_of || !s->tick || !s->scratch) {
        xc_hset_free(s);
        return xc_fail(XC_E_NOMEM, -1, -1, -1,
                       "policy %s: no memory for %u keys", who, n_keys);
    }
    for (i = 0; i < nk; i++)
        s->bucket_of[i] = s->left[i] = s->right[i] = s->up[i] = XC_KNIL;
    for (i = 0; i <= nk; i++)
        s->free_b[i] = (uint32_t)(nk - i);
    s->n_free = (uint32_t)(nk + 1);
    return XC_OK;
}

void xc_hset_free(xc_hset *s)
{
    xc_free(s->b);
    xc_free(s->free_b);
    xc_free(s->left);
    xc_free(s->right);
    xc_free(s->up);
    xc_free(s->rank);
    xc_free(s->bucket_of);
    xc_free(s->tick);
    xc_free(s->scratch);
    memset(s, 0, sizeof *s);
}

/* Melds the heaps rooted at a and b (either may be XC_KNIL) and returns
 * the root (its up link is the caller's to set); adds one to *steps per
 * node of the right spines it walks.  Recursion depth <= rank(a) + rank(b)
 * <= 2 log2(n) + 2. */
static uint32_t h_meld(xc_hset *s, uint32_t a, uint32_t b, uint64_t *steps)
{
    uint32_t r, t;
    if (a == XC_KNIL)
        return b;
    if (b == XC_KNIL)
        return a;
    if (s->tick[b] < s->tick[a]) {
        t = a;
        a = b;
        b = t;
    }
    (*steps)++;
    r = h_meld(s, s->right[a], b, steps);
    s->right[a] = r;
    s->up[r] = a;
    if (HRANK(s, s->left[a]) < HRANK(s, r)) {
        s->right[a] = s->left[a];
        s->left[a] = r;
    }
    s->rank[a] = (uint8_t)(HRANK(s, s->right[a]) + 1);
    return a;
}

/* Unlinks empty bucket bi from the bucket list and frees it. */
static void hbucket_drop(xc_hset *s, uint32_t bi)
{
    xc_hbucket *b = &s->b[bi];
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
static uint32_t hbucket_new(xc_hset *s, uint32_t after, uint64_t v)
{
    uint32_t bi = s->free_b[--s->n_free];
    xc_hbucket *b = &s->b[bi];
    b->v = v;
    b->root = b->head = b->tail = XC_KNIL;
    b->n = 0;
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

void xc_hset_remove(xc_hset *s, uint32_t key)
{
    uint32_t bi = s->bucket_of[key], m, p;
    uint64_t steps = 0;
    s->hint_key = XC_KNIL;
    if (bi == XC_KNIL)
        return;
    /* where a place of this key right after may start its walk */
    s->hint_at = s->b[bi].n > 1 ? bi : s->b[bi].prev;
    m = h_meld(s, s->left[key], s->right[key], &steps);
    p = s->up[key];
    if (m != XC_KNIL)
        s->up[m] = p;
    if (key == s->b[bi].tail)
        s->b[bi].tail = p; /* the chain's new last (XC_KNIL: empty) */
    if (key == s->b[bi].head) {
        s->b[bi].head = m;
    } else if (p == XC_KNIL) {
        s->b[bi].root = m;
    } else {
        if (s->left[p] == key)
            s->left[p] = m;
        else
            s->right[p] = m;
        /* ranks above may fall: fix them up to where one stays */
        while (p != XC_KNIL) {
            uint32_t l = s->left[p], r = s->right[p];
            unsigned nr;
            if (HRANK(s, l) < HRANK(s, r)) {
                s->left[p] = r;
                s->right[p] = l;
            }
            nr = HRANK(s, s->right[p]) + 1;
            if (nr == s->rank[p])
                break;
            s->rank[p] = (uint8_t)nr;
            p = s->up[p];
        }
    }
    s->left[key] = s->right[key] = s->up[key] = XC_KNIL;
    s->rank[key] = 0;
    s->bucket_of[key] = XC_KNIL;
    s->n--;
    if (--s->b[bi].n == 0)
        hbucket_drop(s, bi);
    s->hint_key = key;
}

void xc_hset_place(xc_hset *s, uint32_t key, uint64_t v, uint64_t tick)
{
    uint32_t at = s->bucket_of[key], bi;
    xc_hbucket *b;
    uint64_t steps = 0;
    if (at == XC_KNIL && s->hint_key == key)
        at = s->hint_at; /* taken off just before (a hotness request) */
    s->hint_key = XC_KNIL;
    if (s->bucket_of[key] != XC_KNIL) {
        /* start the walk next to the key's bucket, which may go away */
        if (s->b[at].n == 1)
            at = s->b[at].prev;
        xc_hset_remove(s, key);
        s->hint_key = XC_KNIL;
    }
    /* at: a live bucket to start from (the walk goes either way) */
    while (at != XC_KNIL && s->b[at].v > v)
        at = s->b[at].prev;
    for (;;) {
        uint32_t nx = at != XC_KNIL ? s->b[at].next : s->first;
        if (nx == XC_KNIL || s->b[nx].v > v)
            break;
        at = nx;
    }
    bi = at != XC_KNIL && s->b[at].v == v ? at : hbucket_new(s, at, v);
    b = &s->b[bi];
    s->tick[key] = tick;
    s->left[key] = s->right[key] = s->up[key] = XC_KNIL;
    s->rank[key] = 1;
    if (b->tail == XC_KNIL) {          /* a new chain */
        b->head = b->tail = key;
    } else if (tick > s->tick[b->tail]) { /* the usual: the newest tick */
        s->left[b->tail] = key;
        s->up[key] = b->tail;
        b->tail = key;
    } else {
        b->root = h_meld(s, b->root, key, &steps);
        s->up[b->root] = XC_KNIL;
    }
    b->n++;
    s->bucket_of[key] = bi;
    s->n++;
}

/* Sets bucket_of to bi for every key of bucket g's heap and chain;
 * returns how many.  Walks with scratch as a stack. */
static size_t h_relabel(xc_hset *s, uint32_t g, uint32_t bi)
{
    size_t top = 0, n = 0;
    uint32_t k;
    if (s->b[g].root != XC_KNIL)
        s->scratch[top++] = s->b[g].root;
    if (s->b[g].head != XC_KNIL)
        s->scratch[top++] = s->b[g].head;
    while (top > 0) {
        k = s->scratch[--top];
        s->bucket_of[k] = bi;
        n++;
        if (s->left[k] != XC_KNIL)
            s->scratch[top++] = s->left[k];
        if (s->right[k] != XC_KNIL)
            s->scratch[top++] = s->right[k];
    }
    return n;
}

void xc_hset_halve(xc_hset *s)
{
    uint32_t bi = s->first;
    s->halvings++;
    s->hint_key = XC_KNIL; /* a merge may free the hinted bucket */
    while (bi != XC_KNIL) {
        uint32_t nx = s->b[bi].next, pv = s->b[bi].prev;
        s->b[bi].v >>= 1;
        if (pv != XC_KNIL && s->b[pv].v == s->b[bi].v) {
            /* the larger bucket stays; the smaller one's keys relabel */
            uint32_t keep = s->b[pv].n >= s->b[bi].n ? pv : bi;
            uint32_t gone = keep == pv ? bi : pv;
            xc_hbucket *k = &s->b[keep], *g = &s->b[gone];
            uint32_t r;
            s->halve_relabels += h_relabel(s, gone, keep);
            /* a chain is a heap whose right spine is its head alone */
            r = h_meld(s, h_meld(s, k->root, k->head, &s->halve_steps),
                       h_meld(s, g->root, g->head, &s->halve_steps),
                       &s->halve_steps);
            s->up[r] = XC_KNIL;
            k->root = r;
            k->head = k->tail = XC_KNIL;
            k->n += g->n;
            g->n = 0;
            hbucket_drop(s, gone);
        }
        bi = nx;
    }
}

/* Frontier of a best-first walk: a binary min-heap by tick in f[0..n). */
static void f_push(const xc_hset *s, uint32_t *f, size_t *n, uint32_t k)
{
    size_t i = (*n)++;
    while (i > 0 && s->tick[f[(i - 1) / 2]] > s->tick[k]) {
        f[i] = f[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    f[i] = k;
}

static uint32_t f_pop(const xc_hset *s, uint32_t *f, size_t *n)
{
    uint32_t top = f[0], last = f[--*n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= *n)
            break;
        if (c + 1 < *n && s->tick[f[c + 1]] < s->tick[f[c]])
            c++;
        if (s->tick[f[c]] >= s->tick[last])
            break;
        f[i] = f[c];
        i = c;
    }
    if (*n > 0)
        f[i] = last;
    return top;
}

int64_t xc_hset_first(const xc_hset *s, const xc_pview *v)
{
    xc_pcand row;
    uint32_t bi, k, *f = s->scratch;
    for (bi = s->first; bi != XC_KNIL; bi = s->b[bi].next) {
        size_t n = 0;
        if (s->b[bi].root != XC_KNIL)
            f_push(s, f, &n, s->b[bi].root);
        if (s->b[bi].head != XC_KNIL)
            f_push(s, f, &n, s->b[bi].head);
        while (n > 0) {
            k = f_pop(s, f, &n);
            if (v->row(v->ctx, k, &row))
                return k;
            if (s->left[k] != XC_KNIL)
                f_push(s, f, &n, s->left[k]);
            if (s->right[k] != XC_KNIL)
                f_push(s, f, &n, s->right[k]);
        }
    }
    return -1;
}

int xc_hset_check(const xc_hset *s, const char *who)
{
    uint32_t bi, k, last = XC_KNIL;
    size_t n = 0, nb = 0;
    if (s->b == NULL)
        return xc_fail(XC_E_MISUSE, -1, -1, -1, "[heaps.none] %s: no state",
                       who);
    for (bi = s->first; bi != XC_KNIL && nb <= s->n; bi = s->b[bi].next) {
        const xc_hbucket *b = &s->b[bi];
        size_t top = 0, m = 0;
#define PLACE(id) \
    xc_fail(XC_E_MISUSE, -1, -1, -1, "[" id "] %s: bucket %zu (value %llu) " \
            "is out of place", who, nb, (unsigned long long)b->v)
        if (b->prev != last)
            return PLACE("heaps.prev");
        if (last != XC_KNIL && s->b[last].v >= b->v)
            return PLACE("heaps.order");
        if (b->n == 0)
            return PLACE("heaps.empty");
        if (b->root != XC_KNIL && s->up[b->root] != XC_KNIL)
            return PLACE("heaps.root_up");
        if ((b->head == XC_KNIL) != (b->tail == XC_KNIL))
            return PLACE("heaps.ends");
        if (b->head != XC_KNIL && s->up[b->head] != XC_KNIL)
            return PLACE("heaps.head_up");
        if (b->head != XC_KNIL && s->left[b->tail] != XC_KNIL)
            return PLACE("heaps.tail_left");
        if (b->head != XC_KNIL && s->right[b->tail] != XC_KNIL)
            return PLACE("heaps.tail_right");
#undef PLACE
#define CHAIN(id) \
    xc_fail(XC_E_MISUSE, -1, -1, -1, "[" id "] %s: bucket %zu's chain is " \
            "broken at key %u", who, nb, k)
        for (k = b->tail; k != XC_KNIL && k != b->head && m <= b->n;
             k = s->up[k], m++) {
            if (s->right[k] != XC_KNIL)
                return CHAIN("heaps.chain_right");
            if (s->up[k] == XC_KNIL)
                return CHAIN("heaps.chain_up");
        }
#undef CHAIN
        m = 0;
        if (b->root != XC_KNIL)
            s->scratch[top++] = b->root;
        if (b->head != XC_KNIL)
            s->scratch[top++] = b->head;
        while (top > 0 && m <= b->n) {
            uint32_t k = s->scratch[--top], c[2] = {s->left[k], s->right[k]};
            int j;
#define NODE(id) \
    xc_fail(XC_E_MISUSE, -1, -1, -1, "[" id "] %s: key %u sits in bucket " \
            "%zu out of place", who, k, nb)
            if (s->bucket_of[k] != bi)
                return NODE("heaps.key_bucket");
            if (s->rank[k] != HRANK(s, c[1]) + 1)
                return NODE("heaps.rank");
            if (HRANK(s, c[0]) < HRANK(s, c[1]))
                return NODE("heaps.leftist");
#undef NODE
#define HEAP(id) \
    xc_fail(XC_E_MISUSE, -1, -1, -1, "[" id "] %s: key %u is out of its " \
            "heap order in bucket %zu", who, c[j], nb)
            for (j = 0; j < 2; j++) {
                if (c[j] == XC_KNIL)
                    continue;
                if (s->up[c[j]] != k)
                    return HEAP("heaps.child_up");
                if (s->tick[c[j]] <= s->tick[k])
                    return HEAP("heaps.child_tick");
#undef HEAP
                s->scratch[top++] = c[j];
            }
            m++;
        }
        if (m != b->n)
            return xc_fail(XC_E_MISUSE, -1, -1, -1,
                           "[heaps.bucket_count] %s: bucket %zu holds %zu "
                           "keys, its count says %zu", who, nb, m, b->n);
        n += b->n;
        last = bi;
        nb++;
    }
#define COUNT(id) \
    xc_fail(XC_E_MISUSE, -1, -1, -1, "[" id "] %s: buckets hold %zu keys in " \
            "%zu buckets, counts say %zu keys and %u free buckets", who, n, \
            nb, s->n, s->n_free)
    if (n != s->n)
        return COUNT("heaps.count");
    if (nb + s->n_free != (size_t)(s->n_keys ? s->n_keys : 1) + 1)
        return COUNT("heaps.free");
#undef COUNT
    return 0;
}
