/*
 * xc_index.c -- a sharded container's model.safetensors.index.json: parse
 * it, open every shard it names (in sorted order), validate each, then
 * check that the index and the shards agree tensor by tensor and in
 * total_size.
 */
#include "xc_reader.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

typedef struct st_mapent {
    st_key key;
    uint64_t at;     /* absolute offset of the entry in the index file */
    uint32_t shard;  /* into the shard-name list, then into st->shards */
    uint32_t seen;
} st_mapent;

typedef struct st_shardname {
    st_key key;
    uint64_t at;       /* first weight_map entry that names it */
    uint32_t first_map;
    uint32_t pos;      /* position after sorting */
} st_shardname;

typedef struct st_index {
    xj j;
    char *buf;
    st_mapent *map;
    size_t n_map, cap_map;
    st_table map_tb;
    st_shardname *sn;
    size_t n_sn, cap_sn;
    st_table sn_tb;
    int have_total;
    uint64_t total;
    uint64_t total_at;
} st_index;

static void index_free(st_index *ix)
{
    xc_free(ix->buf);
    xc_free(ix->map);
    xc_free(ix->sn);
    xc_table_free(&ix->map_tb);
    xc_table_free(&ix->sn_tb);
}

static int valid_shard_name(const char *s, size_t n)
{
    if (n == 0 || memchr(s, '/', n) != NULL)
        return 0;
    return !is_key(s, n, ".") && !is_key(s, n, "..");
}

static int parse_weight_map(st_index *ix)
{
    xj *j = &ix->j;
    int rc, nul, started = 0;
    char *k, *v;
    size_t kn, vn, kat, vat;
    if (xj_peek(j) != '{')
        return xj_fail(j, XC_E_FORMAT_INDEX, j->pos,
                       "weight_map must be an object");
    j->pos++;
    while ((rc = xj_member_key(j, &started, &k, &kn, &nul, &kat)) > 0) {
        uint32_t h, hv;
        int64_t si;
        st_mapent *m;
        if (nul || kn > UINT32_MAX)
            return xj_fail(j, XC_E_FORMAT_INDEX, kat, "a weight_map name "
                           "contains U+0000 or is too long");
        if ((rc = xj_expect(j, ':')) != XC_OK)
            return rc;
        xj_ws(j);
        vat = j->pos;
        if (xj_peek(j) != '"')
            return xj_fail(j, XC_E_FORMAT_INDEX, vat, "weight_map value of "
                           "tensor \"%.200s\" must be a shard file name", k);
        if ((rc = xj_string(j, &v, &vn, &nul)) != XC_OK)
            return rc;
        if (nul || !valid_shard_name(v, vn) || vn > UINT32_MAX)
            return xj_fail(j, XC_E_FORMAT_INDEX, vat, "tensor \"%.200s\": "
                           "shard \"%.200s\" is not a plain file name in the "
                           "index's folder", k, v);
        h = xc_name_hash(k, kn);
        if (xc_table_find(&ix->map_tb, ix->map, sizeof *ix->map, k, kn,
                          h) >= 0)
            return xj_fail(j, XC_E_FORMAT_INDEX, kat, "tensor \"%.200s\" "
                           "appears twice in weight_map", k);
        if (ix->n_map >= UINT32_MAX - 1)
            return xj_fail(j, XC_E_FORMAT_INDEX, kat, "too many entries");
        hv = xc_name_hash(v, vn);
        si = xc_table_find(&ix->sn_tb, ix->sn, sizeof *ix->sn, v, vn, hv);
        if (si < 0) {
            st_shardname *sn;
            if (xc_st_grow((void **)&ix->sn, &ix->cap_sn, ix->n_sn,
                           sizeof *ix->sn) != XC_OK ||
                xc_table_reserve(&ix->sn_tb, 1) != XC_OK)
                return xc_st_nomem(j->path, "shard names");
            sn = &ix->sn[ix->n_sn];
            sn->key.name = v;
            sn->key.len = (uint32_t)vn;
            sn->key.hash = hv;
            sn->at = j->base + kat;
            sn->first_map = (uint32_t)ix->n_map;
            sn->pos = 0;
            xc_table_put(&ix->sn_tb, hv, (uint32_t)ix->n_sn);
            si = (int64_t)ix->n_sn++;
        }
        if (xc_st_grow((void **)&ix->map, &ix->cap_map, ix->n_map,
                       sizeof *ix->map) != XC_OK ||
            xc_table_reserve(&ix->map_tb, 1) != XC_OK)
            return xc_st_nomem(j->path, "weight_map");
        m = &ix->map[ix->n_map];
        m->key.name = k;
        m->key.len = (uint32_t)kn;
        m->key.hash = h;
        m->at = j->base + kat;
        m->shard = (uint32_t)si;
        m->seen = 0;
        xc_table_put(&ix->map_tb, h, (uint32_t)ix->n_map);
        ix->n_map++;
    }
    return rc;
}

static int parse_index_metadata(st_index *ix)
{
    xj *j = &ix->j;
    int rc, started = 0;
    char *k;
    size_t kn, kat;
    if (xj_peek(j) == 'n')
        return xj_skip(j, 1);
    if (xj_peek(j) != '{')
        return xj_fail(j, XC_E_FORMAT_INDEX, j->pos,
                       "metadata must be an object");
    j->pos++;
    while ((rc = xj_member(j, &started, &k, &kn, NULL, &kat)) > 0) {
        if (is_key(k, kn, "total_size")) {
            ix->total_at = j->base + j->pos;
            if ((rc = xj_uint(j, UINT64_MAX, XC_E_FORMAT_INDEX, "total_size",
                              &ix->total)) != XC_OK)
                return rc;
            ix->have_total = 1;
        } else if ((rc = xj_skip(j, 2)) != XC_OK) {
            return rc;
        }
    }
    return rc;
}

static int parse_index(st_index *ix)
{
    xj *j = &ix->j;
    int rc, have_map = 0, started = 0;
    char *k;
    size_t kn, at;
    if ((rc = xc_doc_open(j, XC_E_FORMAT_INDEX, "index")) != XC_OK)
        return rc;
    while ((rc = xj_member(j, &started, &k, &kn, NULL, &at)) > 0) {
        if (is_key(k, kn, "weight_map")) {
            if (have_map)
                return xj_fail(j, XC_E_FORMAT_INDEX, at,
                               "weight_map appears twice");
            have_map = 1;
            rc = parse_weight_map(ix);
        } else if (is_key(k, kn, "metadata")) {
            rc = parse_index_metadata(ix);
        } else {
            rc = xj_skip(j, 1);
        }
        if (rc != XC_OK)
            return rc;
    }
    if (rc != XC_OK || (rc = xc_doc_close(j, "index")) != XC_OK)
        return rc;
    if (!have_map)
        return xj_fail(j, XC_E_FORMAT_INDEX, 0, "the index has no "
                       "weight_map");
    return XC_OK;
}

static int cmp_shardname(const void *a, const void *b)
{
    const st_shardname *const *x = a, *const *y = b;
    return strcmp((*x)->key.name, (*y)->key.name);
}

static int read_index_file(xc_st *st, st_index *ix, const char *path)
{
    int64_t h = -1;
    uint64_t size = 0;
    size_t bad;
    struct stat sb;
    int rc = st->io.open(st->io.ctx, path, 0, &h);
    if (rc == -ENOMEM)
        return xc_fail(XC_E_NOMEM, -1, -1, -1, "%s: no memory to open it",
                       path);
    if (rc != 0)
        return xc_io_open_fail(path, rc);
    /* The index's identity, so that no output (a trace) may name it. */
    if ((st->index_path = xc_strdup(path)) == NULL) {
        st->io.close(st->io.ctx, h);
        return xc_st_nomem(path, "index path");
    }
    if (stat(path, &sb) == 0) {
        st->index_id_ok = 1;
        st->index_dev = (uint64_t)sb.st_dev;
        st->index_ino = (uint64_t)sb.st_ino;
    }
    rc = st->io.size(st->io.ctx, h, &size);
    if (rc != 0) {
        st->io.close(st->io.ctx, h);
        return xc_fail(XC_E_IO, -1, -1, -1, "%s: cannot read the file size: "
                       "%s (errno %d)", path, strerror(-rc), -rc);
    }
    if (size > XC_HEADER_MAX_BYTES) {
        st->io.close(st->io.ctx, h);
        return xc_fail(XC_E_FORMAT_INDEX, 0, -1, -1, "%s: byte 0: the index "
                       "is %llu bytes, above the limit of %llu", path,
                       (unsigned long long)size,
                       (unsigned long long)XC_HEADER_MAX_BYTES);
    }
    ix->buf = xc_malloc((size_t)size + XJ_PAD);
    if (ix->buf == NULL) {
        st->io.close(st->io.ctx, h);
        return xc_st_nomem(path, "index buffer");
    }
    rc = xc_io_read_full(&st->io, h, path, ix->buf, (size_t)size, 0, NULL);
    st->io.close(st->io.ctx, h);
    if (rc != XC_OK)
        return rc;
    memset(ix->buf + size, 0, XJ_PAD);
    if (!xj_utf8_valid((const unsigned char *)ix->buf, (size_t)size, &bad))
        return xc_fail(XC_E_FORMAT_NOT_UTF8, (int64_t)bad, -1, -1,
                       "%s: byte %llu: the index is not UTF-8", path,
                       (unsigned long long)bad);
    ix->j.buf = ix->buf;
    ix->j.len = (size_t)size;
    ix->j.base = 0;
    ix->j.path = path;
    return XC_OK;
}

/* Opens the container an index describes: parse the index, open every
 * named shard (in sorted order), validate each, then cross-check. */
int xc_st_open_index(xc_st *st, const char *index_path, const char *dir)
{
    st_index ix;
    st_shardname **order = NULL;
    uint64_t sum = 0;
    size_t seen = 0;
    int rc;

    memset(&ix, 0, sizeof ix);
    if ((rc = read_index_file(st, &ix, index_path)) != XC_OK)
        goto out;
    if ((rc = parse_index(&ix)) != XC_OK)
        goto out;
    if (ix.n_sn > 0) {
        order = xc_malloc(ix.n_sn * sizeof *order);
        if (order == NULL) {
            rc = xc_st_nomem(index_path, "shard order");
            goto out;
        }
    }
    for (size_t i = 0; i < ix.n_sn; i++)
        order[i] = &ix.sn[i];
    if (ix.n_sn > 1)
        qsort(order, ix.n_sn, sizeof *order, cmp_shardname);
    for (size_t i = 0; i < ix.n_sn; i++)
        order[i]->pos = (uint32_t)i;
    for (size_t i = 0; i < ix.n_map; i++)
        ix.map[i].shard = ix.sn[ix.map[i].shard].pos;

    /* Every named shard exists (all are opened before any is parsed). */
    for (size_t i = 0; i < ix.n_sn; i++) {
        const st_shardname *sn = order[i];
        char *shard_path;
        if (sn->key.len > NAME_MAX) { /* no file can have this name */
            rc = xc_fail(XC_E_FORMAT_INDEX, (int64_t)sn->at, -1, -1,
                         "%s: byte %llu: shard \"%.200s...\" named by the "
                         "index (for tensor \"%.200s\") does not exist: its "
                         "name is %zu bytes, longer than a file name can be "
                         "(%d)", index_path, (unsigned long long)sn->at,
                         sn->key.name, ix.map[sn->first_map].key.name,
                         (size_t)sn->key.len, NAME_MAX);
            goto out;
        }
        shard_path = xc_st_join_path(dir, sn->key.name);
        rc = shard_path ? xc_st_add_shard(st, shard_path)
                        : xc_st_nomem(index_path, "shard path");
        if (rc == XC_E_NOT_FOUND) {
            rc = xc_fail(XC_E_FORMAT_INDEX, (int64_t)sn->at, -1, -1,
                         "%s: byte %llu: shard \"%.200s\" named by the index "
                         "(for tensor \"%.200s\") does not exist",
                         index_path, (unsigned long long)sn->at,
                         sn->key.name, ix.map[sn->first_map].key.name);
            goto out;
        }
        if (rc != XC_OK)
            goto out;
    }
    for (size_t s = 0; s < st->n_shards; s++)
        if ((rc = xc_st_load_shard(st, s)) != XC_OK)
            goto out;

    /* Each shard's tensors are in the map, mapped to that shard. */
    for (size_t i = 0; i < st->n_t; i++) {
        const st_tensor *t = &st->t[i];
        int64_t m = xc_table_find(&ix.map_tb, ix.map, sizeof *ix.map,
                                  t->key.name, t->key.len, t->key.hash);
        if (m < 0) {
            rc = xc_st_tensor_fail(
                st, t, XC_E_FORMAT_INDEX, "not in the weight_map "
                "of %s", index_path);
            goto out;
        }
        if (ix.map[m].shard != t->shard) {
            rc = xc_st_tensor_fail(
                st, t, XC_E_FORMAT_INDEX, "%s maps it to shard "
                "\"%.200s\", but it is in this shard",
                index_path,
                order[ix.map[m].shard]->key.name);
            goto out;
        }
        ix.map[m].seen = 1;
        seen++;
        if (__builtin_add_overflow(sum, t->nbits, &sum))
            sum = UINT64_MAX;
    }
    /* ... and every map entry was met. */
    if (seen != ix.n_map) {
        for (size_t i = 0; i < ix.n_map; i++)
            if (!ix.map[i].seen) {
                rc = xc_fail(XC_E_FORMAT_INDEX, (int64_t)ix.map[i].at, -1, -1,
                             "%s: byte %llu: the index maps tensor \"%.200s\" "
                             "to shard \"%.200s\", which does not contain it",
                             index_path, (unsigned long long)ix.map[i].at,
                             ix.map[i].key.name,
                             order[ix.map[i].shard]->key.name);
                goto out;
            }
    }
    if (ix.have_total && ix.total != sum) {
        rc = xc_fail(XC_E_FORMAT_INDEX, (int64_t)ix.total_at, -1, -1,
                     "%s: byte %llu: metadata.total_size is %llu but the "
                     "shards' tensors hold %llu bytes", index_path,
                     (unsigned long long)ix.total_at,
                     (unsigned long long)ix.total, (unsigned long long)sum);
        goto out;
    }
    rc = XC_OK;
out:
    xc_free(order);
    index_free(&ix);
    return rc;
}

