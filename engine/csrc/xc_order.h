/*
 * xc_order.h -- the ordered key structures the eviction policies keep.
 *
 * A policy orders the keys it holds from its victim end; these are the
 * three orders the built-in policies need, each over per-key arrays sized
 * once at open, so that no event allocates:
 *
 *   key lists (xc_order_list.c)      doubly linked lists of keys threaded
 *                                    through one link set: lru, fifo, the
 *                                    queues of s3fifo and arc;
 *   buckets (xc_order_buckets.c)     keys in buckets of equal value, each
 *                                    bucket a list in tick order: lfu;
 *   heap buckets (xc_order_heaps.c)  the same order with each bucket a
 *                                    leftist heap, so that halving every
 *                                    value melds buckets cheaply: hotness.
 *
 * None of them knows the cache: a victim walk asks the policy's view
 * (struct xc_pview, xc_policy.h) which keys are candidates now.  Every
 * operation runs with the cache lock held (the policy's caller holds it)
 * and cannot fail except alloc.
 */
#ifndef XC_ORDER_H
#define XC_ORDER_H

#include <stddef.h>
#include <stdint.h>

struct xc_pview; /* xc_policy.h: which keys are candidates now */

/* Key lists threaded through per-key links (a key is on at most one list
 * of a link set), oldest first; XC_KNIL ends a list. */
#define XC_KNIL UINT32_MAX
typedef struct xc_klist {
    uint32_t head, tail;
    size_t n;
} xc_klist;
typedef struct xc_klinks {
    uint32_t *prev, *next;
} xc_klinks;

/* Key lists (xc_order_list.c).  alloc gives n_keys (>= 1) unlinked keys, 0 or
 * XC_E_NOMEM (recorded, naming `who`); free takes NULL arrays.  Every
 * operation below is O(1) except insert_by (O(1 + keys it steps over)) and
 * check (O(n)). */
int xc_kl_alloc(xc_klinks *l, uint32_t n_keys, const char *who);
void xc_kl_free(xc_klinks *l);
void xc_kl_init(xc_klist *q);
void xc_kl_push(xc_klinks *l, xc_klist *q, uint32_t key);   /* at the back */
void xc_kl_remove(xc_klinks *l, xc_klist *q, uint32_t key); /* key on q */
/* Inserts key (not on any list) so that val[] ascends from front to back,
 * after every key of equal value; walks from the back. */
void xc_kl_insert_by(xc_klinks *l, xc_klist *q, uint32_t key,
                     const uint64_t *val);
/* 0 when q's links agree both ways and it holds q->n keys, all with
 * mark[key] == want when mark is not NULL (and, with val, in ascending
 * val order), else records why, naming `who`. */
int xc_kl_check(const xc_klinks *l, const xc_klist *q, const uint8_t *mark,
                uint8_t want, const uint64_t *val, const char *who);

/* Keys in buckets of equal value (lfu: freq), buckets in ascending value,
 * each bucket a list in ascending tick; the victim end is the front of the
 * first bucket (xc_order_buckets.c).  place puts a key (on or off the structure)
 * at (v, tick), walking buckets from the key's current bucket (or the
 * first): O(1) for a key that moves one bucket up to the newest tick. */
typedef struct xc_bucket {
    uint64_t v;
    xc_klist l;
    uint32_t prev, next;   /* neighbouring buckets, XC_KNIL at the ends */
} xc_bucket;
typedef struct xc_bset {
    xc_klinks kl;
    xc_bucket *b;          /* n_keys + 1 buckets */
    uint32_t *free_b, n_free, first;
    uint32_t *bucket_of;   /* per key, XC_KNIL when off the structure */
    uint64_t *tick;        /* per key: its tick while on the structure */
    uint32_t n_keys;
    size_t n;              /* keys on the structure */
} xc_bset;
int xc_bset_alloc(xc_bset *s, uint32_t n_keys, const char *who);
void xc_bset_free(xc_bset *s);
void xc_bset_place(xc_bset *s, uint32_t key, uint64_t v, uint64_t tick);
void xc_bset_remove(xc_bset *s, uint32_t key);              /* if on it */
/* The first key of the structure, in (v, tick) order, that v shows as a
 * candidate, or -1. */
int64_t xc_bset_first(const xc_bset *s, const struct xc_pview *v);
/* 0 when buckets ascend, each is a tick-ordered list of keys that name it
 * and the counts agree, else records why, naming `who`. */
int xc_bset_check(const xc_bset *s, const char *who);

/* The same order with each bucket's keys in a leftist heap by tick plus a
 * chain of its newest keys, where a place at the newest tick appends in
 * O(1) (hotness), so that halve -- every value v to v >> 1, buckets that meet
 * melded -- costs amortised O(log n_keys) per request whatever the period
 * and the counts (the argument is in xc_order_heaps.c).  place and remove are
 * O(log n); first is O(1 + p log p) for p keys it steps over.  The
 * halve_* counters measure the halvings' work (tests read them). */
typedef struct xc_hbucket {
    uint64_t v;
    uint32_t root;         /* a leftist heap's oldest key */
    uint32_t head, tail;   /* a chain in ascending tick (left links) */
    uint32_t prev, next;   /* neighbouring buckets, XC_KNIL at the ends */
    size_t n;
} xc_hbucket;
typedef struct xc_hset {
    xc_hbucket *b;         /* n_keys + 1 buckets */
    uint32_t *free_b, n_free, first;
    uint32_t *left, *right, *up; /* per key heap links, XC_KNIL for none */
    uint8_t *rank;         /* per key: null-path length (0 off the heap) */
    uint32_t *bucket_of;   /* per key, XC_KNIL when off the structure */
    uint64_t *tick;        /* per key: its tick while on the structure */
    uint32_t *scratch;     /* n_keys + 1: walks (first, check, relabel) */
    uint32_t n_keys;
    size_t n;              /* keys on the structure */
    /* remove() leaves where its key was (a live bucket at or below it), so
     * that the place of that same key next -- a hotness request takes a
     * key off, its hit puts it back -- walks from there, not from the
     * first bucket; any other operation forgets it */
    uint32_t hint_key, hint_at;
    uint64_t halvings;     /* halve() calls */
    uint64_t halve_relabels; /* keys whose bucket a halving changed */
    uint64_t halve_steps;  /* heap nodes the halvings' melds walked */
} xc_hset;
int xc_hset_alloc(xc_hset *s, uint32_t n_keys, const char *who);
void xc_hset_free(xc_hset *s);
void xc_hset_place(xc_hset *s, uint32_t key, uint64_t v, uint64_t tick);
void xc_hset_remove(xc_hset *s, uint32_t key);              /* if on it */
void xc_hset_halve(xc_hset *s);
/* The first key in (v, tick) order that v shows as a candidate, or -1. */
int64_t xc_hset_first(const xc_hset *s, const struct xc_pview *v);
/* 0 when buckets ascend, each heap is ordered, leftist, its keys name it
 * and the counts agree, else records why, naming `who`. */
int xc_hset_check(const xc_hset *s, const char *who);

#endif /* XC_ORDER_H */
