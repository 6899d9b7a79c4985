/* directcache.h - a cache of Mixtral-style MoE experts read straight from
 * safetensors shards with aligned O_DIRECT windows.
 *
 * A key is (layer, expert): layer is the position of a layer id in the
 * sorted list of layer ids found in the shards (not the id itself, see
 * dc_info.layer_ids), expert is the expert id, 0 .. experts-1.
 * An expert's payload is its three BF16 tensors concatenated in the order
 * w1, w3, w2 (offsets 0, w1_bytes, w1_bytes + w3_bytes).
 *
 * Every function that takes a cache locks its one mutex for the whole call,
 * so any function may be called from any thread.  Functions returning int
 * return DC_OK (0) or a non-negative count on success and a negative
 * dc_status on failure; after a failure the cache is as it was before the
 * call except for its counters (and, for dc_load_layer, experts it had
 * already loaded, see there).
 */
#ifndef DIRECTCACHE_H
#define DIRECTCACHE_H

#include <stddef.h>
#include <stdint.h>

enum dc_status {
    DC_OK = 0,
    DC_EARG = -1,    /* bad argument: NULL, slots 0, key outside the layout */
    DC_EFORMAT = -2, /* a shard or the folder breaks the format rules */
    DC_EIO = -3,     /* open/pread failed (-1 other than EINTR) */
    DC_ESHORT = -4,  /* pread returned 0 (or stalled) before the last byte */
    DC_ENOMEM = -5,  /* an allocation failed */
    DC_EFULL = -6,   /* no slot can take the expert: all pinned/held/named */
    DC_ESTATE = -7   /* pin/unpin of a non-resident key, release of no hold */
};

typedef struct dc_cache dc_cache;

typedef struct dc_info {
    int layers;          /* number of distinct layer ids found */
    int experts;         /* experts per layer (same for every layer) */
    size_t slots;        /* payload slots (min(requested, layers*experts)) */
    size_t expert_bytes; /* payload size = w1_bytes + w3_bytes + w2_bytes */
    size_t w1_bytes, w3_bytes, w2_bytes;
    int files;           /* *.safetensors files opened */
    int direct_files;    /* how many of them are open with O_DIRECT */
    const int *layer_ids; /* layers entries, ascending; valid until close */
} dc_info;

typedef struct dc_stats {
    uint64_t requests;      /* dc_get calls with a key inside the layout */
    uint64_t hits;          /* ... that found the expert resident */
    uint64_t misses;        /* ... that did not (requests = hits + misses) */
    uint64_t evictions;     /* residents dropped to make room */
    uint64_t batch_loads;   /* experts read by dc_load_layer */
    uint64_t bytes_read;    /* bytes asked of pread (aligned windows) */
    uint64_t load_failures; /* expert reads that failed (get or batch) */
    uint64_t short_reads;   /* reads failed with DC_ESHORT */
    uint64_t io_errors;     /* reads failed with DC_EIO */
    uint64_t resident;      /* experts resident now (not reset) */
} dc_stats;

/* Opens every *.safetensors file in `folder` (other files are ignored),
 * validates every header and builds the expert layout; allocates `slots`
 * payload buffers (capped at layers*experts) plus one spare.
 * Returns DC_OK and sets *out, or DC_EARG / DC_EFORMAT / DC_EIO / DC_ESHORT /
 * DC_ENOMEM with *out = NULL, nothing left open, and a one-line message
 * (file, tensor, byte offset where there is one) in err[errlen] if err is
 * not NULL.  Counters start at zero. */
int dc_open(const char *folder, size_t slots, dc_cache **out,
            char *err, size_t errlen);

/* Closes the files and frees everything.  Every pointer dc_get returned
 * and dc_info.layer_ids become invalid.  c may be NULL. */
void dc_close(dc_cache *c);

/* Fills *out with the layout; never fails. */
void dc_get_info(const dc_cache *c, dc_info *out);

/* Returns the payload of (layer, expert) in *payload and takes one hold on
 * it; reads it on a miss, into the first free slot or else over the
 * resident loaded first (FIFO) that is neither pinned nor held.  The
 * pointer stays valid and its bytes unchanged until the matching
 * dc_release (and while any other hold remains).
 * Fails with DC_EARG (key outside the layout: nothing counted),
 * DC_EFULL (every slot pinned or held: counted as request and miss),
 * DC_EIO / DC_ESHORT (read failed: counted, no slot changed); *payload is
 * NULL on failure. */
int dc_get(dc_cache *c, int layer, int expert, const void **payload);

/* Gives back one hold of (layer, expert).  DC_EARG outside the layout,
 * DC_ESTATE if the key is not resident or has no hold. */
int dc_release(dc_cache *c, int layer, int expert);

/* Pins a resident expert: it is never evicted until dc_unpin.  Pinning a
 * pinned expert does nothing more (a flag, not a count).  DC_EARG outside
 * the layout, DC_ESTATE if the key is not resident. */
int dc_pin(dc_cache *c, int layer, int expert);

/* Clears the pin flag of a resident expert (no-op if not pinned); the
 * expert stays resident.  DC_EARG / DC_ESTATE as dc_pin. */
int dc_unpin(dc_cache *c, int layer, int expert);

/* Reads the experts `experts[0..n-1]` of one layer on the caller's thread
 * without holding them; already resident or repeated ones are skipped.
 * Never evicts an expert named in the list.  Returns the number of experts
 * read (0..n).  Fails, changing nothing, with DC_EARG (layer or any expert
 * out of range, n < 0, experts NULL with n > 0) or DC_EFULL (fewer
 * evictable slots than experts to read).  On a read failure it returns
 * DC_EIO / DC_ESHORT at once: experts read before it stay resident (and
 * counted in batch_loads), the failed one and those after it are not read. */
int dc_load_layer(dc_cache *c, int layer, const int *experts, int n);

/* Reports the state of a key: *resident 0/1, *pinned 0/1, *holds >= 0
 * (each pointer may be NULL).  DC_EARG outside the layout. */
int dc_query(dc_cache *c, int layer, int expert,
             int *resident, int *pinned, int *holds);

/* Writes the resident keys, oldest load first (the FIFO order victims are
 * taken in), into layers[]/experts[] up to cap entries; returns how many
 * are resident (may exceed cap).  The arrays may be NULL if cap is 0. */
int dc_residents(dc_cache *c, int *layers, int *experts, size_t cap);

/* Copies the counters into *out. */
void dc_get_stats(dc_cache *c, dc_stats *out);

/* Zeroes every counter except resident. */
void dc_reset_stats(dc_cache *c);

/* Checks the internal invariants (key map <-> slots, resident count, FIFO
 * sequence numbers, pins/holds only on residents, hits + misses = requests).
 * Returns 0, or nonzero with a one-line description in msg[len]. */
int dc_check(dc_cache *c, char *msg, size_t len);

/* Copies the message of the last failed call on c into buf[len]
 * ("" if none); returns its length. */
size_t dc_last_error(dc_cache *c, char *buf, size_t len);

/* Returns a static name for a dc_status ("DC_EFULL", ...). */
const char *dc_strerror(int code);

#endif
