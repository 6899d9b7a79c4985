/*
 * pread_batch.c -- the floor for bench/load_throughput.py: the same byte
 * ranges read with plain pread(2) into preallocated buffers, one batch of
 * top-k experts at a time, the experts of a batch spread over T threads
 * (OpenMP's persistent team, so no thread is created per batch).  The
 * destinations rotate over SLOTS buffers, as the cache's slots do, so both
 * arms write the same amount of memory.
 *
 *   pread_batch FILE DATA_START EXPERT_BYTES N_EXPERTS TOP_K THREADS ROUNDS
 *               SLOTS
 *
 * Prints the best round's seconds.
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
    if (argc != 9) {
        fprintf(stderr, "usage: %s FILE DATA_START EXPERT_BYTES N_EXPERTS "
                        "TOP_K THREADS ROUNDS SLOTS\n", argv[0]);
        return 2;
    }
    int fd = open(argv[1], O_RDONLY);
    long long start = atoll(argv[2]);
    size_t bytes = (size_t)atoll(argv[3]);
    int n = atoi(argv[4]), k = atoi(argv[5]), threads = atoi(argv[6]);
    int rounds = atoi(argv[7]), slots = atoi(argv[8]);
    if (fd < 0 || k < 1 || threads < 1 || slots < k) {
        perror("open");
        return 2;
    }
    char **bufs = malloc((size_t)slots * sizeof *bufs);
    for (int i = 0; i < slots; i++)
        bufs[i] = aligned_alloc(4096, (bytes + 4095) / 4096 * 4096);
    double best = 1e9;
    int bad = 0;
    for (int r = 0; r < rounds; r++) {
        double t0 = now();
        for (int b = 0; b < n; b += k) {
#pragma omp parallel for num_threads(threads) schedule(static) reduction(+ : bad)
            for (int i = 0; i < k; i++) {
                char *dst = bufs[(b + i) % slots];
                size_t done = 0;
                off_t off = (off_t)(start + (long long)(b + i) * (long long)bytes);
                while (done < bytes) {
                    ssize_t got = pread(fd, dst + done, bytes - done,
                                        off + (off_t)done);
                    if (got <= 0) {
                        bad++;
                        break;
                    }
                    done += (size_t)got;
                }
            }
        }
        double dt = now() - t0;
        if (dt < best)
            best = dt;
    }
    close(fd);
    for (int i = 0; i < slots; i++)
        free(bufs[i]);
    free(bufs);
    if (bad) {
        fprintf(stderr, "%d reads failed\n", bad);
        return 1;
    }
    printf("%.9f\n", best);
    return 0;
}
