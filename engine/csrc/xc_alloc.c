/*
 * xc_alloc.c -- the one allocation wrapper, with a countdown fault.
 *
 * Allocation failures are tested the way SQLite tests them: arm a countdown
 * so that the Nth allocation from now returns NULL (once, or from then on),
 * run an operation, and check that it failed cleanly or succeeded.  All
 * counters are C11 atomics so that the cache's worker threads can allocate
 * while a test arms the fault.  xc_alloc_live() lets a test prove that every
 * allocation made by an operation was given back.
 */
#include "xc_internal.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

static _Atomic uint64_t n_calls;      /* allocations attempted so far */
static _Atomic int64_t n_live;        /* successful minus freed */
static _Atomic uint64_t fail_at;      /* n_calls value that fails; 0 = off */
static _Atomic int fail_persistent;
static _Atomic uint64_t n_refused;

void xc_alloc_fail_at(uint64_t n, int persistent)
{
    atomic_store(&fail_persistent, persistent != 0);
    atomic_store(&fail_at, n == 0 ? 0 : atomic_load(&n_calls) + n);
}

uint64_t xc_alloc_count(void) { return atomic_load(&n_calls); }
int64_t xc_alloc_live(void) { return atomic_load(&n_live); }
uint64_t xc_alloc_failures(void) { return atomic_load(&n_refused); }

/* Counts one attempt; returns 1 if the armed fault refuses it. */
static int refuse(void)
{
    uint64_t k = atomic_fetch_add(&n_calls, 1) + 1;
    uint64_t at = atomic_load(&fail_at);
    if (at == 0 || k < at)
        return 0;
    if (k == at || atomic_load(&fail_persistent)) {
        atomic_fetch_add(&n_refused, 1);
        return 1;
    }
    return 0;
}

void *xc_malloc(size_t n)
{
    void *p;
    if (refuse())
        return NULL;
    p = malloc(n ? n : 1);
    if (p)
        atomic_fetch_add(&n_live, 1);
    return p;
}

void *xc_calloc(size_t count, size_t size)
{
    void *p;
    if (refuse())
        return NULL;
    p = calloc(count ? count : 1, size ? size : 1);
    if (p)
        atomic_fetch_add(&n_live, 1);
    return p;
}

void *xc_realloc(void *old, size_t n)
{
    void *p;
    if (old == NULL)
        return xc_malloc(n);
    if (refuse())
        return NULL; /* old stays valid, as with realloc */
    p = realloc(old, n ? n : 1);
    return p;
}

void *xc_aligned_alloc(size_t align, size_t n)
{
    void *p = NULL;
    if (refuse())
        return NULL;
    if (posix_memalign(&p, align, n ? n : 1) != 0)
        return NULL;
    atomic_fetch_add(&n_live, 1);
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
    atomic_fetch_sub(&n_live, 1);
    free(p);
}
