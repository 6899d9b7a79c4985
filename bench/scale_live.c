/*
 * scale_live.c -- the live cache's C cost per hit and per miss at a given
 * size, with loads that cost nothing: the container is opened through an
 * io vtable whose pread, once the cache is open, returns at once as if
 * every byte had arrived (no copy, no page cache), so a miss costs only
 * the cache's own bookkeeping (victim, reservation, publish, policy) and
 * the loader's call path.  Compiled with the engine sources by
 * bench/scale.py:
 *
 *   scale_live <shard> <n_layers> <n_experts> <slots> <policy> <rounds>
 *              [<misses per round, default 200000>]
 *
 * prints "hit_ns miss_ns hot_ns misses requests floor_ns": the best of
 * <rounds> rounds of get+release over resident keys in a shuffled order
 * (every one a hit: the memory of the whole cache is in play), of
 * get+release over keys in a cycle longer than the cache (every one a miss;
 * counted by the cache's counters), of get+release hits cycling over 8
 * resident keys (the bookkeeping alone, its memory in the caches), and of
 * the floor: the same shuffled keys walked over plain arrays of the cache's
 * own sizes, one dependent random access per structure a hit touches --
 * the key's index entry, the slot record it names, the key's policy node
 * (prev, next, tick) -- with no lock, no call and no bookkeeping, so
 * hit_ns / floor_ns is what the cache adds to the memory hierarchy at this
 * size.  The hit, floor and hot arms alternate within each round; the miss
 * rounds come last (they evict the resident keys).
 */
#include "xc.h"
#include "xc_core.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int fake; /* 1: reads return at once */
static const xc_io *real;

static int f_open(void *ctx, const char *path, int direct, int64_t *h)
{
    (void)ctx;
    return real->open(real->ctx, path, direct, h);
}
static int64_t f_pread(void *ctx, int64_t h, void *buf, size_t len,
                       uint64_t off)
{
    (void)ctx;
    if (fake)
        return (int64_t)len;
    return real->pread(real->ctx, h, buf, len, off);
}
static int f_size(void *ctx, int64_t h, uint64_t *out)
{
    (void)ctx;
    return real->size(real->ctx, h, out);
}
static int f_close(void *ctx, int64_t h)
{
    (void)ctx;
    return real->close(real->ctx, h);
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e9 + ts.tv_nsec;
}

static uint64_t rng = 88172645463325252ull;
static uint64_t next(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

/* The floor's per-key policy node: what a list policy keeps per key. */
typedef struct fnode {
    uint32_t prev, next;
    uint64_t tick;
} fnode;

/* One floor pass over keys hk[0..n): index -> slot record -> policy node,
 * each read and written as a hit would; returns ns per key. */
static double floor_pass(const uint32_t *hk, size_t n, size_t reps,
                         int32_t *idx, slot *sl, fnode *pn)
{
    uint64_t tick = 1;
    size_t k, i;
    double t0 = now();
    for (k = 0; k < reps; k++)
        for (i = 0; i < n; i++) {
            uint32_t key = hk[i];
            slot *s = &sl[idx[key]];          /* index, then the slot */
            fnode *f = &pn[s->key];           /* the key's policy node */
            s->holds++;
            s->last_use = ++tick;
            s->freq++;
            f->tick = s->last_use;
            f->prev = f->next ^ (uint32_t)tick;
            s->holds--;
        }
    return (now() - t0) / (double)(reps * n);
}

int main(int argc, char **argv)
{
    static const char *tensors[] = {"w.weight"};
    xc_io io = {f_open, f_pread, f_size, f_close, NULL, NULL};
    xc_st_opts so = {&io, 0, 0};
    xc_st *st;
    xc_cache *c;
    xc_ref ref;
    xc_stats s0, s1;
    int32_t *layers, L, E;
    size_t slots, i, n_keys, n_hit, n_miss;
    long r, rounds, per_round;
    uint32_t *hk, *mk;
    double t0, hit = 1e30, miss = 1e30, hot = 1e30, flo = 1e30;
    int32_t *f_idx;
    slot *f_sl;
    fnode *f_pn;
    if (argc < 7) {
        fprintf(stderr, "usage: scale_live shard layers experts slots "
                        "policy rounds\n");
        return 2;
    }
    real = xc_io_default();
    L = atoi(argv[2]);
    E = atoi(argv[3]);
    slots = (size_t)atol(argv[4]);
    rounds = atol(argv[6]);
    per_round = argc > 7 ? atol(argv[7]) : 200000;
    n_keys = (size_t)L * (size_t)E;
    layers = malloc((size_t)L * sizeof *layers);
    for (i = 0; i < (size_t)L; i++)
        layers[i] = (int32_t)i;
    {
        xc_cache_opts o = {slots, 0, 8, argv[5],
                           "model.layers.{layer}.mlp.experts.{expert}.{tensor}",
                           tensors, 1, layers, (size_t)L, E, 0, 1,
                           0, 0, 0, 0, NULL, 0};
        if (xc_st_open(argv[1], &so, &st) != XC_OK ||
            xc_cache_open(st, &o, &c) != XC_OK) {
            fprintf(stderr, "open failed: %s\n", xc_last_error()->message);
            return 1;
        }
    }
    fake = 1;
    /* fill: keys 0 .. slots-1, each a miss */
    for (i = 0; i < slots; i++) {
        if (xc_cache_get(c, (int32_t)(i / (size_t)E), (int32_t)(i % (size_t)E),
                         &ref) != XC_OK) {
            fprintf(stderr, "fill failed: %s\n", xc_last_error()->message);
            return 1;
        }
        xc_cache_release(c, &ref);
    }
    /* hits: the resident keys in a shuffled order */
    n_hit = slots;
    hk = malloc(n_hit * sizeof *hk);
    for (i = 0; i < n_hit; i++)
        hk[i] = (uint32_t)i;
    for (i = n_hit; i > 1; i--) {
        size_t j = next() % i;
        uint32_t t = hk[i - 1];
        hk[i - 1] = hk[j];
        hk[j] = t;
    }
    /* misses: keys from slots on, cycling through the ones never resident
     * (n_keys - slots >= slots + 1 of them, so each is gone again before
     * it comes back under every policy here) */
    n_miss = n_keys - slots;
    mk = malloc(n_miss * sizeof *mk);
    for (i = 0; i < n_miss; i++)
        mk[i] = (uint32_t)(slots + i);
    /* the floor's arrays: the cache's sizes, keys and slots as the cache
     * has them (key i in slot i after the fill) */
    f_idx = malloc(n_keys * sizeof *f_idx);
    f_sl = calloc(slots, sizeof *f_sl);
    f_pn = calloc(n_keys, sizeof *f_pn);
    if (f_idx == NULL || f_sl == NULL || f_pn == NULL) {
        fprintf(stderr, "no memory for the floor\n");
        return 1;
    }
    for (i = 0; i < n_keys; i++)
        f_idx[i] = i < slots ? (int32_t)i : -1;
    for (i = 0; i < slots; i++)
        f_sl[i].key = (uint32_t)i;
    for (r = 0; r < rounds; r++) {
        size_t reps = 1 + 2000000 / n_hit, k;
        t0 = now();
        for (k = 0; k < reps; k++)
            for (i = 0; i < n_hit; i++) {
                xc_cache_get(c, (int32_t)(hk[i] / (uint32_t)E),
                             (int32_t)(hk[i] % (uint32_t)E), &ref);
                xc_cache_release(c, &ref);
            }
        t0 = (now() - t0) / (double)(reps * n_hit);
        if (t0 < hit)
            hit = t0;
        t0 = floor_pass(hk, n_hit, reps, f_idx, f_sl, f_pn);
        if (t0 < flo)
            flo = t0;
        t0 = now();
        for (k = 0; k < 2000000; k++) {
            uint32_t key = hk[k & 7];
            xc_cache_get(c, (int32_t)(key / (uint32_t)E),
                         (int32_t)(key % (uint32_t)E), &ref);
            xc_cache_release(c, &ref);
        }
        t0 = (now() - t0) / 2000000.0;
        if (t0 < hot)
            hot = t0;
    }
    xc_cache_stats(c, &s0);
    for (r = 0; r < rounds; r++) {
        size_t n = n_miss < (size_t)per_round ? n_miss : (size_t)per_round;
        xc_stats a, b;
        xc_cache_stats(c, &a);
        t0 = now();
        for (i = 0; i < n; i++) {
            uint32_t k = mk[(r * n + i) % n_miss];
            xc_cache_get(c, (int32_t)(k / (uint32_t)E),
                         (int32_t)(k % (uint32_t)E), &ref);
            xc_cache_release(c, &ref);
        }
        t0 = now() - t0;
        xc_cache_stats(c, &b);
        if (b.misses - a.misses > 0 &&
            t0 / (double)(b.misses - a.misses) < miss)
            miss = t0 / (double)(b.misses - a.misses);
        (void)n;
    }
    xc_cache_stats(c, &s1);
    printf("%.1f %.1f %.1f %llu %llu %.1f\n", hit, miss, hot,
           (unsigned long long)(s1.misses - s0.misses),
           (unsigned long long)(s1.requests - s0.requests), flo);
    xc_cache_close(c);
    xc_st_close(st);
    free(layers);
    free(hk);
    free(mk);
    free(f_idx);
    free(f_sl);
    free(f_pn);
    return 0;
}
