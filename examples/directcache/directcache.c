/* directcache.c - how an expert is found and read.
 *
 * Finding.  dc_open lists the folder and takes every regular file whose name
 * ends in ".safetensors", in name order; an index JSON, if any, is never
 * read: the shards themselves are the truth.  A shard starts with an 8-byte
 * little-endian length N and N bytes of JSON mapping each tensor name to its
 * dtype, shape and data_offsets [begin, end), counted from byte 8 + N.  The
 * header is parsed by a small bounded parser that trusts nothing: N is capped
 * and must fit the file, offsets must lie in the file with begin <= end, the
 * byte count must equal product(shape) * dtype size, no two tensors of a file
 * may overlap and no name may appear twice in the whole folder.  Of all
 * tensors only the Mixtral expert weights are kept,
 *     model.layers.{L}.block_sparse_moe.experts.{E}.w{1,2,3}.weight,
 * which must be BF16.  The layer ids found are sorted and the cache's layer
 * index is a position in that list; every layer must have experts 0..E-1
 * with all three tensors, E the same for all, and w1 (w2, w3) the same size
 * in every expert.  The result is a table: for each (layer, expert) and each
 * of w1, w3, w2 (the payload order) a file and an absolute byte offset.
 *
 * Reading.  A tensor [begin, end) of a file is read through windows: from
 * begin rounded down to 4096 to end rounded up to 4096, in chunks of at most
 * DIRECTCACHE_BOUNCE_BYTES, each one pread into a 4096-aligned bounce buffer
 * at an aligned offset for an aligned length; then the bytes of the tensor
 * are copied out.  Files are opened with O_DIRECT, or without it when the
 * file system refuses (EINVAL); the windows stay the same.  A pread that
 * returns fewer bytes is continued from the last whole block it delivered
 * (the offset must stay aligned); EINTR is retried; 0 before the tensor's
 * last byte is a short read; a window past the end of file is legal.  An
 * expert's three tensors are copied into a spare payload buffer; only when
 * all three succeeded is a slot chosen (first empty, else the oldest load
 * that is neither pinned nor held) and the spare swapped with it, so a
 * failed read never disturbs a resident expert.  One mutex covers every
 * call, reads included.
 */
#include "directcache.h"

#include <assert.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define DC_ALIGN 4096u
#ifndef DIRECTCACHE_BOUNCE_BYTES
#define DIRECTCACHE_BOUNCE_BYTES (4u << 20) /* a multiple of DC_ALIGN */
#endif
#define DC_HEADER_CAP (100u << 20)
#define DC_MAX_STALLS 8  /* preads in a row that deliver no new byte */
#define DC_MAX_DEPTH 64  /* JSON nesting inside skipped values */
#define ULL(x) ((unsigned long long)(x))

struct dfile { char *path; int fd, direct; uint64_t size; };
struct loc { int file; uint64_t off; };   /* one tensor of one expert */
struct slot {
    unsigned char *data;
    int key;        /* layer * experts + expert, -1 when empty */
    uint64_t seq;   /* load order: smaller = loaded earlier (FIFO) */
    unsigned holds;
    int pinned;
};

struct dc_cache {
    pthread_mutex_t mu;
    struct dfile *file;
    int nfiles, layers, experts, *layer_id;
    size_t role_bytes[3], expert_bytes;  /* roles in payload order w1 w3 w2 */
    struct loc *loc;      /* [key * 3 + role] */
    int *where;           /* [key] -> slot index, -1 if not resident */
    uint64_t *named;      /* [key] == batch_gen while a batch names it */
    uint64_t batch_gen, next_seq;
    struct slot *slot;
    size_t nslots, nres;
    unsigned char *spare, *bounce;
    dc_stats st;
    char msg[512];
};

static const char role_name[3][3] = {"w1", "w3", "w2"};

__attribute__((format(printf, 3, 4)))
static int fail(dc_cache *c, int code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->msg, sizeof c->msg, fmt, ap);
    va_end(ap);
    return code;
}

static uint64_t align_down(uint64_t x) { return x & ~(uint64_t)(DC_ALIGN - 1); }
static uint64_t align_up(uint64_t x) { return align_down(x + DC_ALIGN - 1); }

/* ------------------------------------------------------------- reading */

/* Copies bytes [begin, end) of file fi into dst through aligned windows;
 * `what` names the tensor in messages. */
static int read_span(dc_cache *c, int fi, uint64_t begin, uint64_t end,
                     unsigned char *dst, const char *what) {
    const struct dfile *f = &c->file[fi];
    uint64_t wpos = align_down(begin), wend = align_up(end);
#ifdef DIRECTCACHE_DEFECT_WINDOW_END
    wend = wpos + align_up(end - begin); /* rounds the length, not the end */
#endif
    while (wpos < wend) {
        size_t len = wend - wpos < DIRECTCACHE_BOUNCE_BYTES
                   ? (size_t)(wend - wpos) : DIRECTCACHE_BOUNCE_BYTES;
        uint64_t need = wpos + len < end ? wpos + len : end, have = wpos;
        int stalls = 0;
        while (have < need) {
            uint64_t at = align_down(have); /* resume at the last whole block */
            size_t ask = (size_t)(wpos + len - at);
            c->st.bytes_read += ask;
            ssize_t r = pread(f->fd, c->bounce + (at - wpos), ask, (off_t)at);
            if (r < 0 && errno == EINTR)
                continue;
            if (r < 0 || (size_t)r > ask) {
                c->st.io_errors++;
                return fail(c, DC_EIO, "I/O error: %s: %s: pread of %zu bytes at byte "
                            "offset %llu: %s", f->path, what, ask, ULL(at),
                            r < 0 ? strerror(errno) : "more bytes than asked");
            }
            if (r == 0 || (at + (uint64_t)r <= have && ++stalls > DC_MAX_STALLS)) {
                c->st.short_reads++;
                return fail(c, DC_ESHORT, "short read: %s: %s: pread at byte offset %llu "
                            "returned %zd before byte offset %llu", f->path, what,
                            ULL(at), r, ULL(end));
            }
            if (at + (uint64_t)r > have) {
                have = at + (uint64_t)r;
                stalls = 0;
            }
#ifdef DIRECTCACHE_DEFECT_SHORT_AS_EOF
            if ((size_t)r < ask)
                break; /* fewer bytes than asked: must be the end of the file */
#endif
        }
        uint64_t from = begin > wpos ? begin : wpos;
        if (need > from)
            memcpy(dst + (from - begin), c->bounce + (from - wpos), (size_t)(need - from));
        wpos += len;
    }
    return DC_OK;
}

/* Reads the payload of key (w1, w3, w2) into dst; counts a failure. */
static int read_expert(dc_cache *c, int key, unsigned char *dst) {
    char name[96];
    for (int r = 0; r < 3; r++) {
        const struct loc *l = &c->loc[key * 3 + r];
        snprintf(name, sizeof name, "model.layers.%d.block_sparse_moe.experts.%d.%s.weight",
                 c->layer_id[key / c->experts], key % c->experts, role_name[r]);
        int rc = read_span(c, l->file, l->off, l->off + c->role_bytes[r], dst, name);
        if (rc != DC_OK) {
            c->st.load_failures++;
            return rc;
        }
        dst += c->role_bytes[r];
    }
    return DC_OK;
}

/* --------------------------------------------------------------- slots */

static int evictable(const dc_cache *c, const struct slot *s) {
    (void)c;
    if (s->key < 0 || s->holds > 0)
        return s->key < 0;
#ifndef DIRECTCACHE_DEFECT_PIN_VICTIM
    if (s->pinned)
        return 0;
#endif
#ifndef DIRECTCACHE_DEFECT_BATCH_SELF_EVICT
    if (c->named[s->key] == c->batch_gen)
        return 0;
#endif
    return 1;
}

/* The first empty slot, else the evictable resident loaded first; -1. */
static long pick_victim(const dc_cache *c) {
    long best = -1;
    for (size_t i = 0; i < c->nslots; i++) {
        const struct slot *s = &c->slot[i];
        if (s->key < 0)
            return (long)i;
        if (evictable(c, s) && (best < 0 || s->seq < c->slot[best].seq))
            best = (long)i;
    }
    return best;
}

/* Publishes the payload in c->spare as key over the victim (which must
 * exist); the victim's buffer becomes the spare. */
static struct slot *install(dc_cache *c, int key) {
    long v = pick_victim(c);
    assert(v >= 0);
    struct slot *s = &c->slot[v];
    if (s->key >= 0) {
        c->where[s->key] = -1;
        c->st.evictions++;
        c->nres--;
    }
    unsigned char *t = s->data;
    s->data = c->spare;
    c->spare = t;
    *s = (struct slot){s->data, key, c->next_seq++, 0, 0};
    c->where[key] = (int)v;
    c->nres++;
    return s;
}

static int key_of(dc_cache *c, int layer, int expert) {
    if (layer < 0 || layer >= c->layers || expert < 0 || expert >= c->experts)
        return fail(c, DC_EARG, "key (layer %d, expert %d) outside the layout (%d layers, "
                    "%d experts)", layer, expert, c->layers, c->experts);
    return layer * c->experts + expert;
}

/* ---------------------------------------------------------- public ops */

int dc_get(dc_cache *c, int layer, int expert, const void **payload) {
    assert(c && payload);
    *payload = NULL;
    pthread_mutex_lock(&c->mu);
    int key = key_of(c, layer, expert), rc = key < 0 ? key : DC_OK, w;
    struct slot *s;
    if (rc != DC_OK)
        goto out;
    if ((w = c->where[key]) >= 0 && c->slot[w].holds == UINT_MAX) {
        rc = fail(c, DC_ESTATE, "layer %d expert %d: too many holds", layer, expert);
        goto out;
    }
    c->st.requests++;
    if (w >= 0) {
        c->st.hits++;
        c->slot[w].holds++;
        *payload = c->slot[w].data;
        goto out;
    }
    c->st.misses++;
    if (pick_victim(c) < 0) {
        rc = fail(c, DC_EFULL, "layer %d expert %d: all %zu slots pinned or held", layer,
                  expert, c->nslots);
        goto out;
    }
    rc = read_expert(c, key, c->spare); /* the victim is chosen only after this */
#ifdef DIRECTCACHE_DEFECT_FAILED_PUBLISH
    s = install(c, key); /* publish first, then report the failure */
    if (rc != DC_OK)
        goto out;
#else
    if (rc != DC_OK)
        goto out;
    s = install(c, key);
#endif
    s->holds = 1;
    *payload = s->data;
out:
    pthread_mutex_unlock(&c->mu);
    return rc;
}

int dc_release(dc_cache *c, int layer, int expert) {
    assert(c);
    pthread_mutex_lock(&c->mu);
    int key = key_of(c, layer, expert), rc = key < 0 ? key : DC_OK;
    if (key >= 0) {
        int w = c->where[key];
        if (w < 0 || c->slot[w].holds == 0)
            rc = fail(c, DC_ESTATE, "release of layer %d expert %d: %s", layer, expert,
                      w < 0 ? "not resident" : "no hold");
        else
            c->slot[w].holds--;
    }
    pthread_mutex_unlock(&c->mu);
    return rc;
}

static int set_pin(dc_cache *c, int layer, int expert, int on) {
    assert(c);
    pthread_mutex_lock(&c->mu);
    int key = key_of(c, layer, expert), rc = key < 0 ? key : DC_OK;
    if (key >= 0 && c->where[key] < 0)
        rc = fail(c, DC_ESTATE, "%s of layer %d expert %d: not resident",
                  on ? "pin" : "unpin", layer, expert);
    else if (key >= 0)
        c->slot[c->where[key]].pinned = on;
    pthread_mutex_unlock(&c->mu);
    return rc;
}

int dc_pin(dc_cache *c, int layer, int expert) { return set_pin(c, layer, expert, 1); }
int dc_unpin(dc_cache *c, int layer, int expert) { return set_pin(c, layer, expert, 0); }

int dc_load_layer(dc_cache *c, int layer, const int *experts, int n) {
    assert(c);
    pthread_mutex_lock(&c->mu);
    int rc = DC_OK, loaded = 0;
    size_t want = 0, room = 0;
    if (n < 0 || (n > 0 && !experts))
        rc = fail(c, DC_EARG, "load_layer: bad expert list (n = %d)", n);
    else if (n == 0 && (layer < 0 || layer >= c->layers))
        rc = key_of(c, layer, 0);
    for (int i = 0; i < n && rc == DC_OK; i++) /* validate all before any change */
        if (key_of(c, layer, experts[i]) < 0)
            rc = DC_EARG;
    if (rc != DC_OK)
        goto out;
    c->batch_gen++; /* from here every named key is protected from eviction */
    for (int i = 0; i < n; i++) {
        int k = layer * c->experts + experts[i];
        want += c->named[k] != c->batch_gen && c->where[k] < 0;
        c->named[k] = c->batch_gen;
    }
    for (size_t i = 0; i < c->nslots; i++)
        room += (size_t)evictable(c, &c->slot[i]);
    if (want > room)
        rc = fail(c, DC_EFULL, "load_layer: layer %d needs %zu slots, %zu evictable",
                  layer, want, room);
    for (int i = 0; i < n && rc == DC_OK; i++) {
        int k = layer * c->experts + experts[i];
        if (c->where[k] >= 0)
            continue; /* resident before, or named twice and read already */
        if ((rc = read_expert(c, k, c->spare)) == DC_OK) {
            install(c, k);
            c->st.batch_loads++;
            loaded++;
        }
    }
    c->batch_gen++; /* no key is named any more */
out:
    pthread_mutex_unlock(&c->mu);
    return rc != DC_OK ? rc : loaded;
}

int dc_query(dc_cache *c, int layer, int expert, int *resident, int *pinned, int *holds) {
    assert(c);
    pthread_mutex_lock(&c->mu);
    int key = key_of(c, layer, expert);
    if (key >= 0) {
        const struct slot *s = c->where[key] >= 0 ? &c->slot[c->where[key]] : NULL;
        if (resident) *resident = s != NULL;
        if (pinned) *pinned = s ? s->pinned : 0;
        if (holds) *holds = !s ? 0 : s->holds > INT_MAX ? INT_MAX : (int)s->holds;
    }
    pthread_mutex_unlock(&c->mu);
    return key < 0 ? key : DC_OK;
}

int dc_residents(dc_cache *c, int *layers, int *experts, size_t cap) {
    assert(c && (cap == 0 || (layers && experts)));
    pthread_mutex_lock(&c->mu);
    size_t n = 0;
    for (uint64_t last = 0;; n++) { /* selection by seq, O(slots^2): a diagnostic */
        long b = -1;
        for (size_t i = 0; i < c->nslots; i++)
            if (c->slot[i].key >= 0 && (n == 0 || c->slot[i].seq > last) &&
                (b < 0 || c->slot[i].seq < c->slot[b].seq))
                b = (long)i;
        if (b < 0)
            break;
        last = c->slot[b].seq;
        if (n < cap) {
            layers[n] = c->slot[b].key / c->experts;
            experts[n] = c->slot[b].key % c->experts;
        }
    }
    pthread_mutex_unlock(&c->mu);
    return (int)n;
}

void dc_get_stats(dc_cache *c, dc_stats *out) {
    assert(c && out);
    pthread_mutex_lock(&c->mu);
    *out = c->st;
    out->resident = c->nres;
    pthread_mutex_unlock(&c->mu);
}

void dc_reset_stats(dc_cache *c) {
    assert(c);
    pthread_mutex_lock(&c->mu);
    memset(&c->st, 0, sizeof c->st);
    pthread_mutex_unlock(&c->mu);
}

int dc_check(dc_cache *c, char *msg, size_t len) {
    assert(c && (msg || len == 0));
    char b[200] = "";
    size_t used = 0, total = (size_t)c->layers * (size_t)c->experts;
    pthread_mutex_lock(&c->mu);
    for (size_t i = 0; i < c->nslots && !b[0]; i++) {
        const struct slot *s = &c->slot[i];
        if (s->key < 0 && (s->holds || s->pinned))
            snprintf(b, sizeof b, "empty slot %zu has a hold or a pin", i);
        else if (s->key >= 0 && ((size_t)s->key >= total || c->where[s->key] != (int)i))
            snprintf(b, sizeof b, "slot %zu holds key %d, which is not mapped to it", i, s->key);
        else if (s->key >= 0 && s->seq >= c->next_seq)
            snprintf(b, sizeof b, "slot %zu has seq %llu >= next %llu", i, ULL(s->seq),
                     ULL(c->next_seq));
        for (size_t j = 0; j < i && s->key >= 0 && !b[0]; j++)
            if (c->slot[j].key >= 0 && c->slot[j].seq == s->seq)
                snprintf(b, sizeof b, "slots %zu and %zu share seq %llu", j, i, ULL(s->seq));
        used += s->key >= 0;
    }
    for (size_t k = 0; k < total && !b[0]; k++)
        if (c->where[k] >= 0 && ((size_t)c->where[k] >= c->nslots ||
                                 c->slot[c->where[k]].key != (int)k))
            snprintf(b, sizeof b, "key %zu maps to slot %d, which holds another", k,
                     c->where[k]);
    if (!b[0] && used != c->nres)
        snprintf(b, sizeof b, "resident count %zu, but %zu slots occupied", c->nres, used);
    if (!b[0] && c->st.hits + c->st.misses != c->st.requests)
        snprintf(b, sizeof b, "hits %llu + misses %llu != requests %llu", ULL(c->st.hits),
                 ULL(c->st.misses), ULL(c->st.requests));
    pthread_mutex_unlock(&c->mu);
    if (len)
        snprintf(msg, len, "%s", b);
    return b[0] != 0;
}

size_t dc_last_error(dc_cache *c, char *buf, size_t len) {
    assert(c && (buf || len == 0));
    pthread_mutex_lock(&c->mu);
    size_t n = strlen(c->msg);
    if (len)
        snprintf(buf, len, "%s", c->msg);
    pthread_mutex_unlock(&c->mu);
    return n;
}

const char *dc_strerror(int code) {
    static const char *const n[] = {"DC_OK", "DC_EARG", "DC_EFORMAT", "DC_EIO",
                                    "DC_ESHORT", "DC_ENOMEM", "DC_EFULL", "DC_ESTATE"};
    return code <= 0 && code >= DC_ESTATE ? n[-code] : "DC_UNKNOWN";
}

void dc_get_info(const dc_cache *c, dc_info *out) {
    assert(c && out);
    *out = (dc_info){c->layers, c->experts, c->nslots, c->expert_bytes, c->role_bytes[0],
                     c->role_bytes[1], c->role_bytes[2], c->nfiles, 0, c->layer_id};
    for (int i = 0; i < c->nfiles; i++)
        out->direct_files += c->file[i].direct;
}

/* ------------------------------------------------------ header parsing */

struct trec { char *name; uint64_t begin, end; int file; char dtype[12]; };
struct plist { struct trec *t; size_t n, cap; };
typedef struct { const unsigned char *s, *p, *e; const char *why; int nomem; } js;

static int jerr(js *j, const char *why) {
    if (!j->why)
        j->why = why;
    return -1;
}

static int jis(js *j, int ch) { /* skips blanks, then takes ch if it is next */
    while (j->p < j->e && (*j->p == ' ' || *j->p == '\t' || *j->p == '\n' || *j->p == '\r'))
        j->p++;
    return j->p < j->e && *j->p == ch ? (j->p++, 1) : 0;
}

static int jexpect(js *j, int ch, const char *why) { return jis(j, ch) ? 0 : jerr(j, why); }
static void jws(js *j) { (void)jis(j, ' '); } /* a blank is never next after jis */

static int hex4(const unsigned char *p, unsigned *v) {
    *v = 0;
    for (int i = 0; i < 4; i++) {
        int ch = p[i], d = ch >= '0' && ch <= '9' ? ch - '0' : ch >= 'a' && ch <= 'f'
                 ? ch - 'a' + 10 : ch >= 'A' && ch <= 'F' ? ch - 'A' + 10 : -1;
        if (d < 0)
            return -1;
        *v = *v << 4 | (unsigned)d;
    }
    return 0;
}

static size_t utf8(char *b, unsigned u) {
    int n = u < 0x80 ? 1 : u < 0x800 ? 2 : u < 0x10000 ? 3 : 4;
    static const unsigned char lead[5] = {0, 0, 0xC0, 0xE0, 0xF0};
    for (int i = n - 1; i > 0; i--, u >>= 6)
        b[i] = (char)(0x80 | (u & 63));
    b[0] = (char)(lead[n] | u);
    return (size_t)n;
}

/* Parses a string; with out, stores a malloc'd decoded copy (never longer
 * than the raw text; \u0000 and lone surrogates refused). */
static int jstr(js *j, char **out) {
    if (out)
        *out = NULL;
    if (!jis(j, '"'))
        return jerr(j, "expected a string");
    const unsigned char *q = j->p;
    while (q < j->e && *q != '"')
        q += (*q == '\\' && q + 1 < j->e) ? 2 : 1;
    if (q >= j->e)
        return jerr(j, "unterminated string");
    char *b = out ? malloc((size_t)(q - j->p) + 1) : NULL;
    size_t k = 0;
    if (out && !b)
        return j->nomem = 1, jerr(j, "out of memory");
    while (j->p < q) {
        unsigned ch = *j->p++, u, lo;
        if (ch < 0x20)
            goto bad;
        if (ch == '\\') {
            static const char from[] = "\"\\/bfnrtu", to[] = "\"\\/\b\f\n\r\t";
            const char *esc = strchr(from, (int)(ch = *j->p++));
            if (!ch || !esc)
                goto bad;
            if (ch == 'u') {
                if (q - j->p < 4 || hex4(j->p, &u) || u == 0 || (u >= 0xDC00 && u < 0xE000))
                    goto bad;
                j->p += 4;
                if (u >= 0xD800 && u < 0xDC00) { /* needs its low surrogate */
                    if (q - j->p < 6 || j->p[0] != '\\' || j->p[1] != 'u' ||
                        hex4(j->p + 2, &lo) || lo < 0xDC00 || lo >= 0xE000)
                        goto bad;
                    j->p += 6;
                    u = 0x10000 + ((u - 0xD800) << 10) + (lo - 0xDC00);
                }
                k += b ? utf8(b + k, u) : 0;
                continue;
            }
            ch = (unsigned char)to[esc - from];
        }
        if (b)
            b[k++] = (char)ch;
    }
    j->p = q + 1;
    if (b)
        b[k] = 0, *out = b;
    return 0;
bad:
    free(b);
    return jerr(j, "bad escape or control character in a string");
}

static int jnum(js *j, uint64_t *v) {
    uint64_t x = 0;
    jws(j);
    if (j->p >= j->e || *j->p < '0' || *j->p > '9')
        return jerr(j, "expected a non-negative integer");
    for (unsigned d; j->p < j->e && *j->p >= '0' && *j->p <= '9'; x = x * 10 + d)
        if (x > (UINT64_MAX - (d = (unsigned)(*j->p++ - '0'))) / 10)
            return jerr(j, "integer too large");
    if (j->p < j->e && (*j->p == '.' || *j->p == 'e' || *j->p == 'E'))
        return jerr(j, "expected an integer, found a fraction");
    *v = x;
    return 0;
}

/* Skips one value of any kind (the value of an unknown key). */
static int jskip(js *j, int depth) {
    static const char *const lit[] = {"true", "false", "null"};
    jws(j);
    if (j->p >= j->e || depth > DC_MAX_DEPTH)
        return jerr(j, depth > DC_MAX_DEPTH ? "nesting too deep" : "expected a value");
    int ch = *j->p, obj = ch == '{';
    if (ch == '"')
        return jstr(j, NULL);
    if (ch == '{' || ch == '[') {
        j->p++;
        if (jis(j, obj ? '}' : ']'))
            return 0;
        do
            if ((obj && (jstr(j, NULL) || jexpect(j, ':', "expected ':'"))) || jskip(j, depth + 1))
                return -1;
        while (jis(j, ','));
        return jexpect(j, obj ? '}' : ']', "expected ',' or a closing bracket");
    }
    for (int i = 0; i < 3; i++)
        if ((size_t)(j->e - j->p) >= strlen(lit[i]) && !memcmp(j->p, lit[i], strlen(lit[i])))
            return j->p += strlen(lit[i]), 0;
    if (ch != '-' && (ch < '0' || ch > '9'))
        return jerr(j, "unexpected character");
    while (j->p < j->e && *j->p && strchr("+-.eE0123456789", *j->p))
        j->p++;
    return 0;
}

/* Parses {"dtype": s, "shape": [n, ...], "data_offsets": [b, e]} (other
 * keys skipped); *elems = product(shape). */
static int jtensor(js *j, struct trec *t, uint64_t *elems) {
    int seen = 0, nd = 0;
    *elems = 1;
    if (jexpect(j, '{', "expected '{' after a tensor name"))
        return -1;
    if (!jis(j, '}')) do {
        char *k, *d;
        uint64_t x;
        if (jstr(j, &k))
            return -1;
        int bit = !strcmp(k, "dtype") ? 1 : !strcmp(k, "shape") ? 2
                : !strcmp(k, "data_offsets") ? 4 : 0;
        free(k);
        if (bit & seen)
            return jerr(j, "repeated field in a tensor entry");
        seen |= bit;
        if (jexpect(j, ':', "expected ':'"))
            return -1;
        if (bit == 1) {
            if (jstr(j, &d))
                return -1;
            snprintf(t->dtype, sizeof t->dtype, "%s", strlen(d) < sizeof t->dtype ? d : "?");
            free(d);
        } else if (bit == 2) {
            if (jexpect(j, '[', "expected '[' for shape"))
                return -1;
            if (!jis(j, ']')) {
                do {
                    if (jnum(j, &x))
                        return -1;
                    if (++nd > 64 || (x && *elems > UINT64_MAX / x))
                        return jerr(j, "shape too large");
                    *elems *= x;
                } while (jis(j, ','));
                if (jexpect(j, ']', "expected ']' after shape"))
                    return -1;
            }
        } else if (bit == 4) {
            if (jexpect(j, '[', "expected '[' for data_offsets") || jnum(j, &t->begin) ||
                jexpect(j, ',', "data_offsets needs two integers") || jnum(j, &t->end) ||
                jexpect(j, ']', "data_offsets needs two integers"))
                return -1;
        } else if (jskip(j, 1)) {
            return -1;
        }
    } while (jis(j, ','));
    if (jexpect(j, '}', "expected ',' or '}' in a tensor entry"))
        return -1;
    return seen == 7 ? 0 : jerr(j, "tensor entry lacks dtype, shape or data_offsets");
}

static unsigned dtype_size(const char *d) { /* 0: unknown, size not checked */
    static const char *const names[] = {"BOOL", "U8", "I8", "F8_E4M3", "F8_E5M2", "U16",
        "I16", "F16", "BF16", "U32", "I32", "F32", "U64", "I64", "F64"};
    static const unsigned char size[] = {1, 1, 1, 1, 1, 2, 2, 2, 2, 4, 4, 4, 8, 8, 8};
    for (size_t i = 0; i < sizeof size; i++)
        if (!strcmp(d, names[i]))
            return size[i];
    return 0;
}

static int cmp_span(const void *a, const void *b) {
    const struct trec *x = a, *y = b;
    if (x->begin != y->begin)
        return x->begin < y->begin ? -1 : 1;
    return (x->end > y->end) - (x->end < y->end);
}

static int cmp_name(const void *a, const void *b) {
    return strcmp(((const struct trec *)a)->name, ((const struct trec *)b)->name);
}

/* Parses header h[0..n) of file fi, appending its tensors to P with
 * absolute offsets, each checked against the file and its neighbours. */
static int parse_json(dc_cache *c, int fi, const unsigned char *h, size_t n, struct plist *P) {
    const struct dfile *f = &c->file[fi];
    const uint64_t base = 8 + (uint64_t)n, room = f->size - base;
    js j = {h, h, h + n, NULL, 0};
    char *name = NULL;
    int meta = 0;
    size_t first = P->n;
    if (jexpect(&j, '{', "the header is not a JSON object"))
        goto syntax;
    if (!jis(&j, '}')) do {
        if (jstr(&j, &name) || jexpect(&j, ':', "expected ':'"))
            goto syntax;
        if (!strcmp(name, "__metadata__")) { /* string -> string */
            if (meta++ || jexpect(&j, '{', "__metadata__ must be one object"))
                goto syntax;
            if (!jis(&j, '}')) {
                do
                    if (jstr(&j, NULL) || jexpect(&j, ':', "expected ':'") || jstr(&j, NULL))
                        goto syntax;
                while (jis(&j, ','));
                if (jexpect(&j, '}', "expected ',' or '}' in __metadata__"))
                    goto syntax;
            }
            free(name);
            name = NULL;
            continue;
        }
        if (P->n == P->cap) {
            struct trec *t = realloc(P->t, (P->cap ? 2 * P->cap : 64) * sizeof *t);
            if (!t) {
                free(name);
                return fail(c, DC_ENOMEM, "%s: out of memory parsing the header", f->path);
            }
            P->t = t;
            P->cap = P->cap ? 2 * P->cap : 64;
        }
        struct trec *t = memset(&P->t[P->n], 0, sizeof *t);
        uint64_t elems;
        unsigned ds;
        t->file = fi;
        if (jtensor(&j, t, &elems))
            goto syntax;
        t->name = name;
        name = NULL;
        P->n++;
        if (t->begin > t->end || t->end > room)
            return fail(c, DC_EFORMAT, "%s: tensor '%s': data_offsets [%llu, %llu] (byte offset "
                        "%llu) %s", f->path, t->name, ULL(t->begin), ULL(t->end),
                        ULL(base + t->begin), t->begin > t->end ? "begin after end"
                        : "run past the end of the file");
        if ((ds = dtype_size(t->dtype)) && (elems > UINT64_MAX / ds || elems * ds != t->end - t->begin))
            return fail(c, DC_EFORMAT, "%s: tensor '%s' at byte offset %llu has %llu bytes, "
                        "but dtype %s and its shape give %llu elements", f->path, t->name,
                        ULL(base + t->begin), ULL(t->end - t->begin), t->dtype, ULL(elems));
        t->begin += base;
        t->end += base;
    } while (jis(&j, ','));
    if (jexpect(&j, '}', "expected ',' or '}' after a tensor entry"))
        goto syntax;
    jws(&j);
    if (j.p != j.e) { /* only blanks (padding) may follow the object */
        j.why = "bytes after the header object";
        goto syntax;
    }
    qsort(P->t + first, P->n - first, sizeof *P->t, cmp_span);
    for (size_t i = first + 1; i < P->n; i++)
        if (P->t[i].begin < P->t[i - 1].end)
            return fail(c, DC_EFORMAT, "%s: tensors '%s' and '%s' overlap at byte offset %llu",
                        f->path, P->t[i - 1].name, P->t[i].name, ULL(P->t[i].begin));
#ifndef DIRECTCACHE_DEFECT_TRAILING_OK
    /* the data buffer ends the file: bytes after it are indexed by no tensor */
    uint64_t last = base;
    for (size_t i = first; i < P->n; i++)
        last = P->t[i].end > last ? P->t[i].end : last;
    if (last != f->size)
        return fail(c, DC_EFORMAT, "%s: %llu bytes after the data buffer's end at byte "
                    "offset %llu", f->path, ULL(f->size - last), ULL(last));
#endif
    return DC_OK;
syntax:
    if (j.nomem)
        fail(c, DC_ENOMEM, "%s: out of memory parsing the header", f->path);
    else
        fail(c, DC_EFORMAT, "%s: header JSON%s%s%s: %s at byte offset %llu", f->path,
             name ? " (tensor '" : "", name ? name : "", name ? "')" : "", j.why,
             ULL(8 + (uint64_t)(j.p - j.s)));
    free(name);
    return j.nomem ? DC_ENOMEM : DC_EFORMAT;
}

static int parse_file(dc_cache *c, int fi, struct plist *P) {
    const struct dfile *f = &c->file[fi];
    unsigned char len8[8], *h;
    uint64_t n = 0;
    if (f->size < 8)
        return fail(c, DC_EFORMAT, "%s: %llu bytes, too short for the 8-byte header length",
                    f->path, ULL(f->size));
    int rc = read_span(c, fi, 0, 8, len8, "header length");
    for (int i = 7; i >= 0; i--)
        n = n << 8 | len8[i];
    if (rc == DC_OK && (n < 2 || n > DC_HEADER_CAP || n > f->size - 8))
        rc = fail(c, DC_EFORMAT, "%s: header length %llu at byte offset 0 %s (file of %llu "
                  "bytes, cap %u)", f->path, ULL(n), n < 2 ? "too small" : "too large",
                  ULL(f->size), DC_HEADER_CAP);
    if (rc != DC_OK)
        return rc;
    if (!(h = malloc((size_t)n)))
        return fail(c, DC_ENOMEM, "%s: no memory for a %llu-byte header", f->path, ULL(n));
    if ((rc = read_span(c, fi, 8, 8 + n, h, "header")) == DC_OK)
        rc = parse_json(c, fi, h, (size_t)n, P);
    free(h);
    return rc;
}

/* -------------------------------------------------------------- layout */

/* model.layers.{L}.block_sparse_moe.experts.{E}.w{1,2,3}.weight, L and E
 * decimal without sign or leading zero; role in payload order (w1 0, w3 1,
 * w2 2). */
static int match_name(const char *p, int *L, int *E, int *role) {
    char l[11], e[11], w[2];
    int end = 0;
    if (sscanf(p, "model.layers.%10[0-9].block_sparse_moe.experts.%10[0-9].w%1[123].weight%n",
               l, e, w, &end) != 3 || end == 0 || p[end] || strlen(l) > 9 || strlen(e) > 9 ||
        (l[0] == '0' && l[1]) || (e[0] == '0' && e[1]))
        return 0;
    *L = atoi(l);
    *E = atoi(e);
    *role = w[0] == '1' ? 0 : w[0] == '3' ? 1 : 2;
    return 1;
}

struct xrec { int L, E, role; const struct trec *t; };

static int cmp_x(const void *a, const void *b) {
    const struct xrec *x = a, *y = b;
    if (x->L != y->L)
        return x->L < y->L ? -1 : 1;
    return x->E != y->E ? (x->E < y->E ? -1 : 1) : x->role - y->role;
}

static int build_layout(dc_cache *c, const struct plist *P, const char *folder) {
    struct xrec *x = malloc((P->n ? P->n : 1) * sizeof *x);
    size_t nx = 0, i, k;
    int rc = DC_OK, L, E, r;
    if (!x)
        return fail(c, DC_ENOMEM, "out of memory building the layout");
    for (i = 0; i < P->n && rc == DC_OK; i++) {
        const struct trec *t = &P->t[i];
        if (!match_name(t->name, &L, &E, &r))
            continue;
        x[nx++] = (struct xrec){L, E, r, t};
        if (strcmp(t->dtype, "BF16"))
            rc = fail(c, DC_EFORMAT, "%s: tensor '%s' at byte offset %llu has dtype %s, "
                      "expected BF16", c->file[t->file].path, t->name, ULL(t->begin), t->dtype);
    }
    if (rc == DC_OK && nx == 0)
        rc = fail(c, DC_EFORMAT, "%s: no tensor named model.layers.L.block_sparse_moe."
                  "experts.E.w1/w2/w3.weight in any shard", folder);
    if (rc != DC_OK)
        goto out;
    qsort(x, nx, sizeof *x, cmp_x);
    for (i = 0; i < nx; i = k, c->layers++) { /* layer groups x[i..k) */
        for (k = i; k < nx && x[k].L == x[i].L; k++)
            ;
        if (i == 0)
            c->experts = x[k - 1].E + 1;
        else if (x[k - 1].E + 1 != c->experts) {
            rc = fail(c, DC_EFORMAT, "%s: layer %d has %d experts (up to '%s' in %s), layer %d "
                      "has %d", folder, x[i].L, x[k - 1].E + 1, x[k - 1].t->name,
                      c->file[x[k - 1].t->file].path, x[0].L, c->experts);
            goto out;
        }
    }
    /* Names are unique, so the sorted list must be every (layer, expert,
     * role) in order; the first mismatch is the missing tensor. */
    for (i = 0; i < nx;) {
        L = x[i].L;
        for (E = 0; E < c->experts; E++)
            for (r = 0; r < 3; r++, i++)
                if (i >= nx || x[i].L != L || x[i].E != E || x[i].role != r) {
                    rc = fail(c, DC_EFORMAT, "%s: missing tensor model.layers.%d.block_sparse_moe."
                              "experts.%d.%s.weight", folder, L, E, role_name[r]);
                    goto out;
                }
    }
    assert(nx == (size_t)c->layers * (size_t)c->experts * 3 && nx / 3 <= INT_MAX);
    for (r = 0; r < 3; r++)
        c->expert_bytes += c->role_bytes[r] = (size_t)(x[r].t->end - x[r].t->begin);
    c->layer_id = malloc((size_t)c->layers * sizeof *c->layer_id);
    c->loc = malloc(nx * sizeof *c->loc);
    c->where = malloc(nx / 3 * sizeof *c->where);
    c->named = calloc(nx / 3, sizeof *c->named);
    if (!c->layer_id || !c->loc || !c->where || !c->named) {
        rc = fail(c, DC_ENOMEM, "out of memory for %zu experts", nx / 3);
        goto out;
    }
    for (i = 0; i < nx && rc == DC_OK; i++) {
        const struct trec *t = x[i].t;
        if (t->end - t->begin != c->role_bytes[x[i].role])
            rc = fail(c, DC_EFORMAT, "%s: tensor '%s' at byte offset %llu has %llu bytes, "
                      "expected %zu like '%s'", c->file[t->file].path, t->name, ULL(t->begin),
                      ULL(t->end - t->begin), c->role_bytes[x[i].role], x[x[i].role].t->name);
        c->loc[i] = (struct loc){t->file, t->begin};
        c->layer_id[i / 3 / (size_t)c->experts] = x[i].L;
        if (i % 3 == 0)
            c->where[i / 3] = -1;
    }
    if (rc == DC_OK && c->expert_bytes == 0)
        rc = fail(c, DC_EFORMAT, "%s: the expert payload is 0 bytes", folder);
out:
    free(x);
    return rc;
}

/* ---------------------------------------------------------- open/close */

static int cmp_cstr(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static int open_files(dc_cache *c, const char *folder) {
    DIR *d = opendir(folder);
    char **names = NULL, **t;
    size_t n = 0, cap = 0, len;
    int rc = DC_OK;
    struct dirent *e;
    if (!d)
        return fail(c, DC_EIO, "%s: cannot list the folder: %s", folder, strerror(errno));
    while (rc == DC_OK && (e = readdir(d))) {
        if ((len = strlen(e->d_name)) <= 12 || strcmp(e->d_name + len - 12, ".safetensors"))
            continue;
        if (n == cap && (t = realloc(names, (cap = cap ? 2 * cap : 16) * sizeof *t)))
            names = t;
        if (n == cap || !(names[n] = strdup(e->d_name)))
            rc = fail(c, DC_ENOMEM, "out of memory listing %s", folder);
        else
            n++;
    }
    closedir(d);
    if (rc == DC_OK && n) {
        qsort(names, n, sizeof *names, cmp_cstr);
        if (!(c->file = calloc(n, sizeof *c->file)))
            rc = fail(c, DC_ENOMEM, "out of memory opening %s", folder);
    }
    for (size_t i = 0; i < n && rc == DC_OK; i++) {
        struct dfile *f = &c->file[c->nfiles];
        struct stat sb;
        if (!(f->path = malloc(len = strlen(folder) + strlen(names[i]) + 2))) {
            rc = fail(c, DC_ENOMEM, "out of memory opening %s", folder);
            break;
        }
        snprintf(f->path, len, "%s/%s", folder, names[i]);
        f->direct = 1;
#ifdef DIRECTCACHE_DEFECT_OPEN_NO_EINTR
        /* as first written: an open interrupted by a signal fails the cache */
        if ((f->fd = open(f->path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_DIRECT)) < 0 && errno == EINVAL) {
            f->direct = 0; /* e.g. tmpfs: the same aligned windows, through the page cache */
            f->fd = open(f->path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
        }
#else
        do
            f->fd = open(f->path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_DIRECT);
        while (f->fd < 0 && errno == EINTR);
        if (f->fd < 0 && errno == EINVAL) {
            f->direct = 0; /* e.g. tmpfs: the same aligned windows, through the page cache */
            do
                f->fd = open(f->path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
            while (f->fd < 0 && errno == EINTR);
        }
#endif
        if (f->fd < 0 || fstat(f->fd, &sb))
            rc = fail(c, DC_EIO, "%s: cannot open: %s", f->path, strerror(errno));
        else if (S_ISREG(sb.st_mode)) {
            f->size = (uint64_t)sb.st_size;
            c->nfiles++;
            continue;
        }
        if (f->fd >= 0) /* failed, or not a regular file (skipped) */
            close(f->fd);
        free(f->path);
        f->path = NULL;
    }
    if (rc == DC_OK && c->nfiles == 0)
        rc = fail(c, DC_EFORMAT, "%s: no *.safetensors file", folder);
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
    return rc;
}

static int build(dc_cache *c, const char *folder, size_t slots) {
    struct plist P = {NULL, 0, 0};
    void *p;
    int rc;
    if (!folder || slots == 0)
        return fail(c, DC_EARG, "open: %s", folder ? "slots must be at least 1" : "folder is NULL");
    if (posix_memalign(&p, DC_ALIGN, DIRECTCACHE_BOUNCE_BYTES))
        return fail(c, DC_ENOMEM, "no memory for the bounce buffer");
    c->bounce = p;
    c->batch_gen = 1; /* named[] starts at 0: no key is named */
    rc = open_files(c, folder);
    for (int i = 0; i < c->nfiles && rc == DC_OK; i++)
        rc = parse_file(c, i, &P);
    if (rc == DC_OK && P.n > 1)
        qsort(P.t, P.n, sizeof *P.t, cmp_name);
    for (size_t i = 1; i < P.n && rc == DC_OK; i++)
        if (!strcmp(P.t[i].name, P.t[i - 1].name))
            rc = fail(c, DC_EFORMAT, "duplicate tensor name '%s' in %s (byte offset %llu) and "
                      "%s (byte offset %llu)", P.t[i].name, c->file[P.t[i - 1].file].path,
                      ULL(P.t[i - 1].begin), c->file[P.t[i].file].path, ULL(P.t[i].begin));
    if (rc == DC_OK)
        rc = build_layout(c, &P, folder);
    for (size_t i = 0; i < P.n; i++)
        free(P.t[i].name);
    free(P.t);
    if (rc != DC_OK)
        return rc;
    size_t total = (size_t)c->layers * (size_t)c->experts;
    slots = slots < total ? slots : total;
    if (slots + 1 > SIZE_MAX / c->expert_bytes || !(c->slot = calloc(slots, sizeof *c->slot)))
        return fail(c, DC_ENOMEM, "no memory for %zu slots of %zu bytes", slots, c->expert_bytes);
    for (; c->nslots < slots; c->nslots++)
        if (c->slot[c->nslots].key = -1, !(c->slot[c->nslots].data = malloc(c->expert_bytes)))
            return fail(c, DC_ENOMEM, "no memory for %zu slots of %zu bytes", slots,
                        c->expert_bytes);
    if (!(c->spare = malloc(c->expert_bytes)))
        return fail(c, DC_ENOMEM, "no memory for the spare payload buffer");
    return DC_OK;
}

int dc_open(const char *folder, size_t slots, dc_cache **out, char *err, size_t errlen) {
    assert(out && (err || errlen == 0));
    dc_cache *c = calloc(1, sizeof *c);
    int rc = c ? DC_OK : DC_ENOMEM;
    *out = NULL;
    if (c) {
        pthread_mutex_init(&c->mu, NULL);
        if ((rc = build(c, folder, slots)) == DC_OK) {
            memset(&c->st, 0, sizeof c->st); /* header reads are not counted */
            c->msg[0] = 0;
            *out = c;
        }
    }
    if (errlen)
        snprintf(err, errlen, "%s", !c ? "out of memory" : c->msg);
    if (rc != DC_OK)
        dc_close(c);
    return rc;
}

void dc_close(dc_cache *c) {
    if (!c)
        return;
    for (int i = 0; i < c->nfiles; i++)
        close(c->file[i].fd), free(c->file[i].path);
    for (size_t i = 0; i < c->nslots; i++)
        free(c->slot[i].data);
    void *blocks[] = {c->file, c->slot, c->spare, c->bounce, c->loc, c->where, c->named,
                      c->layer_id};
    for (size_t i = 0; i < sizeof blocks / sizeof blocks[0]; i++)
        free(blocks[i]);
    pthread_mutex_destroy(&c->mu);
    free(c);
}
