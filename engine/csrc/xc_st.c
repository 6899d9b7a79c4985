/*
 * xc_st.c -- the safetensors reader's public face: open a container (one
 * file, a folder, or an index), its tensors, shards and metadata, reads,
 * and the check that the files are still the ones opened.
 *
 * The reader's other files, sharing xc_reader.h (which says who calls
 * whom: from this file down, never back):
 *   xc_index.c   model.safetensors.index.json;
 *   xc_header.c  one shard: its file opened, its header validated
 *                completely (steps 1-10 of the safetensors validation
 *                order);
 *   xc_names.c   name hashing and the name tables;
 *   xc_st_mem.c  the memory the reader's tables live in: growing arrays,
 *                huge-page advice, the out-of-memory record, paths.
 *
 * Nothing here is static and mutable: two threads may open containers at
 * once.
 */
#include "xc_reader.h"

#include <assert.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* ------------------------------------------------------------------ */
/* Shards and the container                                             */
/* ------------------------------------------------------------------ */

/* The final name table over the whole container, and the summaries. */
static int finalize(xc_st *st)
{
    size_t bytes = 0;
    int rebuild = st->n_shards != 1 || st->names.slots == NULL ||
                  st->names.n != st->n_t;
    if (rebuild) {
        xc_table_free(&st->names);
        if (xc_table_reserve(&st->names, st->n_t) != XC_OK)
            return xc_st_nomem(st->n_shards ? st->shards[0].path : NULL,
                               "name index");
    }
    for (size_t i = 0; i < st->n_t; i++) {
        if (rebuild)
            xc_table_put(&st->names, st->t[i].key.hash, (uint32_t)i);
        bytes += (size_t)st->t[i].key.len + 1;
    }
    st->names_bytes = bytes;
    st->direct_all = st->direct_req && st->n_shards > 0;
    for (size_t s = 0; s < st->n_shards; s++)
        if (!st->shards[s].direct)
            st->direct_all = 0;
    if (!st->direct_req)
        snprintf(st->note, sizeof st->note, "O_DIRECT not requested");
    else if (st->direct_all)
        snprintf(st->note, sizeof st->note, "O_DIRECT active on %zu "
                 "shard(s), %d-byte alignment", st->n_shards,
                 XC_DIRECT_ALIGN);
    return XC_OK;
}

static int open_single(xc_st *st, char *path)
{
    int rc = xc_st_add_shard(st, path);
    if (rc != XC_OK)
        return rc;
    return xc_st_load_shard(st, 0);
}

/* ------------------------------------------------------------------ */
/* Public API                                                           */
/* ------------------------------------------------------------------ */

static int ends_with(const char *s, const char *suffix)
{
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
}

static int open_folder(xc_st *st, const char *dir)
{
    char *idx = xc_st_join_path(dir, INDEX_NAME), **names = NULL;
    size_t n = 0;
    int kind, rc;
    if (idx == NULL)
        return xc_st_nomem(dir, "index path");
    kind = xc_path_kind(idx);
    if (kind == 1) {
        rc = xc_st_open_index(st, idx, dir);
        xc_free(idx);
        return rc;
    }
    xc_free(idx);
    if ((rc = xc_list_dir(dir, ".safetensors", &names, &n)) != XC_OK)
        return rc;
    if (n == 1) {
        rc = open_single(st, xc_st_join_path(dir, names[0]));
    } else if (n == 0) {
        rc = xc_fail(XC_E_NOT_FOUND, -1, -1, -1, "%s: the folder holds no "
                     ".safetensors file and no " INDEX_NAME, dir);
    } else {
        rc = xc_fail(XC_E_FORMAT_INDEX, -1, -1, -1, "%s: the folder holds "
                     "%zu .safetensors files (\"%.100s\", \"%.100s\", ...) "
                     "but no " INDEX_NAME " to say which form the container",
                     dir, n, names[0], names[1]);
    }
    for (size_t i = 0; i < n; i++)
        xc_free(names[i]);
    xc_free(names);
    return rc;
}

int xc_st_open(const char *path, const xc_st_opts *opts, xc_st **out)
{
    xc_st *st;
    int kind, rc;
    if (path == NULL || out == NULL)
        return xc_fail(XC_E_MISUSE, -1, -1, -1,
                       "xc_st_open: path and out must not be NULL");
    st = xc_calloc(1, sizeof *st);
    if (st == NULL)
        return xc_st_nomem(path, "container");
    st->io = (opts && opts->io) ? *opts->io : *xc_io_default();
    st->direct_req = opts ? opts->direct != 0 : 0;
    st->verify = opts ? opts->verify != 0 : 0;
    kind = xc_path_kind(path);
    if (kind < 0) {
        rc = xc_fail(XC_E_IO, -1, -1, -1, "%s: stat failed: %s (errno %d)",
                     path, strerror(-kind), -kind);
    } else if (kind == 0) {
        rc = xc_fail(XC_E_NOT_FOUND, -1, -1, -1, "%s: no such file or folder",
                     path);
    } else if (kind == 2) {
        rc = open_folder(st, path);
    } else if (ends_with(path, ".json")) {
        const char *slash = strrchr(path, '/');
        char *dir;
        if (slash == NULL) {
            dir = xc_strdup(".");
        } else {
            size_t dn = slash == path ? 1 : (size_t)(slash - path);
            dir = xc_malloc(dn + 1);
            if (dir) {
                memcpy(dir, path, dn);
                dir[dn] = '\0';
            }
        }
        rc = dir ? xc_st_open_index(st, path, dir)
                 : xc_st_nomem(path, "folder name");
        xc_free(dir);
    } else {
        char *p = xc_strdup(path);
        rc = p ? open_single(st, p) : xc_st_nomem(path, "shard path");
    }
    if (rc == XC_OK)
        rc = finalize(st);
    if (rc != XC_OK) {
        xc_st_close(st);
        return rc;
    }
    *out = st;
    return XC_OK;
}

void xc_st_close(xc_st *st)
{
    if (st == NULL)
        return;
    for (size_t s = 0; s < st->n_shards; s++) {
        if (st->shards[s].handle >= 0)
            st->io.close(st->io.ctx, st->shards[s].handle);
        xc_free(st->shards[s].buf);
        xc_free(st->shards[s].path);
    }
    xc_free(st->shards);
    xc_free(st->index_path);
    xc_free(st->t);
    xc_free(st->dims);
    xc_free(st->meta);
    xc_table_free(&st->names);
    xc_free(st);
}

size_t xc_st_n_tensors(const xc_st *st) { return st->n_t; }
size_t xc_st_n_shards(const xc_st *st) { return st->n_shards; }

int xc_st_tensor(const xc_st *st, size_t i, xc_tensor_info *out)
{
    const st_tensor *t;
    if (i >= st->n_t)
        return xc_fail(XC_E_MISUSE, -1, -1, -1, "tensor index %zu out of "
                       "range (%zu tensors)", i, st->n_t);
    t = &st->t[i];
    memset(out, 0, sizeof *out);
    out->name = t->key.name;
    out->dtype = t->dtype;
    out->ndim = t->ndim;
    for (int k = 0; k < t->ndim; k++)
        out->shape[k] = (int64_t)st->dims[t->dims_at + (size_t)k];
    out->shard = t->shard;
    out->offset = 8 + st->shards[t->shard].header_bytes + t->begin;
    out->nbytes = t->nbits;
    return XC_OK;
}

int xc_st_find(const xc_st *st, const char *name, size_t *out_index)
{
    size_t n = strlen(name);
    int64_t i = xc_table_find(&st->names, st->t, sizeof *st->t, name, n,
                              xc_name_hash(name, n));
    if (i < 0)
        return xc_fail(XC_E_NOT_FOUND, -1, -1, -1, "no tensor named "
                       "\"%.200s\"", name);
    *out_index = (size_t)i;
    return XC_OK;
}

const char *xc_st_shard_path(const xc_st *st, size_t i)
{
    return i < st->n_shards ? st->shards[i].path : NULL;
}

uint64_t xc_st_shard_data_start(const xc_st *st, size_t i)
{
    return i < st->n_shards ? 8 + st->shards[i].header_bytes : 0;
}

uint64_t xc_st_shard_header_bytes(const xc_st *st, size_t i)
{
    return i < st->n_shards ? st->shards[i].header_bytes : 0;
}

int64_t xc_st_shard_handle(const xc_st *st, size_t i)
{
    return i < st->n_shards ? st->shards[i].handle : -1;
}

int xc_st_shard_direct(const xc_st *st, size_t i)
{
    return i < st->n_shards ? st->shards[i].direct : 0;
}

const xc_io *xc_st_io(const xc_st *st) { return &st->io; }

int xc_st_verify(const xc_st *st) { return st->verify; }

const char *xc_st_file_with_id(const xc_st *st, uint64_t dev, uint64_t ino)
{
    assert(st != NULL);
    for (size_t i = 0; i < st->n_shards; i++)
        if (st->shards[i].id_ok && st->shards[i].id_dev == dev &&
            st->shards[i].id_ino == ino)
            return st->shards[i].path;
    if (st->index_id_ok && st->index_dev == dev && st->index_ino == ino)
        return st->index_path;
    return NULL;
}

/* ------------------------------------------------------------------ */
/* Files changed while open                                             */
/* ------------------------------------------------------------------ */

int xc_st_shard_changed(const xc_st *st, size_t i, char *why, size_t why_len,
                        uint64_t *now_bytes)
{
    const st_shard *sh = &st->shards[i];
    struct stat sb;
    uint64_t handle_bytes = 0;
    int rc;
    *now_bytes = UINT64_MAX;
    if (why_len)
        why[0] = '\0';
    if (stat(sh->path, &sb) != 0) {
        int err = errno;
        if (err == ENOENT || err == ENOTDIR) {
            snprintf(why, why_len, "%s was removed while the container was "
                     "open", sh->path);
            return XC_CHANGED_IDENTITY;
        }
        return xc_fail(XC_E_IO, -1, -1, -1, "%s: stat failed: %s (errno %d)",
                       sh->path, strerror(err), err);
    }
    *now_bytes = (uint64_t)sb.st_size;
    if (sh->id_ok && ((uint64_t)sb.st_dev != sh->id_dev ||
                      (uint64_t)sb.st_ino != sh->id_ino)) {
        snprintf(why, why_len, "%s was replaced by another file (inode %llu, "
                 "%llu bytes) while the container was open (inode %llu, "
                 "%llu bytes)", sh->path, (unsigned long long)sb.st_ino,
                 (unsigned long long)sb.st_size,
                 (unsigned long long)sh->id_ino,
                 (unsigned long long)sh->file_bytes);
        return XC_CHANGED_IDENTITY;
    }
    /* The open handle's view: the same inode unless the vtable says
     * otherwise; it is what reads see. */
    rc = st->io.size(st->io.ctx, sh->handle, &handle_bytes);
    if (rc == 0 && handle_bytes != (uint64_t)sb.st_size)
        *now_bytes = handle_bytes;
    if ((uint64_t)sb.st_size != sh->file_bytes ||
        (rc == 0 && handle_bytes != sh->file_bytes)) {
        snprintf(why, why_len, "%s was resized from %llu to %llu bytes while "
                 "the container was open", sh->path,
                 (unsigned long long)sh->file_bytes,
                 (unsigned long long)*now_bytes);
        return XC_CHANGED_SIZE;
    }
    if (sh->id_ok && ((int64_t)sb.st_mtim.tv_sec != sh->id_mtime_s ||
                      (int64_t)sb.st_mtim.tv_nsec != sh->id_mtime_ns)) {
        snprintf(why, why_len, "%s was modified while the container was "
                 "open (mtime %lld.%09lld, was %lld.%09lld)", sh->path,
                 (long long)sb.st_mtim.tv_sec, (long long)sb.st_mtim.tv_nsec,
                 (long long)sh->id_mtime_s, (long long)sh->id_mtime_ns);
        return XC_CHANGED_MTIME;
    }
    /* A same-size rewrite whose mtime was put back (utime) still moved the
     * status change time, which no caller can set. */
    if (sh->id_ok && ((int64_t)sb.st_ctim.tv_sec != sh->id_ctime_s ||
                      (int64_t)sb.st_ctim.tv_nsec != sh->id_ctime_ns)) {
        snprintf(why, why_len, "%s was changed while the container was "
                 "open (ctime %lld.%09lld, was %lld.%09lld; mtime as at "
                 "open)", sh->path,
                 (long long)sb.st_ctim.tv_sec, (long long)sb.st_ctim.tv_nsec,
                 (long long)sh->id_ctime_s, (long long)sh->id_ctime_ns);
        return XC_CHANGED_MTIME;
    }
    return XC_SAME;
}

int xc_st_check_files(const xc_st *st)
{
    char why[900];
    uint64_t now;
    for (size_t i = 0; i < st->n_shards; i++) {
        int ch = xc_st_shard_changed(st, i, why, sizeof why, &now);
        if (ch < 0)
            return ch;
        if (ch != XC_SAME)
            return xc_fail(XC_E_CHANGED,
                           now == UINT64_MAX ? -1 : (int64_t)now, -1, -1,
                           "%s", why);
    }
    return XC_OK;
}

size_t xc_st_n_metadata(const xc_st *st) { return st->n_meta; }

int xc_st_metadata(const xc_st *st, size_t i, const char **key,
                   const char **value)
{
    if (i >= st->n_meta)
        return xc_fail(XC_E_MISUSE, -1, -1, -1, "metadata index %zu out of "
                       "range (%zu entries)", i, st->n_meta);
    *key = st->meta[i].key.name;
    *value = st->meta[i].value;
    return XC_OK;
}

int xc_st_direct_active(const xc_st *st) { return st->direct_all; }
const char *xc_st_direct_note(const xc_st *st) { return st->note; }

const char *xc_st_names_block(const xc_st *st, size_t *len)
{
    *len = st->names_bytes;
    if (st->n_shards != 1 || st->n_t == 0)
        return NULL;
    return st->shards[0].names;
}

int xc_st_names(const xc_st *st, char *buf, size_t buf_len, size_t *needed)
{
    char *w = buf;
    size_t len;
    const char *block = xc_st_names_block(st, &len);
    *needed = st->names_bytes;
    if (buf_len < st->names_bytes)
        return xc_fail(XC_E_MISUSE, -1, -1, -1, "xc_st_names needs %zu "
                       "bytes, got %zu", st->names_bytes, buf_len);
    if (block != NULL) {
        memcpy(buf, block, len);
        return XC_OK;
    }
    for (size_t i = 0; i < st->n_t; i++) {
        memcpy(w, st->t[i].key.name, (size_t)st->t[i].key.len + 1);
        w += st->t[i].key.len + 1;
    }
    return XC_OK;
}

/* A direct read goes through an aligned bounce buffer, chunk by chunk, so
 * the caller's dst needs no alignment.  8 MiB keeps a chunk well above the
 * size where per-call overhead matters and the bounce buffer small.  Each
 * chunk is widened on its own; chunks start BOUNCE_BYTES apart, a multiple
 * of the alignment, so no chunk's window is larger than the first's. */
#define BOUNCE_BYTES (8u << 20)

static int read_direct(const xc_st *st, const st_shard *sh, uint64_t off,
                       unsigned char *dst, size_t len)
{
    uint64_t lo, hi;
    unsigned char *bounce;
    size_t done = 0;
    int rc = XC_OK;
    xc_io_window(off, len < BOUNCE_BYTES ? len : BOUNCE_BYTES,
                 XC_DIRECT_ALIGN, &lo, &hi);
    bounce = xc_aligned_alloc(XC_DIRECT_ALIGN, (size_t)(hi - lo));
    if (bounce == NULL)
        return xc_st_nomem(sh->path, "direct-read bounce buffer");
    while (done < len) {
        size_t chunk = len - done < BOUNCE_BYTES ? len - done : BOUNCE_BYTES;
        uint64_t at = off + done;
        xc_io_window(at, chunk, XC_DIRECT_ALIGN, &lo, &hi);
        rc = xc_io_read_window(&st->io, sh->handle, sh->path, bounce, lo,
                               (size_t)(hi - lo), at + chunk, at, chunk);
        if (rc != XC_OK)
            break;
        memcpy(dst + done, bounce + (at - lo), chunk);
        done += chunk;
    }
    xc_free(bounce);
    return rc;
}

int xc_st_read_tensor(const xc_st *st, size_t i, void *dst, size_t dst_len)
{
    const st_tensor *t;
    const st_shard *sh;
    uint64_t off;
    int rc;
    if (i >= st->n_t)
        return xc_fail(XC_E_MISUSE, -1, -1, -1, "tensor index %zu out of "
                       "range (%zu tensors)", i, st->n_t);
    t = &st->t[i];
    sh = &st->shards[t->shard];
    if (dst_len < t->nbits)
        return xc_fail(XC_E_MISUSE, -1, -1, -1, "tensor \"%.200s\" is %llu "
                       "bytes; the buffer holds %zu", t->key.name,
                       (unsigned long long)t->nbits, dst_len);
    if (t->nbits == 0)
        return XC_OK;
    off = 8 + sh->header_bytes + t->begin;
    if (sh->direct)
        rc = read_direct(st, sh, off, dst, (size_t)t->nbits);
    else
        rc = xc_io_read_full(&st->io, sh->handle, sh->path, dst,
                             (size_t)t->nbits, off, NULL);
    if (rc != XC_OK) {
        char why[1024];
        const xc_error *e = xc_last_error();
        int64_t where = e->offset;
        snprintf(why, sizeof why, "%s", e->message);
        return xc_fail(rc, where, -1, -1, "tensor \"%.200s\" (shard %u, "
                       "bytes %llu..%llu): %s", t->key.name,
                       (unsigned)t->shard, (unsigned long long)off,
                       (unsigned long long)(off + t->nbits), why);
    }
    if (st->verify) {
        /* as an expert load: bytes from a file changed since open are
         * not returned as the ones validated then */
        char why[900];
        uint64_t now;
        int ch = xc_st_shard_changed(st, t->shard, why, sizeof why, &now);
        if (ch < 0)
            return ch;
        if (ch != XC_SAME)
            return xc_fail(XC_E_CHANGED,
                           now == UINT64_MAX ? -1 : (int64_t)now, -1, -1,
                           "tensor \"%.200s\": not returned: %s",
                           t->key.name, why);
    }
    return XC_OK;
}

