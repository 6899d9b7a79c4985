/*
 * xc_io.c -- the I/O seam: the default POSIX vtable and the full-read loop.
 *
 * Every byte of expert data enters the engine through an xc_io vtable.  The
 * vtable is deliberately raw -- one pread is one system call that may come
 * back short, interrupted or failed -- and the loop that turns it into "all
 * of this range or a clear error" lives here, above the vtable.  That split
 * is what lets the fault layer inject EINTR storms and partial reads *under*
 * the loop and prove that the loop, not luck, handles them.
 *
 * O_DIRECT is opt-in and never trusted on the word of open(): some file
 * systems (tmpfs among them) refuse the flag, others accept it and then fail
 * the first read with EINVAL.  xc_io_open_probed therefore reads one aligned
 * block before calling O_DIRECT "active", and on any refusal reopens the file
 * buffered and writes the reason into a note the caller reports -- a silent
 * fallback would make a benchmark of "direct" reads measure the page cache.
 * Direct reads must start, end and land on XC_DIRECT_ALIGN boundaries.
 * Every widened read -- xc_io_read_aligned here, the loader's O_DIRECT
 * experts, the reader's bounce-buffered tensors -- takes its window from
 * xc_io_window and reads it (whole or in pieces) with xc_io_read_window,
 * which holds the one past-end-of-file rule: the window may run past the
 * end of the file, the payload may not.
 */
#include "xc_internal.h"

#include <assert.h>
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

const char *xc_file_type_name(unsigned mode)
{
    switch (mode & S_IFMT) {
    case S_IFREG: return "a regular file";
    case S_IFDIR: return "a directory";
    case S_IFIFO: return "a FIFO";
    case S_IFCHR: return "a character device";
    case S_IFBLK: return "a block device";
    case S_IFSOCK: return "a socket";
    case S_IFLNK: return "a symbolic link";
    default: return "not a regular file";
    }
}

int xc_open_regular(const char *path, int flags, int *fd_out)
{
    struct stat st;
    int fd, fl;
    assert(path != NULL && fd_out != NULL);
    /* O_NONBLOCK: opening a FIFO (or a tty, a device) for reading may wait
     * for a writer forever; with it, the open returns at once and fstat
     * says what was opened before anything can block. */
    do {
        fd = open(path, flags | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    } while (fd < 0 && errno == EINTR);
    if (fd < 0)
        return -errno;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return -e;
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return XC_IO_NOT_REGULAR(st.st_mode);
    }
    if ((fl = fcntl(fd, F_GETFL)) < 0 ||
        fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) != 0) {
        int e = errno;
        close(fd);
        return -e;
    }
    *fd_out = fd;
    return 0;
}

static int posix_open(void *ctx, const char *path, int direct,
                      int64_t *handle)
{
    int flags = O_RDONLY;
    int fd = -1, rc;
    (void)ctx;
#ifdef O_DIRECT
    if (direct)
        flags |= O_DIRECT;
#else
    if (direct)
        return -EINVAL;
#endif
    if ((rc = xc_open_regular(path, flags, &fd)) != 0)
        return rc;
    *handle = fd;
    return 0;
}

static int64_t posix_pread(void *ctx, int64_t handle, void *buf, size_t len,
                           uint64_t offset)
{
    ssize_t n;
    (void)ctx;
    if (offset > (uint64_t)INT64_MAX)
        return -EINVAL;
    n = pread((int)handle, buf, len, (off_t)offset);
    return n < 0 ? -errno : (int64_t)n;
}

static int posix_size(void *ctx, int64_t handle, uint64_t *out_bytes)
{
    struct stat st;
    (void)ctx;
    if (fstat((int)handle, &st) != 0)
        return -errno;
    *out_bytes = (uint64_t)st.st_size;
    return 0;
}

static int posix_close(void *ctx, int64_t handle)
{
    (void)ctx;
    /* POSIX leaves the descriptor state unspecified after EINTR on close;
     * on Linux it is always released, so never retry. */
    return close((int)handle) == 0 ? 0 : -errno;
}

#if defined(__linux__) && defined(RWF_NOWAIT)
/* preadv2(RWF_NOWAIT): copies only what the page cache holds; -EAGAIN when
 * the first byte would need the device.  This is how a load learns whether
 * its bytes came from memory or from the device without a second read. */
static int64_t posix_pread_nowait(void *ctx, int64_t handle, void *buf,
                                  size_t len, uint64_t offset)
{
    struct iovec iov;
    ssize_t n;
    (void)ctx;
    if (offset > (uint64_t)INT64_MAX)
        return -EINVAL;
    iov.iov_base = buf;
    iov.iov_len = len;
    n = preadv2((int)handle, &iov, 1, (off_t)offset, RWF_NOWAIT);
    return n < 0 ? -errno : (int64_t)n;
}
#define XC_PREAD_NOWAIT posix_pread_nowait
#else
#define XC_PREAD_NOWAIT NULL
#endif

static const xc_io posix_io = {posix_open, posix_pread, posix_size,
                               posix_close, NULL, XC_PREAD_NOWAIT};

const xc_io *xc_io_default(void) { return &posix_io; }

/* XC_IO_MAX_RETRIES (xc.h): a signal storm that long is a fault to report,
 * not to spin on forever. */

/* Records that a read wanting [want_off, want_off + want_len) met end of
 * file at byte eof_at: how many of the wanted bytes arrived, and where the
 * file ended (the error's offset).  One sentence for every short read, so
 * a buffered and a widened read of the same bytes fail alike. */
static int fail_short(const char *path, uint64_t want_off, size_t want_len,
                      uint64_t eof_at)
{
    return xc_fail(XC_E_SHORT_READ, (int64_t)eof_at, -1, -1,
                   "%s: short read: %zu of %zu bytes at byte %llu "
                   "(end of file at byte %llu)", path ? path : "(file)",
                   eof_at > want_off ? (size_t)(eof_at - want_off) : 0,
                   want_len, (unsigned long long)want_off,
                   (unsigned long long)eof_at);
}

/* The read loop behind xc_io_read_full and xc_io_read_window.  With
 * eof_ok, end of file ends the loop quietly (the caller decides whether
 * what arrived is enough); otherwise it is XC_E_SHORT_READ. */
static int read_loop(const xc_io *io, int64_t handle, const char *path,
                     void *buf, size_t len, uint64_t offset, size_t *got,
                     int eof_ok)
{
    size_t done = 0;
    unsigned retries = 0;
    unsigned char *p = buf;
    while (done < len) {
        int64_t n = io->pread(io->ctx, handle, p + done, len - done,
                              offset + done);
        if ((n == -EINTR || n == -EAGAIN) && ++retries < XC_IO_MAX_RETRIES)
            continue;
        if (n < 0) {
            if (got)
                *got = done;
            return xc_fail(XC_E_IO, (int64_t)(offset + done), -1, -1,
                           "%s: read of %zu bytes at byte %llu failed after "
                           "%zu bytes: %s (errno %d)",
                           path ? path : "(file)", len,
                           (unsigned long long)offset, done,
                           strerror((int)-n), (int)-n);
        }
        if (n == 0) {
            if (got)
                *got = done;
            if (eof_ok)
                return XC_OK;
            return fail_short(path, offset, len, offset + done);
        }
        if ((uint64_t)n > len - done) /* a vtable that over-reports */
            return xc_fail(XC_E_IO, (int64_t)(offset + done), -1, -1,
                           "%s: read returned %lld bytes for %zu asked",
                           path ? path : "(file)", (long long)n, len - done);
        done += (size_t)n;
        retries = 0;
    }
    if (got)
        *got = done;
    return XC_OK;
}

int xc_io_read_full(const xc_io *io, int64_t handle, const char *path,
                    void *buf, size_t len, uint64_t offset, size_t *got)
{
    return read_loop(io, handle, path, buf, len, offset, got, 0);
}

/* ------------------------------------------------------------------ */
/* Aligned reads and O_DIRECT                                           */
/* ------------------------------------------------------------------ */

static int is_pow2(size_t a) { return a != 0 && (a & (a - 1)) == 0; }

void xc_io_window(uint64_t offset, uint64_t len, size_t align, uint64_t *lo,
                  uint64_t *hi)
{
    const uint64_t mask = (uint64_t)align - 1;
    *lo = offset & ~mask;
    *hi = (offset + len + mask) & ~mask;
}

int xc_io_read_window(const xc_io *io, int64_t handle, const char *path,
                      void *buf, uint64_t at, size_t n, uint64_t need_end,
                      uint64_t want_off, size_t want_len)
{
    size_t got = 0;
    int rc = read_loop(io, handle, path, buf, n, at, &got, 1);
    if (rc != XC_OK)
        return rc;
    if (at + got < need_end)
        return fail_short(path, want_off, want_len, at + got);
    return XC_OK;
}

size_t xc_io_aligned_span(uint64_t offset, size_t len, size_t align)
{
    uint64_t lo, hi;
    if (!is_pow2(align))
        return 0;
    if (offset > UINT64_MAX - len || offset + len > UINT64_MAX - align)
        return 0;
    xc_io_window(offset, len, align, &lo, &hi);
    if (hi - lo > SIZE_MAX)
        return 0;
    return (size_t)(hi - lo);
}

int xc_io_read_aligned(const xc_io *io, int64_t handle, const char *path,
                       void *buf, size_t buf_len, uint64_t offset, size_t len,
                       size_t align, size_t *payload_start)
{
    size_t span = xc_io_aligned_span(offset, len, align);
    uint64_t lo, hi;
    int rc;
    if (span == 0 && len != 0)
        return xc_fail(XC_E_MISUSE, (int64_t)offset, -1, -1,
                       "%s: aligned read of %zu bytes at byte %llu: bad "
                       "alignment %zu or range overflow",
                       path ? path : "(file)", len,
                       (unsigned long long)offset, align);
    if (buf_len < span || ((uintptr_t)buf & (align - 1)) != 0)
        return xc_fail(XC_E_MISUSE, (int64_t)offset, -1, -1,
                       "%s: aligned read needs a %zu-aligned buffer of %zu "
                       "bytes, got %zu bytes", path ? path : "(file)", align,
                       span, buf_len);
    xc_io_window(offset, len, align, &lo, &hi);
    if (len != 0 &&
        (rc = xc_io_read_window(io, handle, path, buf, lo, span,
                                offset + len, offset, len)) != XC_OK)
        return rc;
    *payload_start = (size_t)(offset - lo);
    return XC_OK;
}

int xc_io_open_probed(const xc_io *io, const char *path, int want_direct,
                      int64_t *handle, int *direct_active, char *note,
                      size_t note_len)
{
    int64_t h = -1;
    int rc;
    if (note && note_len)
        note[0] = '\0';
    *direct_active = 0;
    if (want_direct) {
        rc = io->open(io->ctx, path, 1, &h);
        if (rc == 0) {
            /* An O_DIRECT open can succeed on a file system that then
             * refuses the reads (EINVAL); only a real read proves it. */
            size_t got = 0;
            void *probe = xc_aligned_alloc(XC_DIRECT_ALIGN, XC_DIRECT_ALIGN);
            if (probe == NULL) {
                io->close(io->ctx, h);
                return xc_fail(XC_E_NOMEM, -1, -1, -1, "%s: no memory for "
                               "the O_DIRECT probe buffer", path);
            }
            rc = read_loop(io, h, path, probe, XC_DIRECT_ALIGN, 0, &got, 1);
            xc_free(probe);
            if (rc == XC_OK) {
                *handle = h;
                *direct_active = 1;
                return XC_OK;
            }
            io->close(io->ctx, h);
            if (note && note_len)
                snprintf(note, note_len, "%s: O_DIRECT probe read failed "
                         "(%s); using buffered reads", path,
                         xc_last_error()->message);
        } else if (rc == -ENOENT || XC_IO_IS_NOT_REGULAR(rc)) {
            return xc_io_open_fail(path, rc);
        } else if (note && note_len) {
            snprintf(note, note_len, "%s: O_DIRECT open failed: %s (errno "
                     "%d); using buffered reads", path, strerror(-rc), -rc);
        }
    }
    rc = io->open(io->ctx, path, 0, &h);
    if (rc != 0)
        return xc_io_open_fail(path, rc);
    *handle = h;
    return XC_OK;
}

int xc_io_open_fail(const char *path, int rc)
{
    assert(rc < 0);
    if (rc == -ENOENT)
        return xc_fail(XC_E_NOT_FOUND, -1, -1, -1, "%s: no such file", path);
    if (XC_IO_IS_NOT_REGULAR(rc))
        return xc_fail(XC_E_IO, -1, -1, -1, "%s: is %s, not a regular file; "
                       "only regular files are read", path,
                       xc_file_type_name(XC_IO_NOT_REGULAR_MODE(rc)));
    /* ENOMEM is a failed allocation (the kernel's, or a vtable's own, as
     * the fault injector's): the caller's documented OutOfMemoryError, not
     * an I/O error, so allocation countdowns see one error class. */
    if (rc == -ENOMEM)
        return xc_fail(XC_E_NOMEM, -1, -1, -1, "%s: open failed: no memory",
                       path);
    return xc_fail(XC_E_IO, -1, -1, -1, "%s: open failed: %s (errno %d)",
                   path, strerror(-rc), -rc);
}

/* ------------------------------------------------------------------ */
/* Paths (internal)                                                     */
/* ------------------------------------------------------------------ */

int xc_path_kind(const char *path)
{
    struct stat st;
    if (stat(path, &st) != 0)
        return errno == ENOENT || errno == ENOTDIR ? 0 : -errno;
    return S_ISDIR(st.st_mode) ? 2 : 1;
}

static int cmp_names(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

int xc_list_dir(const char *dir, const char *suffix, char ***out, size_t *n)
{
    DIR *d;
    struct dirent *e;
    char **names = NULL;
    size_t count = 0, cap = 0, slen = strlen(suffix);
    *out = NULL;
    *n = 0;
    d = opendir(dir);
    if (d == NULL)
        return xc_fail(errno == ENOENT ? XC_E_NOT_FOUND : XC_E_IO, -1, -1, -1,
                       "%s: cannot list the folder: %s", dir,
                       strerror(errno));
    while ((e = readdir(d)) != NULL) {
        size_t len = strlen(e->d_name);
        if (len < slen || strcmp(e->d_name + len - slen, suffix) != 0)
            continue;
        if (count == cap) {
            size_t ncap = cap ? cap * 2 : 8;
            char **grown = xc_realloc(names, ncap * sizeof *names);
            if (grown == NULL)
                goto nomem;
            names = grown;
            cap = ncap;
        }
        if ((names[count] = xc_strdup(e->d_name)) == NULL)
            goto nomem;
        count++;
    }
    closedir(d);
    if (count)
        qsort(names, count, sizeof *names, cmp_names);
    *out = names;
    *n = count;
    return XC_OK;
nomem:
    closedir(d);
    for (size_t i = 0; i < count; i++)
        xc_free(names[i]);
    xc_free(names);
    return xc_fail(XC_E_NOMEM, -1, -1, -1, "%s: no memory to list the "
                   "folder", dir);
}
