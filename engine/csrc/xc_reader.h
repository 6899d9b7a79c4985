/*
 * xc_reader.h -- the private types of the safetensors reader and the
 * functions its files share; not public (xc.h is the boundary).
 *
 *   xc_st.c      the public reader API: open (file, folder, index), the
 *                tensor, shard and metadata accessors, reads, file checks;
 *   xc_index.c   model.safetensors.index.json;
 *   xc_header.c  one shard: its file opened, its header validated
 *                completely (steps 1-10);
 *   xc_names.c   name hashing and the open-addressing name tables;
 *   xc_st_mem.c  growing arrays, huge-page advice, the out-of-memory
 *                record, paths.
 *
 * Calls run one way, down this list: xc_st.c -> xc_index.c ->
 * xc_header.c -> xc_names.c -> xc_st_mem.c (each may skip a level; none
 * calls one above it).  The sections below follow the same order, bottom
 * first.
 */
#ifndef XC_READER_H
#define XC_READER_H

#include "xc_json.h"

#include <string.h>

#define MAX_48 ((1ull << 48) - 1)
#define INDEX_NAME "model.safetensors.index.json"
#define NOTE_LEN 512

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
    int64_t id_ctime_s, id_ctime_ns; /* status change: a write or utime */
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
    char *index_path;             /* NULL: opened without an index */
    int index_id_ok;              /* 1 once the index's identity is known */
    uint64_t index_dev, index_ino; /* stat(index) right after its open */
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
/* Short literal compares (header and index parsing)                    */
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

/* ------------------------------------------------------------------ */
/* Memory (xc_st_mem.c)                                                 */
/* ------------------------------------------------------------------ */

/* Grows an array of elem-byte items to hold one more than n when n has
 * reached *cap; XC_E_NOMEM (not recorded) keeps it as it was. */
int xc_st_grow(void **arr, size_t *cap, size_t n, size_t elem);
/* Advice to the kernel that the 2 MiB-aligned part of [p, p + bytes) be
 * backed by huge pages (Linux transparent huge pages in "madvise" mode),
 * when bytes is at least HUGE_MIN: a 29 MB header and its tensor and name
 * tables then fault in a few dozen times instead of ~12,000 times (4 KiB
 * each) on every open.  Advice only: contents and sizes do not change, and
 * where the kernel lacks it or refuses, nothing happens.  Cannot fail. */
#define HUGE_MIN (4u << 20)
void xc_st_advise_huge(void *p, size_t bytes);
/* Records XC_E_NOMEM "<path>: out of memory (<what>)" and returns it. */
int xc_st_nomem(const char *path, const char *what);
/* "dir/name" from xc_malloc, or NULL. */
char *xc_st_join_path(const char *dir, const char *name);

/* ------------------------------------------------------------------ */
/* Name tables (xc_names.c)                                             */
/* ------------------------------------------------------------------ */

/* Hash of the n bytes at s (whole names only): SipHash-1-3 under a key
 * drawn once per process (the first call draws it, thread-safely), so
 * values agree within a process and nowhere else.  Cannot fail. */
uint32_t xc_name_hash(const char *s, size_t n);
/* Index of the entry called name (len bytes, hash) in the array at base
 * whose entries are stride bytes and begin with an st_key, or -1. */
int64_t xc_table_find(const st_table *tb, const void *base, size_t stride,
                      const char *name, size_t len, uint32_t hash);
/* Records entry idx under hash; room must have been reserved. */
void xc_table_put(st_table *tb, uint32_t hash, uint32_t idx);
/* Makes room for `more` entries at load <= 1/2.  XC_E_NOMEM (not
 * recorded) leaves the table as it was. */
int xc_table_reserve(st_table *tb, size_t more);
/* Frees the table and leaves it empty and usable. */
void xc_table_free(st_table *tb);

/* ------------------------------------------------------------------ */
/* One shard: its file and its header (xc_header.c)                     */
/* ------------------------------------------------------------------ */

/* Adds shard path (taking ownership of it) and opens it, probing O_DIRECT
 * when asked.  XC_E_NOT_FOUND is returned as is for the caller to word. */
int xc_st_add_shard(xc_st *st, char *path);
/* Reads, parses and validates shard s (already opened by
 * xc_st_add_shard): steps 1-10, its tensors appended to st->t in offset
 * order.  Returns the first problem's code, recorded. */
int xc_st_load_shard(xc_st *st, size_t s);
/* Records code for tensor t with "<shard>: byte <entry>: tensor "<name>":
 * <fmt...>" and its entry's offset; returns code. */
int xc_st_tensor_fail(const xc_st *st, const st_tensor *t, int code,
                      const char *fmt, ...) XC_PRINTF(4, 5);
/* The frame of a JSON document whose top level must be an object:
 * xc_doc_open passes the '{' or fails with code ("the <what> must be a
 * JSON object"; a malformed value is JSON's error first), xc_doc_close
 * allows only whitespace after the object. */
int xc_doc_open(xj *j, int code, const char *what);
int xc_doc_close(xj *j, const char *what);

/* ------------------------------------------------------------------ */
/* The index (xc_index.c)                                               */
/* ------------------------------------------------------------------ */

/* Opens into st the container the index at index_path (in folder dir)
 * describes.  The first problem's code, recorded. */
int xc_st_open_index(xc_st *st, const char *index_path, const char *dir);

#endif /* XC_READER_H */
