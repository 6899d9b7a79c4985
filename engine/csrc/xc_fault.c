/*
 * xc_fault.c -- a fault-injecting xc_io vtable.
 *
 * Real machines return short reads, EIO and EINTR storms; the cache promises
 * that none of them ever publishes a partial expert or leaks a reservation.
 * To test that promise the faults must happen *under* the engine's read loop,
 * in C, at the exact call a countdown names -- the way SQLite's test VFS
 * and malloc countdown work.  This injector wraps another vtable:
 *
 *     cache / reader --> xc_io_read_full --> [xc_fault] --> inner vtable
 *
 * It remembers the path of every handle it opened (so a fault can target one
 * shard even when armed after the container was opened), counts matching
 * preads from the moment it is armed, and breaks the nth one (transient) or
 * the nth and every later one (persistent).  A *placed* fault
 * (xc_fault_place) counts only the preads whose range covers one byte of
 * the file, so it lands on the read of that byte however the reads before
 * it were cut; a placed partial returns exactly the bytes before it.  The
 * decision is taken under a
 * mutex; the forwarded read and any delay happen outside it, so concurrent
 * readers are serialised only for the bookkeeping.
 *
 * A *stall* (XC_FAULT_STALL) is the one fault that waits for the test: the
 * pread that meets it blocks, before it reads, until xc_fault_release (or a
 * disarm) lets it go, or its bound of arg microseconds passes -- so a test
 * holds a chosen read under way for exactly as long as it needs, without
 * sleeping, and a stall nobody releases still ends.  xc_fault_stalled says
 * how many preads are blocked now: the test knows the read has begun (its
 * slot reserved, INFLIGHT) before it makes the call that races it.
 *
 * A *burst* (XC_FAULT_EINTR_BURST, XC_FAULT_EAGAIN_BURST) interleaves arg
 * interrupted preads in a row with a pread that makes some progress, so a
 * read meets more interrupts in total than the read loop's retry budget
 * but never that many in a row.  The *page-cache* kinds (XC_FAULT_NOWAIT_*)
 * meet the optional pread_nowait calls the loader makes before a piece's
 * preads, never preads: a partial copy, EAGAIN, a copy that meets end of
 * file, another errno.  While one is armed every other pread_nowait copies
 * as if the page cache held the file; while none is, pread_nowait answers
 * -EOPNOTSUPP ("cannot tell"), so the loader reads every piece with pread
 * and the pread faults count the same preads as without the hook.
 */
#ifndef XC_TEST_SEAMS
#error "xc_fault.c is a test seam: it is compiled into the instrumented build only (-DXC_TEST_SEAMS; engine/_build.py SEAM_SOURCES)"
#endif
#include "xc_internal.h"

#include <assert.h>
#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <time.h>

typedef struct handle_path {
    int64_t handle;
    char *path;
} handle_path;

struct xc_fault {
    xc_io vt;             /* our vtable; vt.ctx points back here */
    xc_io inner;          /* copied at open */
    xc_io base;           /* the innermost vtable (no injector): copies */
    int inner_is_fault;   /* inner is another injector's vtable */
    pthread_mutex_t mu;
    handle_path *handles; /* open handles and their paths */
    size_t n_handles, cap_handles;
    size_t n_opening;     /* opens under way: room is kept for each */
    /* arming */
    int kind;
    uint64_t nth;
    int persistent;
    int64_t arg;
    uint64_t progress;    /* bursts: bytes the pread after one may return */
    char *filter;         /* NULL = every file */
    int placed;           /* only preads covering byte `at` match */
    uint64_t at;
    uint64_t reads;       /* matching preads since arming */
    uint64_t fired;
    /* stalls (XC_FAULT_STALL) */
    pthread_cond_t stall_cv;  /* signalled when the release epoch moves */
    uint64_t stall_epoch;     /* moved by every release and disarm */
    uint64_t n_stalled;       /* preads blocked in a stall now */
    uint64_t stall_timeouts;  /* stalls that ended by their bound */
};

/* Path of handle h, or NULL; caller holds f->mu. */
static const char *path_of(const xc_fault *f, int64_t h)
{
    for (size_t i = 0; i < f->n_handles; i++)
        if (f->handles[i].handle == h)
            return f->handles[i].path;
    return NULL;
}

static int fault_open(void *ctx, const char *path, int direct,
                      int64_t *handle)
{
    xc_fault *f = ctx;
    int64_t h;
    char *copy;
    int rc;
    copy = xc_strdup(path);
    if (copy == NULL)
        return -ENOMEM;
    /* Reserve a table entry before opening, so that a successful open never
     * has to be undone for want of memory; the reservation counts opens
     * under way in other threads too. */
    pthread_mutex_lock(&f->mu);
    if (f->n_handles + f->n_opening == f->cap_handles) {
        size_t cap = f->cap_handles ? 2 * f->cap_handles : 8;
        handle_path *p = xc_realloc(f->handles, cap * sizeof *p);
        if (p == NULL) {
            pthread_mutex_unlock(&f->mu);
            xc_free(copy);
            return -ENOMEM;
        }
        f->handles = p;
        f->cap_handles = cap;
    }
    f->n_opening++;
    pthread_mutex_unlock(&f->mu);
    rc = f->inner.open(f->inner.ctx, path, direct, &h);
    pthread_mutex_lock(&f->mu);
    f->n_opening--;
    if (rc < 0) {
        pthread_mutex_unlock(&f->mu);
        xc_free(copy);
        return rc;
    }
    f->handles[f->n_handles].handle = h;
    f->handles[f->n_handles].path = copy;
    f->n_handles++;
    pthread_mutex_unlock(&f->mu);
    *handle = h;
    return 0;
}

static int is_nowait_kind(int kind)
{
    return kind >= XC_FAULT_NOWAIT_PARTIAL && kind <= XC_FAULT_NOWAIT_EIO;
}

static int is_burst_kind(int kind)
{
    return kind == XC_FAULT_EINTR_BURST || kind == XC_FAULT_EAGAIN_BURST;
}

/* Decides whether this pread (nowait: pread_nowait call) of [offset,
 * offset + len) meets the fault, and at which position *pos from its nth
 * (0 = the nth); caller holds f->mu. */
static int meets_fault(xc_fault *f, int64_t handle, uint64_t offset,
                       size_t len, int nowait, uint64_t *pos)
{
    const char *path;
    if (f->kind == XC_FAULT_NONE || is_nowait_kind(f->kind) != nowait)
        return 0;
    if (f->placed && (f->at < offset || f->at - offset >= len ||
                      (f->kind == XC_FAULT_PARTIAL && f->at == offset)))
        return 0;
    if (f->filter != NULL) {
        path = path_of(f, handle);
        if (path == NULL || strstr(path, f->filter) == NULL)
            return 0;
    }
    f->reads++;
    if (f->reads < f->nth)
        return 0;
    *pos = f->reads - f->nth;
    /* a transient burst is its arg interrupts and the progress after them */
    if (!f->persistent &&
        *pos > (is_burst_kind(f->kind) ? (uint64_t)f->arg : 0))
        return 0;
    f->fired++;
    return 1;
}

/* The CLOCK_MONOTONIC time us microseconds (>= 0) from now. */
static struct timespec deadline(int64_t us)
{
    struct timespec end;
    assert(us >= 0);
    clock_gettime(CLOCK_MONOTONIC, &end);
    end.tv_sec += (time_t)(us / 1000000);
    end.tv_nsec += (long)(us % 1000000) * 1000;
    if (end.tv_nsec >= 1000000000L) {
        end.tv_sec++;
        end.tv_nsec -= 1000000000L;
    }
    return end;
}

/* Blocks the calling pread (f->mu held, and held again on return) until the
 * release epoch moves or bound_us microseconds pass. */
static void stall(xc_fault *f, int64_t bound_us)
{
    struct timespec end = deadline(bound_us);
    uint64_t epoch = f->stall_epoch;
    assert(bound_us > 0);
    f->n_stalled++;
    pthread_cond_broadcast(&f->stall_cv); /* a waiter for the count */
    while (f->stall_epoch == epoch)
        if (pthread_cond_timedwait(&f->stall_cv, &f->mu, &end) == ETIMEDOUT) {
            if (f->stall_epoch == epoch)
                f->stall_timeouts++;
            break;
        }
    f->n_stalled--;
}

static int64_t fault_pread(void *ctx, int64_t handle, void *buf, size_t len,
                           uint64_t offset)
{
    xc_fault *f = ctx;
    int kind = XC_FAULT_NONE;
    int64_t arg = 0;
    uint64_t pos = 0, progress = 0;
    pthread_mutex_lock(&f->mu);
    if (meets_fault(f, handle, offset, len, 0, &pos)) {
        kind = f->kind;
        arg = f->placed && kind == XC_FAULT_PARTIAL ? (int64_t)(f->at - offset)
                                                    : f->arg;
        progress = f->progress;
    }
    if (kind == XC_FAULT_STALL)
        stall(f, arg); /* then read normally */
    pthread_mutex_unlock(&f->mu);
    switch (kind) {
    case XC_FAULT_PARTIAL:
        if (arg >= 0 && (uint64_t)arg < len)
            len = (size_t)arg;
        break;
    case XC_FAULT_EOF:
        return 0;
    case XC_FAULT_EIO:
        return -EIO;
    case XC_FAULT_EINTR:
        return -EINTR;
    case XC_FAULT_EAGAIN:
        return -EAGAIN;
    case XC_FAULT_EINTR_BURST:
    case XC_FAULT_EAGAIN_BURST:
        if (pos % ((uint64_t)arg + 1) < (uint64_t)arg)
            return kind == XC_FAULT_EINTR_BURST ? -EINTR : -EAGAIN;
        if (progress > 0 && progress < len)
            len = (size_t)progress;
        break;
    case XC_FAULT_DELAY: {
        struct timespec ts;
        ts.tv_sec = (time_t)(arg / 1000000);
        ts.tv_nsec = (long)(arg % 1000000) * 1000;
        while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
            ;
        break;
    }
    default:
        break;
    }
    return f->inner.pread(f->inner.ctx, handle, buf, len, offset);
}

/* pread_nowait: a page-cache fault when one is armed here (else every copy
 * is whole, as if all were cached); none armed: the inner injector's
 * answer, or -EOPNOTSUPP over the default vtable. */
static int64_t fault_pread_nowait(void *ctx, int64_t handle, void *buf,
                                  size_t len, uint64_t offset)
{
    xc_fault *f = ctx;
    int kind = XC_FAULT_NONE, armed;
    int64_t arg = 0;
    uint64_t pos = 0;
    pthread_mutex_lock(&f->mu);
    armed = is_nowait_kind(f->kind);
    if (meets_fault(f, handle, offset, len, 1, &pos)) {
        kind = f->kind;
        arg = f->arg;
    }
    pthread_mutex_unlock(&f->mu);
    if (!armed)
        return f->inner_is_fault ? f->inner.pread_nowait(f->inner.ctx, handle,
                                                         buf, len, offset)
                                 : -EOPNOTSUPP;
    switch (kind) {
    case XC_FAULT_NOWAIT_PARTIAL:
        if ((uint64_t)arg < len)
            len = (size_t)arg;
        break;
    case XC_FAULT_NOWAIT_EAGAIN:
        return -EAGAIN;
    case XC_FAULT_NOWAIT_EOF:
        return 0;
    case XC_FAULT_NOWAIT_EIO:
        return -EIO;
    default:
        break;
    }
    if (len == 0)
        return 0;
    return f->base.pread(f->base.ctx, handle, buf, len, offset);
}

static int fault_size(void *ctx, int64_t handle, uint64_t *out_bytes)
{
    xc_fault *f = ctx;
    return f->inner.size(f->inner.ctx, handle, out_bytes);
}

static int fault_close(void *ctx, int64_t handle)
{
    xc_fault *f = ctx;
    char *path = NULL;
    pthread_mutex_lock(&f->mu);
    for (size_t i = 0; i < f->n_handles; i++) {
        if (f->handles[i].handle == handle) {
            path = f->handles[i].path;
            f->handles[i] = f->handles[--f->n_handles];
            break;
        }
    }
    pthread_mutex_unlock(&f->mu);
    xc_free(path);
    return f->inner.close(f->inner.ctx, handle);
}

int xc_fault_open(const xc_io *inner, xc_fault **out)
{
    xc_fault *f = xc_calloc(1, sizeof *f);
    if (f == NULL)
        return xc_fail(XC_E_NOMEM, -1, -1, -1,
                       "out of memory creating a fault injector");
    f->inner = inner ? *inner : *xc_io_default();
    f->inner_is_fault = f->inner.pread == fault_pread;
    f->base = f->inner_is_fault ? ((xc_fault *)f->inner.ctx)->base : f->inner;
    f->vt.open = fault_open;
    f->vt.pread = fault_pread;
    f->vt.size = fault_size;
    f->vt.close = fault_close;
    f->vt.pread_nowait = fault_pread_nowait;
    f->vt.ctx = f;
    {
        pthread_condattr_t ca;
        int rc = pthread_condattr_init(&ca);
        if (rc == 0) {
            rc = pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
            if (rc == 0)
                rc = pthread_cond_init(&f->stall_cv, &ca);
            pthread_condattr_destroy(&ca);
        }
        if (rc != 0) {
            xc_free(f);
            return xc_fail(XC_E_NOMEM, -1, -1, -1, "fault injector: its "
                           "stall condition could not be made (%s)",
                           strerror(rc));
        }
    }
    pthread_mutex_init(&f->mu, NULL);
    *out = f;
    return XC_OK;
}

void xc_fault_close(xc_fault *f)
{
    if (f == NULL)
        return;
    for (size_t i = 0; i < f->n_handles; i++)
        xc_free(f->handles[i].path);
    xc_free(f->handles);
    xc_free(f->filter);
    pthread_cond_destroy(&f->stall_cv);
    pthread_mutex_destroy(&f->mu);
    xc_free(f);
}

const xc_io *xc_fault_io(const xc_fault *f) { return &f->vt; }

int xc_fault_arm(xc_fault *f, int kind, uint64_t nth, int persistent,
                 int64_t arg, const char *path_filter)
{
    char *filter = NULL;
    if (kind < XC_FAULT_PARTIAL || kind > XC_FAULT_NOWAIT_EIO)
        return xc_fail(XC_E_MISUSE, -1, -1, -1,
                       "unknown fault kind %d (valid: 1 partial, 2 eof, "
                       "3 eio, 4 eintr, 5 delay, 6 stall, 7 eagain, "
                       "8 eintr burst, 9 eagain burst, 10 nowait partial, "
                       "11 nowait eagain, 12 nowait eof, 13 nowait eio)",
                       kind);
    if (nth == 0)
        return xc_fail(XC_E_MISUSE, -1, -1, -1,
                       "fault countdown must start at 1, not 0");
    if (arg < 0)
        return xc_fail(XC_E_MISUSE, -1, -1, -1,
                       "fault argument must not be negative (got %lld)",
                       (long long)arg);
    if (kind == XC_FAULT_STALL && arg == 0)
        return xc_fail(XC_E_MISUSE, -1, -1, -1,
                       "a stall needs its bound: arg microseconds above 0");
    if (is_burst_kind(kind) && arg == 0)
        return xc_fail(XC_E_MISUSE, -1, -1, -1,
                       "a burst needs its length: arg interrupts above 0");
    if (path_filter != NULL && path_filter[0] != '\0') {
        filter = xc_strdup(path_filter);
        if (filter == NULL)
            return xc_fail(XC_E_NOMEM, -1, -1, -1,
                           "out of memory arming a fault");
    }
    pthread_mutex_lock(&f->mu);
    xc_free(f->filter);
    f->filter = filter;
    f->kind = kind;
    f->nth = nth;
    f->persistent = persistent != 0;
    f->arg = arg;
    f->progress = 0;
    f->reads = 0;
    f->fired = 0;
    f->placed = 0;
    pthread_mutex_unlock(&f->mu);
    return XC_OK;
}

int xc_fault_place(xc_fault *f, uint64_t at)
{
    assert(f != NULL);
    pthread_mutex_lock(&f->mu);
    if (f->kind == XC_FAULT_NONE) {
        pthread_mutex_unlock(&f->mu);
        return xc_fail(XC_E_MISUSE, -1, -1, -1,
                       "a fault is placed after it is armed: none is armed");
    }
    if (is_burst_kind(f->kind) || is_nowait_kind(f->kind)) {
        int kind = f->kind;
        pthread_mutex_unlock(&f->mu);
        return xc_fail(XC_E_MISUSE, -1, -1, -1, "fault kind %d cannot be "
                       "placed (only kinds 1 to 7: a burst or a page-cache "
                       "fault counts its own calls)", kind);
    }
    f->placed = 1;
    f->at = at;
    f->reads = 0;
    f->fired = 0;
    pthread_mutex_unlock(&f->mu);
    return XC_OK;
}

int xc_fault_progress(xc_fault *f, uint64_t bytes)
{
    assert(f != NULL);
    pthread_mutex_lock(&f->mu);
    if (!is_burst_kind(f->kind)) {
        pthread_mutex_unlock(&f->mu);
        return xc_fail(XC_E_MISUSE, -1, -1, -1,
                       "a burst's progress is set after it is armed: none "
                       "is armed");
    }
    f->progress = bytes;
    pthread_mutex_unlock(&f->mu);
    return XC_OK;
}

void xc_fault_disarm(xc_fault *f)
{
    pthread_mutex_lock(&f->mu);
    f->kind = XC_FAULT_NONE;
    xc_free(f->filter);
    f->filter = NULL;
    f->stall_epoch++; /* disarming lets every stalled read go */
    pthread_cond_broadcast(&f->stall_cv);
    pthread_mutex_unlock(&f->mu);
}

void xc_fault_release(xc_fault *f)
{
    assert(f != NULL);
    pthread_mutex_lock(&f->mu);
    f->stall_epoch++;
    pthread_cond_broadcast(&f->stall_cv);
    pthread_mutex_unlock(&f->mu);
}

int xc_fault_await_stalled(xc_fault *f, uint64_t n, int64_t timeout_us)
{
    struct timespec end = deadline(timeout_us > 0 ? timeout_us : 0);
    int met;
    assert(f != NULL);
    pthread_mutex_lock(&f->mu);
    while (f->n_stalled < n && timeout_us > 0)
        if (pthread_cond_timedwait(&f->stall_cv, &f->mu, &end) == ETIMEDOUT)
            break;
    met = f->n_stalled >= n;
    pthread_mutex_unlock(&f->mu);
    return met;
}

uint64_t xc_fault_stalled(const xc_fault *f)
{
    uint64_t n;
    pthread_mutex_lock((pthread_mutex_t *)&f->mu);
    n = f->n_stalled;
    pthread_mutex_unlock((pthread_mutex_t *)&f->mu);
    return n;
}

uint64_t xc_fault_stall_timeouts(const xc_fault *f)
{
    uint64_t n;
    pthread_mutex_lock((pthread_mutex_t *)&f->mu);
    n = f->stall_timeouts;
    pthread_mutex_unlock((pthread_mutex_t *)&f->mu);
    return n;
}

uint64_t xc_fault_reads(const xc_fault *f)
{
    uint64_t n;
    pthread_mutex_lock((pthread_mutex_t *)&f->mu);
    n = f->reads;
    pthread_mutex_unlock((pthread_mutex_t *)&f->mu);
    return n;
}

uint64_t xc_fault_fired(const xc_fault *f)
{
    uint64_t n;
    pthread_mutex_lock((pthread_mutex_t *)&f->mu);
    n = f->fired;
    pthread_mutex_unlock((pthread_mutex_t *)&f->mu);
    return n;
}

int64_t xc_fault_open_handles(const xc_fault *f)
{
    int64_t n;
    pthread_mutex_lock((pthread_mutex_t *)&f->mu);
    n = (int64_t)f->n_handles;
    pthread_mutex_unlock((pthread_mutex_t *)&f->mu);
    return n;
}
