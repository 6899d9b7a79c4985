/*
 * xc_trace.c -- the cache's access trace (docs/TRACE_FORMAT.md): records
 * buffered under the cache lock and written in blocks, the header with the
 * container fingerprint, opened as the last step of cache open.
 */
#include "xc_core.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* The names of the read kinds and outcomes, from their lists
 * (xc_kinds.h). */
#define XC_NAME_(n, name) name,
static const char *const kind_names[] = {XC_READ_KINDS(XC_NAME_)};
static const char *const outcome_names[] = {XC_TRACE_OUTCOMES(XC_NAME_)};
#undef XC_NAME_

const char *xc_read_kind_name(int kind)
{
    return kind >= 0 && kind < XC_N_KINDS ? kind_names[kind] : NULL;
}

const char *xc_trace_outcome_name(int outcome)
{
    return outcome >= 0 && outcome < XC_N_OUTCOMES ? outcome_names[outcome]
                                                   : NULL;
}

static void put_le(uint8_t *p, uint64_t v, unsigned n)
{
    unsigned i;
    for (i = 0; i < n; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

/* Writes the buffered records (mu held, or the cache not shared yet). */
int xc_trace_write(xc_cache *c)
{
    if (c->tr == NULL || c->tr_failed || c->tr_n == 0)
        return XC_OK;
    if (fwrite(c->tr_buf, TRACE_RECORD_BYTES, c->tr_n, c->tr) != c->tr_n ||
        fflush(c->tr) != 0) {
        int e = errno;
        c->tr_failed = 1;
        snprintf(c->tr_note, sizeof c->tr_note,
                 "trace write failed, recording stopped: %s (errno %d)",
                 strerror(e), e);
    }
    c->tr_n = 0;
    return c->tr_failed ? XC_E_IO : XC_OK;
}

/* Appends one record (mu held): step, layer, expert, kind, outcome. */
void xc_trace_put(xc_cache *c, int kind, int outcome, uint32_t key)
{
    uint8_t *r;
    int32_t layer, expert;
    assert(kind >= 0 && kind < XC_N_KINDS && outcome >= 0 &&
           outcome < XC_N_OUTCOMES && key < c->ld.n_keys);
    if (c->tr == NULL || c->tr_failed)
        return;
    /* tracing: asserted only here, off the untraced hit path (xc_locked) */
    assert(xc_locked(&c->mu) && c->tr_n < c->tr_cap);
    xc_load_unkey(&c->ld, key, &layer, &expert);
    r = c->tr_buf + c->tr_n * TRACE_RECORD_BYTES;
    memset(r, 0, TRACE_RECORD_BYTES);
    put_le(r, c->tr_step, 8);
    put_le(r + 8, (uint32_t)layer, 4);
    put_le(r + 12, (uint32_t)expert, 4);
    r[16] = (uint8_t)kind;
    r[17] = (uint8_t)outcome;
    if (++c->tr_n == c->tr_cap)
        (void)xc_trace_write(c);
}

/* FNV-1a 64 over little-endian u64 words. */
static uint64_t fnv_words(uint64_t h, const uint64_t *w, size_t n)
{
    size_t i;
    unsigned b;
    for (i = 0; i < n; i++)
        for (b = 0; b < 8; b++) {
            h ^= (uint8_t)(w[i] >> (8 * b));
            h *= 0x100000001b3ull;
        }
    return h;
}

/* The container fingerprint of docs/TRACE_FORMAT.md: FNV-1a 64 over
 * n_keys words [expert_bytes, n_experts, then per key its layer and the
 * file offset of its first tensor]. */
static uint64_t fingerprint(const xc_loader *ld)
{
    uint64_t h = 0xcbf29ce484222325ull, w[2];
    uint32_t k;
    w[0] = ld->expert_bytes;
    w[1] = (uint64_t)ld->n_experts;
    h = fnv_words(h, w, 2);
    for (k = 0; k < ld->n_keys; k++) {
        int32_t layer, expert;
        xc_load_unkey(ld, k, &layer, &expert);
        w[0] = (uint64_t)(uint32_t)layer;
        w[1] = ld->file_offset[(size_t)k * ld->n_tensors];
        h = fnv_words(h, w, 2);
    }
    return h;
}

/* Refuses trace_path (XC_E_MISUSE, naming it) with the reason why; closes
 * fd.  Nothing was written. */
static int refuse(int fd, const char *path, const char *why, const char *arg)
{
    close(fd);
    return xc_fail(XC_E_MISUSE, -1, -1, -1, "cache open: refusing to write "
                   "the trace to %s: %s%s", path, why, arg ? arg : "");
}

/* Opens the trace file and writes its header (docs/TRACE_FORMAT.md).  It
 * is the last step of cache open, so an open that fails earlier never
 * creates or changes the file.  Links are followed.  Only what the project
 * may write over is written (docs/DESIGN.md, "Only regular files"): a path
 * naming nothing yet (created), an empty regular file or an earlier trace
 * (one that starts with the trace magic), or a stream -- a FIFO some
 * process is reading, a character device -- written in place.  Anything
 * else is refused (XC_E_MISUSE, naming the file and why) with nothing
 * changed: a file that is not a trace, any file of the open container
 * (same device and inode, so a hard or symbolic link to a shard is that
 * shard), a FIFO no process reads (which would block), a directory or a
 * block device.  No open here blocks (O_NONBLOCK until the checks pass).
 * A regular file is cut to the header only once the header is written.
 * If the header cannot be written, a file this call created is removed
 * again; a file that was there keeps its length. */
int xc_trace_open(xc_cache *c, const char *path)
{
    const int base = O_NONBLOCK | O_NOCTTY | O_CLOEXEC;
    uint8_t h[TRACE_HEADER_BYTES], magic[8];
    char real[PATH_MAX];
    const char *own;
    struct stat sb;
    int e, fd, fl, created = 0;
    memset(h, 0, sizeof h);
    memcpy(h, TRACE_MAGIC, 8);
    put_le(h + 8, TRACE_VERSION, 4);
    put_le(h + 12, TRACE_RECORD_BYTES, 4);
    put_le(h + 16, fingerprint(&c->ld), 8);
    put_le(h + 24, (uint32_t)(c->ld.layers[c->ld.n_layers - 1] + 1), 4);
    put_le(h + 28, (uint32_t)c->ld.n_experts, 4);
    put_le(h + 32, (uint32_t)c->top_k, 4);
    put_le(h + 36, (uint32_t)c->n_slots, 4);
    fd = open(path, O_RDWR | base);
    if (fd < 0 && errno == ENOENT &&
        (fd = open(path, O_RDWR | O_CREAT | base, 0666)) >= 0)
        created = 1;
    if (fd >= 0 && fstat(fd, &sb) == 0 && S_ISFIFO(sb.st_mode)) {
        /* Read-write would keep the FIFO open with no reader; write-only
         * without blocking fails (ENXIO) when nobody reads it. */
        close(fd);
        fd = open(path, O_WRONLY | base);
        if (fd < 0 && errno == ENXIO)
            return xc_fail(XC_E_MISUSE, -1, -1, -1, "cache open: refusing "
                           "to write the trace to %s: it is a FIFO that no "
                           "process is reading (start the reader first)",
                           path);
        if (fd >= 0 && fstat(fd, &sb) == 0 && !S_ISFIFO(sb.st_mode))
            return refuse(fd, path, "it changed while being opened", NULL);
    }
    if (fd < 0 || fstat(fd, &sb) != 0) {
        e = errno;
        if (fd >= 0)
            close(fd);
        return xc_fail(XC_E_IO, -1, -1, -1, "cache open: cannot write trace "
                       "file %s: %s (errno %d)", path, strerror(e), e);
    }
    if (S_ISREG(sb.st_mode)) {
        own = xc_st_file_with_id(c->ld.st, (uint64_t)sb.st_dev,
                                 (uint64_t)sb.st_ino);
        if (own != NULL)
            return refuse(fd, path, "it is the open container's own file ",
                          own);
        if (sb.st_size > 0 &&
            (pread(fd, magic, sizeof magic, 0) != (ssize_t)sizeof magic ||
             memcmp(magic, TRACE_MAGIC, sizeof magic) != 0))
            return refuse(fd, path, "the file exists and is not an xcache "
                          "trace (it does not start with " TRACE_MAGIC "); "
                          "remove it or name another file", NULL);
    } else if (!S_ISFIFO(sb.st_mode) && !S_ISCHR(sb.st_mode)) {
        return refuse(fd, path, "it is ", xc_file_type_name(sb.st_mode));
    }
    if ((fl = fcntl(fd, F_GETFL)) < 0 ||
        fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) != 0)
        goto fail;
    if ((c->tr = fdopen(fd, "wb")) != NULL &&
        fwrite(h, 1, sizeof h, c->tr) == sizeof h && fflush(c->tr) == 0 &&
        (!S_ISREG(sb.st_mode) || ftruncate(fd, (off_t)sizeof h) == 0))
        return XC_OK;
fail:
    e = errno;
    if (c->tr != NULL)
        fclose(c->tr);
    else
        close(fd);
    c->tr = NULL;
    if (created && realpath(path, real) != NULL)
        unlink(real); /* what the open created, even through a link */
    return xc_fail(XC_E_IO, -1, -1, -1, "cache open: cannot write trace "
                   "file %s: %s (errno %d)", path, strerror(e), e);
}

void xc_cache_set_step(xc_cache *c, uint64_t step)
{
    pthread_mutex_lock(&c->mu);
    c->tr_step = step;
    pthread_mutex_unlock(&c->mu);
}

int xc_cache_trace_flush(xc_cache *c)
{
    int rc;
    pthread_mutex_lock(&c->mu);
    rc = xc_trace_write(c);
    if (rc == XC_OK && c->tr_failed)
        rc = XC_E_IO;
    if (rc != XC_OK)
        xc_fail(rc, -1, -1, -1, "%s", c->tr_note);
    pthread_mutex_unlock(&c->mu);
    return rc;
}

