/*
 * xcs_faults.c -- I/O faults under an outside cache's own reads.
 *
 * The build links the cache's objects with -Wl,--wrap=pread,--wrap=pread64,
 * --wrap=read (gate/outside/build.py, when the manifest declares fault:io),
 * so every such call the cache makes lands here first; its sources are not
 * changed.  Two injectors, the first in front of the second, follow the
 * engine's injector (engine/csrc/xc_fault.c): armed with a kind, an nth and
 * a persistence, each counts the reads that reach it from its arming and
 * breaks the nth one (or the nth and every later one):
 *   1 partial: at most `arg` bytes     2 eof: returns 0
 *   3 eio: -1, errno EIO               4 eintr: -1, errno EINTR
 *   5 delay: sleeps `arg` microseconds, then reads
 * An eof, eio or eintr of the first never reaches the second.  A plain
 * read() meets the injectors as a pread does.  Arming and counting are
 * under one mutex; the read itself and a delay happen outside it.
 */
#include "xcs_shim.h"

#include <errno.h>
#include <pthread.h>
#include <time.h>
#include <unistd.h>

ssize_t __real_pread(int fd, void *buf, size_t n, off_t off);
ssize_t __real_pread64(int fd, void *buf, size_t n, off_t off);
ssize_t __real_read(int fd, void *buf, size_t n);
ssize_t __wrap_pread(int fd, void *buf, size_t n, off_t off);
ssize_t __wrap_pread64(int fd, void *buf, size_t n, off_t off);
ssize_t __wrap_read(int fd, void *buf, size_t n);

typedef struct injector {
    int kind;  /* 0: disarmed */
    uint64_t nth, reads, fired;
    int persistent;
    int64_t arg;
} injector;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static injector inj[2];

/* Arms injector `which` (0 the first, 1 the second); counting starts now.
 * Returns 0, or XCS_EMISUSE for a bad which, kind or nth. */
int xcs_fault_arm(int which, int kind, uint64_t nth, int persistent,
                  int64_t arg)
{
    if (which < 0 || which > 1 || kind < 1 || kind > 5 || nth < 1)
        return XCS_EMISUSE;
    pthread_mutex_lock(&mu);
    injector fresh = {kind, nth, 0, 0, persistent != 0, arg};
    inj[which] = fresh;
    pthread_mutex_unlock(&mu);
    return XCS_OK;
}

/* Disarms both injectors. */
void xcs_fault_disarm(void)
{
    pthread_mutex_lock(&mu);
    inj[0].kind = inj[1].kind = 0;
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

/* The fault this read meets: fills *n (partial) and *delay_us; returns
 * 0 to read, else the byte count or -1 (errno set) to return instead. */
static int decide(size_t *n, int64_t *delay_us, ssize_t *ret)
{
    int stop = 0;
    *delay_us = 0;
    pthread_mutex_lock(&mu);
    for (int i = 0; i < 2 && !stop; i++) {
        injector *f = &inj[i];
        if (!f->kind)
            continue;
        f->reads++;
        if (!(f->reads == f->nth || (f->persistent && f->reads > f->nth)))
            continue;
        f->fired++;
        switch (f->kind) {
        case 1:
            if (f->arg >= 0 && (uint64_t)f->arg < *n)
                *n = (size_t)f->arg;
            break;
        case 2:
            *ret = 0;
            stop = 1;
            break;
        case 3:
        case 4:
            *ret = -1;
            errno = f->kind == 3 ? EIO : EINTR;
            stop = 1;
            break;
        default:
            *delay_us += f->arg;
        }
    }
    int e = errno;
    pthread_mutex_unlock(&mu);
    errno = e;
    if (!stop && *delay_us > 0) {
        struct timespec ts = {(time_t)(*delay_us / 1000000),
                              (long)(*delay_us % 1000000) * 1000};
        while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
            ;
    }
    return stop;
}

ssize_t __wrap_pread(int fd, void *buf, size_t n, off_t off)
{
    int64_t delay;
    ssize_t ret = 0;
    if (decide(&n, &delay, &ret))
        return ret;
    return __real_pread(fd, buf, n, off);
}

ssize_t __wrap_pread64(int fd, void *buf, size_t n, off_t off)
{
    int64_t delay;
    ssize_t ret = 0;
    if (decide(&n, &delay, &ret))
        return ret;
    return __real_pread64(fd, buf, n, off);
}

ssize_t __wrap_read(int fd, void *buf, size_t n)
{
    int64_t delay;
    ssize_t ret = 0;
    if (decide(&n, &delay, &ret))
        return ret;
    return __real_read(fd, buf, n);
}
