/*
 * xc_io.c -- the I/O seam: the default POSIX vtable and the full-read loop.
 *
 * Every byte of expert data enters the engine through an xc_io vtable.  The
 * vtable is deliberately raw -- one pread is one system call that may come
 * back short, interrupted or failed -- and the loop that turns it into "all
 * of this range or a clear error" lives here, above the vtable.  That split
 * is what lets the fault layer inject EINTR storms and partial reads *under*
 * the loop and prove that the loop, not luck, handles them.
 */
#include "xc_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int posix_open(void *ctx, const char *path, int direct,
                      int64_t *handle)
{
    int flags = O_RDONLY | O_CLOEXEC;
    int fd;
    (void)ctx;
#ifdef O_DIRECT
    if (direct)
        flags |= O_DIRECT;
#else
    if (direct)
        return -EINVAL;
#endif
    do {
        fd = open(path, flags);
    } while (fd < 0 && errno == EINTR);
    if (fd < 0)
        return -errno;
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

static const xc_io posix_io = {posix_open, posix_pread, posix_size,
                               posix_close, NULL};

const xc_io *xc_io_default(void) { return &posix_io; }

/* Consecutive EINTR/EAGAIN results without a byte of progress after which a
 * read gives up: a signal storm that long is a fault to report, not to spin
 * on forever. */
#define XC_IO_MAX_RETRIES 1000

int xc_io_read_full(const xc_io *io, int64_t handle, const char *path,
                    void *buf, size_t len, uint64_t offset, size_t *got)
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
            return xc_fail(XC_E_SHORT_READ, (int64_t)(offset + done), -1, -1,
                           "%s: short read: %zu of %zu bytes at byte %llu "
                           "(end of file at byte %llu)",
                           path ? path : "(file)", done, len,
                           (unsigned long long)offset,
                           (unsigned long long)(offset + done));
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
