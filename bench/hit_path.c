/*
 * hit_path.c -- ns per get+release hit, from C.  Compiled with the engine
 * sources by bench/hit_path.py: hit_path <shard> <iterations>.
 */
#include "xc.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static const char *tensors[] = {"w1.weight_packed", "w1.weight_scale",
                                "w2.weight_packed", "w2.weight_scale",
                                "w3.weight_packed", "w3.weight_scale"};

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e9 + ts.tv_nsec;
}

int main(int argc, char **argv)
{
    xc_st *st;
    xc_cache *c;
    xc_ref ref;
    int32_t layer = 0;
    long i, n = argc > 2 ? atol(argv[2]) : 10000000;
    double t0, best = 1e30;
    int round;
    xc_cache_opts o = {8, 0, 4, "lru",
                       "language_model.model.layers.{layer}.block_sparse_moe."
                       "experts.{expert}.{tensor}",
                       tensors, 6, &layer, 1, 24, 0, 1};
    if (argc < 2 || xc_st_open(argv[1], NULL, &st) != XC_OK ||
        xc_cache_open(st, &o, &c) != XC_OK) {
        fprintf(stderr, "open failed: %s\n", xc_last_error()->message);
        return 1;
    }
    if (xc_cache_get(c, 0, 3, &ref) != XC_OK || xc_cache_release(c, &ref))
        return 1;
    for (round = 0; round < 5; round++) {
        t0 = now();
        for (i = 0; i < n; i++) {
            xc_cache_get(c, 0, 3, &ref);
            xc_cache_release(c, &ref);
        }
        if ((now() - t0) / n < best)
            best = (now() - t0) / n;
    }
    printf("%.1f\n", best);
    xc_cache_close(c);
    xc_st_close(st);
    return 0;
}
