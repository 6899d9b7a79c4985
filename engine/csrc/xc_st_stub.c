/*
 * xc_st_stub.c -- TEMPORARY stand-in for branch st's reader, so the cache
 * can be built and tested before it lands.  Deleted by the merge of st.
 * Reads one .safetensors file whose header is a flat object of tensors
 * with dtype/shape/data_offsets (plus an optional __metadata__), trusting
 * it.  Not a validator.
 */
#include "xc_internal.h"

#include <stdlib.h>
#include <string.h>

struct xc_st {
    char *path;
    const xc_io *io;
    int64_t handle;
    uint64_t data_start;
    size_t n;
    xc_tensor_info *t;
    char **names;
};

static const char *skip_ws(const char *p)
{
    while (*p == ' ' || *p == '\n' || *p == '\t' || *p == '\r' || *p == ',' ||
           *p == ':')
        p++;
    return p;
}

/* Reads a JSON string at p (no escapes); returns the end. */
static const char *str(const char *p, char *out, size_t cap)
{
    size_t n = 0;
    p++;
    while (*p && *p != '"') {
        if (n + 1 < cap)
            out[n++] = *p;
        p++;
    }
    out[n] = 0;
    return *p ? p + 1 : p;
}

static int dtype_of(const char *s)
{
    int i;
    for (i = 0; i < XC_DT_COUNT; i++)
        if (strcmp(xc_dtype_name(i), s) == 0)
            return i;
    return -1;
}

int xc_st_open(const char *path, const xc_st_opts *opts, xc_st **out)
{
    xc_st *st = xc_calloc(1, sizeof *st);
    uint8_t len8[8];
    uint64_t hlen = 0;
    char *h = NULL, key[512], val[64];
    const char *p;
    size_t got, cap = 0;
    int i, rc;
    if (!st)
        return xc_fail(XC_E_NOMEM, -1, -1, -1, "stub: nomem");
    st->io = opts && opts->io ? opts->io : xc_io_default();
    st->path = xc_strdup(path);
    if ((rc = st->io->open(st->io->ctx, path, 0, &st->handle)) != 0) {
        xc_free(st->path);
        xc_free(st);
        return xc_fail(XC_E_IO, -1, -1, -1, "stub: cannot open %s", path);
    }
    if ((rc = xc_io_read_full(st->io, st->handle, path, len8, 8, 0, &got)))
        goto fail;
    for (i = 7; i >= 0; i--)
        hlen = hlen << 8 | len8[i];
    h = xc_malloc(hlen + 1);
    if ((rc = xc_io_read_full(st->io, st->handle, path, h, hlen, 8, &got)))
        goto fail;
    h[hlen] = 0;
    st->data_start = 8 + hlen;
    p = skip_ws(h + 1);
    while (*p == '"') {
        xc_tensor_info ti;
        memset(&ti, 0, sizeof ti);
        p = str(p, key, sizeof key);
        p = skip_ws(p);
        if (strcmp(key, "__metadata__") == 0) {
            p = strchr(p, '}') + 1;
            p = skip_ws(p);
            continue;
        }
        p = skip_ws(p + 1); /* { */
        while (*p == '"') {
            p = str(p, val, sizeof val);
            p = skip_ws(p);
            if (strcmp(val, "dtype") == 0) {
                p = str(p, val, sizeof val);
                ti.dtype = dtype_of(val);
            } else {
                int is_shape = strcmp(val, "shape") == 0;
                uint64_t v[XC_MAX_DIMS];
                int n = 0;
                p = skip_ws(p + 1); /* [ */
                while (*p != ']') {
                    v[n++] = strtoull(p, (char **)&p, 10);
                    p = skip_ws(p);
                }
                p++;
                if (is_shape) {
                    ti.ndim = n;
                    for (i = 0; i < n; i++)
                        ti.shape[i] = (int64_t)v[i];
                } else {
                    ti.offset = st->data_start + v[0];
                    ti.nbytes = v[1] - v[0];
                }
            }
            p = skip_ws(p);
        }
        p = skip_ws(p + 1); /* } */
        if (st->n == cap) {
            cap = cap ? 2 * cap : 64;
            st->t = xc_realloc(st->t, cap * sizeof *st->t);
            st->names = xc_realloc(st->names, cap * sizeof *st->names);
        }
        st->names[st->n] = xc_strdup(key);
        ti.name = st->names[st->n];
        st->t[st->n++] = ti;
    }
    xc_free(h);
    *out = st;
    return XC_OK;
fail:
    xc_free(h);
    xc_st_close(st);
    return rc;
}

void xc_st_close(xc_st *st)
{
    size_t i;
    if (!st)
        return;
    st->io->close(st->io->ctx, st->handle);
    for (i = 0; i < st->n; i++)
        xc_free(st->names[i]);
    xc_free(st->names);
    xc_free(st->t);
    xc_free(st->path);
    xc_free(st);
}

size_t xc_st_n_tensors(const xc_st *st) { return st->n; }
size_t xc_st_n_shards(const xc_st *st) { (void)st; return 1; }
int xc_st_tensor(const xc_st *st, size_t i, xc_tensor_info *out)
{
    if (i >= st->n)
        return xc_fail(XC_E_MISUSE, -1, -1, -1, "stub: range");
    *out = st->t[i];
    return XC_OK;
}
int xc_st_find(const xc_st *st, const char *name, size_t *out_index)
{
    size_t i;
    for (i = 0; i < st->n; i++)
        if (strcmp(st->names[i], name) == 0) {
            *out_index = i;
            return XC_OK;
        }
    return xc_fail(XC_E_NOT_FOUND, -1, -1, -1, "stub: no %s", name);
}
const char *xc_st_shard_path(const xc_st *st, size_t i)
{
    return i == 0 ? st->path : NULL;
}
uint64_t xc_st_shard_data_start(const xc_st *st, size_t i)
{
    return i == 0 ? st->data_start : 0;
}
int64_t xc_st_shard_handle(const xc_st *st, size_t i)
{
    return i == 0 ? st->handle : -1;
}
const xc_io *xc_st_io(const xc_st *st) { return st->io; }
int xc_st_direct_active(const xc_st *st) { (void)st; return 0; }
