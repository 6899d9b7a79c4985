/*
 * xc_internal.h -- helpers shared by the engine's C files; not public.
 * Every engine file sees the boundary of its build: xc.h, xc_ext.h (the io
 * helpers the library implements and uses itself) and, in the instrumented
 * build only (XC_TEST_SEAMS), the seams of xc_test.h.
 */
#ifndef XC_INTERNAL_H
#define XC_INTERNAL_H

#include "xc_ext.h"
#ifdef XC_TEST_SEAMS
#include "xc_test.h"
#endif

#include <pthread.h>
#include <stdarg.h>
#include <sys/stat.h>

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

/* Makes *e this thread's error record (a copy) and returns e->code: how a
 * failure recorded on another thread (a reader's) is handed to the caller
 * who reports it. */
int xc_fail_copy(const xc_error *e);

/* The allocation wrapper (see xc_alloc_fail_at in xc_test.h: its countdown
 * exists in the instrumented build only; the release build's wrapper is
 * plain malloc).  xc_malloc and xc_calloc return NULL when the armed fault
 * fires or the system is out of memory; they do not record an error (the caller knows what it was
 * allocating and says so).  xc_free(NULL) is a no-op.  xc_aligned_alloc
 * returns memory aligned to align (a power of two >= sizeof(void *)). */
void *xc_malloc(size_t n);
void *xc_calloc(size_t count, size_t size);
void *xc_realloc(void *p, size_t n);
void *xc_aligned_alloc(size_t align, size_t n);
char *xc_strdup(const char *s);
void xc_free(void *p);

/* Widened reads (xc_io.c), the one place O_DIRECT's alignment rules live.
 *
 * xc_io_window writes the window of the payload [offset, offset + len):
 * *lo is offset rounded down and *hi is offset + len rounded up to align, a
 * power of two.  The caller vouches that offset + len + align fits in 64
 * bits (xc_io_aligned_span checks that for untrusted ranges).  Cannot
 * fail.
 *
 * xc_io_read_window reads [at, at + n), a window or one piece of it, into
 * buf through io -- so under whatever the vtable injects -- with the full-
 * read loop.  End of file is accepted once every byte below need_end (at
 * most at + n: the payload's end, or the piece's) has arrived, since a
 * window may run past the end of the file and its payload may not.
 * Otherwise XC_E_SHORT_READ, "short read: X of want_len bytes at byte
 * want_off (end of file at byte E)" with offset E, where [want_off,
 * want_off + want_len) is the range the caller asked for (the payload, or
 * the piece) and X how much of it arrived; or XC_E_IO as
 * xc_io_read_full.  buf's content after a failure is unspecified. */
void xc_io_window(uint64_t offset, uint64_t len, size_t align, uint64_t *lo,
                  uint64_t *hi);
int xc_io_read_window(const xc_io *io, int64_t handle, const char *path,
                      void *buf, uint64_t at, size_t n, uint64_t need_end,
                      uint64_t want_off, size_t want_len);

/* Only regular files are read (docs/DESIGN.md, "Only regular files").  An
 * xc_io open that finds something else at the path returns
 * XC_IO_NOT_REGULAR(st_mode): minus its S_IFMT bits, which are all >= 4096
 * and so never a negative errno. */
#define XC_IO_NOT_REGULAR(mode) (-(int)((mode) & S_IFMT))
#define XC_IO_IS_NOT_REGULAR(rc) ((rc) <= -4096)
#define XC_IO_NOT_REGULAR_MODE(rc) ((unsigned)-(rc))

/* What a file of st_mode is, for a message: "a FIFO", "a directory",
 * "a character device", ...  Cannot fail. */
const char *xc_file_type_name(unsigned mode);

/* Opens path with flags (O_RDONLY, O_RDWR, ... plus O_CLOEXEC and
 * O_NOCTTY) without blocking: O_NONBLOCK for the open, then fstat, then
 * O_NONBLOCK cleared for the reads.  Returns 0 with the descriptor in
 * *fd_out, a negative errno, or XC_IO_NOT_REGULAR(mode) (nothing left open)
 * when the path names anything but a regular file.  EINTR is retried: the
 * open cannot block, so a retry cannot hold off Ctrl-C. */
int xc_open_regular(const char *path, int flags, int *fd_out);

/* Records the error for an xc_io open of path that returned rc (< 0) and
 * returns its code: XC_E_NOT_FOUND "no such file" (ENOENT); XC_E_IO "is a
 * FIFO, not a regular file; ..." (XC_IO_NOT_REGULAR); XC_E_NOMEM (ENOMEM);
 * else XC_E_IO naming the errno. */
int xc_io_open_fail(const char *path, int rc);

/* What is at path: 0 nothing, 1 a file (or anything not a folder), 2 a
 * folder, or a negative errno when stat fails for another reason. */
int xc_path_kind(const char *path);

/* The names of the entries of folder dir that end in suffix, sorted by
 * strcmp, each and the array from xc_malloc (caller frees all).  Returns
 * XC_OK, XC_E_NOT_FOUND / XC_E_IO for an unreadable folder, XC_E_NOMEM;
 * nothing is left allocated after a failure. */
int xc_list_dir(const char *dir, const char *suffix, char ***out, size_t *n);

/* How shard i of st differs from what was recorded when it was opened
 * (xc_st.c): XC_SAME, XC_CHANGED_MTIME (same file and size, another mtime
 * or, with the mtime as at open, another ctime: written and put back),
 * XC_CHANGED_SIZE (same file, other size: truncated or extended in place),
 * XC_CHANGED_IDENTITY (the path now names another file, or none).  Writes a
 * sentence naming the file and the change into why (why_len > 0) and the
 * size now seen into *now_bytes (UINT64_MAX when the file is gone), or
 * returns XC_E_IO (recorded) when stat fails for another reason.  Records
 * no error otherwise; safe from several threads. */
enum { XC_SAME = 0, XC_CHANGED_MTIME = 1, XC_CHANGED_SIZE = 2,
       XC_CHANGED_IDENTITY = 3 };
int xc_st_shard_changed(const xc_st *st, size_t i, char *why, size_t why_len,
                        uint64_t *now_bytes);

/* Whether st was opened with xc_st_opts.verify.  Cannot fail. */
int xc_st_verify(const xc_st *st);

/* The path of the file of st (a shard, or its index) whose device and
 * inode are dev and ino, as recorded at open, or NULL when none is: an
 * output (a trace) must never be one of them.  Cannot fail. */
const char *xc_st_file_with_id(const xc_st *st, uint64_t dev, uint64_t ino);

/* The thread-start wrapper (see xc_thread_fail_at in xc_test.h, in the
 * instrumented build only): every thread the engine starts goes through
 * here instead of pthread_create.  Starts
 * fn(arg) with default attributes in *t and returns 0, or returns an error
 * number (EAGAIN when the armed fault fires, else pthread_create's) with no
 * thread started.  Records no error: the caller says which thread it was. */
int xc_thread_start(pthread_t *t, void *(*fn)(void *), void *arg);

#endif /* XC_INTERNAL_H */
