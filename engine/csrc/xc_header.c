/*
 * xc_header.c -- one shard: open its file (xc_st_add_shard) and validate
 * its header completely (steps 1-10).
 *
 * Why the checks run in this order
 * --------------------------------
 * A safetensors file is an 8-byte length N, N bytes of JSON, and a data
 * buffer.  Each check below may only rely on facts the checks before it
 * have established, and each reports its own status code, so the order is
 * the order of dependence (the XC_E_FORMAT_* codes of xc.h, in order):
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
 * 29 MB header a MAP_POPULATE mapping saved ~0.7 ms of ~2 ms, for a
 * SIGBUS if the file were truncated mid-parse.  A buffer that large is a
 * fresh mapping on every open (glibc maps a request at its threshold
 * anew), so the copy faults its pages in: the buffer, and the big tables,
 * are advised onto huge pages (xc_st_advise_huge), which took the page
 * faults of one open of that header from ~6,700 to ~1,800.
 *
 * A shard's names go into its name table (xc_names.c) in one batch after
 * its header is parsed (dup_check), not entry by entry: a 200,000-name
 * table is megabytes, every insert misses the cache, and a batch loop with
 * the slot prefetched sixteen entries ahead overlaps those misses where the
 * parser could not.  The batch meets the names in document order and every
 * name recorded lies before the point where the parse stopped, so the
 * report is the same: the first duplicate wins over any later problem,
 * including one in its own entry.
 */
#include "xc_reader.h"

#include <assert.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* ------------------------------------------------------------------ */
/* Dtypes                                                               */
/* ------------------------------------------------------------------ */

/* The previous dtype hit, tried first: headers repeat one dtype. */
typedef struct st_dtcache {
    int d;
    const char *name; /* xc_dtype_name(d) */
    size_t len;
} st_dtcache;

/* The dtype spelled s[0..n), or -1. */
static int dtype_lookup(const char *s, size_t n, st_dtcache *last)
{
    assert((s != NULL || n == 0) && last != NULL);
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

/* A value of the wrong type at buffer position at is a schema error only if
 * it is JSON at all: a byte that cannot start a value, or a malformed one,
 * makes the header not JSON, which the validation order checks first (the
 * way xc_doc_open treats a top level that is not an object).  Returns the
 * JSON error (recorded) when the value is malformed, XC_OK when it is a
 * well-formed value of another type.  The probe may decode a string in
 * place; every caller fails right after, so the buffer is not used again. */
static int malformed_value(const xj *j, size_t at)
{
    xj probe = *j;
    assert(at <= j->len); /* a position the parse reached */
    probe.pos = at;
    return xj_skip(&probe, 2);
}

/* As malformed_value, for a value held by a container at level depth (the
 * top-level object is 1; malformed_value's values are held at 2, an
 * entry's fields): xj_skip counts the value's own brackets from there. */
static int malformed_at_level(const xj *j, size_t at, int depth)
{
    xj probe = *j;
    assert(at <= j->len && depth >= 0);
    probe.pos = at;
    return xj_skip(&probe, depth);
}

static int parse_metadata(st_parse *p)
{
    xj *j = &p->j;
    xc_st *st = p->st;
    int rc, nul, started = 0;
    char *k, *v;
    size_t kn, vn, kat;
    /* this shard's metadata table, on the value of "__metadata__" */
    assert(st != NULL && p->m_first <= st->n_meta && j->pos <= j->len);
    if (xj_peek(j) == 'n') /* null: the official reader's Option::None */
        return xj_skip(j, 1);
    if (xj_peek(j) != '{')
        return malformed_at_level(j, j->pos, 1) ? XC_E_FORMAT_JSON
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
        h = xc_name_hash(k, kn);
        if (xc_table_find(&p->mdup, st->meta + p->m_first, sizeof *st->meta, k,
                          kn, h) >= 0)
            return xj_fail(j, XC_E_FORMAT_DUPLICATE, kat, "__metadata__ key "
                           "\"%.200s\" appears twice", k);
        if (xc_st_grow((void **)&st->meta, &st->cap_meta, st->n_meta,
                       sizeof *st->meta) != XC_OK ||
            xc_table_reserve(&p->mdup, 1) != XC_OK)
            return xc_st_nomem(j->path, "metadata");
        st->meta[st->n_meta].key.name = k;
        st->meta[st->n_meta].key.len = (uint32_t)kn;
        st->meta[st->n_meta].key.hash = h;
        st->meta[st->n_meta].value = v;
        xc_table_put(&p->mdup, h, (uint32_t)(st->n_meta - p->m_first));
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
    assert(v != NULL && max >= 1 && name != NULL && field != NULL &&
           count != NULL);
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
        /* An element is held at level 3 (xj_uint probes another type as
         * a value held at 2, an entry's field): a nested one is probed and
         * refused here, at its own level (a second probe would meet the
         * strings the first decoded in place). */
        if (xj_peek(j) == '[' || xj_peek(j) == '{') {
            int c = xj_peek(j);
            if ((rc = malformed_at_level(j, j->pos, 3)) != XC_OK)
                return rc;
            return xj_fail(j, XC_E_FORMAT_SCHEMA, j->pos, "%s must be a "
                           "non-negative integer, found %s", what,
                           c == '[' ? "an array" : "an object");
        }
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

/* ------------------------------------------------------------------ */
/* The entry as writers lay it out (fast path of parse_entry)           */
/* ------------------------------------------------------------------ */

static inline int fast_digit(char c) { return c >= '0' && c <= '9'; }

/* A plain integer at b[*pos] (no sign, fraction, exponent or leading zero;
 * at most 19 digits, so it cannot wrap) not above limit; the caller checks
 * the byte after it.  Returns 1 and moves *pos past it, or 0.  Reads stop
 * at len or at the padding's zeros. */
static inline int fast_uint(const char *b, size_t len, size_t *pos,
                            uint64_t limit, uint64_t *out)
{
    size_t k, stop;
    uint64_t v;
    assert(b != NULL && pos != NULL && out != NULL);
    k = *pos;
    stop = len - k > 19 ? k + 19 : len;
    if (k >= len || !fast_digit(b[k]))
        return 0;
    v = (uint64_t)(b[k] - '0');
    k++;
    if (v != 0)
        while (k < stop && fast_digit(b[k])) {
            v = v * 10 + (uint64_t)(b[k] - '0');
            k++;
        }
    if (v > limit)
        return 0;
    *pos = k;
    *out = v;
    return 1;
}

/* Parses the entry at the cursor if it is spelled exactly as the writers
 * spell it -- {"dtype":"<dtype>","shape":[<d>,...],"data_offsets":[<a>,<b>]}
 * with no whitespace, no escapes, a known dtype, plain integers within
 * their limits and at most XC_MAX_DIMS dimensions -- and returns 1 with
 * the cursor past its '}'.  Anything else returns 0 with the cursor and
 * the buffer untouched, and parse_entry's general path parses the entry
 * from the same place, so every problem still gets its own report; what
 * this path accepts, the general path accepts with the same values.  The
 * literals are compared in place (at most 16 bytes from a position at or
 * before len: the padding holds zeros, which no literal contains). */
static int parse_entry_fast(st_parse *p, st_tensor *t, uint64_t *dims,
                            int *nd_out, uint64_t *offs)
{
    const char *b = p->j.buf;
    size_t len = p->j.len, k = p->j.pos, at;
    int nd = 0, d;
    /* the cursor on an entry's value, inside the padded buffer */
    assert(b != NULL && k <= len && t != NULL && dims != NULL &&
           nd_out != NULL && offs != NULL);
    if (!is_key(b + k, 10, "{\"dtype\":\""))
        return 0;
    k += 10;
    at = k;
    while (k - at < 16 && ((b[k] >= 'A' && b[k] <= 'Z') || fast_digit(b[k]) ||
                           b[k] == '_'))
        k++;
    if (b[k] != '"')
        return 0;
    if (p->last_dtype.name && p->last_dtype.len == k - at &&
        small_eq(p->last_dtype.name, b + at, k - at))
        d = p->last_dtype.d; /* the previous entry's dtype, inlined */
    else if ((d = dtype_lookup(b + at, k - at, &p->last_dtype)) < 0)
        return 0;
    if (!is_key(b + k, 11, "\",\"shape\":["))
        return 0;
    k += 11;
    if (b[k] == ']') {
        k++;
    } else {
        for (;;) {
            if (nd == XC_MAX_DIMS || !fast_uint(b, len, &k, UINT64_MAX,
                                                &dims[nd]))
                return 0;
            nd++;
            if (b[k] == ']') {
                k++;
                break;
            }
            if (b[k] != ',')
                return 0;
            k++;
        }
    }
    if (!is_key(b + k, 16, ",\"data_offsets\":") || b[k + 16] != '[')
        return 0;
    k += 17;
    if (!fast_uint(b, len, &k, MAX_48, &offs[0]) || b[k] != ',')
        return 0;
    k++;
    if (!fast_uint(b, len, &k, MAX_48, &offs[1]) || b[k] != ']' ||
        b[k + 1] != '}')
        return 0;
    k += 2;
    if (k > len) /* cannot happen: the bytes matched are not padding */
        return 0;
    p->j.pos = k;
    t->dtype = (uint8_t)d;
    *nd_out = nd;
    return 1;
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

    /* the entry being parsed: the one past the table's end, named */
    assert(p->pending && t == &st->t[st->n_t] && name != NULL);
    if (parse_entry_fast(p, t, dims, &nd, offs))
        goto parsed;
    if (xj_peek(j) != '{')
        return malformed_at_level(j, j->pos, 1) ? XC_E_FORMAT_JSON
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
parsed:
    /* xc_st_grow() only grows when its n reaches cap; pass cap so that it does
     * (passing n_dims looped forever when n_dims < cap < n_dims + nd). */
    while (st->n_dims + (size_t)nd > st->cap_dims)
        if (xc_st_grow((void **)&st->dims, &st->cap_dims, st->cap_dims,
                       sizeof *st->dims) != XC_OK)
            return xc_st_nomem(j->path, "shapes");
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
    /* decoded in place, NUL-terminated, at or above the write point (see
     * above: the write point never passes a name's opening quote) */
    assert(to != NULL && to <= k && k[kn] == '\0');
    p->cw_gap |= p->meta_after;
    if (to != k)
        memmove(to, k, kn + 1);
    p->cw = to + kn + 1;
    return to;
}

/* The frame of a JSON document whose top level must be an object (a
 * shard's header, the index): xc_doc_open passes the '{' or fails with
 * code and "the <what> must be a JSON object" (a malformed value is JSON's
 * error first, as the validation order says); xc_doc_close, after the
 * object, allows only whitespace. */
int xc_doc_open(xj *j, int code, const char *what)
{
    size_t at;
    int rc;
    assert(j != NULL && j->buf != NULL && code < 0 && what != NULL);
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

int xc_doc_close(xj *j, const char *what)
{
    assert(j != NULL && what != NULL);
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

    /* a fresh parse of this shard's header: nothing recorded yet */
    assert(st != NULL && p->first == st->n_t && p->m_first == st->n_meta &&
           j->pos == 0 && p->cw == j->buf && !p->pending);
    if ((rc = xc_doc_open(j, XC_E_FORMAT_SCHEMA, "header")) != XC_OK)
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
            h = xc_name_hash(k, kn);
            if (xc_st_grow((void **)&st->t, &st->cap_t, st->n_t,
                           sizeof *st->t) != XC_OK)
                return xc_st_nomem(j->path, "tensor table");
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
    return xc_doc_close(j, "header");
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
    const st_tensor *t;
    size_t n;
    st_table *tb = &p->dup;
    /* once per shard, after its parse: the table holds none of its names */
    assert(j == &p->j && p->first <= st->n_t && tb->n == 0 &&
           (!p->pending || st->n_t < st->cap_t));
    t = st->t + p->first;
    n = st->n_t - p->first + (size_t)p->pending;
    if (n == 0)
        return XC_OK;
    if (xc_table_reserve(tb, n) != XC_OK)
        return xc_st_nomem(j->path, "name table");
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

int xc_st_tensor_fail(const xc_st *st, const st_tensor *t, int code,
                             const char *fmt, ...)
{
    char what[768];
    va_list ap;
    assert(st != NULL && t != NULL && t->shard < st->n_shards && code < 0 &&
           fmt != NULL);
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
    assert(sh->first + sh->count <= st->n_t && moved != NULL);
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
        return xc_st_nomem(sh->path, "sorting tensors");
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

/* Steps 6-9 for every tensor in one pass, reporting nothing: 1 when all
 * pass (each nbits then holds the tensor's byte count and *data_end the
 * end of the last range), 0 at the first tensor that fails any of them.
 * The same tests as check_data's per-step passes, made in one stream over
 * the tensor table (a 200,000-tensor table is ~13 MB, and each per-step
 * pass is one more trip through memory).  xc_st_load_shard tries it on
 * the tensors in header order (passing proves them sorted) and, when that
 * fails, check_data again after sorting; on 0 there, check_data runs the
 * steps one by one, which recompute every nbits and report the earliest
 * kind of problem exactly as before. */
static int data_ok(xc_st *st, st_tensor *t, size_t n, uint64_t *data_end)
{
    uint64_t expected = 0;
    assert((n == 0 || (t != NULL && t >= st->t &&
                       (size_t)(t - st->t) + n <= st->n_t)) &&
           data_end != NULL);
    for (size_t i = 0; i < n; i++) {
        const uint64_t *d = st->dims + t[i].dims_at;
        uint64_t count = 1, bits;
        if (t[i].begin != expected || t[i].end < t[i].begin)
            return 0; /* 6 */
        expected = t[i].end;
        for (int k = 0; k < t[i].ndim; k++)
            if (d[k] > MAX_48 || __builtin_mul_overflow(count, d[k], &count))
                return 0; /* 7 */
        if (__builtin_mul_overflow(count, (uint64_t)xc_dtype_bits(t[i].dtype),
                                   &bits) ||
            bits % 8 != 0 || t[i].end - t[i].begin != bits / 8)
            return 0; /* 7, 8, 9 */
        t[i].nbits = bits / 8;
    }
    *data_end = expected;
    return 1;
}

/* Steps 6-10 for shard s, its tensors in (begin, end) order.  ok says
 * data_ok has passed on them, data_end then being its end: only step 10
 * is left. */
static int check_data(xc_st *st, size_t s, int ok, uint64_t data_end)
{
    st_shard *sh;
    st_tensor *t;
    size_t n, i;
    uint64_t expected = 0, want;

    assert(s < st->n_shards);
    sh = &st->shards[s];
    assert(sh->first + sh->count <= st->n_t);
    t = st->t + sh->first;
    n = sh->count;

    if (ok || data_ok(st, t, n, &data_end))
        goto length;

    /* 6: contiguous from 0 in (begin, end) order. */
    for (i = 0; i < n; i++) {
        if (t[i].end < t[i].begin)
            return xc_st_tensor_fail(
                st, &t[i], XC_E_FORMAT_OFFSETS,
                "data_offsets [%llu, %llu] end before they "
                "begin", (unsigned long long)t[i].begin,
                (unsigned long long)t[i].end);
        if (t[i].begin < expected)
            return xc_st_tensor_fail(
                st, &t[i], XC_E_FORMAT_OFFSETS,
                "data_offsets [%llu, %llu] overlap tensor "
                "\"%.200s\", which ends at %llu",
                (unsigned long long)t[i].begin,
                (unsigned long long)t[i].end,
                t[i - 1].key.name,
                (unsigned long long)expected);
        if (t[i].begin > expected)
            return xc_st_tensor_fail(
                st, &t[i], XC_E_FORMAT_OFFSETS,
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
                return xc_st_tensor_fail(
                    st, &t[i], XC_E_FORMAT_OVERFLOW,
                    "dimension %d is %llu, above the 48-bit "
                    "limit", k, (unsigned long long)d[k]);
            if (__builtin_mul_overflow(count, d[k], &count))
                return xc_st_tensor_fail(st, &t[i], XC_E_FORMAT_OVERFLOW,
                                         "element count overflows 64 bits at "
                                         "dimension %d", k);
        }
        if (__builtin_mul_overflow(count, (uint64_t)xc_dtype_bits(t[i].dtype),
                                   &t[i].nbits))
            return xc_st_tensor_fail(st, &t[i], XC_E_FORMAT_OVERFLOW,
                                     "%llu elements of %s overflow 64 bits",
                                     (unsigned long long)count,
                                     xc_dtype_name(t[i].dtype));
    }

    /* 8: whole bytes. */
    for (i = 0; i < n; i++)
        if (t[i].nbits % 8 != 0)
            return xc_st_tensor_fail(
                st, &t[i], XC_E_FORMAT_BITS,
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
            return xc_st_tensor_fail(
                st, &t[i], XC_E_FORMAT_SIZE,
                "data_offsets [%llu, %llu] hold %llu bytes, "
                "but dtype and shape need %llu",
                (unsigned long long)t[i].begin,
                (unsigned long long)t[i].end,
                (unsigned long long)(t[i].end - t[i].begin),
                (unsigned long long)t[i].nbits);
    }

length:
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
    assert(sh >= st->shards && sh < st->shards + st->n_shards &&
           buf != NULL && data != NULL);
    span = xc_io_aligned_span(offset, len, align);
    if (span == 0 || span > SIZE_MAX - XJ_PAD)
        return xc_st_nomem(sh->path, "header buffer");
    b = xc_aligned_alloc(align, span + XJ_PAD);
    if (b == NULL)
        return xc_st_nomem(sh->path, "header buffer");
    xc_st_advise_huge(b, span); /* before the read touches it */
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

int xc_st_load_shard(xc_st *st, size_t s)
{
    st_shard *sh;
    st_parse p;
    char *lenbuf = NULL, *lenp, *hdr;
    uint64_t n = 0, data_end = 0;
    int rc, moved = 0, ok;

    /* a shard xc_st_add_shard opened, not loaded yet */
    assert(st != NULL && s < st->n_shards && st->shards[s].buf == NULL);
    sh = &st->shards[s];

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
    {
        /* A big header's tensor table is reserved once, for one entry per
         * 64 header bytes (an entry as writers spell it takes more), and
         * advised onto huge pages before anything touches it, instead of
         * growing by doubling through small pages; more entries than that
         * still grow it.  Smaller headers grow as before. */
        size_t want = st->n_t + (size_t)n / 64 + 16;
        if (want > st->cap_t && want * sizeof *st->t >= HUGE_MIN) {
            void *nt = xc_realloc(st->t, want * sizeof *st->t);
            if (nt == NULL)
                return xc_st_nomem(sh->path, "tensor table");
            st->t = nt;
            st->cap_t = want;
            xc_st_advise_huge(st->t, want * sizeof *st->t);
        }
    }
    rc = parse_header(&p);
    {
        /* Step 5's duplicate check, after the parse (see dup_check): a
         * duplicate before the parse's own problem, NOMEM included, wins
         * over it.  Failing to allocate the table is NOMEM either way. */
        int drc = dup_check(&p, &p.j);
        if (drc != XC_OK)
            rc = drc;
    }
    xc_table_free(&p.mdup);
    sh->count = st->n_t - sh->first;
    if (s == 0 && rc == XC_OK && st->names.slots == NULL) {
        /* Shard 0's indices are container indices: keep its table as the
         * container's unless sorting moves them (see finalize). */
        st->names = p.dup;
        memset(&p.dup, 0, sizeof p.dup);
    }
    xc_table_free(&p.dup);
    if (s != 0) /* only the first shard's metadata is kept */
        st->n_meta = p.m_first;
    if (rc != XC_OK)
        return rc;
    /* 6-10.  Tensors that pass steps 6-9 in header order are already in
     * (begin, end) order -- each begins where the one before ends, and
     * ends no earlier -- so a shard written in offset order is checked in
     * one pass and sort_shard's own scan is not needed. */
    ok = data_ok(st, st->t + sh->first, sh->count, &data_end);
    if (!ok && (rc = sort_shard(st, sh, &moved)) != XC_OK)
        return rc;
    if (moved)
        xc_table_free(&st->names); /* stale: finalize rebuilds it */
    else if (!p.cw_gap && sh->count > 0)
        sh->names = st->t[sh->first].key.name; /* header order = ours */
    return check_data(st, s, ok, data_end);
}

/* ------------------------------------------------------------------ */
/* Opening a shard                                                      */
/* ------------------------------------------------------------------ */

/* Adds shard path (taking ownership of it) and opens it, probing O_DIRECT
 * when asked.  NOT_FOUND is returned as is for the caller to word. */
int xc_st_add_shard(xc_st *st, char *path)
{
    st_shard *sh;
    char note[NOTE_LEN];
    int rc;
    assert(st != NULL); /* path NULL: the caller's allocation failed */
    if (path == NULL)
        return xc_st_nomem(NULL, "shard path");
    if (xc_st_grow((void **)&st->shards, &st->cap_shards, st->n_shards,
                   sizeof *st->shards) != XC_OK) {
        rc = xc_st_nomem(path, "shard table");
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
            sh->id_ctime_s = (int64_t)sb.st_ctim.tv_sec;
            sh->id_ctime_ns = (int64_t)sb.st_ctim.tv_nsec;
        }
    }
    return XC_OK;
}
