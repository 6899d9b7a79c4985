/*
 * xc_core.h -- the private types of the cache and the functions its
 * files share; not public (xc.h and xc_test.h are the boundary).
 *
 * The cache is one object split along its seams, every file including
 * this header (xc_cache.c draws the direction of the calls between them):
 *   xc_cache.c   get/release, the integer-handle fast path, pin/unpin,
 *                the arena, open/close;
 *   xc_slot.c    slot life (reserve, read, publish, hit, victim choice,
 *                the order list of stamped inserts), a key's demand read
 *                (xc_get_locked) and a stream's reservation claimed;
 *   xc_batch.c   getmany and hold_layer on the batch pool, prefetch on the
 *                read-ahead ring and its reader threads, drain;
 *   xc_stream.c  layer streams;
 *   xc_check.c   counters, snapshots, geometry and xc_cache_check();
 *   xc_trace.c   the access trace;
 *   xc_testhooks.c  the test-only hook that corrupts one field of a live
 *                cache so that xc_cache_check() must name the invariant it
 *                guards.  Keeping the types here (rather than a copy in the
 *                hook) means the hook can never drift from the real layout.
 *
 * Every function declared below runs with the cache mutex `mu` held unless
 * its comment says otherwise.
 */
#ifndef XC_CORE_H
#define XC_CORE_H

#include "xc_internal.h"
#include "xc_kinds.h"
#include "xc_load.h"
#include "xc_policy.h"

#include <assert.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

typedef struct slot {
    uint8_t state;        /* XC_SLOT_* */
    uint8_t unused_prefetch; /* a prefetch load no demand hit used yet */
    uint8_t unused_spec;  /* a speculative load no demand hit used yet */
    uint8_t insert_pending; /* READY, its insert held back from the policy
                             * (order list below) */
    uint32_t key;         /* valid unless EMPTY */
    uint32_t holds, pins;
    uint32_t generation;  /* bumped at each publish */
    uint64_t last_use, insert_tick, freq;
    uint64_t payload_off;
    /* INFLIGHT only: who owns the read (OWNER_*), and for OWNER_STREAM /
     * OWNER_CLAIMED the stream and its item */
    uint8_t owner;
    struct xc_stream *owner_stream;
    size_t owner_item;
    uint64_t window;      /* INFLIGHT: the counter window of its reservation */
    /* The order list (xc_cache.oq_*): a stamped read whose insert the
     * policy has not been told, INFLIGHT or READY with insert_pending, is
     * on it; onext is the next one in stamp order (-1: the last).
     * insert_pending: READY, published, but its insert (and the
     * pending_hits demand hits since) not yet told to the policy: an
     * earlier stamped read has not ended. */
    int32_t onext;
    uint64_t pending_hits;
    uint8_t noted;         /* on the cache's `nc` list */
} slot;

/* Owner of an INFLIGHT slot's read (slot.owner).  OWNER_STREAM is the one
 * reservation nobody is reading yet: any thread that needs the key claims
 * it (xc_slot_claim_read) instead of waiting for the consumer. */
enum {
    OWNER_NONE = 0,   /* not INFLIGHT */
    OWNER_DEMAND,     /* a get() reading it in its own thread */
    OWNER_BATCH,      /* a getmany()/prefetch() caller reading it */
    OWNER_QUEUED,     /* in the read-ahead ring */
    OWNER_ACTIVE,     /* taken from the ring by a read-ahead reader */
    OWNER_STREAM,     /* a stream's miss, not read yet: claimable */
    OWNER_CLAIMED,    /* a stream's miss being read by whoever claimed it */
};

#define SLOT_PROTECTED(s) ((s)->holds != 0 || (s)->pins != 0)

/* One reservation of a getmany(): filled under mu, read without it. */
typedef struct resv {
    int32_t slot;
    uint32_t key;
    int rc, src;
    uint64_t payload_off, asked_bytes, ns;
    xc_error *err; /* NULL, or where a failed read copies the reading
                    * thread's error record (hold_layer reports it) */
} resv;

#define TRACE_MAGIC "XCTRACE1"
#define TRACE_VERSION 1u
#define TRACE_HEADER_BYTES 48u
#define TRACE_RECORD_BYTES ((unsigned)XC_TRACE_RECORD_BYTES)

/* One read-ahead read in the ring: slot `slot`, reserved for key, for a
 * prefetch, a speculative prefetch (kind: XC_KIND_*) or item idx of stream
 * `stream`. */
typedef struct aitem {
    int32_t slot;
    uint32_t key;
    int kind;
    struct xc_stream *stream;
    size_t idx;
} aitem;

/* State of one key of a stream (xc_stream.state). */
enum {
    STREAM_ITEM_HIT,     /* resident at begin: counted, held, not yielded */
    STREAM_ITEM_QUEUED,  /* our miss, its read in the read-ahead ring */
    STREAM_ITEM_LOCAL,   /* our miss, not read yet (ring full / no readers):
                          * read by next(), or claimed by any get or
                          * stream needing it */
    STREAM_ITEM_READING, /* our miss, claimed: some thread is reading it */
    STREAM_ITEM_FOREIGN, /* INFLIGHT at begin by another read: resolved by
                          * next() */
    STREAM_ITEM_DEFER,   /* no slot at begin: a plain get, last */
    STREAM_ITEM_DONE,    /* our read ended (rc says how), not yet yielded */
    STREAM_ITEM_YIELDED, /* handed to the consumer */
};

struct xc_stream {
    struct xc_cache *c;
    size_t n;
    uint32_t *keys;
    int32_t *slot;        /* per item: its slot once reserved or hit */
    int *rc;              /* per item: result of its read */
    xc_error *err;        /* per item: the failed read's error record, copied
                           * from the reading thread (file, byte, cause) */
    uint8_t *state;       /* per item: STREAM_ITEM_* */
    size_t *done;         /* completion order of STREAM_ITEM_DONE items */
    size_t n_done, done_next, hit_next;
    size_t n_queued;      /* items in the ring or being read (QUEUED,
                           * READING): end() waits for them */
    int plain;            /* below split_min_misses: plain gets in order */
    size_t plain_next;
    struct xc_stream *next_open; /* the cache's open streams, for check() */
};

/* A batch handed to the readers; lives on the caller's stack. */
typedef struct job {
    struct job *next;
    resv *items;
    size_t n, next_item;
    _Atomic size_t n_done; /* read unlocked by the caller's spin */
} job;

/* The slot arena, shared by reference count between the cache and the
 * callers of xc_cache_arena (docs/CACHE.md "Threads, fork and
 * lifetimes"): freed, and munlock()ed when locked, by the last release. */
struct xc_arena {
    _Atomic size_t refs;
    uint8_t *data;
    size_t bytes;
    int mlocked;
};

struct xc_cache {
    pthread_mutex_t mu;
    pthread_cond_t ended;
    xc_loader ld;
    xc_policy pol;
    size_t n_slots;
    int top_k;
    uint8_t *arena;        /* arena_ref->data */
    struct xc_arena *arena_ref;
    pid_t owner_pid;       /* the process that opened the cache */
    slot *slots;
    int32_t *index;        /* key -> slot, -1 when not in the cache */
    xc_pcand *cand;        /* scratch for victim choice and check() */
    int32_t *scratch;      /* per key, for check() */
    uint64_t *seen;        /* per key: batch number that last named it */
    uint64_t batch_seq;
    uint64_t tick;
    uint64_t window;       /* counter window number, +1 per reset_stats */
    uint32_t n_reads;      /* reads under way == INFLIGHT slots */
    /* Stamped reads not yet told to the policy, in stamp order: a list
     * threaded through slot.onext, first to last (-1: empty), oq_n long.
     * Used only when the policy is told inserts (`ordered`: its on_insert
     * is not a no-op); otherwise always empty. */
    int ordered;
    int32_t oq_first, oq_last;
    uint32_t oq_n;
    size_t empty_lo;       /* no slot below it is EMPTY (victim choice) */
    /* For a policy that samples by position (ops->by_position): every slot
     * that may have stopped being a candidate since the last choice (it
     * was reserved, held, touched held or pinned), each once (slot.noted);
     * the choice drops those that are candidates again.  NULL otherwise. */
    int32_t *nc;
    size_t nc_n;
    struct xc_stream *streams; /* open streams (begun, not ended) */
    uint64_t evictions_since_open, requests_since_open;
    xc_stats stats;        /* the derived fields are unused here */

    /* read-ahead: a ring of aq_cap items, read by io_threads readers */
    pthread_cond_t aq_work;
    aitem *aq;
    size_t aq_cap, aq_head, aq_n, aq_active;
    int aq_stop;
    int n_io;
    pthread_t *io;
    int split_min;

    /* trace: records buffered in tr_buf, written when full and at close */
    FILE *tr;
    uint8_t *tr_buf;
    size_t tr_cap, tr_n;
    uint64_t tr_step;
    int tr_failed;
    char tr_note[256];

    int mlocked;
    char mlock_note[256];

    pthread_mutex_t pool_mu;
    pthread_cond_t pool_work, pool_done;
    job *jobs;
    _Atomic size_t pool_unclaimed; /* items queued, not yet claimed */
    int pool_stop;
    int n_workers;
    pthread_t *workers;
};

/* ------------------------------------------------------------------ */
/* Small helpers every file uses                                        */
/* ------------------------------------------------------------------ */

/* Monotonic wall time in nanoseconds, for load_ns.  Cannot fail. */
static inline uint64_t xc_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* For the asserts of "mu held" (and "pool_mu held"): whether some thread
 * holds the mutex.  A default mutex records no owner to ask, but
 * pthread_mutex_trylock() of a locked one fails at once with EBUSY
 * (whoever holds it, the caller included), and a free one it takes is
 * given back, so a function the caller forgot to lock for aborts unless
 * another thread happens to hold the mutex at that instant.  One atomic
 * instruction: asserted where a call costs a read or a reservation
 * anyway, not on the hit path (a C hit is about 15 ns, docs/BENCHMARKS.md,
 * "The hit path"), whose functions say so.  Only ever inside assert(). */
static inline int xc_locked(const pthread_mutex_t *mu)
{
    pthread_mutex_t *m = (pthread_mutex_t *)(uintptr_t)mu;
    if (pthread_mutex_trylock(m) != 0)
        return 1;
    pthread_mutex_unlock(m);
    return 0;
}

/* First byte of slot s in the arena (s < n_slots). */
static inline uint8_t *xc_slot_mem(const xc_cache *c, int32_t s)
{
    assert(s >= 0 && (size_t)s < c->n_slots);
    return c->arena + (size_t)s * c->ld.stride;
}

/* Integer handles (xc.h: xc_cache_hold, xc_cache_hold_layer): the slot
 * index in the low 32 bits, the slot's generation (31 bits) above it. */
#define XC_HANDLE_GEN_MASK 0x7fffffffu

/* The handle of slot si as it is now (mu held). */
static inline int64_t xc_handle_of(const xc_cache *c, int32_t si)
{
    assert(si >= 0 && (size_t)si < c->n_slots);
    return (int64_t)(c->slots[si].generation & XC_HANDLE_GEN_MASK) << 32 |
           (int64_t)si;
}

/* The slot a handle names if it is a held READY reference now (mu held),
 * or NULL: the one rule every call taking handles applies. */
static inline slot *xc_held_slot(xc_cache *c, int64_t handle)
{
    int64_t si = handle & 0xffffffff;
    slot *s;
    if (handle < 0 || (uint64_t)si >= c->n_slots)
        return NULL;
    s = &c->slots[si];
    if (s->state != XC_SLOT_READY || s->holds == 0 ||
        (s->generation & XC_HANDLE_GEN_MASK) != (uint32_t)(handle >> 32))
        return NULL;
    return s;
}

/* The policy's row of slot s. */
static inline void xc_slot_row(const xc_cache *c, const slot *s,
                               xc_pcand *out)
{
    assert(s >= c->slots && s < c->slots + c->n_slots && out != NULL);
    out->slot = (int32_t)(s - c->slots);
    out->key = s->key;
    out->last_use = s->last_use;
    out->insert_tick = s->insert_tick;
    out->freq = s->freq;
}

/* Notes slot s as maybe not a candidate (see xc_cache.nc; mu held). */
static inline void xc_slot_note(xc_cache *c, slot *s)
{
    assert(s >= c->slots && s < c->slots + c->n_slots);
    if (c->nc != NULL && !s->noted) {
        /* each slot is listed once (noted), so the list has room */
        assert(c->nc_n < c->n_slots);
        s->noted = 1;
        c->nc[c->nc_n++] = (int32_t)(s - c->slots);
    }
}

/* Gives s the next tick of the logical clock (mu held).  A slot the policy
 * holds (READY, its insert told) is a touch the policy hears of, so that
 * a policy ordering keys by last_use keeps them in order. */
static inline void xc_slot_touch(xc_cache *c, slot *s)
{
    assert(s >= c->slots && s < c->slots + c->n_slots);
    s->last_use = ++c->tick;
    xc_slot_note(c, s); /* a getmany() touches what it holds */
    if (s->state == XC_SLOT_READY && !s->insert_pending) {
        xc_pcand row;
        xc_slot_row(c, s, &row);
        xc_policy_touch(&c->pol, &row);
    }
}

/* ------------------------------------------------------------------ */
/* Slot life (xc_slot.c); mu held                                       */
/* ------------------------------------------------------------------ */

/* Whether the calling process is not the one that opened c (a child
 * after fork(): the cache's threads do not exist here).  Any thread. */
static inline int xc_cache_forked(const xc_cache *c)
{
    return getpid() != c->owner_pid;
}

/* Stamps reserved slot si with its publish tick and, when the policy is
 * told inserts, appends it to the order list. */
void xc_slot_stamp(xc_cache *c, int32_t si);
/* docs/CACHE.md "Victim choice": the slot to take, or -1 (nothing
 * changed). */
int32_t xc_slot_victim(xc_cache *c);
/* Takes victim si (neither INFLIGHT nor protected) for key: counts the
 * eviction of a READY occupant and leaves si INFLIGHT, OWNER_DEMAND. */
void xc_slot_reserve(xc_cache *c, int32_t si, uint32_t key);
/* Ends the read of INFLIGHT slot si with rc: publishes (kind: XC_KIND_*,
 * src: XC_SRC_*) or empties it, counting in the window it was reserved
 * in. */
void xc_slot_finish(xc_cache *c, int32_t si, int rc, uint64_t payload_off,
                    uint64_t asked_bytes, uint64_t ns, int kind, int src);
/* A demand hit on READY slot si: counts, clears the marks, touches and
 * holds. */
void xc_slot_hit(xc_cache *c, int32_t si, uint32_t key);
/* A demand miss up to the reservation: the reserved slot, or -1 (nothing
 * changed, nothing counted). */
int32_t xc_slot_miss_reserve(xc_cache *c, uint32_t key);
/* Fills *out with the held reference of READY slot si. */
void xc_slot_ref(const xc_cache *c, int32_t si, xc_ref *out);
/* Reads r's key into r's slot, filling r's results; no lock needed (the
 * slot is INFLIGHT and owned by the caller). */
void xc_slot_read(const xc_cache *c, resv *r);
/* A stream's read of item idx ended with rc, in the thread that read it:
 * the item is held for the consumer, or keeps the error record. */
void xc_slot_stream_done(xc_cache *c, struct xc_stream *stream, size_t idx,
                         int rc);
/* Claims item i of stream (STREAM_ITEM_LOCAL) and reads it in the caller,
 * mu released for the read. */
void xc_slot_claim_read(xc_cache *c, struct xc_stream *stream, size_t i);
/* get steps (2)-(6) for a validated key; kind is XC_KIND_GET, or
 * XC_KIND_STREAM for a stream's plain get (its records and publish).  mu is released while waiting or reading. */
int xc_get_locked(xc_cache *c, uint32_t key, int32_t layer, int32_t expert,
                  int kind, xc_ref *out);

/* ------------------------------------------------------------------ */
/* Batch pool and read-ahead (xc_batch.c)                               */
/* ------------------------------------------------------------------ */

/* Appends a read to the read-ahead ring (mu held); 0 when it is full or
 * there are no readers. */
int xc_readahead_push(xc_cache *c, int32_t si, uint32_t key, int kind,
                      struct xc_stream *stream, size_t idx);
/* Thread bodies of a batch pool worker and a read-ahead reader; arg is the
 * cache. */
void *xc_pool_main(void *arg);
void *xc_readahead_main(void *arg);
/* Stop and join the first n_started readers / workers (mu and pool_mu not
 * held); the readers first finish every queued read. */
void xc_readahead_stop(xc_cache *c, int n_started);
void xc_pool_stop(xc_cache *c, int n_started);

/* ------------------------------------------------------------------ */
/* Trace (xc_trace.c)                                                   */
/* ------------------------------------------------------------------ */

/* Writes the buffered records (mu held, or the cache not shared yet);
 * XC_E_IO once a write failed. */
int xc_trace_write(xc_cache *c);
/* Appends one record (mu held); a no-op without a trace. */
void xc_trace_put(xc_cache *c, int kind, int outcome, uint32_t key);
/* Opens the trace file at path and writes its header (open's last step);
 * XC_E_IO recorded on failure, with no file left behind that it made. */
int xc_trace_open(xc_cache *c, const char *path);

#endif /* XC_CORE_H */
