/*
 * xc_test.h -- the engine's test seams: what its tests, its fault
 * injection and its mutation and fuzz runs call, and what no embedding
 * application may reach.
 *
 * Two builds of one source tree (docs/DESIGN.md, "Two builds"):
 *   - the release build (pip install: xcache.engine._xc, what an engine
 *     embeds) compiles without XC_TEST_SEAMS.  Nothing declared here exists
 *     in it: the seam files (xc_fault.c, xc_testhooks.c,
 *     xc_testhooks_check.c) are not compiled, the policies' test views are
 *     preprocessed out, and the allocation and thread-start wrappers
 *     (xc_alloc.c) are plain malloc and pthread_create, with no counter;
 *   - the instrumented build (-DXC_TEST_SEAMS: xcache.engine._xc_test,
 *     `python -m xcache.engine._build --out DIR`, the gate's, CI's
 *     sanitizer and coverage builds) adds, on the same library (one shared object, the
 *     same status codes and error records):
 *       - the allocation and thread-start countdowns (fail the Nth one);
 *       - the fault injector, an xc_io vtable that breaks chosen reads;
 *       - the test hooks that corrupt one field of a live cache so that
 *         xc_cache_check() must name the invariant it guards.
 * Including this header without XC_TEST_SEAMS is a compile error, so
 * release code cannot call a seam by mistake.  Everything here keeps the
 * contracts of xc.h ("Ownership and lifetimes", "Errors", "Threads").
 */
#ifndef XC_TEST_H
#define XC_TEST_H

#ifndef XC_TEST_SEAMS
#error "xc_test.h declares the test seams: the instrumented build only (-DXC_TEST_SEAMS)"
#endif

#include "xc_ext.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------ */
/* Allocation and thread-start countdowns                               */
/* ------------------------------------------------------------------ */

/* Every allocation the engine makes goes through one wrapper so that tests
 * can fail the Nth one.  xc_alloc_fail_at(n, persistent): the n-th
 * allocation from now (1 = the next one) fails; with persistent != 0 every
 * allocation after it fails too.  n == 0 disarms.  The counters are
 * process-wide and atomic.  xc_alloc_live() is the number of engine
 * allocations not yet freed; xc_alloc_count() the number made so far. */
void xc_alloc_fail_at(uint64_t n, int persistent);
uint64_t xc_alloc_count(void);
int64_t xc_alloc_live(void);
/* Number of allocations refused by the armed fault so far. */
uint64_t xc_alloc_failures(void);

/* Thread-start seam (test control).  Every thread the engine starts (the
 * batch pool's and the read-ahead readers of xc_cache_open) goes through one
 * wrapper with a countdown of its own, separate from the allocation one so
 * that a test names the k-th thread start directly and the allocation
 * counts stay what they were.  xc_thread_fail_at(n, persistent): the n-th
 * thread start from now (1 = the next one) fails with EAGAIN, as
 * pthread_create does at a thread or memory limit; with persistent != 0
 * every start after it fails too.  n == 0 disarms.  xc_thread_count() is
 * the number of starts attempted so far, xc_thread_failures() the number
 * refused by the armed fault.  Process-wide and atomic; none can fail. */
void xc_thread_fail_at(uint64_t n, int persistent);
uint64_t xc_thread_count(void);
uint64_t xc_thread_failures(void);

/* ------------------------------------------------------------------ */
/* Fault injection under the I/O seam (xc_fault.c)                      */
/* ------------------------------------------------------------------ */

/* A fault injector is an xc_io vtable that forwards to an inner vtable and
 * breaks chosen reads.  Tests configure it from Python; it is plain C, so no
 * Python code ever runs inside a read.  Reads are counted per injector from
 * the moment it is armed: the nth pread (1 = the next) that matches the path
 * filter meets the fault; with persistent != 0 every matching pread after it
 * does too. */
enum {
    XC_FAULT_NONE = 0,
    XC_FAULT_PARTIAL = 1, /* return at most arg bytes (a legal partial read) */
    XC_FAULT_EOF = 2,     /* return 0: the file seems to end here */
    XC_FAULT_EIO = 3,     /* fail with -EIO */
    XC_FAULT_EINTR = 4,   /* fail with -EINTR (the read loop must retry) */
    XC_FAULT_DELAY = 5,   /* sleep arg microseconds, then read normally */
    XC_FAULT_STALL = 6,   /* block until xc_fault_release or a disarm, or
                           * at most arg microseconds (> 0), then read
                           * normally: a read held under way */
    XC_FAULT_EAGAIN = 7,  /* fail with -EAGAIN (retried as EINTR is) */
    /* Bursts: from the nth matching pread, arg (>= 1) preads in a row fail
     * with -EINTR (-EAGAIN), then one reads at most the progress bytes
     * (xc_fault_progress; 0: as asked); persistent: the cycle of arg + 1
     * repeats, else it runs once.  Interrupts spread between partial
     * reads: the read loop's retry budget must restart after progress. */
    XC_FAULT_EINTR_BURST = 8,
    XC_FAULT_EAGAIN_BURST = 9,
    /* Page-cache copies: these meet the vtable's pread_nowait calls only
     * (the kinds above meet only preads).  While one is armed, a
     * pread_nowait that does not meet it copies as if the page cache held
     * the whole file (a real pread of the innermost vtable: short at the
     * real end of file); while none is, the injector forwards pread_nowait
     * to an inner injector, or, over the default vtable, answers
     * -EOPNOTSUPP (cannot tell), so that every piece goes through pread. */
    XC_FAULT_NOWAIT_PARTIAL = 10, /* copy at most arg bytes (the rest is
                                   * not cached) */
    XC_FAULT_NOWAIT_EAGAIN = 11,  /* -EAGAIN: the first byte is not cached */
    XC_FAULT_NOWAIT_EOF = 12,     /* return 0: the file seems to end here */
    XC_FAULT_NOWAIT_EIO = 13,     /* fail with -EIO (another errno) */
};

typedef struct xc_fault xc_fault;

/* Creates an injector forwarding to inner (NULL: xc_io_default()), disarmed.
 * XC_E_NOMEM on failure. */
int xc_fault_open(const xc_io *inner, xc_fault **out);

/* Frees the injector.  Every object opened with its vtable must be closed
 * first.  NULL is a no-op. */
void xc_fault_close(xc_fault *f);

/* The injector's vtable, for xc_st_opts.io.  Valid until xc_fault_close. */
const xc_io *xc_fault_io(const xc_fault *f);

/* Arms the fault: kind (XC_FAULT_*), nth matching pread from now (>= 1),
 * transient or persistent, arg (bytes for PARTIAL, microseconds for DELAY),
 * and path_filter: only reads of files whose opened path contains this
 * substring match (NULL or "" = every file).  Replaces any earlier arming
 * and restarts the count (a read stalled now stays stalled until released
 * or its bound).  XC_E_MISUSE, nothing changed, for an unknown kind,
 * nth == 0, a negative arg, or a stall without its bound (arg 0). */
int xc_fault_arm(xc_fault *f, int kind, uint64_t nth, int persistent,
                 int64_t arg, const char *path_filter);

/* Places the armed fault at byte `at` of the files it matches: from now
 * only preads whose range [offset, offset + len) covers `at` count toward
 * its nth, and a placed PARTIAL returns the bytes before `at` (its arg
 * unused; a pread starting at `at` does not match it).  The count
 * restarts; a later xc_fault_arm unplaces it.  XC_E_MISUSE, nothing
 * changed, when no fault is armed, or a burst or page-cache one (kinds 8
 * to 13 count their own calls). */
int xc_fault_place(xc_fault *f, uint64_t at);

/* Sets the armed burst's progress: the pread after each burst returns at
 * most bytes (0: as asked).  A later xc_fault_arm resets it to 0.
 * XC_E_MISUSE, nothing changed, when no burst is armed. */
int xc_fault_progress(xc_fault *f, uint64_t bytes);

/* Disarms; reads pass through unchanged, and every read stalled now is let
 * go (as xc_fault_release).  Cannot fail. */
void xc_fault_disarm(xc_fault *f);

/* Stalls (XC_FAULT_STALL).  xc_fault_release lets every pread stalled now
 * go on to read; a pread that meets the stall later blocks again (a
 * persistent or later-nth arming).  Cannot fail.  xc_fault_await_stalled
 * waits at most timeout_us microseconds (0: not at all) until at least n
 * preads are stalled at once, and returns 1 if they are, else 0; it blocks
 * nothing else, and a caller that must stay interruptible (Python's
 * Ctrl-C) calls it in short slices.  xc_fault_stalled is the number of
 * preads stalled now, xc_fault_stall_timeouts the number of stalls that
 * ended by their bound rather than a release (since the injector opened).
 * None can fail. */
void xc_fault_release(xc_fault *f);
int xc_fault_await_stalled(xc_fault *f, uint64_t n, int64_t timeout_us);
uint64_t xc_fault_stalled(const xc_fault *f);
uint64_t xc_fault_stall_timeouts(const xc_fault *f);

/* Matching preads seen since arming, and how many met the fault. */
uint64_t xc_fault_reads(const xc_fault *f);
uint64_t xc_fault_fired(const xc_fault *f);

/* Descriptors the injector has open right now (opened minus closed). */
int64_t xc_fault_open_handles(const xc_fault *f);

/* ------------------------------------------------------------------ */
/* Test hook (xc_testhooks.c)                                           */
/* ------------------------------------------------------------------ */

/* For the test suite only; never call from production code.  Corrupts one
 * field of a live cache (what = XC_TH_*, a and b name slots or variants as
 * documented in xc_testhooks.c), runs xc_cache_check(), restores every
 * field and returns check()'s result: the INV-* number it found (its
 * message in the error record), 0 if none; XC_E_MISUSE, nothing written,
 * for a NULL cache or arguments that do not fit this cache; XC_E_NOMEM
 * when it cannot save the fields it would corrupt.  Not safe against the
 * cache's read-ahead readers: use io_threads = 0 for XC_TH_QUEUE_*. */
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

/* For the test suite only.  The hotness policy's halving work since the
 * cache opened, under its lock: out[0] halvings, out[1] keys whose bucket
 * a halving changed, out[2] heap nodes the halvings' melds walked
 * (xc_order_heaps.c: amortised O(log n_keys) per request).  XC_E_MISUSE,
 * nothing written, for a NULL cache or out, or a policy that is not
 * hotness. */
int xc_testhook_halving_work(xc_cache *c, uint64_t *out);

/* For the test suite only.  The address (*addr) and size (*bytes) of the
 * condition every call waiting for a read under way blocks on, so that a
 * test can tell a thread blocked there (its futex word lies inside) from
 * one not there yet (xc_testhooks.c).  XC_E_MISUSE, nothing written, for
 * a NULL argument; cannot fail otherwise, and changes nothing. */
int xc_testhook_wait_span(const xc_cache *c, uint64_t *addr, uint64_t *bytes);

/* TEST HOOKS ONLY to the end (xc_testhooks_check.c) ----------------- */
/* ------------------------------------------------------------------ */
/* Test hook: check()'s cross-checks                                  */
/* ------------------------------------------------------------------ */

/* For the test suite only; never call from production code.  The same
 * contract as xc_testhook_break_check for the breaks below, which reach
 * the tests check() makes beyond one field per invariant: the owners of
 * reads under way against the open streams and the read-ahead ring, a
 * stream's items, the ring's counts and entries, and the policy's check()
 * (its own counts and the key lists, buckets and heap buckets of
 * xc_order.h).  a names a slot, b the variant (xc_testhooks_check.c says
 * which test each makes fail).  XC_E_MISUSE, nothing changed, when the
 * cache lacks the structure the break needs.  Needs io_threads = 0 and no
 * other thread using the cache. */
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

#ifdef __cplusplus
}
#endif
#endif /* XC_TEST_H */
