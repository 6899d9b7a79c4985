/*
 * xcs_shim.h -- the contract between the gate and an outside expert cache.
 *
 * An adapter's shim file includes this header and defines xcs_shim(), which
 * returns a table of entry points over the cache under test.  The gate
 * compiles the cache's unchanged sources and the shim into one module
 * (gate/outside/build.py) and drives the table from OutsideBackend
 * (gate/outside/backend.py).  An entry the cache cannot offer is NULL; the
 * capability declaration of the adapter's manifest must agree with it (a
 * capability whose entry is NULL is refused before anything runs).
 *
 * Conventions of every entry:
 *   - `h` is the handle open() gave; calls come from one thread at a time.
 *   - A key is (layer, expert): layer is the position of the layer in
 *     xcs_layout.layer_ids (0 .. n_layers-1), expert 0 .. n_experts-1.  The
 *     gate passes keys outside those ranges on purpose (the key-bounds
 *     contract): an entry must refuse them with XCS_EMISUSE and change
 *     nothing.
 *   - A batch of keys is n pairs: keys[2i] the layer, keys[2i+1] the expert.
 *   - Return 0 (or a count, where said) on success and a negative code on
 *     failure.  The typed codes below are optional: a cache with only
 *     "failed" returns XCS_EFAILED (or any negative value) and declares
 *     errors = "failed" in its manifest.
 */
#ifndef XCS_SHIM_H
#define XCS_SHIM_H

#include <stddef.h>
#include <stdint.h>

/* XCS-CDEF-BEGIN (the gate hands this part to cffi: no preprocessor here) */

enum {
    XCS_ABI = 3,         /* xcs_vtable.abi of this header */
    XCS_ABI_OLDEST = 1,  /* the oldest abi the gate still runs (no options) */
    XCS_OK = 0,
    XCS_EFAILED = -1,    /* a failure of no particular kind */
    XCS_EMISUSE = -2,    /* a bad argument: a key outside the layout, ... */
    XCS_EIO = -3,        /* a read failed */
    XCS_ESHORT = -4,     /* a read ended before the expert's last byte */
    XCS_ENOMEM = -5,
    XCS_EFULL = -6,      /* no slot may be taken: every one held or pinned */
    XCS_EFORMAT = -7,    /* the container was refused at open (any check
                          * of its format: compared as one kind) */
    XCS_ENOTFOUND = -8,  /* ABI 3: the key is not resident (pin), not
                          * pinned (unpin), not held (release) */
    XCS_ECHANGED = -9    /* ABI 3: with verify, a file changed since open */
};

/* One contiguous run of an expert's bytes in one file. */
typedef struct xcs_piece {
    const char *path;  /* absolute path of the file */
    uint64_t offset;   /* where the run starts in it */
    uint64_t length;   /* its bytes */
} xcs_piece;

/* The scenario's cache options (ABI 2; xcs_layout.options).  The gate
 * passes every one; a cache honours those its manifest declares
 * ([capabilities] options) -- a scenario asking for an undeclared one is
 * N/A on the cache, never run -- and may refuse at open (XCS_EMISUSE) an
 * option it cannot honour.  `size` is sizeof(xcs_options) of the gate's
 * header: a field at or past it is absent (a later ABI may add fields at
 * the end only). */
typedef struct xcs_options {
    uint32_t size;         /* the bytes of this struct the gate filled */
    int top_k;             /* experts each token is routed to (the model's) */
    int direct;            /* 1: read with O_DIRECT where the file allows */
    uint64_t chunk_bytes;  /* 0: an expert's run in one read; else reads of
                            * at most this many bytes */
    int io_threads;        /* read-ahead threads (0: none, reads inline) */
    int batch_threads;     /* threads reading one batch (0: the default) */
    int verify;            /* 1: a load checks its file is still the one
                            * opened (stat), and fails if not */
} xcs_options;

/* ABI 3: the gate's fetch function, for a cache with no I/O of its own
 * (the manifest's [design] io = "callback"): reads the expert's payload
 * (its pieces, in order) into dst[0..len) and returns XCS_OK, or
 * XCS_ESHORT (a file ended before the expert's last byte), XCS_EIO (a read
 * failed), XCS_EMISUSE (a key outside the layout, len below the expert's
 * size, a NULL dst), dst then holding no byte of the expert (the gate
 * poisons it).  Its reads are the ones the gate's injectors break, so the
 * fault contracts judge how the cache handles a failed fetch.  Safe to call from any thread at any
 * time between open() and close(); `ctx` is xcs_layout.fetch_ctx. */
typedef int (*xcs_fetch_fn)(void *ctx, int layer, int expert, void *dst,
                            uint64_t len);

/* Everything open() is given; valid only during the call (copy it), except
 * fetch and fetch_ctx, which stay valid until close() returns. */
typedef struct xcs_layout {
    const char *folder;      /* the container folder (safetensors shards) */
    int n_layers;            /* layers of experts */
    const int *layer_ids;    /* the model's layer id of each layer position */
    int n_experts;           /* experts per layer */
    int n_pieces;            /* runs per expert, the same for every expert */
    /* pieces[(layer * n_experts + expert) * n_pieces + p]: an expert's
     * payload is its runs concatenated in this order */
    const xcs_piece *pieces;
    uint64_t expert_bytes;   /* every expert's payload size */
    int n_slots;             /* how many experts may be resident at once */
    uint64_t slot_bytes;     /* bytes of one slot (>= expert_bytes) */
    const char *policy;      /* the policy name the scenario asks for */
    const xcs_options *options;  /* ABI 2: the scenario's options, never
                                  * NULL (a shim of ABI 1 ignores them) */
    xcs_fetch_fn fetch;          /* ABI 3: the gate's fetch when the
                                  * manifest declares [design] io =
                                  * "callback", else NULL */
    void *fetch_ctx;             /* ABI 3: its first argument */
} xcs_layout;

/* Counters and slot facts stats() may report, by bit of xcs_stats.present. */
enum {
    XCS_REQUESTS = 0,        /* demand accesses (get) */
    XCS_HITS = 1,            /* demand accesses served from a resident */
    XCS_MISSES = 2,          /* demand accesses that read */
    XCS_EVICTIONS = 3,       /* residents displaced */
    XCS_PAYLOAD_BYTES = 4,   /* bytes of the loads published */
    XCS_IO_BYTES = 5,        /* bytes asked of the files */
    XCS_PREFETCH_LOADS = 6,  /* loads made by getmany or prefetch */
    XCS_LOAD_FAILURES = 7,   /* loads that failed */
    XCS_SHORT_READS = 8,     /* loads failed by an early end of file */
    XCS_IO_ERRORS = 9,       /* loads failed by a read error */
    XCS_READY_SLOTS = 10,    /* slots holding a published expert */
    XCS_INFLIGHT_SLOTS = 11, /* slots whose read is under way */
    XCS_PREFETCH_FIRST_USES = 12, /* demand hits that were the first use of
                                   * a prefetch's or batch's load */
    XCS_N_STATS = 13
};

typedef struct xcs_stats {
    uint64_t present;            /* bit i set: v[i] is reported */
    uint64_t v[16];              /* XCS_N_STATS values, by the enum above
                                  * (room for more: a shim sets only the
                                  * bits it reports) */
} xcs_stats;

typedef struct xcs_vtable {
    int abi;            /* XCS_ABI */
    const char *name;   /* the cache's name, for the report */

    /* Required.  Opens a cache over the layout; *out is its handle.
     * Returns 0, or a negative code with *out untouched: XCS_EFORMAT the
     * container refused (op:reader: a cache that reads the safetensors
     * headers itself), XCS_EIO a file that could not be opened.  A failed
     * open closes every file it opened (fault:open counts them); an open
     * interrupted by a signal (EINTR) is retried. */
    int (*open)(const xcs_layout *layout, void **out);
    /* Required.  Frees the cache and everything it opened; NULL ignored. */
    void (*close)(void *h);

    /* Required (op:get).  A demand access: the expert's payload, held until
     * release() of the same key; the bytes stay valid and unchanged while
     * held.  On failure nothing is published and *data is untouched. */
    int (*get)(void *h, int layer, int expert, const void **data,
               size_t *len);
    /* Required with get, unless [design] holds = "whole-set" (then NULL
     * is allowed: release_all gives holds back).  Gives back one hold get()
     * took of the key; a key with no hold: a negative code, nothing
     * changed. */
    int (*release)(void *h, int layer, int expert);

    /* op:getmany.  Reads and publishes the batch without holding it; a
     * resident the batch names is never the victim of another key of the
     * batch.  Returns how many it published (>= 0) or a negative code;
     * a key outside the layout refuses the whole batch first. */
    int (*getmany)(void *h, const int *keys, int n);
    /* op:prefetch.  Read-ahead of the keys, as getmany but perhaps not yet
     * done on return (drain waits); never counted as a demand access.
     * Returns the loads started or published, or a negative code. */
    int (*prefetch)(void *h, const int *keys, int n);
    /* op:drain.  Waits until every read-ahead under way has ended. */
    int (*drain)(void *h);

    /* pins:flag (or pins:count when pins nest).  Pins a resident expert:
     * never a victim while pinned.  A key not resident: a negative code.
     * pins:flag: pinning a pinned expert succeeds and changes nothing. */
    int (*pin)(void *h, int layer, int expert);
    /* Undoes a pin (one of them when pins nest).  pins:flag: clears the
     * flag; unpinning a resident expert not pinned succeeds and changes
     * nothing; a key not resident: a negative code. */
    int (*unpin)(void *h, int layer, int expert);

    /* op:reset_stats.  Starts a new counter window: every counter 0. */
    int (*reset)(void *h);
    /* Required.  Fills *out (present and v); a counter the cache does not
     * keep has its present bit clear. */
    int (*stats)(void *h, xcs_stats *out);
    /* fact:resident.  1 if the key is resident (published), 0 if not. */
    int (*resident)(void *h, int layer, int expert);
    /* op:check.  The outside invariant check: 0 when sound, else 1 with a
     * one-line reason in msg[0..cap) (no slot handed out twice, nothing
     * left in flight, no more residents than slots, ...). */
    int (*check)(void *h, char *msg, size_t cap);

    /* ABI 3, [design] holds = "whole-set" (else NULL).  Gives back every
     * hold get() took since the last release_all (the gate then never
     * calls release).  Returns 0, or a negative code (none held: it may
     * return 0 or XCS_EMISUSE; the gate only calls it with holds). */
    int (*release_all)(void *h);
} xcs_vtable;

/* Defined by the shim: its table (static storage, never freed). */
const xcs_vtable *xcs_shim(void);

/* XCS-CDEF-END */

/* The gate's fetch (gate/outside/xcs_fetch.c), linked into every module;
 * a shim uses it only through xcs_layout.fetch.
 * XCS-FETCH-BEGIN */
void *xcs_fetch_new(const xcs_layout *lay);
void xcs_fetch_free(void *ctx);
int xcs_fetch(void *ctx, int layer, int expert, void *dst, uint64_t len);
/* XCS-FETCH-END */

/* The gate's fault injectors (gate/outside/xcs_faults.c), linked in front
 * of the cache's reads and opens when the manifest declares fault:io or
 * fault:open; a shim never calls them.
 * XCS-FAULTS-BEGIN */
int xcs_fault_arm(int which, int kind, uint64_t nth, int persistent,
                  int64_t arg);
int xcs_fault_place(int which, const char *path, uint64_t at);
void xcs_fault_disarm(void);
uint64_t xcs_fault_fired(void);
int xcs_fault_open_files(void);
/* XCS-FAULTS-END */

#endif
