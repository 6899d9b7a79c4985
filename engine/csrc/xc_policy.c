/*
 * xc_policy.c -- the policy table and the spec parser.
 *
 * A spec is "name" or "name:key=value,key=value" with unsigned decimal
 * values.  Everything about a policy except its parameter names lives in its
 * own file; this file only finds it by name and fills its parameters.
 */
#include "xc_internal.h"
#include "xc_policy.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* The policy table: one X(name) per policy, each defined in its own
 * xc_policy_<name>.c as xc_policy_<name>_ops.  Its order is the order
 * xc_policy_name lists them in and the "valid:" message shows.  Adding a
 * policy is its file plus one entry here. */
#define XC_POLICY_TABLE(X) \
    X(lru) X(fifo) X(lfu) X(lfru) X(hotness) X(s3fifo) X(arc)

#define XC_POLICY_DECLARE(n) extern const xc_policy_ops xc_policy_##n##_ops;
XC_POLICY_TABLE(XC_POLICY_DECLARE)
#undef XC_POLICY_DECLARE

static const xc_policy_ops *const table[] = {
#define XC_POLICY_ENTRY(n) &xc_policy_##n##_ops,
    XC_POLICY_TABLE(XC_POLICY_ENTRY)
#undef XC_POLICY_ENTRY
};
#define N_POLICIES (sizeof table / sizeof table[0])

/* ------------------------------------------------------------------ */
/* The table, as xc.h exposes it                                        */
/* ------------------------------------------------------------------ */

int xc_policy_count(void) { return (int)N_POLICIES; }

const char *xc_policy_name(int i)
{
    return i >= 0 && (size_t)i < N_POLICIES ? table[i]->name : NULL;
}

/* Parameter j of policy i, or NULL (param_names is NULL-terminated when
 * shorter than XC_POLICY_MAX_PARAMS). */
static const char *param_name(int i, int j)
{
    if (i < 0 || (size_t)i >= N_POLICIES || j < 0 ||
        j >= XC_POLICY_MAX_PARAMS)
        return NULL;
    for (int k = 0; k < j; k++)
        if (table[i]->param_names[k] == NULL)
            return NULL;
    return table[i]->param_names[j];
}

const char *xc_policy_param_name(int i, int j) { return param_name(i, j); }

uint64_t xc_policy_param_default(int i, int j)
{
    return param_name(i, j) != NULL ? table[i]->param_default[j] : 0;
}

void xc_policy_nop(xc_policy *p, uint32_t key) { (void)p; (void)key; }
void xc_policy_row_nop(xc_policy *p, const xc_pcand *row)
{
    (void)p;
    (void)row;
}
int xc_policy_check_nop(const xc_policy *p) { (void)p; return 0; }

/* ------------------------------------------------------------------ */
/* Key lists                                                            */
/* ------------------------------------------------------------------ */

int xc_kl_alloc(xc_klinks *l, uint32_t n_keys, const char *who)
{
    size_t nk = n_keys ? n_keys : 1, i;
    l->prev = xc_malloc(nk * sizeof *l->prev);
    l->next = xc_malloc(nk * sizeof *l->next);
    if (l->prev == NULL || l->next == NULL) {
        xc_kl_free(l);
        return xc_fail(XC_E_NOMEM, -1, -1, -1,
                       "policy %s: no memory for %u keys", who, n_keys);
    }
    for (i = 0; i < nk; i++)
        l->prev[i] = l->next[i] = XC_KNIL;
    return XC_OK;
}

void xc_kl_free(xc_klinks *l)
{
    xc_free(l->prev);
    xc_free(l->next);
    l->prev = l->next = NULL;
}

void xc_kl_init(xc_klist *q)
{
    q->head = q->tail = XC_KNIL;
    q->n = 0;
}

void xc_kl_push(xc_klinks *l, xc_klist *q, uint32_t key)
{
    l->prev[key] = q->tail;
    l->next[key] = XC_KNIL;
    if (q->tail != XC_KNIL)
        l->next[q->tail] = key;
    else
        q->head = key;
    q->tail = key;
    q->n++;
}

void xc_kl_remove(xc_klinks *l, xc_klist *q, uint32_t key)
{
    uint32_t a = l->prev[key], b = l->next[key];
    if (a != XC_KNIL)
        l->next[a] = b;
    else
        q->head = b;
    if (b != XC_KNIL)
        l->prev[b] = a;
    else
        q->tail = a;
    l->prev[key] = l->next[key] = XC_KNIL;
    q->n--;
}

/* Links key (on no list) into q right after `at` (at the front when at is
 * XC_KNIL). */
static void kl_insert_after(xc_klinks *l, xc_klist *q, uint32_t at,
                            uint32_t key)
{
    uint32_t b = at != XC_KNIL ? l->next[at] : q->head;
    l->prev[key] = at;
    l->next[key] = b;
    if (at != XC_KNIL)
        l->next[at] = key;
    else
        q->head = key;
    if (b != XC_KNIL)
        l->prev[b] = key;
    else
        q->tail = key;
    q->n++;
}

void xc_kl_insert_by(xc_klinks *l, xc_klist *q, uint32_t key,
                     const uint64_t *val)
{
    uint32_t at = q->tail;
    while (at != XC_KNIL && val[at] > val[key])
        at = l->prev[at];
    kl_insert_after(l, q, at, key);
}

void xc_kl_concat(xc_klinks *l, xc_klist *a, xc_klist *b)
{
    if (b->head == XC_KNIL)
        return;
    if (a->tail != XC_KNIL) {
        l->next[a->tail] = b->head;
        l->prev[b->head] = a->tail;
    } else {
        a->head = b->head;
    }
    a->tail = b->tail;
    a->n += b->n;
    xc_kl_init(b);
}

int xc_kl_check(const xc_klinks *l, const xc_klist *q, const uint8_t *mark,
                uint8_t want, const uint64_t *val, const char *who)
{
    uint32_t k = q->head, last = XC_KNIL;
    size_t n = 0;
    while (k != XC_KNIL && n <= q->n) {
        if (l->prev[k] != last || (mark && mark[k] != want) ||
            (val && last != XC_KNIL && val[last] > val[k]))
            return xc_fail(XC_E_MISUSE, -1, -1, -1,
                           "%s: key %u at position %zu of a list is out of "
                           "place", who, k, n);
        last = k;
        k = l->next[k];
        n++;
    }
    if (n != q->n || last != q->tail)
        return xc_fail(XC_E_MISUSE, -1, -1, -1,
                       "%s: a list holds %zu keys, its count says %zu", who,
                       n, q->n);
    return 0;
}

/* ------------------------------------------------------------------ */
/* Buckets                                                              */
/* ------------------------------------------------------------------ */

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
        return xc_fail(XC_E_MISUSE, -1, -1, -1, "%s: no state", who);
    for (bi = s->first; bi != XC_KNIL && nb <= s->n; bi = s->b[bi].next) {
        const xc_bucket *b = &s->b[bi];
        if (b->prev != last || (last != XC_KNIL && s->b[last].v >= b->v) ||
            b->l.n == 0)
            return xc_fail(XC_E_MISUSE, -1, -1, -1,
                           "%s: bucket %zu (value %llu) is out of place", who,
                           nb, (unsigned long long)b->v);
        if (xc_kl_check(&s->kl, &b->l, NULL, 0, s->tick, who) != 0)
            return -1;
        for (k = b->l.head; k != XC_KNIL; k = s->kl.next[k])
            if (s->bucket_of[k] != bi)
                return xc_fail(XC_E_MISUSE, -1, -1, -1,
                               "%s: key %u sits in bucket %zu it does not "
                               "name", who, k, nb);
        n += b->l.n;
        last = bi;
        nb++;
    }
    if (n != s->n || nb + s->n_free != (size_t)(s->n_keys ? s->n_keys : 1) + 1)
        return xc_fail(XC_E_MISUSE, -1, -1, -1,
                       "%s: buckets hold %zu keys in %zu buckets, counts say "
                       "%zu keys and %u free buckets", who, n, nb, s->n,
                       s->n_free);
    return 0;
}

/* ------------------------------------------------------------------ */
/* Heap buckets (hotness)                                               */
/* ------------------------------------------------------------------ */

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
        return xc_fail(XC_E_MISUSE, -1, -1, -1, "%s: no state", who);
    for (bi = s->first; bi != XC_KNIL && nb <= s->n; bi = s->b[bi].next) {
        const xc_hbucket *b = &s->b[bi];
        size_t top = 0, m = 0;
        if (b->prev != last || (last != XC_KNIL && s->b[last].v >= b->v) ||
            b->n == 0 || (b->root != XC_KNIL && s->up[b->root] != XC_KNIL) ||
            (b->head == XC_KNIL) != (b->tail == XC_KNIL) ||
            (b->head != XC_KNIL && (s->up[b->head] != XC_KNIL ||
                                    s->left[b->tail] != XC_KNIL ||
                                    s->right[b->tail] != XC_KNIL)))
            return xc_fail(XC_E_MISUSE, -1, -1, -1,
                           "%s: bucket %zu (value %llu) is out of place", who,
                           nb, (unsigned long long)b->v);
        for (k = b->tail; k != XC_KNIL && k != b->head && m <= b->n;
             k = s->up[k], m++)
            if (s->right[k] != XC_KNIL || s->up[k] == XC_KNIL)
                return xc_fail(XC_E_MISUSE, -1, -1, -1,
                               "%s: bucket %zu's chain is broken at key %u",
                               who, nb, k);
        m = 0;
        if (b->root != XC_KNIL)
            s->scratch[top++] = b->root;
        if (b->head != XC_KNIL)
            s->scratch[top++] = b->head;
        while (top > 0 && m <= b->n) {
            uint32_t k = s->scratch[--top], c[2] = {s->left[k], s->right[k]};
            int j;
            if (s->bucket_of[k] != bi ||
                s->rank[k] != HRANK(s, c[1]) + 1 ||
                HRANK(s, c[0]) < HRANK(s, c[1]))
                return xc_fail(XC_E_MISUSE, -1, -1, -1,
                               "%s: key %u sits in bucket %zu out of place",
                               who, k, nb);
            for (j = 0; j < 2; j++) {
                if (c[j] == XC_KNIL)
                    continue;
                if (s->up[c[j]] != k || s->tick[c[j]] <= s->tick[k])
                    return xc_fail(XC_E_MISUSE, -1, -1, -1,
                                   "%s: key %u is out of its heap order "
                                   "in bucket %zu", who, c[j], nb);
                s->scratch[top++] = c[j];
            }
            m++;
        }
        if (m != b->n)
            return xc_fail(XC_E_MISUSE, -1, -1, -1,
                           "%s: bucket %zu holds %zu keys, its count says "
                           "%zu", who, nb, m, b->n);
        n += b->n;
        last = bi;
        nb++;
    }
    if (n != s->n || nb + s->n_free != (size_t)(s->n_keys ? s->n_keys : 1) + 1)
        return xc_fail(XC_E_MISUSE, -1, -1, -1,
                       "%s: buckets hold %zu keys in %zu buckets, counts say "
                       "%zu keys and %u free buckets", who, n, nb, s->n,
                       s->n_free);
    return 0;
}

/* Appends s to buf (capacity cap, always NUL-terminated), cutting it short
 * when full. */
static void append(char *buf, size_t cap, const char *s)
{
    size_t used = strlen(buf);
    if (used + 1 < cap)
        strncat(buf, s, cap - used - 1);
}

/* Every policy of the table as a spec template, in table order:
 * "lru, fifo, lfu, lfru:sample=N,seed=N, ...". */
static void valid_specs(char *buf, size_t cap)
{
    size_t i, j;
    buf[0] = '\0';
    for (i = 0; i < N_POLICIES; i++) {
        if (i)
            append(buf, cap, ", ");
        append(buf, cap, table[i]->name);
        for (j = 0; j < XC_POLICY_MAX_PARAMS && table[i]->param_names[j]; j++) {
            append(buf, cap, j ? "," : ":");
            append(buf, cap, table[i]->param_names[j]);
            append(buf, cap, "=N");
        }
    }
}

static int bad_name(const char *spec, size_t len)
{
    char valid[256];
    valid_specs(valid, sizeof valid);
    return xc_fail(XC_E_MISUSE, -1, -1, -1, "unknown policy '%.*s'; valid: %s",
                   (int)len, spec, valid);
}

static int bad_param(const xc_policy_ops *ops, const char *what, size_t len)
{
    char valid[128] = "";
    size_t i;
    for (i = 0; i < XC_POLICY_MAX_PARAMS && ops->param_names[i]; i++) {
        if (i)
            strncat(valid, ", ", sizeof valid - strlen(valid) - 1);
        strncat(valid, ops->param_names[i], sizeof valid - strlen(valid) - 1);
    }
    return xc_fail(XC_E_MISUSE, -1, -1, -1,
                   "policy %s: bad parameter '%.*s'; valid parameters: %s "
                   "(as key=unsigned integer)",
                   ops->name, (int)len, what, i ? valid : "none");
}

/* Parses one "key=value" of length len into p->param. */
static int parse_param(xc_policy *p, const char *s, size_t len)
{
    const xc_policy_ops *ops = p->ops;
    const char *eq = memchr(s, '=', len);
    size_t i, klen;
    char num[32], *end;
    unsigned long long v;
    if (eq == NULL)
        return bad_param(ops, s, len);
    klen = (size_t)(eq - s);
    for (i = 0; i < XC_POLICY_MAX_PARAMS && ops->param_names[i]; i++)
        if (strlen(ops->param_names[i]) == klen &&
            memcmp(ops->param_names[i], s, klen) == 0)
            break;
    if (i == XC_POLICY_MAX_PARAMS || ops->param_names[i] == NULL)
        return bad_param(ops, s, len);
    if (len - klen - 1 == 0 || len - klen - 1 >= sizeof num ||
        eq[1] < '0' || eq[1] > '9')
        return bad_param(ops, s, len);
    memcpy(num, eq + 1, len - klen - 1);
    num[len - klen - 1] = '\0';
    errno = 0;
    v = strtoull(num, &end, 10);
    if (errno || *end != '\0')
        return bad_param(ops, s, len);
    p->param[i] = v;
    return XC_OK;
}

int xc_policy_open(xc_policy *p, const char *spec, uint32_t n_keys,
                   size_t n_slots)
{
    const char *colon;
    size_t name_len, i;
    int rc;
    memset(p, 0, sizeof *p);
    if (spec == NULL || *spec == '\0')
        spec = "lru";
    colon = strchr(spec, ':');
    name_len = colon ? (size_t)(colon - spec) : strlen(spec);
    for (i = 0; i < N_POLICIES; i++)
        if (strlen(table[i]->name) == name_len &&
            memcmp(table[i]->name, spec, name_len) == 0)
            break;
    if (i == N_POLICIES)
        return bad_name(spec, name_len);
    p->ops = table[i];
    p->n_keys = n_keys;
    p->n_slots = n_slots ? n_slots : 1;
    memcpy(p->param, p->ops->param_default, sizeof p->param);
    if (colon) {
        const char *s = colon + 1;
        for (;;) {
            const char *comma = strchr(s, ',');
            size_t len = comma ? (size_t)(comma - s) : strlen(s);
            if ((rc = parse_param(p, s, len)) != XC_OK) {
                memset(p, 0, sizeof *p);
                return rc;
            }
            if (!comma)
                break;
            s = comma + 1;
        }
    }
    if ((rc = p->ops->init(p)) != XC_OK) {
        memset(p, 0, sizeof *p);
        return rc;
    }
    return XC_OK;
}

void xc_policy_close(xc_policy *p)
{
    if (p->ops)
        p->ops->fini(p);
    memset(p, 0, sizeof *p);
}
