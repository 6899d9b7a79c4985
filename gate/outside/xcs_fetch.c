/*
 * xcs_fetch.c -- the gate's fetch function, for a cache with no I/O of its
 * own (xcs_shim.h, ABI 3; the manifest's [design] io = "callback").
 *
 * Such a cache is handed a function that fills a buffer with an expert's
 * payload, and calls it from wherever it reads (its own reader threads
 * included).  The gate supplies that function so that the reads under it
 * are the gate's, made with plain pread: when the manifest declares
 * fault:io the build wraps pread (xcs_faults.c), the injectors break the
 * fetch's reads, and the fault contracts judge what the cache does with a
 * fetch that failed -- not what a shim's own reading code does.
 *
 * The context is made before the cache's open from the layout open() is
 * given (xcs_fetch_new copies what it needs and opens each file once) and
 * freed after its close (xcs_fetch_free).  xcs_fetch only reads the
 * context, so any number of threads may call it at once.
 *
 * It reads as the engine does (docs/CACHE.md), so that a fault armed for
 * "the nth read" lands on the same expert under either: the pieces of an
 * expert that follow one another in one file are one run, read by one
 * pread; a read interrupted (EINTR, EAGAIN) is made again, up to
 * XCS_FETCH_MAX_RETRIES times in a row without a byte of progress (the
 * engine's XC_IO_MAX_RETRIES), then it is XCS_EIO; a read returning fewer
 * bytes is continued from where it stopped; a read returning nothing
 * before the run's end is XCS_ESHORT and one failing is XCS_EIO.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "xcs_shim.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Consecutive interrupted reads without progress before a fetch fails
 * (engine/csrc/xc.h XC_IO_MAX_RETRIES). */
#define XCS_FETCH_MAX_RETRIES 1000

/* What dst holds after a failed fetch: a cache that publishes it serves
 * bytes that are not the expert's (the gate's wrong_reads). */
#define XCS_FETCH_POISON 0xA5

typedef struct fetch_piece {
    int file;           /* index into fetch_ctx.fds */
    uint64_t offset, length;
} fetch_piece;

typedef struct fetch_ctx {
    int n_layers, n_experts, n_pieces, n_files;
    uint64_t expert_bytes;
    int *fds;               /* n_files descriptors, each opened once */
    fetch_piece *pieces;    /* n_layers * n_experts * n_pieces: each key's
                             * runs first, the rest of its row unused */
    int *n_runs;            /* n_layers * n_experts: runs of each key */
} fetch_ctx;

void xcs_fetch_free(void *ctx)
{
    fetch_ctx *c = ctx;
    if (c == NULL)
        return;
    for (int i = 0; i < c->n_files; i++)
        if (c->fds[i] >= 0)
            close(c->fds[i]);
    free(c->fds);
    free(c->pieces);
    free(c->n_runs);
    free(c);
}

/* The index of `path` among the first n of `paths`, else -1 (the last
 * match is tried first: consecutive pieces mostly share a file). */
static int find_path(const char **paths, int n, const char *path, int last)
{
    if (last >= 0 && strcmp(paths[last], path) == 0)
        return last;
    for (int i = n - 1; i >= 0; i--)
        if (strcmp(paths[i], path) == 0)
            return i;
    return -1;
}

void *xcs_fetch_new(const xcs_layout *lay)
{
    assert(lay != NULL);
    if (lay->n_layers < 1 || lay->n_experts < 1 || lay->n_pieces < 1 ||
        lay->pieces == NULL)
        return NULL;
    size_t total = (size_t)lay->n_layers * (size_t)lay->n_experts *
                   (size_t)lay->n_pieces;
    fetch_ctx *c = calloc(1, sizeof *c);
    const char **paths = calloc(total, sizeof *paths);
    if (c == NULL || paths == NULL)
        goto fail;
    c->n_layers = lay->n_layers;
    c->n_experts = lay->n_experts;
    c->n_pieces = lay->n_pieces;
    c->expert_bytes = lay->expert_bytes;
    size_t n_keys = (size_t)lay->n_layers * (size_t)lay->n_experts;
    c->pieces = calloc(total, sizeof *c->pieces);
    c->n_runs = calloc(n_keys, sizeof *c->n_runs);
    if (c->pieces == NULL || c->n_runs == NULL)
        goto fail;
    int last = -1;
    for (size_t k = 0; k < n_keys; k++) {
        fetch_piece *row = &c->pieces[k * (size_t)lay->n_pieces];
        int n = 0;
        for (int j = 0; j < lay->n_pieces; j++) {
            const xcs_piece *p = &lay->pieces[k * (size_t)lay->n_pieces +
                                              (size_t)j];
            if (p->path == NULL)
                goto fail;
            int f = find_path(paths, c->n_files, p->path, last);
            if (f < 0) {
                f = c->n_files;
                paths[c->n_files++] = p->path;
            }
            last = f;
            if (n > 0 && row[n - 1].file == f &&
                row[n - 1].offset + row[n - 1].length == p->offset)
                row[n - 1].length += p->length;  /* one run with the last */
            else
                row[n++] = (fetch_piece){f, p->offset, p->length};
        }
        c->n_runs[k] = n;
    }
    c->fds = malloc((size_t)c->n_files * sizeof *c->fds);
    if (c->fds == NULL)
        goto fail;
    for (int i = 0; i < c->n_files; i++)
        c->fds[i] = -1;
    for (int i = 0; i < c->n_files; i++) {
        do
            c->fds[i] = open(paths[i], O_RDONLY | O_CLOEXEC);
        while (c->fds[i] < 0 && errno == EINTR);
        if (c->fds[i] < 0)
            goto fail;
    }
    free(paths);
    return c;
fail:
    free(paths);
    xcs_fetch_free(c);
    return NULL;
}

/* The fetch of one key into dst; the caller poisons dst on failure. */
static int fetch_runs(const fetch_ctx *c, size_t key, char *out)
{
    const fetch_piece *p = &c->pieces[key * (size_t)c->n_pieces];
    for (int i = 0; i < c->n_runs[key]; i++, p++) {
        uint64_t done = 0;
        unsigned retries = 0;
        while (done < p->length) {
            ssize_t r = pread(c->fds[p->file], out + done,
                              (size_t)(p->length - done),
                              (off_t)(p->offset + done));
            if (r < 0 && (errno == EINTR || errno == EAGAIN) &&
                ++retries < XCS_FETCH_MAX_RETRIES)
                continue;
            if (r < 0)
                return XCS_EIO;
            if (r == 0)
                return XCS_ESHORT;
            done += (uint64_t)r;
            retries = 0;
        }
        out += p->length;
    }
    return XCS_OK;
}

int xcs_fetch(void *ctx, int layer, int expert, void *dst, uint64_t len)
{
    const fetch_ctx *c = ctx;
    if (c == NULL || dst == NULL || layer < 0 || layer >= c->n_layers ||
        expert < 0 || expert >= c->n_experts || len < c->expert_bytes)
        return XCS_EMISUSE;
    size_t key = (size_t)layer * (size_t)c->n_experts + (size_t)expert;
    int rc = fetch_runs(c, key, dst);
    if (rc != XCS_OK)  /* unspecified: never the right bytes by luck */
        memset(dst, XCS_FETCH_POISON, (size_t)c->expert_bytes);
    return rc;
}
