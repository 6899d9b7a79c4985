/* fetchcache.h - a thread-safe cache of Mixture-of-Experts experts.
 *
 * An expert is a fixed-size byte blob keyed by (layer, expert).  The cache
 * owns n_slots buffers of expert_bytes each and fills them through a fetch
 * callback the user supplies; it does no I/O of its own.  Eviction is sampled
 * LRU (16 draws), holds are taken per get and given back all at once by
 * fc_release_all, failed fetches are sticky for one get, and prefetch is
 * served by reader threads.  See README.md for the design.
 */
#ifndef FETCHCACHE_H
#define FETCHCACHE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Status codes: 0 is success, every error is negative. */
typedef enum {
    FC_OK = 0,
    FC_EINVAL = -1,   /* bad argument: key outside the layout, bad options */
    FC_ENOMEM = -2,   /* allocation failed */
    FC_EBUSY = -3,    /* no empty slot and no slot may be evicted */
    FC_EFETCH = -4,   /* the fetch callback reported failure (returned < 0) */
    FC_ESHORT = -5,   /* the fetch callback delivered fewer than expert_bytes */
    FC_ETHREAD = -6,  /* a reader thread could not be started */
    FC_ECORRUPT = -7  /* fc_check found the state inconsistent */
} fc_status;

/* What a key maps to, as fc_peek reports it. */
typedef enum {
    FC_SLOT_EMPTY = 0,    /* key not in the cache */
    FC_SLOT_FETCHING = 1, /* queued for a prefetch or being read */
    FC_SLOT_READY = 2,    /* resident: bytes valid */
    FC_SLOT_FAILED = 3    /* last fetch failed; next get reports it */
} fc_slot_state;

/* Fetch callback: write the expert (layer, expert) into dst, which has room
 * for exactly len (= expert_bytes) bytes.  Return the number of bytes written:
 * len is success, 0..len-1 is a short read (the cache records FC_ESHORT),
 * any negative value is a failure (the cache records FC_EFETCH); a value
 * above len is treated as a failure.  Called from the thread that needs the
 * bytes (a demand get, an inline prefetch, or a reader thread), never with
 * the cache's lock held, possibly concurrently for different keys.  It must
 * not call back into the same cache. */
typedef ssize_t (*fc_fetch_fn)(void *user, int layer, int expert,
                               void *dst, size_t len);

typedef struct {
    int n_layers;        /* > 0 */
    int n_experts;       /* > 0, experts per layer */
    size_t expert_bytes; /* > 0, size of every expert */
    int n_slots;         /* > 0, number of expert buffers */
    int n_readers;       /* 0..64 reader threads; 0 = prefetch reads inline */
    uint64_t seed;       /* seed of the eviction sampler (0 is allowed) */
    fc_fetch_fn fetch;   /* required */
    void *user;          /* passed to fetch untouched */
} fc_options;

/* Counters since creation or the last fc_stats_reset, plus current gauges. */
typedef struct {
    uint64_t requests;       /* fc_get calls with a key inside the layout,
                                counted with their outcome (after any wait) */
    uint64_t hits;           /* gets answered FC_OK without calling fetch */
    uint64_t misses;         /* requests - hits: fetched, sticky error, EBUSY */
    uint64_t evictions;      /* READY or FAILED slots reclaimed for another key */
    uint64_t prefetch_loads; /* fetch calls made for a prefetch (ok or not) */
    uint64_t prefetch_hits;  /* hits on a prefetched expert no get had used */
    uint64_t failures;       /* fetch calls that failed or came back short */
    int resident;            /* gauge: slots READY */
    int in_flight;           /* gauge: slots FETCHING (queued or being read) */
    int failed;              /* gauge: slots FAILED */
    int held;                /* gauge: slots with at least one hold */
} fc_stats;

typedef struct fc_cache fc_cache;

/* Create a cache.  On FC_OK *out owns a new cache (free with fc_destroy).
 * Fails with FC_EINVAL (an option out of range, fetch NULL, or the layout or
 * buffer size overflowing), FC_ENOMEM or FC_ETHREAD; then *out is NULL and
 * nothing is left allocated.  opts is copied; out must not be NULL. */
int fc_create(const fc_options *opts, fc_cache **out);

/* Destroy a cache: waits for queued and running reads, stops the readers,
 * frees everything.  Every pointer fc_get returned becomes invalid.  No other
 * thread may use the cache during or after the call.  NULL is a no-op. */
void fc_destroy(fc_cache *c);

/* Get the expert (layer, expert) and hold it.  On FC_OK *out points to its
 * expert_bytes bytes, owned by the cache, which stay valid and unchanged until
 * the next fc_release_all (the slot is never evicted or overwritten while
 * held).  A key may be gotten several times per set.  If the key is being
 * read (by a prefetch or another get) the call waits for that read.
 * Errors (*out set to NULL):
 *   FC_EINVAL  key outside the layout; nothing changes, nothing is counted.
 *   FC_EBUSY   not resident and no slot may be used; nothing changes except
 *              requests and misses.
 *   FC_EFETCH / FC_ESHORT  this get's fetch failed: the slot stays FAILED
 *              (sticky), so the NEXT get of the key returns the same code
 *              without fetching and frees the slot; the get after that
 *              fetches again.  A get that finds a FAILED slot (left by a
 *              prefetch or an earlier get) returns its code the same way. */
int fc_get(fc_cache *c, int layer, int expert, const void **out);

/* Give back every hold taken on the cache (by any thread) since the last
 * fc_release_all.  Pointers from those gets become invalid.  Cannot fail. */
void fc_release_all(fc_cache *c);

/* Queue read-ahead of n keys (layers[i], experts[i]) and return at once
 * (with n_readers == 0 the reads are done inline before returning).  A slot
 * is reserved for each key, in order, by the same rule as fc_get (empty slot
 * first, else sampled LRU victim).  Keys outside the layout, already in the
 * cache (resident, queued, being read or FAILED), or for which no slot may be
 * used are skipped silently.  A failed read leaves a sticky FAILED slot.
 * The arrays are not kept.  n >= 0; the arrays may be NULL when n == 0. */
void fc_prefetch(fc_cache *c, const int *layers, const int *experts, int n);

/* Wait until the prefetch queue is empty and no read (prefetch or demand)
 * is under way, i.e. no slot is FETCHING.  Cannot fail. */
void fc_drain(fc_cache *c);

/* State of the slot holding (layer, expert), as fc_slot_state, without
 * touching the LRU order or any counter; FC_SLOT_EMPTY if the key has no
 * slot; FC_EINVAL if the key is outside the layout. */
int fc_peek(fc_cache *c, int layer, int expert);

/* Copy the counters and gauges into *out (a consistent snapshot). */
void fc_stats_get(fc_cache *c, fc_stats *out);

/* Zero the counters (requests .. failures); the gauges are state, kept. */
void fc_stats_reset(fc_cache *c);

/* Walk the whole state.  Returns 0 if sound, else FC_ECORRUPT and writes a
 * one-line message naming the slot and the broken rule into msg (at most
 * msg_len bytes, NUL-terminated; msg may be NULL if msg_len is 0). */
int fc_check(fc_cache *c, char *msg, size_t msg_len);

/* Static name of a status code ("FC_EBUSY: no slot may be evicted"). */
const char *fc_strerror(int code);

#ifdef __cplusplus
}
#endif
#endif /* FETCHCACHE_H */
