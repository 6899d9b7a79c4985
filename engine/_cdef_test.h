/* cffi declarations of engine/csrc/xc_test.h (the test seams: countdowns,
 * fault injector, test hooks), declared in the instrumented build only;
 * contracts are in that header.  Declared after _cdef.h and _cdef_ext.h,
 * whose types they use. */

void xc_alloc_fail_at(uint64_t n, int persistent);
uint64_t xc_alloc_count(void);
int64_t xc_alloc_live(void);
uint64_t xc_alloc_failures(void);
void xc_thread_fail_at(uint64_t n, int persistent);
uint64_t xc_thread_count(void);
uint64_t xc_thread_failures(void);

enum {
    XC_FAULT_NONE = 0,
    XC_FAULT_PARTIAL = 1,
    XC_FAULT_EOF = 2,
    XC_FAULT_EIO = 3,
    XC_FAULT_EINTR = 4,
    XC_FAULT_DELAY = 5,
    XC_FAULT_STALL = 6,
    XC_FAULT_EAGAIN = 7,
    XC_FAULT_EINTR_BURST = 8,
    XC_FAULT_EAGAIN_BURST = 9,
    XC_FAULT_NOWAIT_PARTIAL = 10,
    XC_FAULT_NOWAIT_EAGAIN = 11,
    XC_FAULT_NOWAIT_EOF = 12,
    XC_FAULT_NOWAIT_EIO = 13,
};
typedef struct xc_fault xc_fault;
int xc_fault_open(const xc_io *inner, xc_fault **out);
void xc_fault_close(xc_fault *f);
const xc_io *xc_fault_io(const xc_fault *f);
int xc_fault_arm(xc_fault *f, int kind, uint64_t nth, int persistent,
                 int64_t arg, const char *path_filter);
int xc_fault_place(xc_fault *f, uint64_t at);
int xc_fault_progress(xc_fault *f, uint64_t bytes);
void xc_fault_disarm(xc_fault *f);
uint64_t xc_fault_reads(const xc_fault *f);
uint64_t xc_fault_fired(const xc_fault *f);
int64_t xc_fault_open_handles(const xc_fault *f);
void xc_fault_release(xc_fault *f);
int xc_fault_await_stalled(xc_fault *f, uint64_t n, int64_t timeout_us);
uint64_t xc_fault_stalled(const xc_fault *f);
uint64_t xc_fault_stall_timeouts(const xc_fault *f);

enum {
    XC_TH_SLOT_STATE = 1,
    XC_TH_SLOT_KEY_RANGE = 2,
    XC_TH_KEY_TWICE = 3,
    XC_TH_INDEX = 4,
    XC_TH_EMPTY_FIELD = 5,
    XC_TH_INFLIGHT_FIELD = 6,
    XC_TH_READS = 7,
    XC_TH_CLOCK = 8,
    XC_TH_CLOCK_SHARED = 9,
    XC_TH_COUNTERS = 10,
    XC_TH_PREFETCH = 11,
    XC_TH_POLICY_COUNT = 12,
    XC_TH_POLICY_STATE = 13,
    XC_TH_QUEUE_DEPTH = 14,
    XC_TH_QUEUE_SLOT = 15,
    XC_TH_QUEUE_STATE = 16,
    XC_TH_QUEUE_TWICE = 17,
    XC_TH_SPEC = 18,
    XC_TH_OWNER_STRAY = 19,
    XC_TH_OWNER_NONE = 20,
    XC_TH_OWNER_ORPHAN = 21,
    XC_TH_ORDER = 22,
};
int xc_testhook_break_check(xc_cache *c, int what, int a, int b);
enum {
    XC_TH_CROSS_FIRST = 100,
    XC_TH_OWNER_RANGE = 100,
    XC_TH_STREAM_OWNER = 101,
    XC_TH_STREAM_ITEM = 102,
    XC_TH_QUEUE_COUNT = 103,
    XC_TH_QUEUE_ENTRY = 104,
    XC_TH_LIST = 105,
    XC_TH_POLICY_OWN = 106,
    XC_TH_BUCKETS = 107,
    XC_TH_HEAPS = 108,
};
int xc_testhook_break_cross(xc_cache *c, int what, int a, int b);
int xc_testhook_halving_work(xc_cache *c, uint64_t *out);
int xc_testhook_wait_span(const xc_cache *c, uint64_t *addr, uint64_t *bytes);
