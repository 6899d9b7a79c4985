/*
 * xc_st_mem.c -- the memory the safetensors reader's tables live in.
 *
 * The reader's other files (xc_st.c, xc_index.c, xc_header.c, xc_names.c)
 * grow their arrays, advise big buffers onto huge pages, join paths and
 * record running out of memory through these, and these call nothing of
 * theirs: the bottom of the reader's one-way calls (xc_reader.h).
 */
#include "xc_reader.h"

#include <stdlib.h>
#include <string.h>
#if defined(__linux__)
#include <sys/mman.h>
#endif

/* ------------------------------------------------------------------ */
/* Growing arrays and huge pages                                        */
/* ------------------------------------------------------------------ */

void xc_st_advise_huge(void *p, size_t bytes)
{
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    const uintptr_t huge = (uintptr_t)2 << 20;
    uintptr_t a, e;
    if (p == NULL || bytes < HUGE_MIN)
        return;
    a = ((uintptr_t)p + huge - 1) & ~(huge - 1);
    e = ((uintptr_t)p + bytes) & ~(huge - 1);
    if (e > a)
        (void)madvise((void *)a, e - a, MADV_HUGEPAGE);
#else
    (void)p;
    (void)bytes;
#endif
}

/* Grows an array of elem-byte items to hold one more; NOMEM keeps it.
 * Large arrays (the tensor table of a big header) are advised onto huge
 * pages: the half each doubling adds is not touched yet. */
int xc_st_grow(void **arr, size_t *cap, size_t n, size_t elem)
{
    size_t ncap;
    void *p;
    if (n < *cap)
        return XC_OK;
    ncap = *cap ? *cap * 2 : 16;
    if (ncap > SIZE_MAX / elem)
        return XC_E_NOMEM;
    p = xc_realloc(*arr, ncap * elem);
    if (p == NULL)
        return XC_E_NOMEM;
    *arr = p;
    *cap = ncap;
    xc_st_advise_huge(p, ncap * elem);
    return XC_OK;
}

int xc_st_nomem(const char *path, const char *what)
{
    return xc_fail(XC_E_NOMEM, -1, -1, -1, "%s: out of memory (%s)",
                   path ? path : "(container)", what);
}

/* "dir/name" from xc_malloc, or NULL. */
char *xc_st_join_path(const char *dir, const char *name)
{
    size_t a = strlen(dir), b = strlen(name);
    char *p = xc_malloc(a + b + 2);
    if (p == NULL)
        return NULL;
    memcpy(p, dir, a);
    p[a] = '/';
    memcpy(p + a + 1, name, b + 1);
    return p;
}
