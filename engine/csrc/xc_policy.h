/*
 * xc_policy.h -- the eviction policy table.
 *
 * A policy never sees the cache.  It sees an abstract view -- the candidate
 * slots as (slot, key, last_use, insert_tick, freq) rows in ascending slot
 * order -- plus the events the cache reports (a demand request, a hit, an
 * insert, an eviction) by key.  That is all an offline simulator has too, so
 * the simulator can link these same files and replay a trace to the live
 * counters exactly (docs/CACHE.md "Victim choice").
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
 * batch load is to_evict, on_evict, on_insert with no on_request.  The
 * inserts of reads whose tick was stamped at reservation (read-ahead,
 * stream misses) come in stamp order, not completion order: the cache holds
 * one back until the earlier ones ended, and the on_hit of a key whose
 * insert is held back comes after that insert.  A key whose insert is held
 * back is never a candidate.  A policy whose on_insert is xc_policy_nop is
 * taken to ignore the order of inserts: nothing is held back for it.
 *
 * Queue policies (s3fifo, arc) keep their own queues of the resident keys
 * in `priv`.  Their to_evict may use `scratch` (per-key working memory that
 * carries nothing from one call to the next) to mark the candidates, and
 * their on_evict re-derives every queue move the choice implied from the
 * policy's own state and the victim's key alone, so the victim choice stays
 * pure while evicting moves what it must.
 */
#ifndef XC_POLICY_H
#define XC_POLICY_H

#include "xc.h"

/* One candidate: what any policy may know about a READY, unprotected slot. */
typedef struct xc_pcand {
    int32_t slot;
    uint32_t key;          /* layer_pos * n_experts + expert */
    uint64_t last_use;     /* unique logical tick of the last touch */
    uint64_t insert_tick;  /* last_use stamped at publish */
    uint64_t freq;         /* demand accesses since this publish */
} xc_pcand;

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
    uint32_t *count;       /* per-key hotness counts, or NULL */
    void *priv;            /* a queue policy's own state, or NULL */
    uint32_t *scratch;     /* n_keys words of working memory, or NULL */
} xc_policy;

/* What a policy promises about its victim, so that a caller may keep the
 * resident slots in that order itself: ORDER_LAST_USE means to_evict always
 * returns the candidate with the smallest last_use, ORDER_INSERT the one
 * with the smallest insert_tick.  Both are ticks that only ever grow to the
 * newest value, so a queue (move to the back on touch / on publish) holds
 * the candidates in victim order and its first unprotected entry is what
 * to_evict would return.  The simulator uses this; tests check both agree. */
enum { XC_POLICY_ORDER_NONE = 0, XC_POLICY_ORDER_LAST_USE = 1,
       XC_POLICY_ORDER_INSERT = 2 };

typedef struct xc_policy_ops {
    const char *name;
    const char *param_names[XC_POLICY_MAX_PARAMS]; /* NULL-terminated */
    uint64_t param_default[XC_POLICY_MAX_PARAMS];
    /* Allocates what the policy needs; XC_E_NOMEM (recorded) on failure. */
    int (*init)(xc_policy *p);
    void (*fini)(xc_policy *p);
    /* Index into c[0..n-1] (n >= 1) of the victim.  Pure. */
    size_t (*to_evict)(const xc_policy *p, const xc_pcand *c, size_t n);
    void (*on_request)(xc_policy *p, uint32_t key); /* every counted get */
    void (*on_hit)(xc_policy *p, uint32_t key);
    void (*on_insert)(xc_policy *p, uint32_t key);
    void (*on_evict)(xc_policy *p, uint32_t key);   /* a READY victim */
    /* 0 when the policy's state is consistent, else records why. */
    int (*check)(const xc_policy *p);
    int order;             /* XC_POLICY_ORDER_* */
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
static inline void xc_policy_hit(xc_policy *p, uint32_t key)
{
    p->ops->on_hit(p, key);
}
static inline void xc_policy_insert(xc_policy *p, uint32_t key)
{
    p->ops->on_insert(p, key);
}
static inline void xc_policy_evict(xc_policy *p, uint32_t key)
{
    p->n_evicted++;
    p->ops->on_evict(p, key);
}

/* Helpers shared by the policy files: no-op callbacks. */
void xc_policy_nop(xc_policy *p, uint32_t key);
int xc_policy_check_nop(const xc_policy *p);

/* Key queues as arrays, oldest first (queue policies).  find returns the
 * position of key in q[0..n-1] or n; remove_at closes the gap. */
size_t xc_pq_find(const uint32_t *q, size_t n, uint32_t key);
void xc_pq_remove_at(uint32_t *q, size_t *n, size_t i);

#endif /* XC_POLICY_H */
