/*
 * xc_cache_impl.h -- the private types of the cache (xc_cache.c); not public.
 *
 * Only two files include this: xc_cache.c, which owns every field, and
 * xc_testhooks.c, the test-only hook that corrupts one field of a live cache
 * so that xc_cache_check() must name the invariant it guards.  Keeping the
 * types here (rather than a copy in the hook) means the hook can never drift
 * from the real layout.
 */
#ifndef XC_CACHE_IMPL_H
#define XC_CACHE_IMPL_H

#include "xc_internal.h"
#include "xc_load.h"
#include "xc_policy.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>

typedef struct slot {
    uint8_t state;        /* XC_SLOT_* */
    uint8_t mark;         /* unused-prefetch mark */
    uint8_t spec;         /* speculative load not yet used by a demand hit */
    uint8_t untold;       /* READY, its insert held back (order list below) */
    uint32_t key;         /* valid unless EMPTY */
    uint32_t holds, pins;
    uint32_t generation;  /* bumped at each publish */
    uint64_t last_use, insert_tick, freq;
    uint64_t payload_off;
    /* INFLIGHT only: who owns the read (OWN_*), and for OWN_STREAM /
     * OWN_CLAIMED the stream and its item */
    uint8_t owner;
    struct xc_stream *ost;
    size_t oidx;
    uint64_t window;      /* INFLIGHT: the counter window of its reservation */
    /* The order list (xc_cache.oq_*): a stamped read whose insert the
     * policy has not been told, INFLIGHT or READY and untold, is on it;
     * onext is the next one in stamp order (-1: the last).  untold: READY,
     * published, but its insert (and the untold_hits demand hits since)
     * not yet told to the policy: an earlier stamped read has not ended. */
    int32_t onext;
    uint64_t untold_hits;
} slot;

/* Owner of an INFLIGHT slot's read (slot.owner).  OWN_STREAM is the one
 * reservation nobody is reading yet: any thread that needs the key claims
 * it (stream_claim_read) instead of waiting for the consumer. */
enum {
    OWN_NONE = 0,   /* not INFLIGHT */
    OWN_DEMAND,     /* a get() reading it in its own thread */
    OWN_BATCH,      /* a getmany()/prefetch() caller reading it */
    OWN_QUEUED,     /* in the read-ahead ring */
    OWN_ACTIVE,     /* taken from the ring by a read-ahead reader */
    OWN_STREAM,     /* a stream's miss, not read yet: claimable */
    OWN_CLAIMED,    /* a stream's miss being read by whoever claimed it */
};

#define SLOT_PROTECTED(s) ((s)->holds != 0 || (s)->pins != 0)

/* One reservation of a getmany(): filled under mu, read without it. */
typedef struct resv {
    int32_t slot;
    uint32_t key;
    int rc, src;
    uint64_t payload_off, asked_bytes, ns;
} resv;

/* Who asked for a read: decides the publish rule (freq, marks, holds). */
enum { K_DEMAND = 0, K_PREFETCH = 1, K_SPEC = 2, K_STREAM = 3 };

/* Trace record kinds and outcomes (docs/TRACE_FORMAT.md). */
enum { TK_GET = 0, TK_PREFETCH = 1, TK_SPEC = 2, TK_STREAM = 3 };
enum {
    TO_HIT = 0, TO_MISS = 1, TO_WAIT_HIT = 2, TO_RESIDENT = 3,
    TO_INFLIGHT = 4, TO_ISSUED = 5, TO_NO_SLOT = 6, TO_DUPLICATE = 7,
};
#define TRACE_MAGIC "XCTRACE1"
#define TRACE_VERSION 1u
#define TRACE_HEADER_BYTES 48u
#define TRACE_RECORD_BYTES 24u

/* One read-ahead read in the ring: slot si, reserved for key, for a
 * prefetch, a speculative prefetch or item idx of stream st. */
typedef struct aitem {
    int32_t slot;
    uint32_t key;
    int kind;
    struct xc_stream *st;
    size_t idx;
} aitem;

/* States of one key of a stream (xc_stream.state). */
enum {
    ST_HIT,       /* resident at begin: counted, held, not yet yielded */
    ST_QUEUED,    /* our miss, its read in the read-ahead ring */
    ST_LOCAL,     /* our miss, not read yet (ring full / no readers): read
                   * by next(), or claimed by any get or stream needing it */
    ST_READING,   /* our miss, claimed: some thread is reading it */
    ST_FOREIGN,   /* INFLIGHT at begin by another read: resolved by next() */
    ST_DEFER,     /* no slot at begin: a plain get, last */
    ST_DONE,      /* our read ended (rc says how), not yet yielded */
    ST_YIELDED,
};

struct xc_stream {
    struct xc_cache *c;
    size_t n;
    uint32_t *keys;
    int32_t *slot;        /* per item: its slot once reserved or hit */
    int *rc;              /* per item: result of its read */
    xc_error *err;        /* per item: the failed read's error record, copied
                           * from the reading thread (file, byte, cause) */
    uint8_t *state;       /* per item: ST_* */
    size_t *done;         /* completion order of ST_DONE items */
    size_t n_done, done_next, hit_next;
    size_t n_queued;      /* items in the ring or being read (ST_QUEUED,
                           * ST_READING): end() waits for them */
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

struct xc_cache {
    pthread_mutex_t mu;
    pthread_cond_t ended;
    xc_loader ld;
    xc_policy pol;
    size_t n_slots;
    int top_k;
    uint8_t *arena;
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
    struct xc_stream *streams; /* open streams (begun, not ended) */
    uint64_t evictions_since_open, requests_since_open;
    xc_stats st;           /* the derived fields are unused here */

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

#endif /* XC_CACHE_IMPL_H */
