/*
 * pread_batch.c -- the floor for bench/load_throughput.py: the same byte
 * ranges read with plain pread(2) into preallocated buffers, one batch of
 * top-k experts at a time, the experts of a batch spread over T threads.
 * The destinations rotate over SLOTS buffers, as the cache's slots do, so
 * both arms write the same amount of memory.
 *
 *   pread_batch FILE DATA_START EXPERT_BYTES N_EXPERTS TOP_K THREADS ROUNDS
 *               SLOTS [MODE [GAP_NS]]
 *
 * MODE says how a batch reaches the T threads:
 *   omp   OpenMP's persistent team (the default; its idle threads spin
 *         for a while before they sleep);
 *   spin  the cache's batch pool: the caller reads beside T - 1 pthreads
 *         that claim items under a mutex, poll for the next batch 100 us
 *         plus their last read's time (at most 400 us more) and then sleep
 *         on a condition variable (engine/csrc/xc_batch.c);
 *   cond  the same pool with readers that sleep at once: every batch wakes
 *         them through the condition variable.
 * GAP_NS is serial work (a busy loop) the caller does before every batch,
 * standing for what a caller spends between batches (default 0).
 *
 * Prints the best round's seconds.
 */
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define SPIN_NS 100000u
#define SPIN_READ_MAX_NS 400000u

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static unsigned long long now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (unsigned long long)ts.tv_sec * 1000000000ull +
           (unsigned long long)ts.tv_nsec;
}

static int fd, k, slots;
static long long start;
static size_t bytes;
static char **bufs;

/* Reads expert e into its rotating buffer; 1 on failure. */
static int read_expert(int e)
{
    char *dst = bufs[e % slots];
    size_t done = 0;
    off_t off = (off_t)(start + (long long)e * (long long)bytes);
    while (done < bytes) {
        ssize_t got = pread(fd, dst + done, bytes - done, off + (off_t)done);
        if (got <= 0)
            return 1;
        done += (size_t)got;
    }
    return 0;
}

/* ---- the pool (modes spin and cond) ---------------------------------- */

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t work = PTHREAD_COND_INITIALIZER;
static pthread_cond_t done_cv = PTHREAD_COND_INITIALIZER;
static int spin_mode, stop, batch_first, next_item, bad;
static _Atomic int unclaimed, n_done;

/* Polls *v until it equals target (equal) or differs from it (!equal),
 * for at most SPIN_NS plus read_ns (capped).  1 if it did. */
static int spin_until(_Atomic int *v, int target, int equal,
                      unsigned long long read_ns)
{
    unsigned long long budget = SPIN_NS + (read_ns < SPIN_READ_MAX_NS
                                           ? read_ns : SPIN_READ_MAX_NS);
    unsigned long long t0 = 0;
    for (unsigned i = 1;; i++) {
        int x = atomic_load_explicit(v, memory_order_acquire);
        if (equal ? x == target : x != target)
            return 1;
#if defined(__x86_64__) || defined(__i386__)
        __builtin_ia32_pause();
#endif
        if ((i & 63) == 0) {
            unsigned long long t = now_ns();
            if (t0 == 0)
                t0 = t;
            else if (t - t0 > budget)
                return 0;
        }
    }
}

/* Locks mu, trying 256 times a pause apart before sleeping (as the
 * cache's pool_lock does; in cond mode it sleeps at once). */
static void lock(void)
{
    for (unsigned i = 0; spin_mode && i < 256; i++) {
        if (pthread_mutex_trylock(&mu) == 0)
            return;
#if defined(__x86_64__) || defined(__i386__)
        __builtin_ia32_pause();
#endif
    }
    pthread_mutex_lock(&mu);
}

/* Claims the next item of the batch (mu held); -1 when none is left. */
static int claim(void)
{
    if (next_item == k)
        return -1;
    atomic_fetch_sub(&unclaimed, 1);
    return batch_first + next_item++;
}

static void item_done(int failed)
{
    bad += failed;
    if (atomic_fetch_add_explicit(&n_done, 1, memory_order_release) + 1 == k)
        pthread_cond_broadcast(&done_cv);
}

static void *pool_main(void *arg)
{
    unsigned long long last = 0;
    (void)arg;
    lock();
    for (;;) {
        int e;
        if (spin_mode && next_item == k && !stop) {
            pthread_mutex_unlock(&mu);
            spin_until(&unclaimed, 0, 0, last);
            lock();
        }
        while (next_item == k && !stop)
            pthread_cond_wait(&work, &mu);
        if (next_item == k)
            break;
        e = claim();
        pthread_mutex_unlock(&mu);
        unsigned long long t0 = now_ns();
        int failed = read_expert(e);
        last = now_ns() - t0;
        lock();
        item_done(failed);
    }
    pthread_mutex_unlock(&mu);
    return NULL;
}

static void pool_batch(int first)
{
    unsigned long long last = 0;
    int e;
    lock();
    batch_first = first;
    next_item = 0;
    atomic_store(&n_done, 0);
    atomic_store_explicit(&unclaimed, k, memory_order_release);
    e = claim();
    pthread_mutex_unlock(&mu);
    pthread_cond_broadcast(&work);
    while (e >= 0) {
        unsigned long long t0 = now_ns();
        int failed = read_expert(e);
        last = now_ns() - t0;
        lock();
        item_done(failed);
        e = claim();
        pthread_mutex_unlock(&mu);
    }
    if (spin_mode && spin_until(&n_done, k, 1, last))
        return;
    lock();
    while (atomic_load(&n_done) < k)
        pthread_cond_wait(&done_cv, &mu);
    pthread_mutex_unlock(&mu);
}

static void gap(unsigned long long ns)
{
    unsigned long long t0;
    if (ns == 0)
        return;
    t0 = now_ns();
    while (now_ns() - t0 < ns)
        ;
}

int main(int argc, char **argv)
{
    if (argc < 9 || argc > 11) {
        fprintf(stderr, "usage: %s FILE DATA_START EXPERT_BYTES N_EXPERTS "
                        "TOP_K THREADS ROUNDS SLOTS [omp|spin|cond "
                        "[GAP_NS]]\n", argv[0]);
        return 2;
    }
    fd = open(argv[1], O_RDONLY);
    start = atoll(argv[2]);
    bytes = (size_t)atoll(argv[3]);
    int n = atoi(argv[4]), threads = atoi(argv[6]);
    k = atoi(argv[5]);
    int rounds = atoi(argv[7]);
    slots = atoi(argv[8]);
    const char *mode = argc > 9 ? argv[9] : "omp";
    unsigned long long gap_ns = argc > 10 ? strtoull(argv[10], NULL, 10) : 0;
    int omp = strcmp(mode, "omp") == 0;
    if (fd < 0 || k < 1 || threads < 1 || slots < k) {
        perror("open");
        return 2;
    }
    if (!omp && strcmp(mode, "spin") != 0 && strcmp(mode, "cond") != 0) {
        fprintf(stderr, "mode must be omp, spin or cond, not %s\n", mode);
        return 2;
    }
    spin_mode = strcmp(mode, "spin") == 0;
    next_item = k; /* no batch yet */
    bufs = malloc((size_t)slots * sizeof *bufs);
    for (int i = 0; i < slots; i++) {
        bufs[i] = aligned_alloc(4096, (bytes + 4095) / 4096 * 4096);
        memset(bufs[i], 0, bytes); /* as the cache's arena after a pass */
    }
    pthread_t *pool = calloc((size_t)threads, sizeof *pool);
    for (int i = 0; !omp && i < threads - 1; i++)
        pthread_create(&pool[i], NULL, pool_main, NULL);
    double best = 1e9;
    for (int r = 0; r < rounds; r++) {
        double t0 = now();
        for (int b = 0; b < n; b += k) {
            gap(gap_ns);
            if (!omp) {
                pool_batch(b);
                continue;
            }
#pragma omp parallel for num_threads(threads) schedule(static) reduction(+ : bad)
            for (int i = 0; i < k; i++)
                bad += read_expert(b + i);
        }
        double dt = now() - t0;
        if (dt < best)
            best = dt;
    }
    if (!omp) {
        pthread_mutex_lock(&mu);
        stop = 1;
        pthread_cond_broadcast(&work);
        pthread_mutex_unlock(&mu);
        for (int i = 0; i < threads - 1; i++)
            pthread_join(pool[i], NULL);
    }
    close(fd);
    for (int i = 0; i < slots; i++)
        free(bufs[i]);
    free(bufs);
    free(pool);
    if (bad) {
        fprintf(stderr, "%d reads failed\n", bad);
        return 1;
    }
    printf("%.9f\n", best);
    return 0;
}
