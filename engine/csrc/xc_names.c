/*
 * xc_names.c -- the container's name tables: the hash of a name and an
 * open-addressing table over any array whose entries begin with an st_key.
 *
 * Names are found through an open-addressing table (linear probing, load
 * <= 1/2) keyed by a multiplicative hash that mixes each 16-byte chunk on
 * its own (a 128-bit multiply folded, as wyhash does) and sums the chunks,
 * so a name's multiplies overlap instead of forming one chain.  The same
 * table catches duplicate names (xc_header.c) and maps weight_map entries
 * for the index (xc_index.c).
 */
#include "xc_st_impl.h"

#include <string.h>

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
uint32_t xc_name_hash(const char *s, size_t n)
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
int64_t xc_table_find(const st_table *tb, const void *base, size_t stride,
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

void xc_table_put(st_table *tb, uint32_t hash, uint32_t idx)
{
    size_t i = hash & tb->mask;
    while (tb->slots[i] != 0)
        i = (i + 1) & tb->mask;
    tb->slots[i] = ((uint64_t)hash << 32) | ((uint64_t)idx + 1);
    tb->n++;
}

/* Makes room for one more entry at load <= 1/2.  XC_E_NOMEM leaves the
 * table as it was. */
int xc_table_reserve(st_table *tb, size_t more)
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

void xc_table_free(st_table *tb)
{
    xc_free(tb->slots);
    tb->slots = NULL;
    tb->mask = 0;
    tb->n = 0;
}

