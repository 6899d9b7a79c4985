/*
 * xc_load.c -- the expert loader: from (layer, expert) to bytes in a slot.
 *
 * An expert is whatever the naming template and the tensor list resolve to
 * in this container; nothing here knows a model.  All the thinking happens
 * once, at open: every name is formatted and looked up, every expert is
 * checked against the first one (same dtypes and shapes, so one slot layout
 * serves all), and each is classified as contiguous (its tensors in one
 * shard, in list order, with no gaps: one read) or not (one read per tensor,
 * each from whichever shard holds it).  Real checkpoints are sharded by a
 * writer that cuts at tensor boundaries without regard to experts, so an
 * expert straddling two shards is normal and must load, not be refused.
 * What remains for the hot path is a table lookup and a few preads.
 *
 * Fused experts.  A template without {expert} names one tensor per (layer,
 * tensor) holding every expert stacked along its leading dimension.
 * That dimension must be n_experts and the tensor's
 * bytes must split into n_experts equal slices; expert e's piece is slice
 * e, one run of the file (the leading dimension is outermost), and the
 * tables hold each slice's offset, so everything below treats a slice as
 * it treats a whole per-expert tensor -- except that a slice is a run, so
 * it is chunked like a contiguous expert, and it may be read O_DIRECT even
 * when the expert is scattered (read_scattered_direct).
 *
 * Chunking.  A contiguous read may be split at file offsets that are
 * multiples of chunk_bytes, so that very large experts are requested in
 * pieces the device handles well.  Each piece goes through
 * xc_io_read_full() and must arrive whole; a short piece fails the load even
 * if a later piece would have made the total add up.
 *
 * O_DIRECT.  When an expert's shard reads with O_DIRECT, a contiguous read is
 * widened to XC_ALIGN on both ends and lands at the start of the slot, so
 * the payload begins (file offset mod XC_ALIGN) bytes in; the stride leaves
 * room for that.  A short read at end of file is accepted when the payload
 * itself arrived whole (xc_io_window and xc_io_read_window, shared with
 * every other widened read).  Per-expert experts read per tensor are not
 * widened into one packed payload: that combination is refused at open.
 */
#include "xc_internal.h"
#include "xc_load.h"

#include <assert.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

/* Formats template with layer, expert and tensor into buf (cap bytes).
 * Returns the length the full name needs (like snprintf). */
static size_t format_name(const char *tmpl, int32_t layer, int32_t expert,
                          const char *tensor, char *buf, size_t cap)
{
    size_t n = 0;
    const char *p = tmpl;
    char num[16];
    assert(tmpl != NULL && tensor != NULL && (buf != NULL || cap == 0));
    while (*p) {
        const char *piece = NULL;
        size_t len = 1, skip = 1;
        if (strncmp(p, "{layer}", 7) == 0) {
            snprintf(num, sizeof num, "%d", (int)layer);
            piece = num, len = strlen(num), skip = 7;
        } else if (strncmp(p, "{expert}", 8) == 0) {
            snprintf(num, sizeof num, "%d", (int)expert);
            piece = num, len = strlen(num), skip = 8;
        } else if (strncmp(p, "{tensor}", 8) == 0) {
            piece = tensor, len = strlen(tensor), skip = 8;
        } else {
            piece = p;
        }
        if (n + len < cap)
            memcpy(buf + n, piece, len);
        n += len;
        p += skip;
    }
    if (cap)
        buf[n < cap ? n : cap - 1] = '\0';
    return n;
}

void xc_load_close(xc_loader *ld)
{
    size_t i;
    assert(ld != NULL);
    if (ld->names)
        for (i = 0; i < ld->n_tensors; i++)
            xc_free(ld->names[i]);
    xc_free(ld->names);
    xc_free(ld->tensors);
    xc_free(ld->layers);
    xc_free(ld->file_shard);
    xc_free(ld->contiguous);
    xc_free(ld->direct);
    xc_free(ld->file_offset);
    memset(ld, 0, sizeof *ld);
}

static int check_opts(const xc_cache_opts *o)
{
    uint64_t keys, cells;
    size_t i;
    assert(o != NULL); /* checked by cache open */
    if (o->expert_template == NULL || o->tensors == NULL ||
        o->n_tensors == 0 || o->layers == NULL || o->n_layers == 0)
        return xc_fail(XC_E_MISUSE, -1, -1, -1,
                       "cache options need an expert_template, at least one "
                       "tensor and at least one layer");
    if (o->n_experts < 1)
        return xc_fail(XC_E_MISUSE, -1, -1, -1,
                       "n_experts must be at least 1 (got %d)",
                       (int)o->n_experts);
    for (i = 0; i < o->n_tensors; i++)
        if (o->tensors[i] == NULL)
            return xc_fail(XC_E_MISUSE, -1, -1, -1, "tensor %zu is NULL", i);
    for (i = 1; i < o->n_layers; i++)
        if (o->layers[i] <= o->layers[i - 1])
            return xc_fail(XC_E_MISUSE, -1, o->layers[i], -1,
                           "layers must be strictly ascending: %d follows %d",
                           (int)o->layers[i], (int)o->layers[i - 1]);
    if (__builtin_mul_overflow((uint64_t)o->n_layers, (uint64_t)o->n_experts,
                               &keys) || keys > XC_MAX_KEYS)
        return xc_fail(XC_E_MISUSE, -1, -1, -1,
                       "%zu layers x %d experts is too many keys",
                       o->n_layers, (int)o->n_experts);
    /* the per key x tensor tables: n_keys x n_tensors x 8 bytes */
    if (__builtin_mul_overflow(keys, (uint64_t)o->n_tensors, &cells) ||
        cells > SIZE_MAX / sizeof(uint64_t))
        return xc_fail(XC_E_MISUSE, -1, -1, -1,
                       "%llu keys x %zu tensors is too many table cells",
                       (unsigned long long)keys, o->n_tensors);
    return XC_OK;
}

static int same_shape(const xc_tensor_info *a, const xc_slot_tensor *b)
{
    int d;
    assert(a != NULL && b != NULL);
    if (a->dtype != b->dtype || a->ndim != b->ndim || a->nbytes != b->nbytes)
        return 0;
    for (d = 0; d < a->ndim; d++)
        if (a->shape[d] != b->shape[d])
            return 0;
    return 1;
}

/* Resolves tensor t of key into *info; records NOT_FOUND naming it. */
static int resolve(xc_loader *ld, const char *tmpl, uint32_t key, size_t t,
                   xc_tensor_info *info, size_t *index)
{
    char name[1024];
    int32_t layer, expert;
    int rc;
    assert(!ld->fused && key < ld->n_keys && t < ld->n_tensors &&
           ld->names[t] != NULL && info != NULL && index != NULL);
    xc_load_unkey(ld, key, &layer, &expert);
    if (format_name(tmpl, layer, expert, ld->names[t], name, sizeof name) >=
        sizeof name)
        return xc_fail(XC_E_MISUSE, -1, layer, expert,
                       "layer %d expert %d: tensor name from template '%s' "
                       "and '%s' is longer than %zu bytes",
                       (int)layer, (int)expert, tmpl, ld->names[t],
                       sizeof name - 1);
    if (xc_st_find(ld->st, name, index) != XC_OK)
        return xc_fail(XC_E_NOT_FOUND, -1, layer, expert,
                       "layer %d expert %d: tensor '%s' (%s) is not in the "
                       "container", (int)layer, (int)expert, ld->names[t],
                       name);
    if ((rc = xc_st_tensor(ld->st, *index, info)) != XC_OK)
        return rc;
    return XC_OK;
}

/* Sets key's contiguous and direct flags from its table rows and refuses
 * what its reads cannot do: chunk_bytes not a multiple of XC_ALIGN when a
 * shard of it reads O_DIRECT, and a per-expert layout's scattered expert
 * under O_DIRECT (a fused one is read slice by slice, each widened on its
 * own). */
static int classify(xc_loader *ld, uint32_t key)
{
    const uint32_t *shard;
    const uint64_t *off;
    int contiguous = 1, direct = 0;
    int32_t layer, expert;
    size_t t;
    assert(key < ld->n_keys && ld->n_tensors > 0); /* its rows filled */
    shard = &ld->file_shard[(size_t)key * ld->n_tensors];
    off = &ld->file_offset[(size_t)key * ld->n_tensors];
    xc_load_unkey(ld, key, &layer, &expert);
    for (t = 0; t < ld->n_tensors; t++) {
        if (t > 0 && (shard[t] != shard[0] ||
                      off[t] != off[t - 1] + ld->tensors[t - 1].nbytes))
            contiguous = 0;
        if (xc_st_shard_direct(ld->st, shard[t]) == 1)
            direct = 1;
    }
    ld->contiguous[key] = (uint8_t)contiguous;
    ld->direct[key] = (uint8_t)direct;
    if (direct && ld->chunk_bytes % XC_ALIGN != 0)
        return xc_fail(XC_E_MISUSE, -1, layer, expert,
                       "chunk_bytes %llu must be a multiple of %llu "
                       "for O_DIRECT reads",
                       (unsigned long long)ld->chunk_bytes,
                       (unsigned long long)XC_ALIGN);
    if (direct && !contiguous && !ld->fused)
        return xc_fail(XC_E_MISUSE, -1, layer, expert,
                       "layer %d expert %d: tensors are not one "
                       "contiguous run, which O_DIRECT reads cannot "
                       "pack; open the container without direct",
                       (int)layer, (int)expert);
    return XC_OK;
}

/* Fills the per-key tables and checks every expert against key 0. */
static int resolve_all(xc_loader *ld, const char *tmpl)
{
    xc_tensor_info info;
    size_t t, index;
    uint32_t key;
    int rc;
    assert(!ld->fused && tmpl != NULL && ld->n_keys > 0 &&
           ld->expert_bytes == 0); /* the tables allocated, nothing in them */
    for (key = 0; key < ld->n_keys; key++) {
        int32_t layer, expert;
        xc_load_unkey(ld, key, &layer, &expert);
        for (t = 0; t < ld->n_tensors; t++) {
            xc_slot_tensor *lt = &ld->tensors[t];
            if ((rc = resolve(ld, tmpl, key, t, &info, &index)) != XC_OK)
                return rc;
            if (key == 0) {
                lt->name = ld->names[t];
                lt->dtype = info.dtype;
                lt->ndim = info.ndim;
                memcpy(lt->shape, info.shape, sizeof lt->shape);
                lt->nbytes = info.nbytes;
                lt->offset = ld->expert_bytes;
                /* the same tensor may be listed many times: the sum and
                 * the stride (below) must still fit */
                if (__builtin_add_overflow(ld->expert_bytes, info.nbytes,
                                           &ld->expert_bytes) ||
                    ld->expert_bytes > UINT64_MAX - 3 * XC_ALIGN)
                    return xc_fail(XC_E_MISUSE, -1, layer, expert,
                                   "layer %d expert %d: the %zu tensors "
                                   "add up to more bytes than a slot can "
                                   "hold", (int)layer, (int)expert,
                                   ld->n_tensors);
            } else if (!same_shape(&info, lt)) {
                return xc_fail(XC_E_MISUSE, -1, layer, expert,
                               "layer %d expert %d: tensor '%s' has dtype %s "
                               "ndim %d (%llu bytes), unlike the first "
                               "expert's %s ndim %d (%llu bytes); every "
                               "expert must share one layout",
                               (int)layer, (int)expert, info.name,
                               xc_dtype_name(info.dtype), info.ndim,
                               (unsigned long long)info.nbytes,
                               xc_dtype_name(lt->dtype), lt->ndim,
                               (unsigned long long)lt->nbytes);
            }
            ld->file_shard[(size_t)key * ld->n_tensors + t] = info.shard;
            ld->file_offset[(size_t)key * ld->n_tensors + t] = info.offset;
        }
        if ((rc = classify(ld, key)) != XC_OK)
            return rc;
    }
    return XC_OK;
}

/* Writes "[d0, d1, ...]" into buf (cap bytes), with lead first when it is
 * >= 0 and then shape[0..ndim-1]. */
static void shape_text(int64_t lead, const int64_t *shape, int ndim,
                       char *buf, size_t cap)
{
    size_t n = 0;
    int d, first = 1;
    assert(buf != NULL && cap > 0 && ndim >= 0 && ndim <= XC_MAX_DIMS &&
           (shape != NULL || ndim == 0));
    n += (size_t)snprintf(buf + n, cap - n, "[");
    if (lead >= 0) {
        n += (size_t)snprintf(buf + n, cap - n, "%lld", (long long)lead);
        first = 0;
    }
    for (d = 0; d < ndim && n < cap; d++) {
        n += (size_t)snprintf(buf + n, cap - n, "%s%lld", first ? "" : ", ",
                              (long long)shape[d]);
        first = 0;
    }
    if (n < cap)
        snprintf(buf + n, cap - n, "]");
}

/* The shape of one expert's slice of a fused tensor of shape
 * shape[0..ndim): [E, ...] gives shape[1:]; stacked [E*I, ...] rows
 * (DBRX-style) give [I, ...], expert e being rows [e*I, (e+1)*I). Writes
 * out[0..*out_ndim). Precondition: ndim >= 1, E >= 1, shape[0] % E == 0. */
static void fused_slice_shape(const int64_t *shape, int ndim, int64_t E,
                              int64_t *out, int *out_ndim)
{
    int d;
    assert(shape != NULL && out != NULL && out_ndim != NULL && ndim >= 1 &&
           E >= 1 && shape[0] % E == 0);
    if (shape[0] == E) {
        for (d = 1; d < ndim; d++)
            out[d - 1] = shape[d];
        *out_ndim = ndim - 1;
        return;
    }
    out[0] = shape[0] / E;
    for (d = 1; d < ndim; d++)
        out[d] = shape[d];
    *out_ndim = ndim;
}

/* Checks tensor info (named name) of layer li as fused tensor t and, for
 * the first layer, sets the slot layout to its slice; later layers must
 * match the first one's whole tensor. The leading dimension is n_experts
 * or a multiple of it (stacked rows); the slice is 1/E of the bytes. */
static int check_fused(xc_loader *ld, size_t li, size_t t, const char *name,
                       const xc_tensor_info *info)
{
    xc_slot_tensor *lt;
    int32_t layer;
    int64_t E = ld->n_experts;
    char have[256], want[256];
    uint64_t slice;
    int64_t sub[XC_MAX_DIMS];
    int d, same, sub_ndim;
    assert(ld->fused && li < ld->n_layers && t < ld->n_tensors &&
           name != NULL && info != NULL);
    lt = &ld->tensors[t];
    layer = ld->layers[li];
    shape_text(-1, info->shape, info->ndim, have, sizeof have);
    if (info->ndim == 0)
        return xc_fail(XC_E_MISUSE, -1, layer, -1,
                       "layer %d: fused tensor '%s' (%s) is 0-d (shape []); "
                       "a fused expert tensor needs a leading dimension "
                       "equal to n_experts %d", (int)layer, ld->names[t],
                       name, (int)E);
    if (info->shape[0] <= 0 || info->shape[0] % E != 0)
        return xc_fail(XC_E_MISUSE, -1, layer, -1,
                       "layer %d: fused tensor '%s' (%s) has shape %s: "
                       "leading dimension %lld is neither n_experts %d nor "
                       "a multiple of it", (int)layer, ld->names[t], name,
                       have, (long long)info->shape[0], (int)E);
    if (info->nbytes % (uint64_t)E != 0)
        return xc_fail(XC_E_MISUSE, -1, layer, -1,
                       "layer %d: fused tensor '%s' (%s) of shape %s %s is "
                       "%llu bytes, which do not split into n_experts %d "
                       "whole-byte slices", (int)layer, ld->names[t], name,
                       have, xc_dtype_name(info->dtype),
                       (unsigned long long)info->nbytes, (int)E);
    slice = info->nbytes / (uint64_t)E;
    memset(sub, 0, sizeof sub);
    fused_slice_shape(info->shape, info->ndim, E, sub, &sub_ndim);
    if (li == 0) {
        lt->name = ld->names[t];
        lt->dtype = info->dtype;
        lt->ndim = sub_ndim;
        memset(lt->shape, 0, sizeof lt->shape);
        for (d = 0; d < sub_ndim; d++)
            lt->shape[d] = sub[d];
        lt->nbytes = slice;
        lt->offset = ld->expert_bytes;
        if (__builtin_add_overflow(ld->expert_bytes, slice,
                                   &ld->expert_bytes) ||
            ld->expert_bytes > UINT64_MAX - 3 * XC_ALIGN)
            return xc_fail(XC_E_MISUSE, -1, layer, -1,
                           "layer %d: the slices of the %zu fused tensors "
                           "add up to more bytes than a slot can hold",
                           (int)layer, ld->n_tensors);
        return XC_OK;
    }
    same = info->dtype == lt->dtype && sub_ndim == lt->ndim &&
           slice == lt->nbytes;
    for (d = 0; same && d < sub_ndim; d++)
        same = sub[d] == lt->shape[d];
    if (same)
        return XC_OK;
    shape_text(E, lt->shape, lt->ndim, want, sizeof want);
    return xc_fail(XC_E_MISUSE, -1, layer, -1,
                   "layer %d: fused tensor '%s' (%s) has dtype %s shape %s "
                   "(%llu bytes), unlike layer %d's %s %s (%llu bytes); "
                   "every layer must share one layout", (int)layer,
                   ld->names[t], name, xc_dtype_name(info->dtype), have,
                   (unsigned long long)info->nbytes, (int)ld->layers[0],
                   xc_dtype_name(lt->dtype), want,
                   (unsigned long long)(lt->nbytes * (uint64_t)E));
}

/* The fused counterpart of resolve_all: one lookup per (layer, tensor),
 * whose slice e is expert e's piece. */
static int resolve_fused(xc_loader *ld, const char *tmpl)
{
    char name[1024];
    xc_tensor_info info;
    size_t li, t, index;
    int32_t e;
    int rc;
    assert(ld->fused && tmpl != NULL && ld->n_keys > 0 &&
           ld->expert_bytes == 0); /* the tables allocated, nothing in them */
    for (li = 0; li < ld->n_layers; li++) {
        int32_t layer = ld->layers[li];
        uint32_t key0 = (uint32_t)(li * (size_t)ld->n_experts);
        for (t = 0; t < ld->n_tensors; t++) {
            /* named for expert 0, the first key that needs the name */
            if (format_name(tmpl, layer, 0, ld->names[t], name,
                            sizeof name) >= sizeof name)
                return xc_fail(XC_E_MISUSE, -1, layer, 0,
                               "layer %d expert 0: tensor name from template "
                               "'%s' and '%s' is longer than %zu bytes",
                               (int)layer, tmpl, ld->names[t],
                               sizeof name - 1);
            if (xc_st_find(ld->st, name, &index) != XC_OK)
                return xc_fail(XC_E_NOT_FOUND, -1, layer, -1,
                               "layer %d: fused tensor '%s' (%s) is not in "
                               "the container", (int)layer, ld->names[t],
                               name);
            if ((rc = xc_st_tensor(ld->st, index, &info)) != XC_OK)
                return rc;
            if ((rc = check_fused(ld, li, t, name, &info)) != XC_OK)
                return rc;
            for (e = 0; e < ld->n_experts; e++) {
                size_t cell = (size_t)(key0 + (uint32_t)e) * ld->n_tensors + t;
                ld->file_shard[cell] = info.shard;
                ld->file_offset[cell] =
                    info.offset + (uint64_t)e * ld->tensors[t].nbytes;
            }
        }
        for (e = 0; e < ld->n_experts; e++)
            if ((rc = classify(ld, key0 + (uint32_t)e)) != XC_OK)
                return rc;
    }
    return XC_OK;
}

int xc_load_open(xc_loader *ld, const xc_st *st, const xc_cache_opts *o)
{
    size_t i;
    int rc;
    assert(ld != NULL && st != NULL && o != NULL); /* checked by cache open */
    memset(ld, 0, sizeof *ld);
    if ((rc = check_opts(o)) != XC_OK)
        return rc;
    ld->st = st;
    ld->io = xc_st_io(st);
    ld->n_layers = o->n_layers;
    ld->n_experts = o->n_experts;
    ld->n_keys = (uint32_t)(o->n_layers * (size_t)o->n_experts);
    ld->n_tensors = o->n_tensors;
    ld->chunk_bytes = o->chunk_bytes;
    ld->layers = xc_calloc(o->n_layers, sizeof *ld->layers);
    ld->names = xc_calloc(o->n_tensors, sizeof *ld->names);
    ld->tensors = xc_calloc(o->n_tensors, sizeof *ld->tensors);
    ld->file_shard = xc_calloc((size_t)ld->n_keys * o->n_tensors,
                               sizeof *ld->file_shard);
    ld->contiguous = xc_calloc(ld->n_keys, sizeof *ld->contiguous);
    ld->direct = xc_calloc(ld->n_keys, sizeof *ld->direct);
    ld->file_offset = xc_calloc((size_t)ld->n_keys * o->n_tensors,
                                sizeof *ld->file_offset);
    if (!ld->layers || !ld->names || !ld->tensors || !ld->file_shard ||
        !ld->contiguous || !ld->direct || !ld->file_offset)
        goto nomem;
    memcpy(ld->layers, o->layers, o->n_layers * sizeof *ld->layers);
    for (i = 0; i < o->n_tensors; i++)
        if ((ld->names[i] = xc_strdup(o->tensors[i])) == NULL)
            goto nomem;
    ld->fused = strstr(o->expert_template, "{expert}") == NULL;
    if ((rc = ld->fused ? resolve_fused(ld, o->expert_template)
                        : resolve_all(ld, o->expert_template)) != XC_OK) {
        xc_load_close(ld);
        return rc;
    }
    ld->stride = (ld->expert_bytes + 2 * (uint64_t)XC_ALIGN + XC_ALIGN - 1) /
                 XC_ALIGN * XC_ALIGN;
    return XC_OK;
nomem: {
    uint32_t n_keys = ld->n_keys; /* xc_load_close zeroes the loader */
    xc_load_close(ld);
    return xc_fail(XC_E_NOMEM, -1, -1, -1,
                   "no memory for the expert tables of %u keys", n_keys);
}
}

int xc_load_key(const xc_loader *ld, int32_t layer, int32_t expert,
                uint32_t *key)
{
    size_t lo = 0, hi = ld->n_layers;
    /* layer and expert are the caller's to check: a bad pair is MISUSE */
    assert(ld->n_layers > 0 && ld->n_experts > 0 && key != NULL);
    while (lo < hi) { /* binary search: layers are strictly ascending */
        size_t mid = lo + (hi - lo) / 2;
        if (ld->layers[mid] < layer)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo == ld->n_layers || ld->layers[lo] != layer || expert < 0 ||
        expert >= ld->n_experts)
        return xc_fail(XC_E_MISUSE, -1, layer, expert,
                       "(layer %d, expert %d) is not a key of this cache "
                       "(%zu layers from %d to %d, %d experts each)",
                       (int)layer, (int)expert, ld->n_layers,
                       (int)ld->layers[0], (int)ld->layers[ld->n_layers - 1],
                       (int)ld->n_experts);
    *key = (uint32_t)(lo * (size_t)ld->n_experts + (size_t)expert);
    return XC_OK;
}

void xc_load_unkey(const xc_loader *ld, uint32_t key, int32_t *layer,
                   int32_t *expert)
{
    assert(key < ld->n_keys && layer != NULL && expert != NULL);
    *layer = ld->layers[key / (uint32_t)ld->n_experts];
    *expert = (int32_t)(key % (uint32_t)ld->n_experts);
}

/* Re-records this thread's last io error with the expert it belongs to. */
static int blame(const xc_loader *ld, uint32_t key, int rc)
{
    char msg[sizeof xc_last_error()->message];
    int64_t off = xc_last_error()->offset;
    int32_t layer, expert;
    assert(rc < 0); /* a failure this thread recorded */
    xc_load_unkey(ld, key, &layer, &expert);
    memcpy(msg, xc_last_error()->message, sizeof msg);
    return xc_fail(rc, off, layer, expert, "layer %d expert %d: %s",
                   (int)layer, (int)expert, msg);
}

/* One buffered piece: page cache first when the vtable can say, then the
 * rest through the ordinary full-read loop.  *src only ever gets worse
 * (page cache -> unknown -> device). */
static int read_piece(const xc_loader *ld, int64_t h, const char *path,
                      uint8_t *buf, size_t len, uint64_t off, size_t *got,
                      int *src)
{
    int64_t n = -EOPNOTSUPP;
    assert(path != NULL && buf != NULL && src != NULL);
    if (ld->io->pread_nowait != NULL && len > 0)
        n = ld->io->pread_nowait(ld->io->ctx, h, buf, len, off);
    if (n == (int64_t)len) {
        *got = len;
        return XC_OK;
    }
    if (n >= 0 || n == -EAGAIN) {
        /* Not all of it is cached (or the file ends early): read the whole
         * piece the ordinary way, so that a failure is reported for the
         * piece as asked and the cached prefix costs only a memory copy. */
        *src = XC_SRC_DEVICE;
        return xc_io_read_full(ld->io, h, path, buf, len, off, got);
    }
    if (*src != XC_SRC_DEVICE)
        *src = XC_SRC_UNKNOWN;
    return xc_io_read_full(ld->io, h, path, buf, len, off, got);
}

/* Ends a load of key from shard: asks whether the file changed since the
 * container opened it.  A failed read of a file replaced or removed is
 * XC_E_CHANGED; of a file resized in place it keeps its code (the bytes
 * really are missing) and the message says so.  A successful read is
 * checked only when the container verifies every load; then any change
 * fails it with XC_E_CHANGED, so replaced or rewritten bytes are never
 * published as the ones validated at open. */
static int end_load(const xc_loader *ld, uint32_t key, uint32_t shard, int rc)
{
    char why[600];
    uint64_t now;
    int ch;
    int32_t layer, expert;
    assert(key < ld->n_keys && shard < xc_st_n_shards(ld->st) &&
           rc <= 0);
    if (rc == XC_OK && !xc_st_verify(ld->st))
        return XC_OK;
    ch = xc_st_shard_changed(ld->st, shard, why, sizeof why, &now);
    if (ch < 0) /* stat itself failed: report the read's own error */
        ch = XC_SAME;
    if (rc == XC_OK) {
        if (ch == XC_SAME)
            return XC_OK;
        xc_load_unkey(ld, key, &layer, &expert);
        return xc_fail(XC_E_CHANGED, now == UINT64_MAX ? -1 : (int64_t)now,
                       layer, expert, "layer %d expert %d: not published: %s",
                       (int)layer, (int)expert, why);
    }
    if (ch == XC_CHANGED_IDENTITY) {
        xc_load_unkey(ld, key, &layer, &expert);
        return xc_fail(XC_E_CHANGED, now == UINT64_MAX ? -1 : (int64_t)now,
                       layer, expert, "layer %d expert %d: read failed and %s",
                       (int)layer, (int)expert, why);
    }
    if (ch == XC_SAME)
        return blame(ld, key, rc);
    {
        char msg[sizeof xc_last_error()->message];
        int64_t off = xc_last_error()->offset;
        xc_load_unkey(ld, key, &layer, &expert);
        memcpy(msg, xc_last_error()->message, sizeof msg);
        return xc_fail(rc, off, layer, expert, "layer %d expert %d: %.500s "
                       "(%s)", (int)layer, (int)expert, msg, why);
    }
}

int xc_load_read(const xc_loader *ld, uint32_t key, uint8_t *slot,
                 uint64_t *payload_off, uint64_t *asked_bytes)
{
    int src;
    return xc_load_read_src(ld, key, slot, payload_off, asked_bytes, &src);
}

/* Reads the run [off, off + n) of shard into buf, split at multiples of
 * chunk_bytes.  Buffered, the run lands at buf; under O_DIRECT (direct)
 * the window [off, off + n) widened to XC_ALIGN lands at buf (which must
 * be aligned) and the run at buf + off mod XC_ALIGN.  Adds every piece
 * asked of io to *asked; the first failed piece ends the run. */
static int read_run(const xc_loader *ld, uint32_t shard, int direct,
                    uint64_t off, uint64_t n, uint8_t *buf, uint64_t *asked,
                    int *src)
{
    int64_t h = xc_st_shard_handle(ld->st, shard);
    const char *path = xc_st_shard_path(ld->st, shard);
    uint64_t begin = off, end = off + n, at, run_end = off + n;
    size_t got;
    int rc = XC_OK;
    /* O_DIRECT: an aligned buffer and pieces (classify refuses others) */
    assert(buf != NULL && asked != NULL && src != NULL &&
           (!direct || ((uintptr_t)buf % XC_ALIGN == 0 &&
                        ld->chunk_bytes % XC_ALIGN == 0)));
    if (direct)
        xc_io_window(off, n, XC_DIRECT_ALIGN, &begin, &end);
    for (at = begin; at < end && rc == XC_OK;) {
        uint64_t stop = end;
        if (ld->chunk_bytes) {
            uint64_t next;
            /* the next multiple of chunk_bytes; none that fits: no cut */
            if (!__builtin_add_overflow(at - at % ld->chunk_bytes,
                                        ld->chunk_bytes, &next) &&
                next < stop)
                stop = next;
        }
        *asked += stop - at;
        /* A widened piece may meet end of file past the run (only the
         * last one can: chunk_bytes is a multiple of the alignment), and
         * a short piece is reported as the piece asked. */
        if (direct)
            rc = xc_io_read_window(ld->io, h, path, buf + (at - begin), at,
                                   (size_t)(stop - at),
                                   stop < run_end ? stop : run_end,
                                   at, (size_t)(stop - at));
        else
            rc = read_piece(ld, h, path, buf + (at - begin),
                            (size_t)(stop - at), at, &got, src);
        at = stop;
    }
    return rc;
}

/* A scattered expert of a fused layout with an O_DIRECT shard: slices are
 * read last tensor first, each widened window placed in the slot so that it
 * ends no later than its slice's final place (so it never overwrites a
 * slice already placed) and starts aligned, then the slice is moved into
 * place.  The payload begins 2 * XC_ALIGN into the slot: a window starts
 * at most 2 * XC_ALIGN - 2 bytes before its slice's place, and the stride
 * (expert_bytes + 2 * XC_ALIGN, rounded up) still holds the payload.  On
 * failure *last is the shard of the piece that failed. */
static int read_scattered_direct(const xc_loader *ld, uint32_t key,
                                 uint8_t *slot, uint64_t *asked, int *src,
                                 uint32_t *last)
{
    const uint32_t *shard;
    const uint64_t *off;
    const uint64_t base = 2 * XC_ALIGN;
    size_t t = ld->n_tensors;
    int rc = XC_OK;
    /* only a fused expert is scattered under O_DIRECT (classify) */
    assert(key < ld->n_keys && ld->fused && ld->direct[key] &&
           !ld->contiguous[key] && (uintptr_t)slot % XC_ALIGN == 0 &&
           asked != NULL && src != NULL && last != NULL);
    shard = &ld->file_shard[(size_t)key * ld->n_tensors];
    off = &ld->file_offset[(size_t)key * ld->n_tensors];
    while (t-- > 0 && rc == XC_OK) {
        uint64_t n = ld->tensors[t].nbytes, place = base + ld->tensors[t].offset;
        uint64_t lo, hi, at;
        *last = shard[t];
        if (xc_st_shard_direct(ld->st, shard[t]) != 1) {
            rc = read_run(ld, shard[t], 0, off[t], n, slot + place, asked, src);
            continue;
        }
        xc_io_window(off[t], n, XC_DIRECT_ALIGN, &lo, &hi);
        /* place + n - (hi - lo) >= base - (2 * XC_ALIGN - 2) > 0 */
        at = (place + n - (hi - lo)) & ~(XC_ALIGN - 1);
        rc = read_run(ld, shard[t], 1, off[t], n, slot + at, asked, src);
        if (rc == XC_OK && at + (off[t] - lo) != place)
            memmove(slot + place, slot + at + (off[t] - lo), (size_t)n);
    }
    return rc;
}

int xc_load_read_src(const xc_loader *ld, uint32_t key, uint8_t *slot,
                     uint64_t *payload_off, uint64_t *asked_bytes, int *src)
{
    const uint32_t *shard;
    const uint64_t *off;
    uint64_t asked = 0;
    size_t t, got;
    int rc = XC_OK;

    /* a key of this loader into a slot of the arena (stride bytes,
     * XC_ALIGN-aligned) */
    assert(key < ld->n_keys && slot != NULL &&
           (uintptr_t)slot % XC_ALIGN == 0 && payload_off != NULL &&
           asked_bytes != NULL && src != NULL);
    shard = &ld->file_shard[(size_t)key * ld->n_tensors];
    off = &ld->file_offset[(size_t)key * ld->n_tensors];
    *src = ld->direct[key] ? XC_SRC_DEVICE : XC_SRC_PAGE_CACHE;
    if (!ld->contiguous[key]) { /* one read per tensor, packed in order */
        uint32_t last = shard[0];
        *payload_off = 0;
        if (ld->direct[key]) { /* fused only: refused at open otherwise */
            rc = read_scattered_direct(ld, key, slot, &asked, src, &last);
            *payload_off = 2 * XC_ALIGN;
        }
        for (t = 0; t < ld->n_tensors && rc == XC_OK && !ld->direct[key];
             t++) {
            last = shard[t];
            if (ld->fused) /* a slice is a run: chunked like one */
                rc = read_run(ld, shard[t], 0, off[t], ld->tensors[t].nbytes,
                              slot + ld->tensors[t].offset, &asked, src);
            else {
                asked += ld->tensors[t].nbytes;
                rc = read_piece(ld, xc_st_shard_handle(ld->st, shard[t]),
                                xc_st_shard_path(ld->st, shard[t]),
                                slot + ld->tensors[t].offset,
                                ld->tensors[t].nbytes, off[t], &got, src);
            }
        }
        *asked_bytes = asked;
        if (rc != XC_OK)
            return end_load(ld, key, last, rc);
        /* every shard the expert came from must still be the one opened */
        for (t = 0; t < ld->n_tensors && rc == XC_OK; t++)
            rc = end_load(ld, key, shard[t], XC_OK);
        return rc;
    }

    rc = read_run(ld, shard[0], ld->direct[key], off[0], ld->expert_bytes,
                  slot, &asked, src);
    *payload_off = ld->direct[key] ? off[0] % XC_ALIGN : 0;
    *asked_bytes = asked;
    return end_load(ld, key, shard[0], rc);
}
