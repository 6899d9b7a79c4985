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
 * Adding a policy is one new file, engine/csrc/xc_policy_<name>.c, in C
 * (copy xc_policy_fifo.c, the simplest, and fill the slots you need; the
 * orders of xc_order.h and the one-list state of xc_policy_list.c are there
 * to use), ending with its XC_POLICY_REGISTER line, plus the oracle's module
 * oracle/policies/<name>.py written from the docs and its rows in
 * docs/CACHE.md (docs/DESIGN.md §9, "Where a change goes: C").
 * Python takes names and parameters from the table.
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
#include "xc_order.h"

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

#define XC_POLICY_MAX_PARAMS 4

struct xc_ptest;

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
    /* 0 when the policy's state is consistent, else records why: a
     * message "[id] text" whose id (words joined by '.', its own in
     * the source) names the test that failed (docs/CACHE.md). */
    int (*check)(const xc_policy *p);
    int order;             /* XC_POLICY_ORDER_* */
    int stamp_order;       /* 1: inserts must come in stamp order */
    /* A held key's last_use moved without a hit (a getmany() naming it):
     * the row after the touch.  Policies that ignore ticks ignore it. */
    void (*on_touch)(xc_policy *p, const xc_pcand *row);
    int by_position;       /* 1: to_evict uses the view's count and nth */
    /* TEST HOOKS ONLY: fills *out with pointers into the policy's state
     * (xc_ptest below), for xc_testhooks_check.c; XC_PTEST(fn) in an ops
     * initialiser: fn in the instrumented build, NULL in a release (and
     * NULL for a policy with no state to break). */
    void (*test_view)(struct xc_policy *p, struct xc_ptest *out);
} xc_policy_ops;

#ifdef XC_TEST_SEAMS
#define XC_PTEST(fn) (fn)
#else
#define XC_PTEST(fn) NULL
#endif

/* The policy table is made from the policy files themselves: each ends
 * with XC_POLICY_REGISTER(its ops, its rank), which adds it to the table
 * (xc_policy.c) when the library is loaded, before any call can read it.
 * The table lists policies by rank, then by name; a new policy takes a
 * rank above the others (lru, the default, is 10; the rest go up by 10).
 * Registration runs as a constructor of the object holding the policy, so
 * a program links every xc_policy_*.c it wants listed (the builds compile
 * every .c file of csrc).  xc_policy_register asserts a name registers once and
 * the table (XC_POLICY_SLOTS) does not overflow. */
#define XC_POLICY_SLOTS 32
void xc_policy_register(const xc_policy_ops *ops, int rank);
#define XC_POLICY_REGISTER(ops, rank)                                      \
    static void xc_policy_register_##ops(void) __attribute__((constructor)); \
    static void xc_policy_register_##ops(void)                             \
    {                                                                      \
        xc_policy_register(&(ops), (rank));                                \
    }                                                                      \
    struct xc_policy_registered_##ops

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

/* No-op callbacks for the slots a policy leaves empty.  Inline here (each
 * policy file takes its own copy's address) so that the policy files call
 * nothing in xc_policy.c but xc_policy_register. */
static inline void xc_policy_nop(xc_policy *p, uint32_t key)
{
    (void)p;
    (void)key;
}
static inline void xc_policy_row_nop(xc_policy *p, const xc_pcand *row)
{
    (void)p;
    (void)row;
}
static inline int xc_policy_check_nop(const xc_policy *p)
{
    (void)p;
    return 0;
}

/* The state of a policy that keeps its keys on one list (lru, fifo,
 * sieve): its private state is an xc_plist or a struct that begins with
 * one (so p->priv may be read as one).  on[k] is 1 while key k is on q;
 * tick[k] is the order q keeps (ascending from head), or unused. */
typedef struct xc_plist {
    xc_klinks kl;
    xc_klist q;
    uint64_t *tick;  /* per key, or NULL when the list keeps no tick order */
    uint8_t *on;     /* per key: on q */
} xc_plist;

/* Allocates a zeroed state of `size` bytes (>= sizeof(xc_plist)) beginning
 * with an xc_plist for p->n_keys keys (tick too when with_tick) into
 * p->priv; XC_E_NOMEM (recorded, naming the policy) on failure, with
 * p->priv left NULL. */
int xc_plist_init(xc_policy *p, size_t size, int with_tick);
/* Frees what xc_plist_init allocated (p->priv may be NULL); p->priv = NULL. */
void xc_plist_fini(xc_policy *p);
/* The one-list state's check(): 0 when p->priv is an xc_plist whose marked
 * keys are exactly those on its list, the list consistent (xc_kl_check,
 * ascending tick when it keeps one); else records why, naming the policy. */
int xc_plist_check(const xc_policy *p);

/* TEST HOOKS ONLY (xc_testhooks_check.c): pointers into a policy's private
 * state, so that the test hook can break each thing the policy's check()
 * tests.  Each policy with private state names its filler in its ops
 * (test_view, through XC_PTEST); fields a policy lacks stay NULL or 0.
 * Never used by the cache itself; in the instrumented build only
 * (XC_TEST_SEAMS, xc_test.h). */
#ifdef XC_TEST_SEAMS
typedef struct xc_ptest {
    xc_klinks *kl;         /* the link set of its key lists, or NULL */
    xc_klist *lists;       /* its key lists (n_lists), lists[i] marked
                            * list_mark + i */
    size_t n_lists;
    uint8_t list_mark;
    uint8_t *mark;         /* per key: on (lru, fifo) or where (arc, s3fifo) */
    uint8_t mark_none;     /* the mark of a key on no list */
    size_t own_marks;      /* lists 0.. whose own count check() compares
                            * with the keys marked for it */
    uint64_t *tick;        /* per key: the order the list keeps, or NULL */
    double *arc_p;         /* arc's target size of T1 */
    size_t *g_cap;         /* s3fifo's ghost capacity */
    uint64_t *to_halve;    /* hotness: requests to the next halving */
    uint8_t *held;         /* hotness: per key, inserted and not evicted */
    xc_hset *hset;         /* hotness's buckets */
    xc_bset *bset;         /* lfu's buckets */
} xc_ptest;
/* The view of a one-list state (xc_plist): its list, marks and ticks. */
void xc_plist_test_view(xc_policy *p, xc_ptest *out);

/* The hotness policy's buckets, or NULL when p is another policy (for the
 * test hooks). */
const xc_hset *xc_policy_hotness_set(const xc_policy *p);

#endif /* XC_TEST_SEAMS */

#endif /* XC_POLICY_H */
