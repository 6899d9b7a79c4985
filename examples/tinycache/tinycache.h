/*
 * tinycache.h -- a deliberately small expert cache, written apart from the
 * engine, to show that the gate judges any cache through an adapter.
 *
 * Its API is unlike the engine's on purpose:
 *   - the caller resolves where each expert's bytes are (one file, offset,
 *     length per expert) and hands tc_open the whole table; there is no
 *     safetensors reader inside;
 *   - a pin is a flag (pinning twice and unpinning once leaves it unpinned);
 *   - the counters are aggregates only: lookups, hits, misses, evictions,
 *     bytes read (no prefetch accounting, no I/O breakdown);
 *   - every call returns an int: 0, or a negative TC_E* code; no messages
 *     (a read or open interrupted by a signal is retried);
 *   - no streams, no read-ahead threads, one policy (LRU), and a mutex
 *     around every call.
 *
 * Ownership: tc_open copies the table and opens each distinct file once;
 * tc_close frees everything.  The bytes tc_get returns stay valid and
 * unchanged until the matching tc_release.
 */
#ifndef TINYCACHE_H
#define TINYCACHE_H

#include <stddef.h>
#include <stdint.h>

enum {
    TC_OK = 0,
    TC_EINVAL = -1,  /* a bad argument: key out of range, NULL, ... */
    TC_ENOMEM = -2,
    TC_EIO = -3,     /* a read failed or came back short */
    TC_EFULL = -4,   /* every slot is held or pinned */
    TC_ENOTRES = -5, /* the key is not resident (pin, release) */
    TC_EOPEN = -6    /* a file could not be opened */
};

typedef struct tc_loc {
    const char *path;  /* the file holding the expert's bytes */
    uint64_t offset;   /* where they start */
    uint64_t length;   /* how many (every expert: at most the slot size) */
} tc_loc;

typedef struct tc_counts {
    uint64_t lookups, hits, misses, evictions, bytes_read;
} tc_counts;

typedef struct tc_cache tc_cache;

/* Opens a cache of n_slots slots of slot_bytes each over n_layers x
 * n_experts experts; locs[layer * n_experts + expert] says where each is.
 * Returns TC_OK and *out, or a TC_E* code with *out untouched. */
int tc_open(const tc_loc *locs, int n_layers, int n_experts, int n_slots,
            size_t slot_bytes, tc_cache **out);

/* Closes the cache (NULL is ignored).  Held bytes become invalid. */
void tc_close(tc_cache *c);

/* Returns the expert's bytes, held until tc_release: a hit, or a miss that
 * evicts the least recently used unheld, unpinned expert and reads it.
 * On failure nothing is published and *data is untouched. */
int tc_get(tc_cache *c, int layer, int expert, const void **data,
           size_t *len);

/* Gives back one hold taken by tc_get. */
int tc_release(tc_cache *c, int layer, int expert);

/* Loads each of n keys (layer, expert pairs in keys[2i], keys[2i+1]) that is
 * not resident, without holding it and without counting a lookup; an
 * expert the same call names is never the victim, and a resident one it
 * names counts as used (once, however often it is named).  A key that
 * finds no free slot or whose read fails is left out; the others still
 * load.  Returns how many it loaded (>= 0), or TC_EINVAL (a key out of
 * range: nothing done) or TC_ENOMEM. */
int tc_prefetch(tc_cache *c, const int *keys, int n);

/* Sets or clears the pin flag of a resident expert. */
int tc_pin(tc_cache *c, int layer, int expert);
int tc_unpin(tc_cache *c, int layer, int expert);

/* Whether the expert is resident (1) or not (0). */
int tc_resident(tc_cache *c, int layer, int expert);

/* The counters since open or the last tc_reset_counts. */
void tc_counts_get(tc_cache *c, tc_counts *out);
void tc_reset_counts(tc_cache *c);

#endif
