/*
 * xc.h -- the public C boundary of the expert cache: everything an
 * embedding application calls.  xc_ext.h adds, on the same library, what
 * the engine's Python face and tools call besides (the io helpers, the
 * zero-copy name block); xc_test.h the test seams (allocation and
 * thread-start countdowns, the fault injector, the test hooks), which exist
 * in the instrumented build only; no declaration is in two of them.
 *
 * Builds
 * ------
 * The release build (what `pip install` makes, what an engine embeds) holds
 * xc.h and xc_ext.h and nothing else: no test hook, fault injector or
 * countdown is compiled in, and its exported symbols show none.  The
 * instrumented build (compiled with -DXC_TEST_SEAMS) is the same engine
 * plus xc_test.h; every function of xc.h keeps the same contract in both.
 *
 * Ownership and lifetimes
 * -----------------------
 * Every object is opaque and created by an xc_*_open() function that returns
 * a status code and writes the new object through an out-parameter; the
 * caller owns it and gives it back with the matching xc_*_close().  Nothing
 * is written through an out-parameter when a call fails.  Strings returned by
 * an object (tensor names, shard paths, metadata) live as long as that object.
 * An xc_io vtable passed to an open function is copied; its ctx must outlive
 * every object opened with it.
 *
 * Errors
 * ------
 * Functions return XC_OK (0) or a negative XC_E_* code.  The detail of the
 * most recent failure on the calling thread (message, byte offset, layer and
 * expert) is kept in thread-local storage and read with xc_last_error(); a
 * successful call does not clear it.  Library code never calls exit() or
 * abort().  Codes from -100 to -199 are format errors, one per validation
 * check, in the order the reader performs them.
 *
 * Threads
 * -------
 * Functions that take a const object are safe to call from several threads at
 * once.  Closing an object while another thread uses it is a caller bug.
 */
#ifndef XC_H
#define XC_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------ */
/* Status codes                                                         */
/* ------------------------------------------------------------------ */

enum {
    XC_OK = 0,
    XC_E_NOMEM = -1,       /* an allocation failed; nothing changed */
    XC_E_IO = -2,          /* the OS reported an error (errno in message) */
    XC_E_SHORT_READ = -3,  /* fewer bytes than asked arrived (EOF) */
    XC_E_CHANGED = -4,     /* a file changed identity or size while open */
    XC_E_NOT_FOUND = -5,   /* no such tensor, shard or key */
    XC_E_ALL_PINNED = -6,  /* every slot is held, pinned or in flight */
    XC_E_MISUSE = -7,      /* bad argument or call out of order */
    XC_E_BUDGET = -8,      /* cache budget too small (message says why) */

    /* Format errors: one per check of the safetensors validation order. */
    XC_E_FORMAT_TOO_SHORT = -100,        /* file shorter than 8 bytes */
    XC_E_FORMAT_HEADER_TOO_LARGE = -101, /* header length N > 100,000,000 */
    XC_E_FORMAT_HEADER_PAST_END = -102,  /* 8 + N overflows or passes EOF */
    XC_E_FORMAT_NOT_UTF8 = -103,         /* header bytes are not UTF-8 */
    XC_E_FORMAT_JSON = -104,             /* header is not valid JSON */
    XC_E_FORMAT_SCHEMA = -105,           /* JSON of the wrong shape */
    XC_E_FORMAT_DTYPE = -106,            /* unknown dtype string */
    XC_E_FORMAT_DUPLICATE = -107,        /* a tensor name appears twice */
    XC_E_FORMAT_OFFSETS = -108,          /* overlap, gap or end < begin */
    XC_E_FORMAT_OVERFLOW = -109,         /* elements x bits overflows */
    XC_E_FORMAT_BITS = -110,             /* size in bits not whole bytes */
    XC_E_FORMAT_SIZE = -111,             /* end - begin != computed size */
    XC_E_FORMAT_LENGTH = -112,           /* data end != file length */
    XC_E_FORMAT_INDEX = -113,            /* index.json inconsistent */
};

#define XC_E_FORMAT_FIRST (-100)
#define XC_E_FORMAT_LAST (-113)

/* Detail of the last failure on this thread.  offset is a byte position
 * (-1 when none applies); layer and expert are -1 when none applies. */
typedef struct xc_error {
    int code;
    int64_t offset;
    int32_t layer;
    int32_t expert;
    char message[1024];
} xc_error;

/* Returns this thread's last error record.  Never NULL; cannot fail. */
const xc_error *xc_last_error(void);

/* Returns a static, stable name for a status code ("ok", "nomem",
 * "format_offsets", ...), or "unknown" for a code not listed above. */
const char *xc_status_name(int code);

/* ------------------------------------------------------------------ */
/* Dtypes                                                               */
/* ------------------------------------------------------------------ */

enum {
    XC_DT_BOOL = 0, XC_DT_U8, XC_DT_I8,
    XC_DT_F8_E5M2, XC_DT_F8_E4M3, XC_DT_F8_E8M0,
    XC_DT_F8_E4M3FNUZ, XC_DT_F8_E5M2FNUZ,
    XC_DT_I16, XC_DT_U16, XC_DT_F16, XC_DT_BF16,
    XC_DT_I32, XC_DT_U32, XC_DT_F32,
    XC_DT_I64, XC_DT_U64, XC_DT_F64, XC_DT_C64,
    XC_DT_F4, XC_DT_F6_E2M3, XC_DT_F6_E3M2,
    XC_DT_COUNT
};

/* Name as written in a safetensors header ("BF16"), or NULL if out of
 * range.  Cannot fail otherwise. */
const char *xc_dtype_name(int dtype);

/* Bits per element (4, 6, 8, 16, 32 or 64), or 0 if out of range. */
int xc_dtype_bits(int dtype);

/* ------------------------------------------------------------------ */
/* I/O seam                                                             */
/* ------------------------------------------------------------------ */

/* The only place the engine touches file descriptors.  Each function returns
 * 0 / a byte count on success and a negative errno on failure; open may
 * also return minus the S_IFMT bits of what it found (a value <= -4096,
 * never an errno) when the path names anything but a regular file, which
 * the engine reports as "is a FIFO, not a regular file".  pread may
 * return fewer bytes than asked (the caller loops) and 0 at end of file.
 * ctx is passed back unchanged. */
typedef struct xc_io {
    int (*open)(void *ctx, const char *path, int direct, int64_t *handle);
    int64_t (*pread)(void *ctx, int64_t handle, void *buf, size_t len,
                     uint64_t offset);
    int (*size)(void *ctx, int64_t handle, uint64_t *out_bytes);
    int (*close)(void *ctx, int64_t handle);
    void *ctx;
    /* Optional (NULL allowed): reads only what the page cache already holds,
     * never waiting for the device.  Returns the bytes copied (possibly
     * fewer than asked: the rest is not cached), -EAGAIN when the first
     * byte is not cached, or another negative errno (-EOPNOTSUPP: this
     * file system cannot tell).  The loader tries it first on buffered
     * handles to learn where a load's bytes came from; with NULL, every
     * load's source is "unknown" and reads are plain preads. */
    int64_t (*pread_nowait)(void *ctx, int64_t handle, void *buf, size_t len,
                            uint64_t offset);
} xc_io;

/* The default POSIX vtable (open/pread/fstat/close, and pread_nowait as
 * preadv2(RWF_NOWAIT) where the platform has it, else NULL).  Cannot
 * fail. */
const xc_io *xc_io_default(void);

/* Alignment of O_DIRECT reads: offset, length and buffer address must all
 * be multiples of it.  4096 is the logical block size of every device the
 * project targets; the reader proves it with a real read of the first
 * block of every shard it opens O_DIRECT (xc_st_opts.direct). */
#define XC_DIRECT_ALIGN 4096

/* ------------------------------------------------------------------ */
/* Safetensors container                                                */
/* ------------------------------------------------------------------ */

#define XC_MAX_DIMS 8
#define XC_HEADER_MAX_BYTES 100000000ull

typedef struct xc_st xc_st;

typedef struct xc_tensor_info {
    const char *name;      /* owned by the container */
    int dtype;             /* XC_DT_* */
    int ndim;
    int64_t shape[XC_MAX_DIMS];
    uint32_t shard;        /* index into the container's shards */
    uint64_t offset;       /* absolute byte offset in the shard file */
    uint64_t nbytes;
} xc_tensor_info;

typedef struct xc_st_opts {
    const xc_io *io;       /* NULL: xc_io_default() */
    int direct;            /* 1: try O_DIRECT for tensor reads (probed) */
    int verify;            /* 1: after every expert load and every
                            * xc_st_read_tensor, check the shard is still
                            * the file opened (see xc_st_check_files);
                            * 0: only after a failed read and on request */
} xc_st_opts;

/* Opens a container: one .safetensors file, a folder holding
 * model.safetensors.index.json (or a single .safetensors file), or the index
 * file itself.  Validates every header completely (the XC_E_FORMAT_* checks,
 * in their order) and, for an index, that each tensor lives in the shard the
 * index names, each named shard exists and total_size matches.  On failure
 * returns the first error found (XC_E_FORMAT_* with the file and byte offset
 * in the message, XC_E_IO, XC_E_NOMEM), writes nothing to *out and leaves no
 * descriptor open.  opts may be NULL. */
int xc_st_open(const char *path, const xc_st_opts *opts, xc_st **out);

/* Closes every shard and frees the container.  NULL is a no-op. */
void xc_st_close(xc_st *st);

/* Number of tensors / shards.  Cannot fail. */
size_t xc_st_n_tensors(const xc_st *st);
size_t xc_st_n_shards(const xc_st *st);

/* Tensor i in container order (shard by shard, ascending offset).
 * XC_E_MISUSE if i is out of range. */
int xc_st_tensor(const xc_st *st, size_t i, xc_tensor_info *out);

/* Index of the tensor called name, by hash lookup.  XC_E_NOT_FOUND if no
 * tensor has that name. */
int xc_st_find(const xc_st *st, const char *name, size_t *out_index);

/* Path of shard i (as opened), or NULL if out of range. */
const char *xc_st_shard_path(const xc_st *st, size_t i);

/* Byte offset where shard i's data buffer begins (8 + N). 0 if out of
 * range. */
uint64_t xc_st_shard_data_start(const xc_st *st, size_t i);

/* The io handle of shard i, for the loader. -1 if out of range. */
int64_t xc_st_shard_handle(const xc_st *st, size_t i);

/* The io vtable the container reads through.  Cannot fail. */
const xc_io *xc_st_io(const xc_st *st);

/* __metadata__ entries of the first shard, in header order: the count
 * (cannot fail), and entry i's key and value, owned by st.  xc_st_metadata
 * returns XC_E_MISUSE if i is out of range. */
size_t xc_st_n_metadata(const xc_st *st);
int xc_st_metadata(const xc_st *st, size_t i, const char **key,
                   const char **value);

/* Whether O_DIRECT is in effect on every shard (1), or not (0): not asked
 * for, or asked for and fell back on at least one shard.  xc_st_direct_note
 * says which, in words: "O_DIRECT not requested", "O_DIRECT active on N
 * shard(s) ...", or the first fallback's reason (file and errno).  The
 * note lives as long as st.  Neither can fail. */
int xc_st_direct_active(const xc_st *st);
const char *xc_st_direct_note(const xc_st *st);

/* Whether shard i's handle is O_DIRECT (then every read on it must go
 * be widened to XC_DIRECT_ALIGN: offset, length and buffer address).  0
 * if out of range. */
int xc_st_shard_direct(const xc_st *st, size_t i);

/* Writes every tensor name in container order, each followed by one NUL
 * byte, into buf, and the number of bytes that takes into *needed.  Writes
 * to buf only if buf_len >= *needed (buf may then be NULL with buf_len 0 to
 * ask the size).  Names never contain U+0000, so the result splits cleanly.
 * Returns XC_OK, or XC_E_MISUSE (nothing written) when buf is too small. */
int xc_st_names(const xc_st *st, char *buf, size_t buf_len, size_t *needed);

/* Checks that every shard is still the file the container opened: its path
 * still names the same file (device and inode recorded at open), with the
 * size, modification time and change time (ctime) recorded at open, and
 * the open handle's size
 * (through the io vtable) is still the size at open.  Reads no data and
 * changes nothing; safe from several threads.  Returns XC_OK, or
 * XC_E_CHANGED for the first shard that differs, with the file and what
 * changed ("replaced", "removed", "resized from A to B bytes",
 * "modified") in the message and the size now seen as offset (-1 when the
 * file is gone); XC_E_IO when stat fails for another reason.  mtime
 * detection is only as fine as the file system's timestamps; replacement,
 * removal and resizing are always seen. */
int xc_st_check_files(const xc_st *st);

/* Number of header bytes N of shard i, or 0 if out of range. */
uint64_t xc_st_shard_header_bytes(const xc_st *st, size_t i);

/* Reads tensor i's bytes into dst (dst_len must be at least its nbytes)
 * through the container's io.  XC_E_SHORT_READ / XC_E_IO on failure, with
 * the tensor name, shard and offset in the message; with xc_st_opts.verify,
 * XC_E_CHANGED (dst's bytes then undefined) when the shard is no longer the
 * file opened, checked after the read. */
int xc_st_read_tensor(const xc_st *st, size_t i, void *dst, size_t dst_len);

/* ------------------------------------------------------------------ */
/* Eviction policies                                                    */
/* ------------------------------------------------------------------ */

/* The built-in policies a cache (xc_cache_opts.policy) or a replay
 * (xc_sim_opts.policy) may name, as a table: policy i (0 <= i <
 * xc_policy_count()) is called xc_policy_name(i) and takes the parameters
 * xc_policy_param_name(i, j) for j = 0, 1, ... up to the first NULL, each
 * an unsigned integer defaulting to xc_policy_param_default(i, j).  A spec
 * is "name" or "name:param=value,..." (docs/CACHE.md "Victim choice").
 * The table is fixed at build time and the strings are static; none of
 * these can fail. */

/* Number of built-in policies (at least 1). */
int xc_policy_count(void);

/* Name of policy i ("lru", "fifo", ...) in table order, or NULL when i is
 * out of range. */
const char *xc_policy_name(int i);

/* Name of parameter j of policy i ("sample"), or NULL when i or j is out
 * of range. */
const char *xc_policy_param_name(int i, int j);

/* Default value of parameter j of policy i, or 0 when i or j is out of
 * range (parameter names say which j exist). */
uint64_t xc_policy_param_default(int i, int j);

/* ------------------------------------------------------------------ */
/* Expert cache                                                         */
/* ------------------------------------------------------------------ */

/* Ownership: a cache borrows its container (st must outlive the cache) and
 * owns one aligned arena of n_slots x stride bytes.  A reference returned by
 * xc_cache_get points into that arena; its bytes stay valid and unchanged
 * until the reference is released (the slot cannot be evicted while held).
 * Every function below is safe to call from several threads at once, except
 * xc_cache_close.  docs/CACHE.md is the exact semantics (victims, clock,
 * counters); the comments here are the contracts. */

typedef struct xc_cache xc_cache;

/* The bounds the cache promises and refuses past (docs/CACHE.md "Bounds";
 * oracle/bounds.py holds the same numbers, tests/oracle/test_bounds.py
 * reads them from this file):
 * XC_MAX_BATCH_THREADS: the largest batch_threads xc_cache_open takes;
 * XC_MAX_IO_THREADS: the largest io_threads it takes;
 * XC_IO_DEPTH_DEFAULT: the read-ahead queue's depth when io_depth is 0;
 * XC_TRACE_RING_DEFAULT: the trace ring's records when trace_ring_records
 *   is 0;
 * XC_TRACE_RECORD_BYTES: the bytes of one trace record (file and ring);
 * XC_MAX_KEYS: the most keys (layers x n_experts) a cache numbers; more is
 *   XC_E_MISUSE at open;
 * XC_IO_MAX_RETRIES: consecutive interrupted (EINTR/EAGAIN) preads without
 *   a byte of progress after which a read gives up: the last is XC_E_IO. */
#define XC_MAX_BATCH_THREADS 256
#define XC_MAX_IO_THREADS 64
#define XC_IO_DEPTH_DEFAULT 64
#define XC_TRACE_RING_DEFAULT 4096
#define XC_TRACE_RECORD_BYTES 24
#define XC_MAX_KEYS 2147483647
#define XC_IO_MAX_RETRIES 1000

typedef struct xc_cache_opts {
    size_t n_slots;            /* budget in slots; 0: use budget_bytes */
    uint64_t budget_bytes;     /* budget in bytes when n_slots == 0 */
    int top_k;                 /* experts per token; need n_slots >= top_k+1 */
    const char *policy;        /* "lru" (NULL), "fifo", "lfu",
                                * "lfru:sample=4,seed=0", "hotness:period=256",
                                * "s3fifo:small=10", "arc" */
    const char *expert_template; /* with {layer}, {tensor} and {expert};
                                  * without {expert}: fused (see
                                  * xc_cache_open) */
    const char *const *tensors;  /* tensor suffixes, in slot order */
    size_t n_tensors;
    const int32_t *layers;     /* MoE layer indices, strictly ascending */
    size_t n_layers;
    int32_t n_experts;         /* experts per layer */
    uint64_t chunk_bytes;      /* 0: one read per contiguous expert */
    int batch_threads;         /* readers of getmany, caller included,
                                * 1..XC_MAX_BATCH_THREADS */
    /* Fields below are all optional: zero means off / the default. */
    int io_threads;            /* read-ahead reader threads; 0: prefetch is
                                * getmany (synchronous),
                                * 0..XC_MAX_IO_THREADS */
    int io_depth;              /* read-ahead reads queued or under way at
                                * most; 0: XC_IO_DEPTH_DEFAULT */
    int split_min_misses;      /* stream only when at least this many keys
                                * are not resident, else plain get order;
                                * 0: 1 */
    int lock_memory;           /* 1: try mlock() on the slot arena (a
                                * refusal is reported, not fatal) */
    const char *trace_path;    /* record accesses to this file; NULL: off */
    size_t trace_ring_records; /* records buffered before a write;
                                * 0: XC_TRACE_RING_DEFAULT */
} xc_cache_opts;

/* Slot states (docs/CACHE.md "Slots and budget"). */
enum { XC_SLOT_EMPTY = 0, XC_SLOT_INFLIGHT = 1, XC_SLOT_READY = 2 };

/* Returns a static, stable name for a slot state ("empty", "inflight",
 * "ready"), or NULL for a number that is not one.  Cannot fail. */
const char *xc_slot_state_name(int state);

/* Invariants walked by xc_cache_check(), in the order it checks them; the
 * return value is the number.  INV-KEY-UNIQUE: a key is in at most one slot.
 * INV-INDEX: the key index maps exactly the non-EMPTY slots.  INV-EMPTY: an
 * EMPTY slot has no holds, pins or unused mark.  INV-INFLIGHT: an INFLIGHT
 * slot has no holds, pins or mark, and the INFLIGHT slots are exactly the
 * reads under way (one each): each names one owner (a get, a batch, the
 * read-ahead ring, a read-ahead reader, or an open stream's item), the
 * ring's entries and readers match the slots that name them, and every
 * open stream's unread, queued or claimed item names an INFLIGHT slot it
 * owns (no orphaned reservation).  INV-CLOCK: last_use values of READY
 * slots and of INFLIGHT slots with a stamped tick are unique and <= tick;
 * insert_tick <= last_use.  INV-COUNTERS: hits + misses == requests,
 * load_failures == short_reads + io_errors, prefetch_evicted_unused <=
 * evictions, payload_bytes is a whole number of experts no more than
 * misses + prefetch_loads + spec_loads.  INV-PREFETCH:
 * prefetch_first_uses + prefetch_evicted_unused + prefetch_unused_resident
 * == prefetch_loads (every prefetch of this window is used, evicted unused
 * or still waiting).  INV-POLICY: the policy saw as many evictions and
 * requests as the cache made, the order list holds exactly the stamped
 * reads whose insert the policy has not been told (INFLIGHT with a stamp,
 * or READY and held back) in ascending stamp order with a read under way
 * first, and the policy's own state is consistent (hotness: count table;
 * s3fifo, arc: queues).
 * INV-QUEUE: every read-ahead queue entry names an INFLIGHT slot holding
 * its key, no slot twice, queued + under way <= io_depth.  INV-SPEC:
 * spec_used + spec_evicted_unused + spec_unused_resident == spec_loads,
 * and page_cache_loads + device_loads + unknown_loads == the loads
 * published in this window (payload_bytes / expert_bytes).  INV-EMPTY and
 * INV-INFLIGHT also refuse a speculative mark on a slot that is not
 * READY. */
enum {
    XC_INV_KEY_UNIQUE = 1,
    XC_INV_INDEX = 2,
    XC_INV_EMPTY = 3,
    XC_INV_INFLIGHT = 4,
    XC_INV_CLOCK = 5,
    XC_INV_COUNTERS = 6,
    XC_INV_PREFETCH = 7,
    XC_INV_POLICY = 8,
    XC_INV_QUEUE = 9,
    XC_INV_SPEC = 10,
};

/* Returns a static, stable name for an invariant number as the comment
 * above spells it ("INV-KEY-UNIQUE" for XC_INV_KEY_UNIQUE, ...), or NULL
 * for a number that is not one (0 included).  Cannot fail. */
const char *xc_invariant_name(int inv);

/* A held reference: data points at the expert's payload (expert_bytes long)
 * inside slot `slot`; generation identifies this publish of the slot. */
typedef struct xc_ref {
    int32_t slot;
    uint32_t generation;
    const uint8_t *data;
    uint64_t nbytes;
} xc_ref;

/* One window of counters (docs/CACHE.md "Counters").  prefetch_unused_resident
 * is derived when the snapshot is taken; load_ns is wall time spent in reads
 * of published and failed loads (informational, not part of the semantics). */
typedef struct xc_stats {
    uint64_t requests, hits, misses;
    uint64_t prefetch_loads, prefetch_first_uses, prefetch_evicted_unused;
    uint64_t evictions, payload_bytes, io_bytes;
    uint64_t load_failures, short_reads, io_errors;
    uint64_t load_ns;
    uint64_t prefetch_unused_resident;
    /* speculative prefetch: reads started, published, first demand hits,
     * evicted before any demand hit; spec_unused_resident is derived */
    uint64_t spec_issued, spec_loads, spec_used, spec_evicted_unused;
    uint64_t spec_unused_resident;
    /* where published loads' bytes came from (bytes asked of io) */
    uint64_t page_cache_loads, device_loads, unknown_loads;
    uint64_t page_cache_bytes, device_bytes;
    /* read-ahead requests read in the caller because the queue was full */
    uint64_t queue_fallbacks;
} xc_stats;

/* Where tensor i of every expert lives inside a payload. name is the suffix
 * given in opts.tensors (owned by the cache). */
typedef struct xc_slot_tensor {
    const char *name;
    int dtype;
    int ndim;
    int64_t shape[XC_MAX_DIMS];
    uint64_t offset;           /* from the payload start (xc_ref.data) */
    uint64_t nbytes;
} xc_slot_tensor;

/* Opens a cache over st.  Resolves every (layer, expert) of opts through the
 * template and checks that each tensor exists (XC_E_NOT_FOUND naming layer,
 * expert and tensor) and has the dtype and shape of expert 0 of the first
 * layer (XC_E_MISUSE naming the tensor); an expert's tensors may live in
 * different shards (it is then read one tensor at a time).  A template
 * without {expert} is a fused layout: it names one tensor per (layer,
 * tensor), whose leading dimension must equal n_experts or a multiple
 * of it, and expert e's piece of it is slice e along that dimension
 * (bytes [e * nbytes / E, (e + 1) * nbytes / E) of its data, read as one
 * run, chunked like a contiguous expert), seen in the slot with the same
 * dtype and shape[1:] ([E, ...]) or [shape[0] / E, shape[1:]] (stacked
 * [E*I, ...] rows: expert e is rows [e*I, (e+1)*I));
 * a fused tensor that is 0-d, whose leading dimension is no multiple of
 * n_experts,
 * whose nbytes does not divide by n_experts, or whose dtype or shape
 * differs from the first layer's is XC_E_MISUSE naming the layer, the
 * tensor, its shape and n_experts, and a missing one XC_E_NOT_FOUND
 * naming the layer and the tensor.  Under O_DIRECT, a per-expert layout's
 * expert that is not one contiguous run is XC_E_MISUSE; a fused one is
 * read slice by slice, each widened on its own.  Bad
 * options (unknown policy or parameter, layers not ascending, n_experts < 1,
 * top_k < 1, batch_threads < 1) are XC_E_MISUSE; fewer than top_k + 1 slots
 * is XC_E_BUDGET with the slots needed, the slots the budget gives and the
 * smallest budget_bytes that works.  Allocates the arena and starts
 * batch_threads - 1 batch pool threads, then io_threads read-ahead
 * threads; a thread that does not start is XC_E_NOMEM naming the pool, the
 * thread's number ("batch pool thread 2 of 3") and the error's text.  The
 * trace file (trace_path: links followed; written only when new, empty,
 * an earlier trace or a stream -- a FIFO being read, a character device;
 * any other file, above all a file of st by device and inode, is
 * XC_E_MISUSE naming it, nothing changed) is opened without blocking and
 * its header written as open's last step; a failure there is XC_E_IO
 * naming the path and errno, and removes a file it created (a file
 * already there keeps its length; its first bytes may hold part of the
 * header).  A trace ring that cannot be allocated is XC_E_NOMEM naming the
 * ring and its size.  On failure
 * nothing is allocated, no thread is left running (those already started
 * are joined), no file is created and *out is not written.  st is
 * borrowed. */
int xc_cache_open(xc_st *st, const xc_cache_opts *opts, xc_cache **out);

/* Lets the read-ahead readers finish every queued read (a drain, so no
 * read is left writing into freed memory), stops every reader thread,
 * flushes and closes the trace and frees everything -- the slot arena only
 * once every reference taken with xc_cache_arena is released too.
 * References still held point into the arena (so into freed memory unless
 * an arena reference is kept).  Open streams must have been ended.  Must
 * not race with any other call on c.  In a child process after fork() it
 * does nothing (the cache's threads do not exist there; the memory stays
 * the child's until it exits).  NULL is a no-op.  Cannot fail. */
void xc_cache_close(xc_cache *c);

/* The slot arena as a reference-counted object, for bindings whose views
 * of held payloads may outlive the cache (docs/CACHE.md "Threads, fork and
 * lifetimes").  xc_cache_arena takes one reference (any thread, cannot
 * fail); xc_arena_release gives one back and frees the arena with the
 * last (the cache's own is given back by xc_cache_close; NULL is a
 * no-op).  xc_arena_data is the first byte (every held payload lies in
 * [data, data + bytes)), xc_arena_bytes the length; both change nothing. */
typedef struct xc_arena xc_arena;
xc_arena *xc_cache_arena(xc_cache *c);
const uint8_t *xc_arena_data(const xc_arena *a);
uint64_t xc_arena_bytes(const xc_arena *a);
void xc_arena_release(xc_arena *a);

/* Taking an expert: one operation, two faces
 * ------------------------------------------
 * xc_cache_get / xc_cache_release and xc_cache_hold / xc_cache_unhold /
 * xc_cache_hold_data are the same operation: the same steps (docs/CACHE.md
 * "get"), the same counters, clock, policy events and trace records, the
 * same holds.  They differ only in how a held reference crosses the call:
 *
 *   - C callers use the struct API, xc_cache_get / xc_cache_release: the
 *     xc_ref carries the data pointer and length with it.
 *   - Bindings (cffi, ctypes, any FFI) use the handle API, xc_cache_hold /
 *     xc_cache_unhold, with xc_cache_hold_data for the bytes: plain
 *     integers cross an FFI boundary with no struct allocated or converted
 *     per call.  This is the one fast path for bindings, and the one the
 *     engine's Python face uses.
 *
 * A *handle* is (generation mod 2^31) << 32 | slot, always >= 0; an xc_ref
 * (from xc_cache_get or xc_cache_stream_next) turned into a handle with
 * that formula is given back with xc_cache_unhold as well. */

/* Demand access (docs/CACHE.md get steps 1-6): returns a held reference to
 * (layer, expert), loading it if needed and waiting for another thread's read
 * of the same key -- except a stream's reservation that nobody is reading yet,
 * which it reads itself and publishes for that stream (the stream keeps its
 * hold; docs/CACHE.md "Claiming").  XC_E_MISUSE for a key outside the cache
 * (nothing changed); XC_E_ALL_PINNED when no slot can be taken (nothing
 * changed, no counter moved); XC_E_SHORT_READ / XC_E_IO when the read failed
 * (the slot is EMPTY again, the failure counted, the evicted key stays
 * evicted, the message names layer and expert); XC_E_CHANGED, handled the same
 * way and counted as an io error, when the shard was replaced or removed since
 * the container opened it (or, with xc_st_opts.verify, changed in any way; see
 * faults/README.md).  *out is written only on success. */
int xc_cache_get(xc_cache *c, int32_t layer, int32_t expert, xc_ref *out);

/* Gives back one hold taken by xc_cache_get and marks *ref spent (its data
 * becomes NULL).  XC_E_MISUSE (nothing changed) for a reference of another
 * cache, a slot republished since, a slot with no hold left, or a spent
 * reference: so *ref given back twice is refused even while another hold
 * of the same publish keeps the slot held (a copy of *ref made before the
 * release is not spent: it is refused only as the slot allows).  Does not
 * touch the clock. */
int xc_cache_release(xc_cache *c, xc_ref *ref);

/* The handle face of xc_cache_get: does exactly what xc_cache_get does --
 * hit, wait or load, with the same counters, clock, policy events and
 * trace records -- and returns the handle of the held reference, or a
 * negative XC_E_* status with the cache left as xc_cache_get leaves it on
 * that failure. */
int64_t xc_cache_hold(xc_cache *c, int32_t layer, int32_t expert);

/* The handle face of xc_cache_release: gives back one hold of handle.
 * XC_E_MISUSE, nothing changed, for a handle outside this cache, a slot
 * republished since (generations compared mod 2^31) or a slot with no hold
 * left.  Does not touch the clock. */
int xc_cache_unhold(xc_cache *c, int64_t handle);

/* The first payload byte of a held handle's expert (xc_cache_expert_bytes
 * long, valid until the hold is given back), or NULL, recording
 * XC_E_MISUSE, when the handle holds nothing now.  Changes nothing. */
const uint8_t *xc_cache_hold_data(xc_cache *c, int64_t handle);

/* One layer's experts held in one call (docs/CACHE.md "hold_layer"): the
 * experts of layer counted, stamped and held exactly as a stream of those
 * keys with split_min_misses 1 (a run of gets that hold, for the tick
 * policies), the misses read in parallel on the batch pool as getmany
 * reads.  On XC_OK handles[i] is the handle of experts[i] (give it back
 * with xc_cache_unhold or xc_cache_unhold_many) and offsets[i] the byte
 * offset of its payload in the slot arena (xc_cache_arena).  On failure
 * nothing is held by the call, nothing is written to handles or offsets,
 * and the counters, clock and slots are those of the gets that ran:
 * XC_E_MISUSE (nothing changed) for an invalid or repeated key, NULL
 * arrays, or more experts than slots; XC_E_NOMEM (nothing changed) for
 * more than 64 experts and no memory; XC_E_ALL_PINNED when an expert
 * found no slot (the experts before it were counted and loaded, then
 * given back; it and those after it were not counted); XC_E_SHORT_READ /
 * XC_E_IO / XC_E_CHANGED when a read failed (every read is published or
 * counted as failed, every hold is given back, and the first failure in
 * the order given is reported with its reader's record: file, byte, cause).
 * n == 0 does nothing and returns XC_OK. */
int xc_cache_hold_layer(xc_cache *c, int32_t layer, const int32_t *experts,
                        size_t n, int64_t *handles, uint64_t *offsets);

/* Gives back one hold of each of handles[0..n-1] (xc_cache_unhold's
 * rules), all or none: XC_E_MISUSE, nothing changed, when any handle holds
 * nothing now.  On success every handles[i] becomes -1 (spent), so the same
 * array given back twice is refused even while other holds of the same
 * publishes keep the slots held.  Does not touch the clock. */
int xc_cache_unhold_many(xc_cache *c, int64_t *handles, size_t n);

/* Batch prefetch (docs/CACHE.md getmany steps 1-3): reserves slots for the
 * missing keys serially, reads them in parallel on the cache's readers and
 * publishes them serially; *published (may be NULL) receives how many were
 * published.  A short count is not an error (no slot, or a failed read,
 * which is counted).  XC_E_MISUSE if any key is invalid, before anything
 * changed.  XC_E_NOMEM only before anything changed. */
int xc_cache_getmany(xc_cache *c, const int32_t *layers,
                     const int32_t *experts, size_t n, size_t *published);

/* Read-ahead (docs/CACHE.md "prefetch"): reserves slots for the missing
 * keys exactly like getmany's step 1 and returns at once; the reads run on
 * the io_threads reader threads, each publishing when it completes (same
 * publish rules as getmany, ticks stamped in reservation order).  The
 * policy is told of the inserts in reservation (stamp) order all the same:
 * under s3fifo and arc an insert whose earlier reservations are still read
 * is held back, and its slot is served but no victim candidate meanwhile
 * (docs/CACHE.md "Stamp order"), so after xc_cache_drain the state is
 * getmany's whatever order the reads completed in.  A read
 * that finds the queue full (io_depth) is done in the caller before
 * returning, never dropped.  With speculative != 0 the published experts
 * count as spec_loads (not prefetch_loads) and carry the speculative mark
 * instead of the unused-prefetch mark.  With io_threads == 0 the reads are
 * getmany's (synchronous), and a non-speculative prefetch is exactly
 * xc_cache_getmany.  *issued (may be NULL) receives the experts published
 * when synchronous, the reads started when asynchronous.  Errors as
 * getmany: XC_E_MISUSE / XC_E_NOMEM before anything changed. */
int xc_cache_prefetch(xc_cache *c, const int32_t *layers,
                      const int32_t *experts, size_t n, int speculative,
                      size_t *issued);

/* Waits until every read-ahead read queued so far has been published or
 * failed (reads that prefetch calls made while it waits are waited for
 * too).  Stream reads done by a consumer are not waited for.  In a child
 * process after fork() it returns at once (no reader exists there).
 * Cannot fail. */
void xc_cache_drain(xc_cache *c);

/* Layer streaming (docs/CACHE.md "stream").  xc_cache_stream_begin
 * validates the keys (XC_E_MISUSE for an invalid or repeated key, nothing
 * changed; XC_E_NOMEM likewise), then -- when at least split_min_misses of
 * them are not resident -- counts the resident ones as hits and holds them,
 * reserves slots for the missing ones (counted as misses, in the order
 * given, like a run of gets that hold) and queues their reads; otherwise
 * it changes nothing and xc_cache_stream_next does plain gets in order.
 * A reserved miss with nobody to read it (no readers, or the queue full)
 * is read by xc_cache_stream_next, or by any get or stream that needs the
 * key first (it is then published for this stream).  The policy is told
 * of the misses' inserts in the order given, whatever order their reads
 * end or are claimed in (docs/CACHE.md "Stamp order").  The caller owns
 * *out and must end it with xc_cache_stream_end before closing the
 * cache. */
typedef struct xc_stream xc_stream;
int xc_cache_stream_begin(xc_cache *c, const int32_t *layers,
                          const int32_t *experts, size_t n, xc_stream **out);

/* Returned by xc_cache_stream_next when every key has been yielded. */
#define XC_STREAM_END 1

/* Yields the next expert: resident ones first in the order given, then
 * missing ones in completion order.  On XC_OK *out is a held reference
 * (release it with xc_cache_release) and *index (may be NULL) its position
 * in the keys given.  A failed read returns XC_E_SHORT_READ / XC_E_IO for
 * that key (counted as in get; *index says which), with the failed read's
 * own error record (file, byte offset, cause; recorded by whichever thread
 * read it) in xc_last_error(), and the stream goes on;
 * a key that found no slot is tried as a plain get last (XC_E_ALL_PINNED
 * possible).  XC_STREAM_END when done. */
int xc_cache_stream_next(xc_stream *s, xc_ref *out, size_t *index);

/* Ends a stream: waits for its reads still under way and gives back the
 * holds of experts it had not yielded (they stay counted and resident).
 * References already yielded stay held by the caller.  NULL is a no-op.
 * Cannot fail. */
void xc_cache_stream_end(xc_stream *s);

/* Sets the step number stamped on trace records from now on (a token
 * index, say).  Cannot fail; a no-op without a trace. */
void xc_cache_set_step(xc_cache *c, uint64_t step);

/* The trace vocabulary (docs/TRACE_FORMAT.md): the name of read kind
 * `kind`, the number a trace record's kind field holds ("get", "prefetch",
 * "speculative", "stream"), and of outcome `outcome` ("hit", "miss",
 * "wait_hit", "resident", "inflight", "issued", "no_slot", "duplicate"),
 * or NULL for a number past the last.  Both come from the one list of each
 * in csrc/xc_kinds.h that also numbers what the engine writes.  Static
 * strings; cannot fail. */
const char *xc_read_kind_name(int kind);
const char *xc_trace_outcome_name(int outcome);

/* Writes the buffered trace records to the trace file.  XC_E_IO when a
 * write failed (then and ever after: recording stopped at that point, the
 * message says why); XC_OK without a trace. */
int xc_cache_trace_flush(xc_cache *c);

/* Whether the slot arena is locked in memory (1) or not (0), and why in
 * words ("mlock not requested", "mlock active on N bytes", or the refusal
 * with errno and RLIMIT_MEMLOCK).  The note lives as long as c.  Neither
 * can fail. */
int xc_cache_mlock_active(const xc_cache *c);
const char *xc_cache_mlock_note(const xc_cache *c);

/* Pin / unpin a READY key (pins nest).  pin: XC_E_NOT_FOUND when the key is
 * not READY; unpin: XC_E_NOT_FOUND when the key is not READY, XC_E_MISUSE
 * when it is READY with no pin (docs/CACHE.md).  Both XC_E_MISUSE for a
 * key outside the cache; nothing changed after a failure.  Neither counts as
 * a request nor touches the clock. */
int xc_cache_pin(xc_cache *c, int32_t layer, int32_t expert);
int xc_cache_unpin(xc_cache *c, int32_t layer, int32_t expert);

/* A consistent snapshot of this window's counters.  Cannot fail. */
void xc_cache_stats(xc_cache *c, xc_stats *out);

/* Starts a new window: zeroes every counter and clears every unused-prefetch
 * mark.  Residents, holds, pins, the clock and policy state are kept.  A
 * read reserved before the reset and ending after it still publishes (or
 * fails), but counts in no window and carries no mark (docs/CACHE.md
 * "reset_stats").  Cannot fail. */
void xc_cache_reset_stats(xc_cache *c);

/* Walks every structure under the lock.  Returns 0, or the number of the
 * first broken invariant (XC_INV_*) with a message naming it and the slot
 * in xc_last_error().  Changes nothing. */
int xc_cache_check(xc_cache *c);

/* Snapshot of slot i: state, key (-1, -1 when EMPTY), holds, pins and the
 * unused-prefetch mark; any out-pointer may be NULL.  XC_E_MISUSE if i is
 * out of range. */
int xc_cache_slot(xc_cache *c, size_t i, int *state, int32_t *layer,
                  int32_t *expert, uint32_t *holds, uint32_t *pins,
                  int *unused_mark);

/* Geometry, fixed at open.  Cannot fail. */
size_t xc_cache_n_slots(const xc_cache *c);
uint64_t xc_cache_stride(const xc_cache *c);
uint64_t xc_cache_expert_bytes(const xc_cache *c);
size_t xc_cache_n_tensors(const xc_cache *c);

/* Layout of tensor i inside every payload.  XC_E_MISUSE if out of range. */
int xc_cache_tensor(const xc_cache *c, size_t i, xc_slot_tensor *out);

/* Whether expert (layer, expert) is one contiguous run in its shard (1),
 * read per tensor (0), or not a key of the cache (XC_E_MISUSE). */
int xc_cache_contiguous(const xc_cache *c, int32_t layer, int32_t expert);

/* ------------------------------------------------------------------ */
/* Trace replay (simulator)                                             */
/* ------------------------------------------------------------------ */

/* Replays a routing trace through the cache's own victim rules (the policy
 * files the live cache runs, in the same order of events), without bytes,
 * threads or locks, so a trace replayed here gives the counters a live
 * cache gives for the same demand gets: plain mode is get + release per
 * access; step mode holds the accesses of one step until the next step
 * starts.  docs/CACHE.md "Trace replay" is the exact semantics. */

enum { XC_SIM_PLAIN = 0, XC_SIM_STEP = 1 };

typedef struct xc_sim_opts {
    const char *policy;   /* a cache policy spec (NULL: "lru"), or "belady" */
    uint64_t n_slots;     /* capacity in slots (per layer with per_layer) */
    uint32_t n_keys;      /* every key is < n_keys */
    uint32_t n_experts;   /* with per_layer, key k is in layer k / n_experts */
    int mode;             /* XC_SIM_PLAIN or XC_SIM_STEP */
    int per_layer;        /* 1: an independent cache of n_slots per layer */
    int no_fast_path;     /* 1: lru / fifo through to_evict too (tests) */
    /* Optional progress hook (NULL: none): called in the calling thread
     * with done = progress_every, 2 * progress_every, ... (each multiple
     * below n) and finally with done = n, the accesses replayed so far
     * (per_layer: counted over the layers in order).  A nonzero return
     * stops the run (XC_SIM_STOPPED).  It must leave keys, step_start
     * and these options unchanged. */
    int (*progress)(void *ctx, uint64_t done);
    void *progress_ctx;        /* passed to progress as ctx */
    uint64_t progress_every;   /* accesses between calls; 0: the default */
} xc_sim_opts;

/* xc_sim_run's return when progress asked to stop; the default period. */
#define XC_SIM_STOPPED 1
#define XC_SIM_PROGRESS_EVERY 65536

/* Counts of one replay; reloads = misses of keys seen before
 * (misses - compulsory). */
typedef struct xc_sim_result {
    uint64_t requests, hits, misses, compulsory, reloads, evictions;
} xc_sim_result;

/* Replays keys[0..n-1] in order.  step_start[i] != 0 marks the first access
 * of a step (access 0 always starts one); it may be NULL in plain mode (and
 * per_layer then makes every access its own step).  With per_layer the
 * accesses of each layer (key / n_experts) go, in order, to that layer's own
 * cache.  *out receives the counts on success.  XC_E_MISUSE (nothing
 * written) for bad options, an unknown policy or parameter, a key >= n_keys
 * (offset: its position), or in step mode a step that needs more slots
 * than the cache has (offset: the access that found every slot held);
 * XC_E_NOMEM.  Re-entrant: no state survives the call.
 * With opts.progress set, a nonzero return from any of its calls ends the
 * replay there: the call returns XC_SIM_STOPPED (positive, no error
 * recorded), *out receives the counts of the accesses replayed by then
 * (requests = the last done reported; all of them when the final call
 * asked), and everything the call allocated is freed. */
int xc_sim_run(const xc_sim_opts *opts, const uint32_t *keys,
               const uint8_t *step_start, size_t n, xc_sim_result *out);

/* Exact miss-ratio curves (xc_curve.c): LRU's or Belady's misses at every
 * cache size in one pass, each point what xc_sim_run gives at that size
 * with the same keys, step flags, mode and per_layer. */
typedef struct xc_curve_opts {
    const char *policy;   /* "lru" (also NULL) or "belady" */
    uint32_t n_keys;      /* every key is < n_keys */
    uint32_t n_experts;   /* with per_layer, key k is in layer k / n_experts */
    int mode;             /* XC_SIM_PLAIN or XC_SIM_STEP */
    int per_layer;        /* 1: an independent cache per layer (size per layer) */
} xc_curve_opts;

/* What one curve covers: working_set is the most distinct keys of one cache
 * (per_layer: of any layer); at it and above, misses = compulsory.
 * min_slots is the least size the mode replays: 1 in plain mode, the most
 * distinct keys of one step in step mode. */
typedef struct xc_curve_result {
    uint64_t requests, compulsory, working_set, min_slots;
} xc_curve_result;

/* Fills misses[c - 1] with the misses of a cache of c slots, for c = 1 ..
 * n_sizes (misses may be NULL when n_sizes is 0), over keys[0..n-1] with
 * step_start as in xc_sim_run; a size below min_slots, which xc_sim_run
 * refuses, gets UINT64_MAX.  *out receives the counts above.  XC_E_MISUSE
 * (nothing written) for NULL arguments, a policy other than lru or belady,
 * bad options or a key >= n_keys (offset: its position); XC_E_NOMEM.
 * Time O(n log W) for lru, O(n D) for belady (D: the mean stack depth of
 * an access, at most W, the working set).  No state survives the call. */
int xc_curve_run(const xc_curve_opts *opts, const uint32_t *keys,
                 const uint8_t *step_start, size_t n, uint64_t *misses,
                 size_t n_sizes, xc_curve_result *out);

#ifdef __cplusplus
}
#endif
#endif /* XC_H */
