/*
 * xc_policy.h -- the eviction policy table.
 *
 * A policy never sees the cache.  It keeps its own ordered structure of
 * the keys it holds (those it was told inserted and not yet evicted),
 * learns the events the cache reports (a demand request, a hit, an insert,
 * an eviction), and chooses a victim by walking that structure from its
 * victim end, asking a view (xc_pview) whether each key is a candidate now
 * -- READY, not protected, its insert told -- and skipping those that are
 * not.  Protected keys are few (held by the current step, pinned, being
 * read), so a choice costs O(1) plus the protected keys it steps over, and
 * no candidate array is built per eviction.  An offline simulator offers
 * the same view over its own slots, so it links these same files and
 * replays a trace to the live counters exactly (docs/CACHE.md "Victim
 * choice").
 *
 * Adding a policy touches four places: its own file (copy
 * xc_policy_fifo.c, the simplest, and fill the slots you need), one X(name)
 * in XC_POLICY_TABLE (xc_policy.c), the oracle's module
 * oracle/policies/<name>.py written from the docs, and its row in
 * docs/CACHE.md.  Python takes names and parameters from the table.
 * `to_evict` must be pure: choosing a victim changes nothing; evicting does
 * (on_evict).
 * All callbacks run with the cache lock held and must not fail.
 *
 * The order of events for one access is fixed, live and simulated alike:
 * a hit is on_request then on_hit; a demand miss is to_evict (only when no
 * slot is EMPTY), on_request, on_evict (only when the victim was READY),
 * then on_insert once the payload arrived (never for a failed read); a
 * batch load is to_evict, on_evict, on_insert with no on_request.  on_hit
 * and on_insert get the slot's row after the event (its freq, last_use and
 * insert_tick), so a policy places the key by the row, never by counting
 * events itself.  The inserts of reads whose tick was stamped at
 * reservation (read-ahead, stream misses) come in stamp order for a policy
 * that sets `stamp_order` (the queue policies, s3fifo and arc): the cache
 * holds one back until the earlier ones ended, and the on_hit of a key
 * whose insert is held back comes after that insert (repeated, with the
 * same row, once per hit it had meanwhile).  A key whose insert is held
 * back is never a candidate.  For the other policies nothing is held back:
 * their inserts come in completion order, and since they order keys by
 * ticks they insert a key by its tick (walking from the newest end, which
 * is where nearly every key lands).
 *
 * Queue policies (s3fifo, arc) keep their queues as lists of keys.  Their
 * to_evict walks the queues the way the policy's own pass would, without
 * moving anything, and their on_evict re-derives every queue move the
 * choice implied from the policy's own state and the victim's key alone,
 * so the victim choice stays pure while evicting moves what it must.
 */
#ifndef XC_POLICY_H
#define XC_POLICY_H

#include "xc.h"

/* One row: what any policy may know about a READY slot. */
typedef struct xc_pcand {
    int32_t slot;
    uint32_t key;          /* layer_pos * n_experts + expert */
    uint64_t last_use;     /* unique logical tick of the last touch */
    uint64_t insert_tick;  /* last_use stamped at publish */
    uint64_t freq;         /* demand accesses since this publish */
} xc_pcand;

/* What the cache (or a simulator) shows a policy choosing a victim.  row()
 * returns 1 and fills *out when key is a candidate now (READY, not
 * protected, its insert told), else 0; it is cheap (a lookup).  count()
 * and nth() list the candidates in ascending slot order, for a policy that
 * samples by position (lfru): count() is their number, nth(j) fills the
 * j-th (0 <= j < count()). */
typedef struct xc_pview {
    int (*row)(const void *ctx, uint32_t key, xc_pcand *out);
    size_t (*count)(const void *ctx);
    void (*nth)(const void *ctx, size_t j, xc_pcand *out);
    const void *ctx;
} xc_pview;

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

#define XC_POLICY_MAX_PARAMS 4

/* Parsed parameters of a policy spec "name:key=value,...", and the state the
 * built-in policies need.  One struct rather than a void * per policy keeps
 * the table small and lets check() look at it. */
typedef struct xc_policy {
    const struct xc_policy_ops *ops;
    uint64_t param[XC_POLICY_MAX_PARAMS]; /* by index in ops->param_names */
    uint32_t n_keys;
    size_t n_slots;        /* the cache's capacity in slots */
    uint64_t n_evicted;    /* policy evictions since open (lfru's e) */
    uint64_t n_requests;   /* demand requests since open (hotness) */
    /* The key whose demand miss the victim choice under way serves: the
     * caller sets it before to_evict and clears want_set after on_evict
     * (0 otherwise, as for a batch load).  arc reads it. */
    uint32_t want;
    int want_set;
    uint32_t *count;       /* per-key hotness counts, or NULL */
    void *priv;            /* the policy's own ordered state, or NULL */
} xc_policy;

/* What a policy promises about its victim, so that a caller may keep the
 * resident slots in that order itself: ORDER_LAST_USE means to_evict always
 * returns the candidate with the smallest last_use, ORDER_INSERT the one
 * with the smallest insert_tick.  Both are ticks that only ever grow to the
 * newest value, so a queue (move to the back on touch / on publish) holds
 * the candidates in victim order and its first unprotected entry is what
 * to_evict would return.  The simulator's plain mode uses this to skip the
 * policy's callbacks; tests check both agree. */
enum { XC_POLICY_ORDER_NONE = 0, XC_POLICY_ORDER_LAST_USE = 1,
       XC_POLICY_ORDER_INSERT = 2 };

typedef struct xc_policy_ops {
    const char *name;
    const char *param_names[XC_POLICY_MAX_PARAMS]; /* NULL-terminated */
    uint64_t param_default[XC_POLICY_MAX_PARAMS];
    /* Allocates what the policy needs; XC_E_NOMEM (recorded) on failure. */
    int (*init)(xc_policy *p);
    void (*fini)(xc_policy *p);
    /* The victim's key, or -1 when v shows no candidate among the keys the
     * policy holds.  Pure. */
    int64_t (*to_evict)(const xc_policy *p, const xc_pview *v);
    void (*on_request)(xc_policy *p, uint32_t key); /* every counted get */
    void (*on_hit)(xc_policy *p, const xc_pcand *row);
    void (*on_insert)(xc_policy *p, const xc_pcand *row);
    void (*on_evict)(xc_policy *p, uint32_t key);   /* a READY victim */
    /* 0 when the policy's state is consistent, else records why. */
    int (*check)(const xc_policy *p);
    int order;             /* XC_POLICY_ORDER_* */
    int stamp_order;       /* 1: inserts must come in stamp order */
    /* A held key's last_use moved without a hit (a getmany() naming it):
     * the row after the touch.  Policies that ignore ticks ignore it. */
    void (*on_touch)(xc_policy *p, const xc_pcand *row);
    int by_position;       /* 1: to_evict uses the view's count and nth */
} xc_policy_ops;

/* Parses spec ("lru", "lfru:sample=3,seed=7"; NULL means "lru") and
 * initialises *p for n_keys keys and a cache of n_slots slots (>= 1).
 * XC_E_MISUSE naming the valid policies or parameters; XC_E_NOMEM.  On
 * failure *p owns nothing. */
int xc_policy_open(xc_policy *p, const char *spec, uint32_t n_keys,
                   size_t n_slots);
void xc_policy_close(xc_policy *p);

/* The cache (and a simulator) report events through these, so the counts
 * every policy may rely on are kept in one place. */
static inline void xc_policy_request(xc_policy *p, uint32_t key)
{
    p->n_requests++;
    p->ops->on_request(p, key);
}
static inline void xc_policy_hit(xc_policy *p, const xc_pcand *row)
{
    p->ops->on_hit(p, row);
}
static inline void xc_policy_insert(xc_policy *p, const xc_pcand *row)
{
    p->ops->on_insert(p, row);
}
static inline void xc_policy_touch(xc_policy *p, const xc_pcand *row)
{
    p->ops->on_touch(p, row);
}
static inline void xc_policy_evict(xc_policy *p, uint32_t key)
{
    p->n_evicted++;
    p->ops->on_evict(p, key);
}

/* Helpers shared by the policy files: no-op callbacks. */
void xc_policy_nop(xc_policy *p, uint32_t key);
void xc_policy_row_nop(xc_policy *p, const xc_pcand *row);
int xc_policy_check_nop(const xc_policy *p);

/* Key lists (xc_policy.c).  alloc gives n_keys (>= 1) unlinked keys, 0 or
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
/* Appends list b to a's back, leaving b empty. */
void xc_kl_concat(xc_klinks *l, xc_klist *a, xc_klist *b);
/* 0 when q's links agree both ways and it holds q->n keys, all with
 * mark[key] == want when mark is not NULL (and, with val, in ascending
 * val order), else records why, naming `who`. */
int xc_kl_check(const xc_klinks *l, const xc_klist *q, const uint8_t *mark,
                uint8_t want, const uint64_t *val, const char *who);

/* Keys in buckets of equal value (lfu: freq), buckets in ascending value,
 * each bucket a list in ascending tick; the victim end is the front of the
 * first bucket (xc_policy.c).  place puts a key (on or off the structure)
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
int64_t xc_bset_first(const xc_bset *s, const xc_pview *v);
/* 0 when buckets ascend, each is a tick-ordered list of keys that name it
 * and the counts agree, else records why, naming `who`. */
int xc_bset_check(const xc_bset *s, const char *who);

/* The same order with each bucket's keys in a leftist heap by tick plus a
 * chain of its newest keys, where a place at the newest tick appends in
 * O(1) (hotness), so that halve -- every value v to v >> 1, buckets that meet
 * melded -- costs amortised O(log n_keys) per request whatever the period
 * and the counts (the argument is in xc_policy.c).  place and remove are
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
int64_t xc_hset_first(const xc_hset *s, const xc_pview *v);
/* 0 when buckets ascend, each heap is ordered, leftist, its keys name it
 * and the counts agree, else records why, naming `who`. */
int xc_hset_check(const xc_hset *s, const char *who);

/* The hotness policy's buckets, or NULL when p is another policy (for the
 * test hooks). */
const xc_hset *xc_policy_hotness_set(const xc_policy *p);

#endif /* XC_POLICY_H */
