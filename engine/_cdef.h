/* cffi declarations of engine/csrc/xc.h; contracts are in that header. */

enum {
    XC_OK = 0,
    XC_E_NOMEM = -1,
    XC_E_IO = -2,
    XC_E_SHORT_READ = -3,
    XC_E_CHANGED = -4,
    XC_E_NOT_FOUND = -5,
    XC_E_ALL_PINNED = -6,
    XC_E_MISUSE = -7,
    XC_E_BUDGET = -8,
    XC_E_FORMAT_TOO_SHORT = -100,
    XC_E_FORMAT_HEADER_TOO_LARGE = -101,
    XC_E_FORMAT_HEADER_PAST_END = -102,
    XC_E_FORMAT_NOT_UTF8 = -103,
    XC_E_FORMAT_JSON = -104,
    XC_E_FORMAT_SCHEMA = -105,
    XC_E_FORMAT_DTYPE = -106,
    XC_E_FORMAT_DUPLICATE = -107,
    XC_E_FORMAT_OFFSETS = -108,
    XC_E_FORMAT_OVERFLOW = -109,
    XC_E_FORMAT_BITS = -110,
    XC_E_FORMAT_SIZE = -111,
    XC_E_FORMAT_LENGTH = -112,
    XC_E_FORMAT_INDEX = -113,
};

typedef struct xc_error {
    int code;
    int64_t offset;
    int32_t layer;
    int32_t expert;
    char message[1024];
} xc_error;

const xc_error *xc_last_error(void);
const char *xc_status_name(int code);

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
const char *xc_dtype_name(int dtype);
int xc_dtype_bits(int dtype);


typedef struct xc_io {
    int (*open)(void *ctx, const char *path, int direct, int64_t *handle);
    int64_t (*pread)(void *ctx, int64_t handle, void *buf, size_t len,
                     uint64_t offset);
    int (*size)(void *ctx, int64_t handle, uint64_t *out_bytes);
    int (*close)(void *ctx, int64_t handle);
    void *ctx;
    int64_t (*pread_nowait)(void *ctx, int64_t handle, void *buf, size_t len,
                            uint64_t offset);
} xc_io;
const xc_io *xc_io_default(void);

#define XC_DIRECT_ALIGN 4096

#define XC_MAX_DIMS 8
#define XC_HEADER_MAX_BYTES 100000000

typedef struct xc_st xc_st;

typedef struct xc_tensor_info {
    const char *name;
    int dtype;
    int ndim;
    int64_t shape[8];
    uint32_t shard;
    uint64_t offset;
    uint64_t nbytes;
} xc_tensor_info;

typedef struct xc_st_opts {
    const xc_io *io;
    int direct;
    int verify;
} xc_st_opts;

int xc_st_open(const char *path, const xc_st_opts *opts, xc_st **out);
void xc_st_close(xc_st *st);
size_t xc_st_n_tensors(const xc_st *st);
size_t xc_st_n_shards(const xc_st *st);
int xc_st_tensor(const xc_st *st, size_t i, xc_tensor_info *out);
int xc_st_find(const xc_st *st, const char *name, size_t *out_index);
const char *xc_st_shard_path(const xc_st *st, size_t i);
uint64_t xc_st_shard_data_start(const xc_st *st, size_t i);
uint64_t xc_st_shard_header_bytes(const xc_st *st, size_t i);
int64_t xc_st_shard_handle(const xc_st *st, size_t i);
int xc_st_shard_direct(const xc_st *st, size_t i);
const xc_io *xc_st_io(const xc_st *st);
size_t xc_st_n_metadata(const xc_st *st);
int xc_st_metadata(const xc_st *st, size_t i, const char **key,
                   const char **value);
int xc_st_direct_active(const xc_st *st);
const char *xc_st_direct_note(const xc_st *st);
int xc_st_names(const xc_st *st, char *buf, size_t buf_len, size_t *needed);
int xc_st_read_tensor(const xc_st *st, size_t i, void *dst, size_t dst_len);
int xc_st_check_files(const xc_st *st);

/* --- eviction policies (contracts in xc.h) --- */
int xc_policy_count(void);
const char *xc_policy_name(int i);
const char *xc_policy_param_name(int i, int j);
uint64_t xc_policy_param_default(int i, int j);

/* --- expert cache (contracts in xc.h) --- */
typedef struct xc_cache xc_cache;
#define XC_MAX_BATCH_THREADS ...
#define XC_MAX_IO_THREADS ...
#define XC_IO_DEPTH_DEFAULT ...
#define XC_TRACE_RING_DEFAULT ...
#define XC_TRACE_RECORD_BYTES ...
#define XC_MAX_KEYS ...
#define XC_IO_MAX_RETRIES ...

typedef struct xc_cache_opts {
    size_t n_slots;
    uint64_t budget_bytes;
    int top_k;
    const char *policy;
    const char *expert_template;
    const char *const *tensors;
    size_t n_tensors;
    const int32_t *layers;
    size_t n_layers;
    int32_t n_experts;
    uint64_t chunk_bytes;
    int batch_threads;
    int io_threads;
    int io_depth;
    int split_min_misses;
    int lock_memory;
    const char *trace_path;
    size_t trace_ring_records;
} xc_cache_opts;
enum { XC_SLOT_EMPTY = 0, XC_SLOT_INFLIGHT = 1, XC_SLOT_READY = 2 };
const char *xc_slot_state_name(int state);
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
const char *xc_invariant_name(int inv);
typedef struct xc_ref {
    int32_t slot;
    uint32_t generation;
    const uint8_t *data;
    uint64_t nbytes;
} xc_ref;
typedef struct xc_stats {
    uint64_t requests, hits, misses;
    uint64_t prefetch_loads, prefetch_first_uses, prefetch_evicted_unused;
    uint64_t evictions, payload_bytes, io_bytes;
    uint64_t load_failures, short_reads, io_errors;
    uint64_t load_ns;
    uint64_t prefetch_unused_resident;
    uint64_t spec_issued, spec_loads, spec_used, spec_evicted_unused;
    uint64_t spec_unused_resident;
    uint64_t page_cache_loads, device_loads, unknown_loads;
    uint64_t page_cache_bytes, device_bytes;
    uint64_t queue_fallbacks;
} xc_stats;
typedef struct xc_slot_tensor {
    const char *name;
    int dtype;
    int ndim;
    int64_t shape[XC_MAX_DIMS];
    uint64_t offset;
    uint64_t nbytes;
} xc_slot_tensor;
int xc_cache_open(xc_st *st, const xc_cache_opts *opts, xc_cache **out);
void xc_cache_close(xc_cache *c);
typedef struct xc_arena xc_arena;
xc_arena *xc_cache_arena(xc_cache *c);
const uint8_t *xc_arena_data(const xc_arena *a);
uint64_t xc_arena_bytes(const xc_arena *a);
void xc_arena_release(xc_arena *a);
int xc_cache_get(xc_cache *c, int32_t layer, int32_t expert, xc_ref *out);
int xc_cache_release(xc_cache *c, xc_ref *ref);

/* the handle face of get / release: the fast path for bindings */
int64_t xc_cache_hold(xc_cache *c, int32_t layer, int32_t expert);
int xc_cache_unhold(xc_cache *c, int64_t handle);
const uint8_t *xc_cache_hold_data(xc_cache *c, int64_t handle);
int xc_cache_hold_layer(xc_cache *c, int32_t layer, const int32_t *experts,
                        size_t n, int64_t *handles, uint64_t *offsets);
int xc_cache_unhold_many(xc_cache *c, int64_t *handles, size_t n);
int xc_cache_getmany(xc_cache *c, const int32_t *layers,
                     const int32_t *experts, size_t n, size_t *published);
int xc_cache_prefetch(xc_cache *c, const int32_t *layers,
                      const int32_t *experts, size_t n, int speculative,
                      size_t *issued);
void xc_cache_drain(xc_cache *c);
typedef struct xc_stream xc_stream;
#define XC_STREAM_END 1
int xc_cache_stream_begin(xc_cache *c, const int32_t *layers,
                          const int32_t *experts, size_t n, xc_stream **out);
int xc_cache_stream_next(xc_stream *s, xc_ref *out, size_t *index);
void xc_cache_stream_end(xc_stream *s);
void xc_cache_set_step(xc_cache *c, uint64_t step);
const char *xc_read_kind_name(int kind);
const char *xc_trace_outcome_name(int outcome);
int xc_cache_trace_flush(xc_cache *c);
int xc_cache_mlock_active(const xc_cache *c);
const char *xc_cache_mlock_note(const xc_cache *c);
int xc_cache_pin(xc_cache *c, int32_t layer, int32_t expert);
int xc_cache_unpin(xc_cache *c, int32_t layer, int32_t expert);
void xc_cache_stats(xc_cache *c, xc_stats *out);
void xc_cache_reset_stats(xc_cache *c);
int xc_cache_check(xc_cache *c);
int xc_cache_slot(xc_cache *c, size_t i, int *state, int32_t *layer,
                  int32_t *expert, uint32_t *holds, uint32_t *pins,
                  int *unused_mark);
size_t xc_cache_n_slots(const xc_cache *c);
uint64_t xc_cache_stride(const xc_cache *c);
uint64_t xc_cache_expert_bytes(const xc_cache *c);
size_t xc_cache_n_tensors(const xc_cache *c);
int xc_cache_tensor(const xc_cache *c, size_t i, xc_slot_tensor *out);
int xc_cache_contiguous(const xc_cache *c, int32_t layer, int32_t expert);

/* --- trace replay (contracts in xc.h) --- */
enum { XC_SIM_PLAIN = 0, XC_SIM_STEP = 1 };
typedef struct xc_sim_opts {
    const char *policy;   /* a cache policy spec (NULL: "lru"), or "belady" */
    uint64_t n_slots;     /* capacity in slots (per layer with per_layer) */
    uint32_t n_keys;      /* every key is < n_keys */
    uint32_t n_experts;   /* with per_layer, key k is in layer k / n_experts */
    int mode;             /* XC_SIM_PLAIN or XC_SIM_STEP */
    int per_layer;        /* 1: an independent cache of n_slots per layer */
    int no_fast_path;     /* 1: lru / fifo through to_evict too (tests) */
    int (*progress)(void *ctx, uint64_t done); /* NULL: no progress calls */
    void *progress_ctx;        /* passed to progress as ctx */
    uint64_t progress_every;   /* accesses between calls; 0: the default */
} xc_sim_opts;
#define XC_SIM_STOPPED 1
#define XC_SIM_PROGRESS_EVERY 65536
/* reloads = misses - compulsory (misses of keys seen before). */
typedef struct xc_sim_result {
    uint64_t requests, hits, misses, compulsory, reloads, evictions;
} xc_sim_result;
/* Replays keys[0..n-1] (step_start[i] != 0: first access of a step; NULL
 * allowed in plain mode).  XC_E_MISUSE (nothing written) for bad options,
 * a key >= n_keys or a step larger than the cache (offset: the access);
 * XC_E_NOMEM; XC_SIM_STOPPED when progress returned nonzero (*out: the
 * counts so far).  No state survives the call. */
int xc_sim_run(const xc_sim_opts *opts, const uint32_t *keys,
               const uint8_t *step_start, size_t n, xc_sim_result *out);
/* --- exact miss-ratio curves (contracts in xc.h) --- */
typedef struct xc_curve_opts {
    const char *policy;   /* "lru" (also NULL) or "belady" */
    uint32_t n_keys;      /* every key is < n_keys */
    uint32_t n_experts;   /* with per_layer, key k is in layer k / n_experts */
    int mode;             /* XC_SIM_PLAIN or XC_SIM_STEP */
    int per_layer;        /* 1: an independent cache per layer */
} xc_curve_opts;
typedef struct xc_curve_result {
    uint64_t requests, compulsory, working_set, min_slots;
} xc_curve_result;
/* misses[c - 1]: misses at c slots, c = 1..n_sizes (UINT64_MAX below
 * min_slots).  XC_E_MISUSE for bad arguments or a key >= n_keys; XC_E_NOMEM. */
int xc_curve_run(const xc_curve_opts *opts, const uint32_t *keys,
                 const uint8_t *step_start, size_t n, uint64_t *misses,
                 size_t n_sizes, xc_curve_result *out);
/* engine.sim's progress hook (the ctx is its handle), defined in Python. */
extern "Python" int _xc_sim_py_progress(void *ctx, uint64_t done);
