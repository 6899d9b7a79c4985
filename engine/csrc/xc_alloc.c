/*
 * xc_alloc.c -- the one allocation wrapper and the one thread-start
 * wrapper, each with a countdown fault.
 *
 * Allocation failures are tested the way SQLite tests them: arm a countdown
 * so that the Nth allocation from now returns NULL (once, or from then on),
 * run an operation, and check that it failed cleanly or succeeded.  All
 * counters are C11 atomics so that the cache's worker threads can allocate
 * while a test arms the fault.  xc_alloc_live() lets a test prove that every
 * allocation made by an operation was given back.
 *
 * Thread starts get the same treatment on a countdown of their own
 * (xc_thread_fail_at).  They are not folded into the allocation count
 * because (1) a refused start is an error number (EAGAIN, as pthread_create
 * returns when a thread or memory limit is hit), not a NULL, so the callers'
 * failure paths differ; (2) counting them as allocations would renumber
 * every allocation after the first thread start, so the allocation loops'
 * counts (faults/README.md F10, F11) would silently change meaning; and (3)
 * with a count of its own a test names "the k-th thread start" directly,
 * without knowing how many allocations come before it.
 *
 * The countdowns and counters are test seams: they exist in the
 * instrumented build only (XC_TEST_SEAMS, xc_test.h).  In the release build
 * refuse() is the constant 0 and LIVE() nothing, so each wrapper compiles
 * to the plain call -- no atomic touched on any allocation -- and none of
 * the xc_alloc_* / xc_thread_* control functions exists to be called.
 */
#include "xc_internal.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#ifdef XC_TEST_SEAMS
/* One countdown: calls counted, the call that fails, refusals made. */
typedef struct countdown {
    _Atomic uint64_t n_calls;   /* attempts so far */
    _Atomic uint64_t fail_at;   /* n_calls value that fails; 0 = off */
    _Atomic int persistent;     /* every attempt after fail_at fails too */
    _Atomic uint64_t n_refused;
} countdown;

static countdown allocs, starts;
static _Atomic int64_t n_live;        /* successful minus freed */

static void arm(countdown *cd, uint64_t n, int persistent)
{
    atomic_store(&cd->persistent, persistent != 0);
    atomic_store(&cd->fail_at, n == 0 ? 0 : atomic_load(&cd->n_calls) + n);
}

/* Counts one attempt; returns 1 if the armed fault refuses it. */
static int refuse(countdown *cd)
{
    uint64_t k = atomic_fetch_add(&cd->n_calls, 1) + 1;
    uint64_t at = atomic_load(&cd->fail_at);
    if (at == 0 || k < at)
        return 0;
    if (k == at || atomic_load(&cd->persistent)) {
        atomic_fetch_add(&cd->n_refused, 1);
        return 1;
    }
    return 0;
}

void xc_alloc_fail_at(uint64_t n, int persistent)
{
    arm(&allocs, n, persistent);
}

uint64_t xc_alloc_count(void) { return atomic_load(&allocs.n_calls); }
int64_t xc_alloc_live(void) { return atomic_load(&n_live); }
uint64_t xc_alloc_failures(void) { return atomic_load(&allocs.n_refused); }

void xc_thread_fail_at(uint64_t n, int persistent)
{
    arm(&starts, n, persistent);
}

uint64_t xc_thread_count(void) { return atomic_load(&starts.n_calls); }
uint64_t xc_thread_failures(void) { return atomic_load(&starts.n_refused); }

/* Counts d successful allocations (-1: one freed). */
#define LIVE(d) atomic_fetch_add(&n_live, (d))
#else
/* The release build: nothing refused, nothing counted. */
#define refuse(cd) 0
#define LIVE(d) ((void)0)
#endif /* XC_TEST_SEAMS */

int xc_thread_start(pthread_t *t, void *(*fn)(void *), void *arg)
{
    if (refuse(&starts))
        return EAGAIN;
    return pthread_create(t, NULL, fn, arg);
}

void *xc_malloc(size_t n)
{
    void *p;
    if (refuse(&allocs))
        return NULL;
    p = malloc(n ? n : 1);
    if (p)
        LIVE(1);
    return p;
}

void *xc_calloc(size_t count, size_t size)
{
    void *p;
    if (refuse(&allocs))
        return NULL;
    p = calloc(count ? count : 1, size ? size : 1);
    if (p)
        LIVE(1);
    return p;
}

void *xc_realloc(void *old, size_t n)
{
    void *p;
    if (old == NULL)
        return xc_malloc(n);
    if (refuse(&allocs))
        return NULL; /* old stays valid, as with realloc */
    p = realloc(old, n ? n : 1);
    return p;
}

void *xc_aligned_alloc(size_t align, size_t n)
{
    void *p = NULL;
    if (refuse(&allocs))
        return NULL;
    if (posix_memalign(&p, align, n ? n : 1) != 0)
        return NULL;
    LIVE(1);
    return p;
}

char *xc_strdup(const char *s)
{
    size_t n = strlen(s) + 1;
    char *p = xc_malloc(n);
    if (p)
        memcpy(p, s, n);
    return p;
}

void xc_free(void *p)
{
    if (p == NULL)
        return;
    LIVE(-1);
    free(p);
}
