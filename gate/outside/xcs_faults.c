/*
 * xcs_faults.c -- I/O faults under an outside cache's own reads and opens.
 *
 * The build links the cache's objects with -Wl,--wrap= for pread, pread64,
 * read, open, open64, openat, openat64, fopen, fopen64, close and fclose
 * (gate/outside/build.py WRAPPED, when the manifest declares fault:io or
 * fault:open), so every such call the cache makes lands here first; its
 * sources are not changed.  Two read injectors, the first in front of the
 * second, follow the engine's injector (engine/csrc/xc_fault.c): armed
 * with a kind, an nth and a persistence, each counts the reads that reach
 * it from its arming and breaks the nth one (or the nth and every later
 * one):
 *   1 partial: at most `arg` bytes     2 eof: returns 0
 *   3 eio: -1, errno EIO               4 eintr: -1, errno EINTR
 *   5 delay: sleeps `arg` microseconds, then returns what it read
 * An eof, eio or eintr of the first never reaches the second.  A plain
 * read() meets the injectors as a pread does.  A read injector *placed*
 * (xcs_fault_place) at one byte of one file counts only the reads of that
 * file whose returned bytes cover it, so the fault lands on the read of
 * that byte whatever order, windows or alignment the cache reads in; a
 * placed partial returns exactly the bytes before it (a read starting at
 * it does not count).
 *
 * Fair to any way of reading (docs/OUTSIDE_CACHES.md "Where a fault
 * lands"): every read is made first exactly as the cache asked -- its
 * buffer, length and offset untouched, so an O_DIRECT read stays aligned
 * -- and the fault is applied to what it returned: a partial read
 * returns fewer bytes than were read into the caller's buffer, an eof,
 * eio or eintr throws the read away (a plain read() is put back with
 * lseek so that the file position moves only by what is returned).  Only
 * a read that returns bytes counts: a read at or past the end of a file
 * (0 bytes: the extra call a cache reading aligned windows makes), of
 * length 0, or one the system failed, passes through uncounted and
 * unbroken, so "the nth read" is the nth read that returns bytes however
 * many times a cache asks at the end of a file.
 *
 * A third injector (which 2) stands in front of every open of a file
 * (open, openat, fopen and their 64 forms): armed with a kind, nth and
 * persistence like the others, the opens it breaks fail with errno
 *   1 ENOENT   2 EACCES   3 EMFILE   4 EINTR
 * and -1 (NULL for fopen).  Every descriptor a wrapped open hands the cache
 * is remembered until the cache's close (or fclose) of it, so that
 * xcs_fault_open_files() tells how many the cache holds: after a failed
 * open of the cache, none (a leak otherwise).  Arming and counting are
 * under one mutex; the read, the open and a delay happen outside it.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE  /* O_TMPFILE, fileno */
#endif
#include "xcs_shim.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

ssize_t __real_pread(int fd, void *buf, size_t n, off_t off);
ssize_t __real_pread64(int fd, void *buf, size_t n, off_t off);
ssize_t __real_read(int fd, void *buf, size_t n);
ssize_t __wrap_pread(int fd, void *buf, size_t n, off_t off);
ssize_t __wrap_pread64(int fd, void *buf, size_t n, off_t off);
ssize_t __wrap_read(int fd, void *buf, size_t n);
int __real_open(const char *path, int flags, ...);
int __real_open64(const char *path, int flags, ...);
int __real_openat(int dirfd, const char *path, int flags, ...);
int __real_openat64(int dirfd, const char *path, int flags, ...);
FILE *__real_fopen(const char *path, const char *mode);
FILE *__real_fopen64(const char *path, const char *mode);
int __real_close(int fd);
int __real_fclose(FILE *f);
int __wrap_open(const char *path, int flags, ...);
int __wrap_open64(const char *path, int flags, ...);
int __wrap_openat(int dirfd, const char *path, int flags, ...);
int __wrap_openat64(int dirfd, const char *path, int flags, ...);
FILE *__wrap_fopen(const char *path, const char *mode);
FILE *__wrap_fopen64(const char *path, const char *mode);
int __wrap_close(int fd);
int __wrap_fclose(FILE *f);

typedef struct injector {
    int kind;  /* 0: disarmed */
    uint64_t nth, reads, fired;
    int persistent;
    int64_t arg;
    int placed;       /* only reads of file (dev, ino) covering byte `at` */
    dev_t dev;
    ino_t ino;
    uint64_t at;
} injector;

/* Descriptors below this are remembered while open (a bit each). */
#define XCS_MAX_FD 4096

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static injector inj[3];  /* two read injectors, then the open injector */
static unsigned char held_fd[XCS_MAX_FD / 8];
static int n_held, untracked;  /* remembered; opened at or above XCS_MAX_FD */

/* Arms injector `which` (0 the first read injector, 1 the second, 2 the
 * open injector); counting starts now.  Returns 0, or XCS_EMISUSE for a
 * bad which, kind or nth. */
int xcs_fault_arm(int which, int kind, uint64_t nth, int persistent,
                  int64_t arg)
{
    if (which < 0 || which > 2 || kind < 1 || kind > (which == 2 ? 4 : 5) ||
        nth < 1)
        return XCS_EMISUSE;
    pthread_mutex_lock(&mu);
    injector fresh = {kind, nth, 0, 0, persistent != 0, arg, 0, 0, 0, 0};
    inj[which] = fresh;
    pthread_mutex_unlock(&mu);
    return XCS_OK;
}

/* Places armed read injector `which` (0 or 1) at byte `at` of the file at
 * `path`: from now only reads of that file (the same device and inode,
 * however the cache named it) whose returned bytes cover `at` count toward
 * its nth, and a placed partial returns the bytes before `at`.  The count
 * restarts; xcs_fault_arm unplaces it.  XCS_EMISUSE for a bad which, an
 * injector not armed, or a path that cannot be stat'ed. */
int xcs_fault_place(int which, const char *path, uint64_t at)
{
    struct stat st;
    if (which < 0 || which > 1 || path == NULL || stat(path, &st) != 0)
        return XCS_EMISUSE;
    pthread_mutex_lock(&mu);
    injector *f = &inj[which];
    if (!f->kind) {
        pthread_mutex_unlock(&mu);
        return XCS_EMISUSE;
    }
    f->placed = 1;
    f->dev = st.st_dev;
    f->ino = st.st_ino;
    f->at = at;
    f->reads = f->fired = 0;
    pthread_mutex_unlock(&mu);
    return XCS_OK;
}

/* Whether a read of `fd` that returned [off, off + got) meets placed
 * injector f (`same`: 1 if fd is f's file, 0 not, -1 not looked at yet);
 * caller holds mu. */
static int placed_misses(const injector *f, int fd, int64_t off, ssize_t got,
                         int *same)
{
    if (!f->placed)
        return 0;
    if (off < 0 || f->at < (uint64_t)off || f->at - (uint64_t)off >= (uint64_t)got ||
        (f->kind == 1 && f->at == (uint64_t)off))
        return 1;
    if (*same < 0) {
        struct stat st;
        *same = fstat(fd, &st) == 0 && st.st_dev == f->dev && st.st_ino == f->ino;
    }
    return !*same;
}

/* Disarms every injector. */
void xcs_fault_disarm(void)
{
    pthread_mutex_lock(&mu);
    inj[0].kind = inj[1].kind = inj[2].kind = 0;
    pthread_mutex_unlock(&mu);
}

/* How many descriptors a wrapped open handed out and no close took back
 * (one opened at or above XCS_MAX_FD counts until any close of one). */
int xcs_fault_open_files(void)
{
    pthread_mutex_lock(&mu);
    int n = n_held + untracked;
    pthread_mutex_unlock(&mu);
    return n;
}

/* 0 to open, or the errno the open injector breaks this open with. */
static int open_fault(void)
{
    static const int errs[] = {0, ENOENT, EACCES, EMFILE, EINTR};
    int e = 0;
    pthread_mutex_lock(&mu);
    injector *f = &inj[2];
    if (f->kind) {
        f->reads++;
        if (f->reads == f->nth || (f->persistent && f->reads > f->nth)) {
            f->fired++;
            e = errs[f->kind];
        }
    }
    pthread_mutex_unlock(&mu);
    return e;
}

/* Remember (on) or forget (off) a descriptor the cache holds. */
static void track(int fd, int on)
{
    if (fd < 0)
        return;
    pthread_mutex_lock(&mu);
    if (fd >= XCS_MAX_FD) {
        untracked += on ? 1 : (untracked > 0 ? -1 : 0);
    } else {
        unsigned char bit = (unsigned char)(1u << (fd % 8));
        int was = (held_fd[fd / 8] & bit) != 0;
        if (on && !was) {
            held_fd[fd / 8] |= bit;
            n_held++;
        } else if (!on && was) {
            held_fd[fd / 8] &= (unsigned char)~bit;
            n_held--;
        }
    }
    pthread_mutex_unlock(&mu);
}

/* How many reads the first injector has broken since its arming. */
uint64_t xcs_fault_fired(void)
{
    pthread_mutex_lock(&mu);
    uint64_t n = inj[0].fired;
    pthread_mutex_unlock(&mu);
    return n;
}

/* The byte a broken read leaves where it returned nothing: bytes the
 * read put in the caller's buffer and did not return are overwritten with
 * it, so a cache that publishes a failed or short read serves bytes that
 * are not the file's (the gate's wrong_reads), never the right bytes by
 * luck.  POSIX leaves them unspecified: a correct cache never looks. */
#define XCS_POISON 0xA5

/* What the read injectors make of a read of `src` that returned `got`
 * bytes from file offset `off` (-1: unknown) into `buf` (`fd` >= 0: a
 * plain read(), whose file position is put back by what is not
 * returned).  A read that returned no bytes is not counted and passes
 * through; else the returned count, or -1 with errno set, the bytes not
 * returned poisoned. */
static ssize_t inflict(ssize_t got, int fd, int src, int64_t off, void *buf)
{
    if (got <= 0)
        return got;
    int stop = 0, err = 0, same = -1;
    int64_t delay_us = 0;
    ssize_t ret = got;
    pthread_mutex_lock(&mu);
    for (int i = 0; i < 2 && !stop; i++) {
        injector *f = &inj[i];
        if (!f->kind || placed_misses(f, src, off, got, &same))
            continue;
        f->reads++;
        if (!(f->reads == f->nth || (f->persistent && f->reads > f->nth)))
            continue;
        f->fired++;
        switch (f->kind) {
        case 1:
            if (f->placed) {
                if ((int64_t)f->at - off < ret)
                    ret = (ssize_t)((int64_t)f->at - off);
            } else if (f->arg >= 0 && f->arg < ret) {
                ret = (ssize_t)f->arg;
            }
            break;
        case 2:
            ret = 0;
            stop = 1;
            break;
        case 3:
        case 4:
            ret = -1;
            err = f->kind == 3 ? EIO : EINTR;
            stop = 1;
            break;
        default:
            delay_us += f->arg;
        }
    }
    pthread_mutex_unlock(&mu);
    if (delay_us > 0) {
        struct timespec ts = {(time_t)(delay_us / 1000000),
                              (long)(delay_us % 1000000) * 1000};
        while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
            ;
    }
    if (ret != got) {
        size_t kept = ret < 0 ? 0 : (size_t)ret;
        memset((unsigned char *)buf + kept, XCS_POISON, (size_t)got - kept);
        if (fd >= 0)  /* what is not returned is read again */
            lseek(fd, -(off_t)((size_t)got - kept), SEEK_CUR);
    }
    if (ret < 0)
        errno = err;
    return ret;
}

ssize_t __wrap_pread(int fd, void *buf, size_t n, off_t off)
{
    return inflict(__real_pread(fd, buf, n, off), -1, fd, (int64_t)off, buf);
}

ssize_t __wrap_pread64(int fd, void *buf, size_t n, off_t off)
{
    return inflict(__real_pread64(fd, buf, n, off), -1, fd, (int64_t)off, buf);
}

ssize_t __wrap_read(int fd, void *buf, size_t n)
{
    ssize_t got = __real_read(fd, buf, n);
    off_t end = got > 0 ? lseek(fd, 0, SEEK_CUR) : (off_t)-1;
    return inflict(got, fd, fd, end < 0 ? -1 : (int64_t)end - got, buf);
}

/* The mode argument an open with these flags passes, else 0. */
#define OPEN_MODE(flags, mode)                                   \
    do {                                                         \
        if ((flags) & (O_CREAT | O_TMPFILE)) {                   \
            va_list ap;                                          \
            va_start(ap, flags);                                 \
            mode = va_arg(ap, int);                              \
            va_end(ap);                                          \
        }                                                        \
    } while (0)

/* Break the open (errno set, -1) or make it and remember its descriptor. */
#define WRAP_OPEN(call)                                          \
    do {                                                         \
        int e = open_fault();                                    \
        if (e) {                                                 \
            errno = e;                                           \
            return -1;                                           \
        }                                                        \
        int fd = call;                                           \
        track(fd, 1);                                            \
        return fd;                                               \
    } while (0)

int __wrap_open(const char *path, int flags, ...)
{
    int mode = 0;
    OPEN_MODE(flags, mode);
    WRAP_OPEN(__real_open(path, flags, mode));
}

int __wrap_open64(const char *path, int flags, ...)
{
    int mode = 0;
    OPEN_MODE(flags, mode);
    WRAP_OPEN(__real_open64(path, flags, mode));
}

int __wrap_openat(int dirfd, const char *path, int flags, ...)
{
    int mode = 0;
    OPEN_MODE(flags, mode);
    WRAP_OPEN(__real_openat(dirfd, path, flags, mode));
}

int __wrap_openat64(int dirfd, const char *path, int flags, ...)
{
    int mode = 0;
    OPEN_MODE(flags, mode);
    WRAP_OPEN(__real_openat64(dirfd, path, flags, mode));
}

static FILE *wrap_fopen(FILE *(*real)(const char *, const char *),
                        const char *path, const char *mode)
{
    int e = open_fault();
    if (e) {
        errno = e;
        return NULL;
    }
    FILE *f = real(path, mode);
    if (f)
        track(fileno(f), 1);
    return f;
}

FILE *__wrap_fopen(const char *path, const char *mode)
{
    return wrap_fopen(__real_fopen, path, mode);
}

FILE *__wrap_fopen64(const char *path, const char *mode)
{
    return wrap_fopen(__real_fopen64, path, mode);
}

int __wrap_close(int fd)
{
    track(fd, 0);
    return __real_close(fd);
}

int __wrap_fclose(FILE *f)
{
    if (f)
        track(fileno(f), 0);
    return __real_fclose(f);
}
