/*
 * xc_internal.h -- helpers shared by the engine's C files; not public.
 */
#ifndef XC_INTERNAL_H
#define XC_INTERNAL_H

#include "xc.h"

#include <stdarg.h>

#if defined(__GNUC__)
#define XC_PRINTF(a, b) __attribute__((format(printf, a, b)))
#define XC_UNUSED __attribute__((unused))
#else
#define XC_PRINTF(a, b)
#define XC_UNUSED
#endif

/* Records a failure in this thread's error record and returns code, so a
 * failing path reads `return xc_fail(XC_E_IO, off, -1, -1, "...", ...)`.
 * offset, layer and expert are -1 when they do not apply. */
int xc_fail(int code, int64_t offset, int32_t layer, int32_t expert,
            const char *fmt, ...) XC_PRINTF(5, 6);

/* The allocation wrapper (see xc_alloc_fail_at in xc.h).  xc_malloc and
 * xc_calloc return NULL when the armed fault fires or the system is out of
 * memory; they do not record an error (the caller knows what it was
 * allocating and says so).  xc_free(NULL) is a no-op.  xc_aligned_alloc
 * returns memory aligned to align (a power of two >= sizeof(void *)). */
void *xc_malloc(size_t n);
void *xc_calloc(size_t count, size_t size);
void *xc_realloc(void *p, size_t n);
void *xc_aligned_alloc(size_t align, size_t n);
char *xc_strdup(const char *s);
void xc_free(void *p);

#endif /* XC_INTERNAL_H */
