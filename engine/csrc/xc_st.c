/*
 * xc_st.c -- the safetensors reader: validate, index, read.
 *
 * Why the checks run in this order
 * --------------------------------
 * A safetensors file is an 8-byte length N, N bytes of JSON, and a data
 * buffer.  Each check below may only rely on facts the checks before it
 * have established, and each reports its own status code, so the order is
 * the order of dependence (DESIGN §3):
 *
 *   1. too_short         the file holds the 8 bytes of N at all;
 *   2. header_too_large  N <= 100,000,000 -- before any arithmetic on N or
 *                        any allocation sized by it, so a hostile N can cost
 *                        neither an overflow nor a 16-exabyte malloc;
 *   3. header_past_end   8 + N fits and lies inside the file -- only now is
 *                        it safe to read (and allocate) N bytes;
 *   4. not_utf8          the bytes are text, so the JSON layer can trust
 *                        every byte >= 0x80 belongs to a valid sequence;
 *   5. json / schema / dtype / duplicate
 *                        one pass over the JSON; the first problem in
 *                        document order wins, each with its own code;
 *   6. offsets           sorted by (begin, end), the tensors tile the data
 *                        buffer from 0 with no overlap, gap or inversion;
 *   7. overflow          element count x bits fits in 64 bits (and every
 *                        dimension in 48) -- after 6, so a size is computed
 *                        only for entries whose ranges are sane;
 *   8. bits              that bit count is whole bytes (F4, F6_*);
 *   9. size              end - begin equals that byte count;
 *  10. length            8 + N + the last end equals the file length: no
 *                        truncation, no trailing bytes.
 *
 * Steps 6-9 each run over every tensor before the next starts, so a file
 * with several problems always reports the earliest *kind*, whatever the
 * order of its entries.  The error record's offset is an absolute file
 * offset: the N field (0) for step 2, the end of the file for steps 1 and 3,
 * the offending byte for 4-5, the entry's name for 6-9, and the first byte
 * where data and file disagree for 10.
 *
 * The bounded cursor
 * ------------------
 * Nothing read from the file is used as a length before it has been
 * checked against what is already known to be there: N against the cap and
 * the file size, every JSON read against the header's end (xc_json.c keeps
 * zero padding after the header so its word-at-a-time scans stop without a
 * bounds test in the inner loop), every integer against 48 or 64 bits with
 * overflow checks, the nesting depth against a fixed bound.  Tensor names
 * are decoded in place in the header buffer, which the container keeps, so
 * 200,000 names cost one allocation, not 200,000; as the parse goes, each
 * name is moved down over header bytes already parsed (compact_name), so
 * the names end up as one NUL-separated block that the Python side decodes
 * and splits once, without a copy (xc_st_names_block).
 *
 * The header is read into memory with the io vtable's pread, not mapped:
 * the fault injector must see every byte come in, and measured on the
 * 29 MB header a MAP_POPULATE mapping saved ~0.7 ms of ~2 ms (glibc reuses
 * the freed buffer, so the copy's page faults are paid once per process),
 * for a SIGBUS if the file were truncated mid-parse.
 *
 * Names are found through an open-addressing table (linear probing, load
 * <= 1/2) keyed by a multiplicative hash that mixes each 16-byte chunk on
 * its own (a 128-bit multiply folded, as wyhash does) and sums the chunks,
 * so a name's multiplies overlap instead of forming one chain.  The same
 * table catches
 * duplicate names and maps weight_map entries for the index.  A shard's
 * table is filled in one batch after its header is parsed (dup_check), not
 * entry by entry: a 200,000-name table is megabytes, every insert misses
 * the cache, and a batch loop with the slot prefetched sixteen entries
 * ahead overlaps those misses where the parser could not.  The batch meets
 * the names in document order and every name recorded lies before the
 * point where the parse stopped, so the report is the same: the first
 * duplicate wins over any later problem, including one in its own entry.
 * Nothing here is static and mutable: two threads may open containers at
 * once.
 */
#include "xc_json.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define MAX_48 ((1ull << 48) - 1)
#define INDEX_NAME "model.safetensors.index.json"
#define NOTE_LEN 512

/* ------------------------------------------------------------------ */
/* Types                                                                */
/* ------------------------------------------------------------------ */

/* First member of every entry a name table indexes. */
typedef struct st_key {
    const char *name; /* NUL-terminated, inside a header/index buffer */
    uint32_t len;
    uint32_t hash;
} st_key;

typedef struct st_tensor {
    st_key key;
    uint64_t begin, end; /* data_offsets, relative to the data buffer */
    uint64_t nbits;      /* then nbytes, once validated */
    uint64_t entry_at;   /* absolute offset of the entry's name */
    uint32_t dims_at;    /* first dimension in xc_st.dims */
    uint32_t shard;
    uint8_t ndim;
    uint8_t dtype;
} st_tensor;

typedef struct st_meta {
    st_key key;
    const char *value;
} st_meta;

typedef struct st_shard {
    char *path;
    int64_t handle;     /* -1 when not open */
    int direct;
    int id_ok;          /* 1 once the identity below was recorded */
    uint64_t id_dev, id_ino; /* stat(path) right after the open */
    int64_t id_mtime_s, id_mtime_ns;
    uint64_t file_bytes;
    uint64_t header_bytes; /* N */
    char *buf;          /* holds the header; names point into it */
    size_t first, count; /* tensor range in xc_st.t */
    const char *names;  /* the names as one NUL-separated block in header
                           order, or NULL (see compact_name) */
} st_shard;

/* Open addressing: a slot is (hash << 32) | (index + 1); 0 is empty. */
typedef struct st_table {
    uint64_t *slots;
    size_t mask;
    size_t n;
} st_table;

struct xc_st {
    xc_io io;
    int direct_req;
    int verify;
    int direct_all;
    char note[NOTE_LEN];
    st_shard *shards;
    size_t n_shards, cap_shards;
    st_tensor *t;
    size_t n_t, cap_t;
    uint64_t *dims;
    size_t n_dims, cap_dims;
    st_meta *meta;
    size_t n_meta, cap_meta;
    st_table names;
    size_t names_bytes;
};

/* ------------------------------------------------------------------ */
/* Hashing and the name table                                           */
/* ------------------------------------------------------------------ */

/* 64x64->128 multiply folded to 64 bits (wyhash's mix); where the
 * compiler has no 128-bit integer, the same from four 32x32 products. */
static inline uint64_t mix128(uint64_t a, uint64_t b)
{
#if defined(__SIZEOF_INT128__)
    __extension__ typedef unsigned __int128 u128;
    u128 r = (u128)a * b;
    return (uint64_t)r ^ (uint64_t)(r >> 64);
#else
    uint64_t al = (uint32_t)a, ah = a >> 32, bl = (uint32_t)b, bh = b >> 32;
    uint64_t ll = al * bl, lh = al * bh, hl = ah * bl, hh = ah * bh;
    uint64_t mid = (ll >> 32) + (uint32_t)lh + (uint32_t)hl;
    uint64_t lo = (mid << 32) | (uint32_t)ll;
    uint64_t hi = hh + (lh >> 32) + (hl >> 32) + (mid >> 32);
    return lo ^ hi;
#endif
}

/* Each 16-byte chunk, keyed by its position, is mixed on its own and the
 * results are summed, so the chunks' multiplies overlap instead of forming
 * one dependent chain (a 72-byte name hashed serially was ~40 cycles);
 * the sum is mixed once more at the end.  The last chunk is the 16 bytes
 * that end the name (overlapping the one before; shorter names load their
 * first and last 8 or 4 bytes), as wyhash does: a variable-length memcpy
 * of the tail compiled to a byte loop and a store-forwarding stall.  Only
 * whole names are read.  Quality only matters for probe lengths: the
 * table compares whole names. */
static uint32_t name_hash(const char *s, size_t n)
{
    const uint64_t s0 = 0xa0761d6478bd642full, s1 = 0xe7037ed1a0b428dbull;
    const uint64_t step = 0x8ebc6af09c88c6e3ull;
    uint64_t h = 0x9e3779b97f4a7c15ull ^ (uint64_t)n, key = s0, w, v;
    if (n > 16) {
        const char *end = s + n;
        while (end - s > 16) {
            memcpy(&w, s, 8);
            memcpy(&v, s + 8, 8);
            h += mix128(w ^ key, v ^ s1);
            key += step;
            s += 16;
        }
        memcpy(&w, end - 16, 8);
        memcpy(&v, end - 8, 8);
    } else if (n >= 8) {
        memcpy(&w, s, 8);
        memcpy(&v, s + n - 8, 8);
    } else if (n >= 4) {
        uint32_t a, c;
        memcpy(&a, s, 4);
        memcpy(&c, s + n - 4, 4);
        w = a;
        v = c;
    } else {
        w = n ? ((uint64_t)(unsigned char)s[0] << 16) |
                ((uint64_t)(unsigned char)s[n / 2] << 8) |
                (uint64_t)(unsigned char)s[n - 1]
              : 0;
        v = 0;
    }
    h += mix128(w ^ key, v ^ s1);
    h = mix128(h ^ s1, 0x589965cc75374cc3ull ^ (uint64_t)(h >> 32));
    return (uint32_t)(h ^ (h >> 32));
}

static const st_key *key_at(const void *base, size_t stride, size_t i)
{
    return (const st_key *)((const char *)base + i * stride);
}

/* Index of the entry called name, or -1. */
static int64_t table_find(const st_table *tb, const void *base, size_t stride,
                          const char *name, size_t len, uint32_t hash)
{
    size_t i;
    if (tb->slots == NULL)
        return -1;
    for (i = hash & tb->mask;; i = (i + 1) & tb->mask) {
        uint64_t s = tb->slots[i];
        if (s == 0)
            return -1;
        if ((uint32_t)(s >> 32) == hash) {
            const st_key *k = key_at(base, stride, (size_t)(uint32_t)s - 1);
            if (k->len == len && memcmp(k->name, name, len) == 0)
                return (int64_t)((uint32_t)s - 1);
        }
    }
}

static void table_put(st_table *tb, uint32_t hash, uint32_t idx)
{
    size_t i = hash & tb->mask;
    while (tb->slots[i] != 0)
        i = (i + 1) & tb->mask;
    tb->slots[i] = ((uint64_t)hash << 32) | ((uint64_t)idx + 1);
    tb->n++;
}

/* Makes room for one more entry at load <= 1/2.  XC_E_NOMEM leaves the
 * table as it was. */
static int table_reserve(st_table *tb, size_t more)
{
    size_t cap = tb->slots ? tb->mask + 1 : 0, ncap;
    uint64_t *ns;
    if ((tb->n + more) * 2 <= cap)
        return XC_OK;
    ncap = cap ? cap : 16;
    while ((tb->n + more) * 2 > ncap)
        ncap *= 2;
    ns = xc_calloc(ncap, sizeof *ns);
    if (ns == NULL)
        return XC_E_NOMEM;
    for (size_t i = 0; i < cap; i++) {
        uint64_t s = tb->slots[i];
        if (s != 0) {
            size_t j = (uint32_t)(s >> 32) & (ncap - 1);
            while (ns[j] != 0)
                j = (j + 1) & (ncap - 1);
            ns[j] = s;
        }
    }
    xc_free(tb->slots);
    tb->slots = ns;
    tb->mask = ncap - 1;
    return XC_OK;
}

static void table_free(st_table *tb)
{
    xc_free(tb->slots);
    tb->slots = NULL;
    tb->mask = 0;
    tb->n = 0;
}

/* Grows an array of elem-byte items to hold one more; NOMEM keeps it. */
static int grow(void **arr, size_t *cap, size_t n, size_t elem)
{
    size_t ncap;
    void *p;
    if (n < *cap)
        return XC_OK;
    ncap = *cap ? *cap * 2 : 16;
    if (ncap > SIZE_MAX / elem)
        return XC_E_NOMEM;
    p = xc_realloc(*arr, ncap * elem);
    if (p == NULL)
        return XC_E_NOMEM;
    *arr = p;
    *cap = ncap;
    return XC_OK;
}

static int nomem(const char *path, const char *what)
{
    return xc_fail(XC_E_NOMEM, -1, -1, -1, "%s: out of memory (%s)",
                   path ? path : "(container)", what);
}

/* ------------------------------------------------------------------ */
/* Dtypes                                                               */
/* ------------------------------------------------------------------ */

/* Byte equality of two short strings of n bytes, inlined (libc memcmp is
 * a call, and a header makes ~850,000 of these compares). */
static inline int small_eq(const char *a, const char *b, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (a[i] != b[i])
            return 0;
    return 1;
}

/* The previous dtype hit, tried first: headers repeat one dtype. */
typedef struct st_dtcache {
    int d;
    const char *name; /* xc_dtype_name(d) */
    size_t len;
} st_dtcache;

/* The dtype spelled s[0..n), or -1. */
static int dtype_lookup(const char *s, size_t n, st_dtcache *last)
{
    if (last->name && last->len == n && small_eq(last->name, s, n))
        return last->d;
    for (int d = 0; d < XC_DT_COUNT; d++) {
        const char *nm = xc_dtype_name(d);
        size_t len = strlen(nm);
        if (len == n && small_eq(nm, s, n)) {
            last->d = d;
            last->name = nm;
            last->len = len;
            return d;
        }
    }
    return -1;
}

/* ------------------------------------------------------------------ */
/* Header parsing (step 5)                                              */
/* ------------------------------------------------------------------ */

typedef struct st_parse {
    xc_st *st;
    uint32_t shard;
    xj j;
    st_table dup;       /* this shard's names, indices relative to first */
    st_table mdup;      /* this shard's metadata keys, relative to m_first */
    size_t first;
    size_t m_first;
    st_dtcache last_dtype;
    int pending;        /* st->t[n_t] holds a named entry that failed */
    char *cw;           /* where the next tensor name is compacted to */
    int meta_after;     /* a __metadata__ object follows a tensor name */
    int cw_gap;         /* a __metadata__ object lies between two names */
} st_parse;

/* Whether k[0..n) spells the literal want.  Inlined so that strlen of the
 * literal folds; the bytes are compared as at most two (overlapping) words
 * whose literal halves fold to constants -- gcc emits a call to libc
 * memcmp for memcmp(k, "dtype", 5), and this runs three times an entry. */
static inline int is_key(const char *k, size_t n, const char *want)
{
    size_t w = strlen(want);
    if (n != w)
        return 0;
    if (w >= 8 && w <= 16) {
        uint64_t a, b, c, d;
        memcpy(&a, k, 8);
        memcpy(&b, want, 8);
        memcpy(&c, k + w - 8, 8);
        memcpy(&d, want + w - 8, 8);
        return a == b && c == d;
    }
    if (w >= 4 && w < 8) {
        uint32_t a, b, c, d;
        memcpy(&a, k, 4);
        memcpy(&b, want, 4);
        memcpy(&c, k + w - 4, 4);
        memcpy(&d, want + w - 4, 4);
        return a == b && c == d;
    }
    return small_eq(k, want, w);
}

/* A value of the wrong type at buffer position at is a schema error only if
 * it is JSON at all: a byte that cannot start a value, or a malformed one,
 * makes the header not JSON, which DESIGN §3 checks first (the way
 * doc_open treats a top level that is not an object).  Returns the
 * JSON error (recorded) when the value is malformed, XC_OK when it is a
 * well-formed value of another type.  The probe may decode a string in
 * place; every caller fails right after, so the buffer is not used again. */
static int malformed_value(const xj *j, size_t at)
{
    xj probe = *j;
    probe.pos = at;
    return xj_skip(&probe, 2);
}

static int parse_metadata(st_parse *p)
{
    xj *j = &p->j;
    xc_st *st = p->st;
    int rc, nul, started = 0;
    char *k, *v;
    size_t kn, vn, kat;
    if (xj_peek(j) == 'n') /* null: the official reader's Option::None */
        return xj_skip(j, 1);
    if (xj_peek(j) != '{')
        return malformed_value(j, j->pos) ? XC_E_FORMAT_JSON
               : xj_fail(j, XC_E_FORMAT_SCHEMA, j->pos,
                         "__metadata__ must be an object of strings");
    j->pos++;
    while ((rc = xj_member_key(j, &started, &k, &kn, &nul, &kat)) > 0) {
        uint32_t h;
        if (nul)
            return xj_fail(j, XC_E_FORMAT_SCHEMA, kat,
                           "a __metadata__ key contains U+0000");
        if ((rc = xj_expect(j, ':')) != XC_OK)
            return rc;
        xj_ws(j);
        if (xj_peek(j) != '"')
            return malformed_value(j, j->pos) ? XC_E_FORMAT_JSON
                   : xj_fail(j, XC_E_FORMAT_SCHEMA, j->pos,
                           "__metadata__ value of \"%.200s\" must be a "
                           "string", k);
        if ((rc = xj_string(j, &v, &vn, &nul)) != XC_OK)
            return rc;
        if (nul)
            return xj_fail(j, XC_E_FORMAT_SCHEMA, kat, "__metadata__ value "
                           "of \"%.200s\" contains U+0000", k);
        if (kn > UINT32_MAX)
            return xj_fail(j, XC_E_FORMAT_SCHEMA, kat, "key too long");
        h = name_hash(k, kn);
        if (table_find(&p->mdup, st->meta + p->m_first, sizeof *st->meta, k,
                       kn, h) >= 0)
            return xj_fail(j, XC_E_FORMAT_DUPLICATE, kat, "__metadata__ key "
                           "\"%.200s\" appears twice", k);
        if (grow((void **)&st->meta, &st->cap_meta, st->n_meta,
                 sizeof *st->meta) != XC_OK ||
            table_reserve(&p->mdup, 1) != XC_OK)
            return nomem(j->path, "metadata");
        st->meta[st->n_meta].key.name = k;
        st->meta[st->n_meta].key.len = (uint32_t)kn;
        st->meta[st->n_meta].key.hash = h;
        st->meta[st->n_meta].value = v;
        table_put(&p->mdup, h, (uint32_t)(st->n_meta - p->m_first));
        st->n_meta++;
    }
    return rc;
}

/* Parses a bracketed list of at most max integers <= limit into v. */
static int parse_uint_array(xj *j, uint64_t *v, int max, uint64_t limit,
                            const char *name, const char *field, int *count)
{
    int n = 0, rc;
    size_t at = j->pos;
    const char *what = max == 2 ? "a data_offsets entry" : "a shape entry";
    if (xj_peek(j) != '[')
        return malformed_value(j, at) ? XC_E_FORMAT_JSON
               : xj_fail(j, XC_E_FORMAT_SCHEMA, at, "tensor \"%.200s\": %s "
                       "must be an array of integers", name, field);
    j->pos++;
    xj_ws(j);
    if (xj_peek(j) == ']') {
        j->pos++;
        *count = 0;
        return XC_OK;
    }
    for (;;) {
        xj_ws(j);
        if (n == max)
            return xj_fail(j, XC_E_FORMAT_SCHEMA, j->pos,
                           "tensor \"%.200s\": %s has more than %d entries",
                           name, field, max);
        if ((rc = xj_uint(j, limit, XC_E_FORMAT_SCHEMA, what, &v[n])) !=
            XC_OK)
            return rc;
        n++;
        xj_ws(j);
        if (xj_peek(j) == ',') {
            j->pos++;
            continue;
        }
        if ((rc = xj_expect(j, ']')) != XC_OK)
            return rc;
        *count = n;
        return XC_OK;
    }
}

static int parse_entry(st_parse *p, st_tensor *t)
{
    xj *j = &p->j;
    xc_st *st = p->st;
    const char *name = t->key.name;
    uint64_t dims[XC_MAX_DIMS], offs[2];
    int nd = 0, no = 0, rc;
    unsigned have = 0;
    static const char *const field_names[3] = {"dtype", "shape",
                                               "data_offsets"};

    if (xj_peek(j) != '{')
        return malformed_value(j, j->pos) ? XC_E_FORMAT_JSON
               : xj_fail(j, XC_E_FORMAT_SCHEMA, j->pos, "tensor \"%.200s\": "
                       "expected an object with dtype, shape and "
                       "data_offsets", name);
    j->pos++;
    xj_ws(j);
    if (xj_peek(j) == '}')
        j->pos++;
    else
        for (;;) {
            char *f, *v;
            size_t fn, vn, fat, vat;
            unsigned bit;
            xj_ws(j);
            fat = j->pos;
            /* The three field names as written by every writer, quotes
             * included, are matched in place (a string of exactly those
             * bytes is plain and decodes to the name); any other spelling,
             * escapes included, is decoded.  The padding after len makes
             * the 16-byte look-ahead safe and never matches a quote. */
            if (is_key(j->buf + fat, 7, "\"dtype\"")) {
                bit = 1u;
                j->pos += 7;
            } else if (is_key(j->buf + fat, 7, "\"shape\"")) {
                bit = 2u;
                j->pos += 7;
            } else if (is_key(j->buf + fat, 14, "\"data_offsets\"")) {
                bit = 4u;
                j->pos += 14;
            } else {
                if ((rc = xj_string(j, &f, &fn, NULL)) != XC_OK)
                    return rc;
                bit = is_key(f, fn, "dtype")          ? 1u
                      : is_key(f, fn, "shape")        ? 2u
                      : is_key(f, fn, "data_offsets") ? 4u
                                                      : 0u;
            }
            if ((rc = xj_expect(j, ':')) != XC_OK)
                return rc;
            xj_ws(j);
            if (bit & have)
                return xj_fail(j, XC_E_FORMAT_SCHEMA, fat, "tensor "
                               "\"%.200s\": field %s appears twice", name,
                               field_names[bit == 1 ? 0 : bit == 2 ? 1 : 2]);
            have |= bit;
            if (bit == 1) {
                int d;
                vat = j->pos;
                if (xj_peek(j) != '"')
                    return malformed_value(j, vat) ? XC_E_FORMAT_JSON
                           : xj_fail(j, XC_E_FORMAT_SCHEMA, vat, "tensor "
                                   "\"%.200s\": dtype must be a string", name);
                if ((rc = xj_string(j, &v, &vn, NULL)) != XC_OK)
                    return rc;
                if ((d = dtype_lookup(v, vn, &p->last_dtype)) < 0)
                    return xj_fail(j, XC_E_FORMAT_DTYPE, vat, "tensor "
                                   "\"%.200s\": unknown dtype \"%.40s\"", name,
                                   v);
                t->dtype = (uint8_t)d;
            } else if (bit == 2) {
                if ((rc = parse_uint_array(j, dims, XC_MAX_DIMS, UINT64_MAX,
                                           name, "shape", &nd)) != XC_OK)
                    return rc;
            } else if (bit == 4) {
                vat = j->pos;
                if ((rc = parse_uint_array(j, offs, 2, MAX_48, name,
                                           "data_offsets", &no)) != XC_OK)
                    return rc;
                if (no != 2)
                    return xj_fail(j, XC_E_FORMAT_SCHEMA, vat, "tensor "
                                   "\"%.200s\": data_offsets must hold "
                                   "exactly two integers", name);
            } else if ((rc = xj_skip(j, 2)) != XC_OK) {
                /* Unknown fields are ignored, as the official reader
                 * does; they must still be valid JSON. */
                return rc;
            }
            xj_ws(j);
            if (xj_peek(j) == ',') {
                j->pos++;
                continue;
            }
            if ((rc = xj_expect(j, '}')) != XC_OK)
                return rc;
            break;
        }
    if (have != 7) {
        const char *miss = !(have & 1) ? "dtype"
                           : !(have & 2) ? "shape" : "data_offsets";
        return xj_fail(j, XC_E_FORMAT_SCHEMA, (size_t)(t->entry_at - j->base),
                       "tensor \"%.200s\" has no %s", name, miss);
    }
    /* grow() only grows when its n reaches cap; pass cap so that it does
     * (passing n_dims looped forever when n_dims < cap < n_dims + nd). */
    while (st->n_dims + (size_t)nd > st->cap_dims)
        if (grow((void **)&st->dims, &st->cap_dims, st->cap_dims,
                 sizeof *st->dims) != XC_OK)
            return nomem(j->path, "shapes");
    if (st->n_dims + (size_t)nd > UINT32_MAX)
        return xj_fail(j, XC_E_FORMAT_SCHEMA, j->pos, "too many dimensions");
    t->dims_at = (uint32_t)st->n_dims;
    t->ndim = (uint8_t)nd;
    if (nd > 0) /* st->dims is still NULL before the first dimension */
        memcpy(st->dims + st->n_dims, dims, (size_t)nd * sizeof *dims);
    st->n_dims += (size_t)nd;
    t->begin = offs[0];
    t->end = offs[1];
    return XC_OK;
}

/* Moves the tensor name at k (kn bytes and its NUL, decoded in place)
 * down to p->cw, so that a shard's names end up back to back at the start
 * of its header buffer -- one NUL-separated block xc_st_names and
 * xc_st_names_block hand out whole instead of name by name.  Safe because
 * every byte below the name's opening quote has been parsed and nothing
 * points there: an entry spends at least kn + 5 header bytes (quotes,
 * colon, a value) on the kn + 1 its name takes here, so p->cw never
 * passes the quote, and parse_header moves p->cw past a __metadata__
 * object, whose keys and values stay where they are.  Returns the name's
 * new address. */
static char *compact_name(st_parse *p, char *k, size_t kn)
{
    char *to = p->cw;
    p->cw_gap |= p->meta_after;
    if (to != k)
        memmove(to, k, kn + 1);
    p->cw = to + kn + 1;
    return to;
}

/* The frame of a JSON document whose top level must be an object (a
 * shard's header, the index): doc_open passes the '{' or fails with code
 * and "the <what> must be a JSON object" (a malformed value is JSON's
 * error first, DESIGN §3); doc_close, after the object, allows only
 * whitespace. */
static int doc_open(xj *j, int code, const char *what)
{
    size_t at;
    int rc;
    xj_ws(j);
    if (xj_peek(j) != '{') {
        at = j->pos;
        if ((rc = xj_skip(j, 0)) != XC_OK)
            return rc;
        return xj_fail(j, code, at, "the %s must be a JSON object", what);
    }
    j->pos++;
    return XC_OK;
}

static int doc_close(xj *j, const char *what)
{
    xj_ws(j);
    if (j->pos != j->len)
        return xj_fail(j, XC_E_FORMAT_JSON, j->pos,
                       "trailing characters after the %s object", what);
    return XC_OK;
}

static int parse_header(st_parse *p)
{
    xj *j = &p->j;
    xc_st *st = p->st;
    int rc, seen_meta = 0, nul, started = 0;
    char *k;
    size_t kn, kat;

    if ((rc = doc_open(j, XC_E_FORMAT_SCHEMA, "header")) != XC_OK)
        return rc;
    while ((rc = xj_member(j, &started, &k, &kn, &nul, &kat)) > 0) {
        if (is_key(k, kn, "__metadata__")) {
            if (seen_meta)
                return xj_fail(j, XC_E_FORMAT_DUPLICATE, kat,
                               "__metadata__ appears twice");
            seen_meta = 1;
            if ((rc = parse_metadata(p)) != XC_OK)
                return rc;
            /* Its keys and values stay in place: compact after it. */
            p->meta_after = st->n_t > p->first;
            p->cw = j->buf + j->pos;
        } else {
            st_tensor *t;
            uint32_t h;
            if (nul)
                return xj_fail(j, XC_E_FORMAT_SCHEMA, kat,
                               "a tensor name contains U+0000");
            if (kn > UINT32_MAX || st->n_t >= UINT32_MAX - 1)
                return xj_fail(j, XC_E_FORMAT_SCHEMA, kat,
                               "name too long or too many tensors");
            h = name_hash(k, kn);
            if (grow((void **)&st->t, &st->cap_t, st->n_t,
                     sizeof *st->t) != XC_OK)
                return nomem(j->path, "tensor table");
            t = &st->t[st->n_t];
            memset(t, 0, sizeof *t);
            t->key.name = compact_name(p, k, kn);
            t->key.len = (uint32_t)kn;
            t->key.hash = h;
            t->entry_at = j->base + kat;
            t->shard = p->shard;
            /* Duplicates are looked for after the parse, in one batch
             * (dup_check); an entry that fails to parse still takes part,
             * so its duplicate name wins over its own error. */
            p->pending = 1;
            if ((rc = parse_entry(p, t)) != XC_OK)
                return rc;
            p->pending = 0;
            st->n_t++;
        }
    }
    if (rc != XC_OK)
        return rc;
    return doc_close(j, "header");
}

/* The duplicate check of step 5, run once the parse has stopped (at the
 * end of the header or at its first problem): the shard's recorded names
 * go into p->dup in document order, so the first name met twice is the
 * first duplicate in document order.  Every recorded entry lies before the
 * position where the parse stopped, so a duplicate found here precedes (or
 * is, for an entry that failed to parse, part of) that problem and wins
 * over it, exactly as a check made entry by entry would.  Batching takes
 * the table's cache misses out of the parser's dependency chain: the slot
 * of the entry DUP_AHEAD places on is prefetched while this one is put. */
#define DUP_AHEAD 16

static int dup_check(st_parse *p, const xj *j)
{
    xc_st *st = p->st;
    const st_tensor *t = st->t + p->first;
    size_t n = st->n_t - p->first + (size_t)p->pending;
    st_table *tb = &p->dup;
    if (n == 0)
        return XC_OK;
    if (table_reserve(tb, n) != XC_OK)
        return nomem(j->path, "name table");
    for (size_t i = 0; i < n; i++) {
        uint32_t h = t[i].key.hash;
        size_t at;
        if (i + DUP_AHEAD < n)
            __builtin_prefetch(&tb->slots[t[i + DUP_AHEAD].key.hash &
                                          tb->mask], 1);
        for (at = h & tb->mask; tb->slots[at] != 0;
             at = (at + 1) & tb->mask) {
            uint64_t s = tb->slots[at];
            const st_tensor *prev;
            if ((uint32_t)(s >> 32) != h)
                continue;
            prev = &t[(uint32_t)s - 1];
            if (prev->key.len == t[i].key.len &&
                memcmp(prev->key.name, t[i].key.name, t[i].key.len) == 0)
                return xj_fail(j, XC_E_FORMAT_DUPLICATE,
                               (size_t)(t[i].entry_at - j->base),
                               "tensor name \"%.200s\" appears twice "
                               "(first at byte %llu)", t[i].key.name,
                               (unsigned long long)prev->entry_at);
        }
        tb->slots[at] = ((uint64_t)h << 32) | ((uint64_t)i + 1);
        tb->n++;
    }
    return XC_OK;
}

/* ------------------------------------------------------------------ */
/* Data-buffer checks (steps 6-10)                                      */
/* ------------------------------------------------------------------ */

static int tensor_fail(const xc_st *st, const st_tensor *t, int code,
                       const char *fmt, ...) XC_PRINTF(4, 5);

static int tensor_fail(const xc_st *st, const st_tensor *t, int code,
                       const char *fmt, ...)
{
    char what[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    return xc_fail(code, (int64_t)t->entry_at, -1, -1,
                   "%s: byte %llu: tensor \"%.200s\": %s",
                   st->shards[t->shard].path,
                   (unsigned long long)t->entry_at, t->key.name, what);
}

typedef struct st_sortkey {
    uint64_t begin, end;
    size_t idx;
} st_sortkey;

static int cmp_sortkey(const void *a, const void *b)
{
    const st_sortkey *x = a, *y = b;
    if (x->begin != y->begin)
        return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end)
        return x->end < y->end ? -1 : 1;
    return x->idx < y->idx ? -1 : x->idx > y->idx;
}

/* Orders the shard's tensors by (begin, end), header order on ties.  Sets
 * *moved when anything moved (the parse-time name table is then stale). */
static int sort_shard(xc_st *st, const st_shard *sh, int *moved)
{
    st_tensor *t = st->t + sh->first, *copy;
    st_sortkey *keys;
    size_t n = sh->count, i;
    for (i = 1; i < n; i++)
        if (t[i - 1].begin > t[i].begin ||
            (t[i - 1].begin == t[i].begin && t[i - 1].end > t[i].end))
            break;
    if (i >= n)
        return XC_OK;
    keys = xc_malloc(n * sizeof *keys);
    copy = xc_malloc(n * sizeof *copy);
    if (keys == NULL || copy == NULL) {
        xc_free(keys);
        xc_free(copy);
        return nomem(sh->path, "sorting tensors");
    }
    for (i = 0; i < n; i++) {
        keys[i].begin = t[i].begin;
        keys[i].end = t[i].end;
        keys[i].idx = i;
    }
    qsort(keys, n, sizeof *keys, cmp_sortkey);
    memcpy(copy, t, n * sizeof *t);
    for (i = 0; i < n; i++)
        t[i] = copy[keys[i].idx];
    xc_free(keys);
    xc_free(copy);
    *moved = 1;
    return XC_OK;
}

static int check_data(xc_st *st, size_t s)
{
    st_shard *sh = &st->shards[s];
    st_tensor *t = st->t + sh->first;
    size_t n = sh->count, i;
    uint64_t expected = 0, data_end, want;

    /* 6: contiguous from 0 in (begin, end) order. */
    for (i = 0; i < n; i++) {
        if (t[i].end < t[i].begin)
            return tensor_fail(st, &t[i], XC_E_FORMAT_OFFSETS,
                               "data_offsets [%llu, %llu] end before they "
                               "begin", (unsigned long long)t[i].begin,
                               (unsigned long long)t[i].end);
        if (t[i].begin < expected)
            return tensor_fail(st, &t[i], XC_E_FORMAT_OFFSETS,
                               "data_offsets [%llu, %llu] overlap tensor "
                               "\"%.200s\", which ends at %llu",
                               (unsigned long long)t[i].begin,
                               (unsigned long long)t[i].end,
                               t[i - 1].key.name,
                               (unsigned long long)expected);
        if (t[i].begin > expected)
            return tensor_fail(st, &t[i], XC_E_FORMAT_OFFSETS,
                               "data_offsets [%llu, %llu] leave a gap of "
                               "%llu bytes after offset %llu",
                               (unsigned long long)t[i].begin,
                               (unsigned long long)t[i].end,
                               (unsigned long long)(t[i].begin - expected),
                               (unsigned long long)expected);
        expected = t[i].end;
    }
    data_end = expected;

    /* 7: element count x bits in 64 bits, multiplied left to right as the
     * official reader does (so [2^40, 2^40, 0] overflows, [0, 2^40, 2^40]
     * does not); dimensions above 48 bits are refused outright. */
    for (i = 0; i < n; i++) {
        const uint64_t *d = st->dims + t[i].dims_at;
        uint64_t count = 1;
        for (int k = 0; k < t[i].ndim; k++) {
            if (d[k] > MAX_48)
                return tensor_fail(st, &t[i], XC_E_FORMAT_OVERFLOW,
                                   "dimension %d is %llu, above the 48-bit "
                                   "limit", k, (unsigned long long)d[k]);
            if (__builtin_mul_overflow(count, d[k], &count))
                return tensor_fail(st, &t[i], XC_E_FORMAT_OVERFLOW,
                                   "element count overflows 64 bits at "
                                   "dimension %d", k);
        }
        if (__builtin_mul_overflow(count, (uint64_t)xc_dtype_bits(t[i].dtype),
                                   &t[i].nbits))
            return tensor_fail(st, &t[i], XC_E_FORMAT_OVERFLOW,
                               "%llu elements of %s overflow 64 bits",
                               (unsigned long long)count,
                               xc_dtype_name(t[i].dtype));
    }

    /* 8: whole bytes. */
    for (i = 0; i < n; i++)
        if (t[i].nbits % 8 != 0)
            return tensor_fail(st, &t[i], XC_E_FORMAT_BITS,
                               "%llu elements of %s are %llu bits, not a "
                               "whole number of bytes",
                               (unsigned long long)(t[i].nbits /
                                                    (uint64_t)xc_dtype_bits(
                                                        t[i].dtype)),
                               xc_dtype_name(t[i].dtype),
                               (unsigned long long)t[i].nbits);

    /* 9: the range holds exactly the tensor. */
    for (i = 0; i < n; i++) {
        t[i].nbits /= 8; /* from here on: nbytes */
        if (t[i].end - t[i].begin != t[i].nbits)
            return tensor_fail(st, &t[i], XC_E_FORMAT_SIZE,
                               "data_offsets [%llu, %llu] hold %llu bytes, "
                               "but dtype and shape need %llu",
                               (unsigned long long)t[i].begin,
                               (unsigned long long)t[i].end,
                               (unsigned long long)(t[i].end - t[i].begin),
                               (unsigned long long)t[i].nbits);
    }

    /* 10: the file ends where the data does. */
    want = 8 + sh->header_bytes + data_end;
    if (want != sh->file_bytes) {
        uint64_t at = want < sh->file_bytes ? want : sh->file_bytes;
        return xc_fail(XC_E_FORMAT_LENGTH, (int64_t)at, -1, -1,
                       "%s: byte %llu: the data buffer ends at byte %llu but "
                       "the file is %llu bytes (%s)", sh->path,
                       (unsigned long long)at, (unsigned long long)want,
                       (unsigned long long)sh->file_bytes,
                       want < sh->file_bytes ? "trailing bytes"
                                             : "truncated");
    }
    return XC_OK;
}

/* ------------------------------------------------------------------ */
/* One shard: steps 1-10                                                */
/* ------------------------------------------------------------------ */

/* Reads len bytes at offset of shard s into a fresh buffer with XJ_PAD
 * zero bytes after them; *data is where they start inside *buf. */
static int read_padded(xc_st *st, st_shard *sh, uint64_t offset, size_t len,
                       char **buf, char **data)
{
    size_t align = sh->direct ? XC_DIRECT_ALIGN : 64, span, at = 0;
    char *b;
    int rc;
    span = xc_io_aligned_span(offset, len, align);
    if (span == 0 || span > SIZE_MAX - XJ_PAD)
        return nomem(sh->path, "header buffer");
    b = xc_aligned_alloc(align, span + XJ_PAD);
    if (b == NULL)
        return nomem(sh->path, "header buffer");
    if (sh->direct)
        rc = xc_io_read_aligned(&st->io, sh->handle, sh->path, b, span,
                                offset, len, align, &at);
    else
        rc = xc_io_read_full(&st->io, sh->handle, sh->path, b, len, offset,
                             NULL);
    if (rc != XC_OK) {
        xc_free(b);
        return rc;
    }
    memset(b + at + len, 0, XJ_PAD);
    *buf = b;
    *data = b + at;
    return XC_OK;
}

static int load_shard(xc_st *st, size_t s)
{
    st_shard *sh = &st->shards[s];
    st_parse p;
    char *lenbuf = NULL, *lenp, *hdr;
    uint64_t n = 0;
    int rc, moved = 0;

    rc = st->io.size(st->io.ctx, sh->handle, &sh->file_bytes);
    if (rc != 0)
        return xc_fail(XC_E_IO, -1, -1, -1, "%s: cannot read the file size: "
                       "%s (errno %d)", sh->path, strerror(-rc), -rc);
    /* 1 */
    if (sh->file_bytes < 8)
        return xc_fail(XC_E_FORMAT_TOO_SHORT, (int64_t)sh->file_bytes, -1, -1,
                       "%s: byte %llu: the file is %llu bytes, shorter than "
                       "the 8-byte header length", sh->path,
                       (unsigned long long)sh->file_bytes,
                       (unsigned long long)sh->file_bytes);
    if ((rc = read_padded(st, sh, 0, 8, &lenbuf, &lenp)) != XC_OK)
        return rc;
    for (int k = 7; k >= 0; k--)
        n = (n << 8) | (unsigned char)lenp[k];
    xc_free(lenbuf);
    /* 2 */
    if (n > XC_HEADER_MAX_BYTES)
        return xc_fail(XC_E_FORMAT_HEADER_TOO_LARGE, 0, -1, -1,
                       "%s: byte 0: header length %llu exceeds the limit of "
                       "%llu bytes", sh->path, (unsigned long long)n,
                       (unsigned long long)XC_HEADER_MAX_BYTES);
    /* 3 (n <= the cap, so 8 + n cannot wrap; the test is kept for form) */
    if (n > UINT64_MAX - 8 || 8 + n > sh->file_bytes)
        return xc_fail(XC_E_FORMAT_HEADER_PAST_END, (int64_t)sh->file_bytes,
                       -1, -1, "%s: byte %llu: the header claims %llu bytes "
                       "(ending at byte %llu) but the file ends at byte %llu",
                       sh->path, (unsigned long long)sh->file_bytes,
                       (unsigned long long)n, (unsigned long long)(8 + n),
                       (unsigned long long)sh->file_bytes);
    sh->header_bytes = n;
    if ((rc = read_padded(st, sh, 8, (size_t)n, &sh->buf, &hdr)) != XC_OK)
        return rc;
    /* 4 */
    {
        size_t bad;
        if (!xj_utf8_valid((const unsigned char *)hdr, (size_t)n, &bad))
            return xc_fail(XC_E_FORMAT_NOT_UTF8, (int64_t)(8 + bad), -1, -1,
                           "%s: byte %llu: the header is not UTF-8 (byte "
                           "0x%02x)", sh->path,
                           (unsigned long long)(8 + bad),
                           (unsigned)(unsigned char)hdr[bad]);
    }
    /* 5 */
    memset(&p, 0, sizeof p);
    p.st = st;
    p.shard = (uint32_t)s;
    p.j.buf = hdr;
    p.j.len = (size_t)n;
    p.j.base = 8;
    p.j.path = sh->path;
    p.first = st->n_t;
    p.m_first = st->n_meta;
    p.cw = hdr;
    sh->first = st->n_t;
    rc = parse_header(&p);
    {
        /* Step 5's duplicate check, after the parse (see dup_check): a
         * duplicate before the parse's own problem, NOMEM included, wins
         * over it.  Failing to allocate the table is NOMEM either way. */
        int drc = dup_check(&p, &p.j);
        if (drc != XC_OK)
            rc = drc;
    }
    table_free(&p.mdup);
    sh->count = st->n_t - sh->first;
    if (s == 0 && rc == XC_OK && st->names.slots == NULL) {
        /* Shard 0's indices are container indices: keep its table as the
         * container's unless sorting moves them (see finalize). */
        st->names = p.dup;
        memset(&p.dup, 0, sizeof p.dup);
    }
    table_free(&p.dup);
    if (s != 0) /* only the first shard's metadata is kept */
        st->n_meta = p.m_first;
    if (rc != XC_OK)
        return rc;
    /* 6-10 */
    if ((rc = sort_shard(st, sh, &moved)) != XC_OK)
        return rc;
    if (moved)
        table_free(&st->names); /* stale: finalize rebuilds it */
    else if (!p.cw_gap && sh->count > 0)
        sh->names = st->t[sh->first].key.name; /* header order = ours */
    return check_data(st, s);
}

/* ------------------------------------------------------------------ */
/* Shards and the container                                             */
/* ------------------------------------------------------------------ */

static char *join_path(const char *dir, const char *name)
{
    size_t a = strlen(dir), b = strlen(name);
    char *p = xc_malloc(a + b + 2);
    if (p == NULL)
        return NULL;
    memcpy(p, dir, a);
    p[a] = '/';
    memcpy(p + a + 1, name, b + 1);
    return p;
}

/* Adds shard path (taking ownership of it) and opens it, probing O_DIRECT
 * when asked.  NOT_FOUND is returned as is for the caller to word. */
static int add_shard(xc_st *st, char *path)
{
    st_shard *sh;
    char note[NOTE_LEN];
    int rc;
    if (path == NULL)
        return nomem(NULL, "shard path");
    if (grow((void **)&st->shards, &st->cap_shards, st->n_shards,
             sizeof *st->shards) != XC_OK) {
        rc = nomem(path, "shard table");
        xc_free(path);
        return rc;
    }
    sh = &st->shards[st->n_shards++];
    memset(sh, 0, sizeof *sh);
    sh->path = path;
    sh->handle = -1;
    rc = xc_io_open_probed(&st->io, path, st->direct_req, &sh->handle,
                           &sh->direct, note, sizeof note);
    if (rc != XC_OK) {
        sh->handle = -1;
        return rc;
    }
    if (st->direct_req && !sh->direct && st->note[0] == '\0')
        snprintf(st->note, sizeof st->note, "%s", note);
    {
        /* The identity xc_st_check_files compares against.  Taken from the
         * path (the io handle need not be a descriptor); the window between
         * open and stat is a few microseconds. */
        struct stat sb;
        if (stat(path, &sb) == 0) {
            sh->id_ok = 1;
            sh->id_dev = (uint64_t)sb.st_dev;
            sh->id_ino = (uint64_t)sb.st_ino;
            sh->id_mtime_s = (int64_t)sb.st_mtim.tv_sec;
            sh->id_mtime_ns = (int64_t)sb.st_mtim.tv_nsec;
        }
    }
    return XC_OK;
}

/* The final name table over the whole container, and the summaries. */
static int finalize(xc_st *st)
{
    size_t bytes = 0;
    int rebuild = st->n_shards != 1 || st->names.slots == NULL ||
                  st->names.n != st->n_t;
    if (rebuild) {
        table_free(&st->names);
        if (table_reserve(&st->names, st->n_t) != XC_OK)
            return nomem(st->n_shards ? st->shards[0].path : NULL,
                         "name index");
    }
    for (size_t i = 0; i < st->n_t; i++) {
        if (rebuild)
            table_put(&st->names, st->t[i].key.hash, (uint32_t)i);
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
    int rc = add_shard(st, path);
    if (rc != XC_OK)
        return rc;
    return load_shard(st, 0);
}

/* ------------------------------------------------------------------ */
/* The index                                                            */
/* ------------------------------------------------------------------ */

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
    table_free(&ix->map_tb);
    table_free(&ix->sn_tb);
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
        h = name_hash(k, kn);
        if (table_find(&ix->map_tb, ix->map, sizeof *ix->map, k, kn, h) >= 0)
            return xj_fail(j, XC_E_FORMAT_INDEX, kat, "tensor \"%.200s\" "
                           "appears twice in weight_map", k);
        if (ix->n_map >= UINT32_MAX - 1)
            return xj_fail(j, XC_E_FORMAT_INDEX, kat, "too many entries");
        hv = name_hash(v, vn);
        si = table_find(&ix->sn_tb, ix->sn, sizeof *ix->sn, v, vn, hv);
        if (si < 0) {
            st_shardname *sn;
            if (grow((void **)&ix->sn, &ix->cap_sn, ix->n_sn,
                     sizeof *ix->sn) != XC_OK ||
                table_reserve(&ix->sn_tb, 1) != XC_OK)
                return nomem(j->path, "shard names");
            sn = &ix->sn[ix->n_sn];
            sn->key.name = v;
            sn->key.len = (uint32_t)vn;
            sn->key.hash = hv;
            sn->at = j->base + kat;
            sn->first_map = (uint32_t)ix->n_map;
            sn->pos = 0;
            table_put(&ix->sn_tb, hv, (uint32_t)ix->n_sn);
            si = (int64_t)ix->n_sn++;
        }
        if (grow((void **)&ix->map, &ix->cap_map, ix->n_map,
                 sizeof *ix->map) != XC_OK ||
            table_reserve(&ix->map_tb, 1) != XC_OK)
            return nomem(j->path, "weight_map");
        m = &ix->map[ix->n_map];
        m->key.name = k;
        m->key.len = (uint32_t)kn;
        m->key.hash = h;
        m->at = j->base + kat;
        m->shard = (uint32_t)si;
        m->seen = 0;
        table_put(&ix->map_tb, h, (uint32_t)ix->n_map);
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
    if ((rc = doc_open(j, XC_E_FORMAT_INDEX, "index")) != XC_OK)
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
    if (rc != XC_OK || (rc = doc_close(j, "index")) != XC_OK)
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
    int rc = st->io.open(st->io.ctx, path, 0, &h);
    if (rc == -ENOENT)
        return xc_fail(XC_E_NOT_FOUND, -1, -1, -1, "%s: no such file", path);
    if (rc == -ENOMEM)
        return xc_fail(XC_E_NOMEM, -1, -1, -1, "%s: no memory to open it",
                       path);
    if (rc != 0)
        return xc_fail(XC_E_IO, -1, -1, -1, "%s: open failed: %s (errno %d)",
                       path, strerror(-rc), -rc);
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
        return nomem(path, "index buffer");
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
static int open_index(xc_st *st, const char *index_path, const char *dir)
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
            rc = nomem(index_path, "shard order");
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
        rc = add_shard(st, join_path(dir, sn->key.name));
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
        if ((rc = load_shard(st, s)) != XC_OK)
            goto out;

    /* Each shard's tensors are in the map, mapped to that shard. */
    for (size_t i = 0; i < st->n_t; i++) {
        const st_tensor *t = &st->t[i];
        int64_t m = table_find(&ix.map_tb, ix.map, sizeof *ix.map,
                               t->key.name, t->key.len, t->key.hash);
        if (m < 0) {
            rc = tensor_fail(st, t, XC_E_FORMAT_INDEX, "not in the weight_map "
                             "of %s", index_path);
            goto out;
        }
        if (ix.map[m].shard != t->shard) {
            rc = tensor_fail(st, t, XC_E_FORMAT_INDEX, "%s maps it to shard "
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
    char *idx = join_path(dir, INDEX_NAME), **names = NULL;
    size_t n = 0;
    int kind, rc;
    if (idx == NULL)
        return nomem(dir, "index path");
    kind = xc_path_kind(idx);
    if (kind == 1) {
        rc = open_index(st, idx, dir);
        xc_free(idx);
        return rc;
    }
    xc_free(idx);
    if ((rc = xc_list_dir(dir, ".safetensors", &names, &n)) != XC_OK)
        return rc;
    if (n == 1) {
        rc = open_single(st, join_path(dir, names[0]));
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
        return nomem(path, "container");
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
        rc = dir ? open_index(st, path, dir) : nomem(path, "folder name");
        xc_free(dir);
    } else {
        char *p = xc_strdup(path);
        rc = p ? open_single(st, p) : nomem(path, "shard path");
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
    xc_free(st->t);
    xc_free(st->dims);
    xc_free(st->meta);
    table_free(&st->names);
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
    int64_t i = table_find(&st->names, st->t, sizeof *st->t, name, n,
                           name_hash(name, n));
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
        return nomem(sh->path, "direct-read bounce buffer");
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
    return XC_OK;
}
