/*
 * xc_load.h -- the expert loader, shared by the cache and its tests; not
 * public.  A loader resolves every (layer, expert) of a cache to its tensors
 * once, at open, and afterwards reads one expert into one slot on demand.
 */
#ifndef XC_LOAD_H
#define XC_LOAD_H

#include "xc.h"

/* Reads are widened to this alignment under O_DIRECT; the slot stride
 * leaves room for the widening on both ends (docs/CACHE.md). */
#define XC_ALIGN ((uint64_t)XC_DIRECT_ALIGN)

typedef struct xc_loader {
    const xc_st *st;
    const xc_io *io;
    int32_t *layers;          /* copy of opts.layers, ascending */
    size_t n_layers;
    int32_t n_experts;
    int fused;                /* template without {expert}: each tensor is
                               * one [n_experts, ...] or stacked
                               * [n_experts*I, ...] tensor per layer and
                               * an expert is slice e of each */
    uint32_t n_keys;          /* n_layers * n_experts */
    size_t n_tensors;
    xc_slot_tensor *tensors;  /* layout inside a payload (fused: the
                               * slice's: shape[1:] of an [E, ...]
                               * tensor, [I, ...] of an [E*I, ...] one) */
    char **names;             /* copies of the tensor suffixes */
    uint64_t expert_bytes;
    uint64_t stride;
    uint64_t chunk_bytes;
    uint32_t *file_shard;     /* per key x tensor: shard index */
    uint8_t *contiguous;      /* per key: one run in file order */
    uint8_t *direct;          /* per key: a shard of it reads O_DIRECT */
    uint64_t *file_offset;    /* per key x tensor: absolute offset (fused:
                               * of the expert's slice) */
} xc_loader;

/* Resolves and validates every expert (see xc_cache_open's contract for the
 * errors).  On failure *ld owns nothing. */
int xc_load_open(xc_loader *ld, const xc_st *st, const xc_cache_opts *o);
void xc_load_close(xc_loader *ld);

/* Key of (layer, expert), or XC_E_MISUSE (recorded) if it is not one. */
int xc_load_key(const xc_loader *ld, int32_t layer, int32_t expert,
                uint32_t *key);
/* Layer and expert of a key (key < n_keys).  Cannot fail. */
void xc_load_unkey(const xc_loader *ld, uint32_t key, int32_t *layer,
                   int32_t *expert);

/* Reads key's payload into slot (stride bytes, XC_ALIGN-aligned).  On
 * success *payload_off is where the payload begins inside the slot (0, the
 * run's offset mod XC_ALIGN for a contiguous O_DIRECT read, 2 * XC_ALIGN
 * for a scattered one).
 * *asked_bytes always receives the bytes asked of io, failed pieces
 * included.  XC_E_SHORT_READ / XC_E_IO with layer and expert recorded on
 * this thread.  Safe from several threads for different slots. */
int xc_load_read(const xc_loader *ld, uint32_t key, uint8_t *slot,
                 uint64_t *payload_off, uint64_t *asked_bytes);

/* Where a load's bytes came from: every piece was already in the page
 * cache, at least one piece needed the device (O_DIRECT loads always do),
 * or the io vtable cannot tell (no pread_nowait, or it refused). */
enum { XC_SRC_UNKNOWN = 0, XC_SRC_PAGE_CACHE = 1, XC_SRC_DEVICE = 2 };

/* xc_load_read that also reports the source in *src (XC_SRC_*).  When the
 * vtable has pread_nowait, each buffered piece is first asked of it and
 * only the part it could not copy goes through pread, so the bytes read
 * and io_bytes are the same as xc_load_read's. */
int xc_load_read_src(const xc_loader *ld, uint32_t key, uint8_t *slot,
                     uint64_t *payload_off, uint64_t *asked_bytes, int *src);

#endif /* XC_LOAD_H */
