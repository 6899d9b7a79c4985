/*
 * xc_ext.h -- the engine's extended C boundary, in every build: what its
 * Python face, tools and tests call besides xc.h, and an embedding
 * application does not need.
 *
 * On the same library as xc.h (the same status codes and error records),
 * this header adds:
 *   - the io helpers the engine reads with (full, aligned and probed
 *     reads), for tools and tests that drive them directly;
 *   - the zero-copy tensor-name block of a container.
 * None of it can change a live cache or the engine's allocations: the
 * seams that can (countdowns, fault injector, test hooks) are in xc_test.h
 * and only in the instrumented build.  Everything here keeps the contracts
 * of xc.h ("Ownership and lifetimes", "Errors", "Threads").
 */
#ifndef XC_EXT_H
#define XC_EXT_H

#include "xc.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------ */
/* I/O helpers (xc_io.c)                                                */
/* ------------------------------------------------------------------ */

/* Reads exactly len bytes at offset through io, looping over partial reads
 * and retrying EINTR.  Returns XC_OK, XC_E_SHORT_READ when end of file came
 * first (*got says how many arrived), or XC_E_IO with errno in the message.
 * path is used only for messages and may be NULL.  buf's content after a
 * failure is unspecified. */
int xc_io_read_full(const xc_io *io, int64_t handle, const char *path,
                    void *buf, size_t len, uint64_t offset, size_t *got);

/* Bytes an aligned read of [offset, offset + len) occupies once widened to
 * align (offset rounded down, offset + len rounded up), or 0 if align is not
 * a power of two or the widened range overflows.  Cannot fail otherwise. */
size_t xc_io_aligned_span(uint64_t offset, size_t len, size_t align);

/* Reads [offset, offset + len) widened to align, so that it may be issued on
 * an O_DIRECT handle: one read of the whole widened range into buf, which
 * must be aligned to align and hold xc_io_aligned_span(offset, len, align)
 * bytes (buf_len says how many it holds).  The widened range may run past
 * the end of the file; that is fine as long as the payload itself arrived.
 * On success *payload_start is where byte `offset` landed in buf (offset
 * modulo align), so the payload is buf[*payload_start, +len).  align 1
 * means no widening.  Returns XC_OK, XC_E_SHORT_READ if the file ends
 * before offset + len, XC_E_IO, or XC_E_MISUSE for a bad align, a
 * misaligned buf or a buf_len too small.  buf's content after a failure is
 * unspecified; *payload_start is written only on success. */
int xc_io_read_aligned(const xc_io *io, int64_t handle, const char *path,
                       void *buf, size_t buf_len, uint64_t offset,
                       size_t len, size_t align, size_t *payload_start);

/* Opens path through io for reading.  With want_direct, opens it O_DIRECT
 * and probes that with one read of XC_DIRECT_ALIGN bytes at offset 0; if
 * the open or the probe is refused, closes that handle, reopens the file
 * buffered and writes the reason into note (never a silent fallback).
 * *direct_active is 1 only when the probe succeeded.  note (may be NULL)
 * gets "" when there is nothing to report.  Returns XC_OK, XC_E_NOT_FOUND
 * when the file does not exist, XC_E_IO for other open errors, XC_E_NOMEM
 * for the probe buffer; no handle is left open after a failure. */
int xc_io_open_probed(const xc_io *io, const char *path, int want_direct,
                      int64_t *handle, int *direct_active, char *note,
                      size_t note_len);

/* ------------------------------------------------------------------ */
/* Tensor names without a copy                                          */
/* ------------------------------------------------------------------ */

/* The same bytes xc_st_names writes (every tensor name in container order,
 * each followed by one NUL byte) without a copy: a pointer to them inside
 * the container, valid until xc_st_close, with their length in *len (always
 * set, the size xc_st_names needs).  NULL when the container does not hold
 * them as one block -- more than one shard, no tensors, tensors whose
 * header order is not their offset order, or a __metadata__ object between
 * two tensor entries -- and then xc_st_names is the way.  Records no
 * error. */
const char *xc_st_names_block(const xc_st *st, size_t *len);

#ifdef __cplusplus
}
#endif
#endif /* XC_EXT_H */
