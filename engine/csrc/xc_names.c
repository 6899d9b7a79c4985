/*
 * xc_names.c -- the container's name tables: the hash of a name and an
 * open-addressing table over any array whose entries begin with an st_key.
 *
 * Names are found through an open-addressing table (linear probing, load
 * <= 1/2).  Its hash is keyed: SipHash-1-3 under a 128-bit key drawn once
 * per process from the kernel's random source.  Names come from files,
 * and a file may be written to collide: under a fixed hash a header of
 * names crafted to share a table slot makes every insert and lookup walk
 * one long run, so opening is quadratic in the names (400,000 crafted
 * names took a minute).  Without the key nobody can tell which names
 * share a slot, so any header costs what random names of the same shape
 * cost.  The same table catches duplicate names and __metadata__ keys
 * (xc_header.c) and maps weight_map entries for the index (xc_index.c);
 * all go through xc_name_hash.
 */
#include "xc_reader.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#if defined(__linux__)
#include <sys/random.h>
#endif

/* ------------------------------------------------------------------ */
/* The per-process key                                                  */
/* ------------------------------------------------------------------ */

static uint64_t sip_k0, sip_k1;
static pthread_once_t key_once = PTHREAD_ONCE_INIT;
/* Set (release) once the key is drawn: a hash then skips pthread_once. */
static int key_ready;

/* splitmix64's step: spreads the fallback's few varying bits. */
static uint64_t splitmix(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Fills buf with n random bytes from the kernel: getrandom(), else
 * /dev/urandom.  Returns 0, or -1 when neither gave all n bytes. */
static int kernel_random(unsigned char *buf, size_t n)
{
    size_t got = 0;
#if defined(__linux__)
    while (got < n) {
        ssize_t r = getrandom(buf + got, n - got, GRND_NONBLOCK);
        if (r > 0)
            got += (size_t)r;
        else if (r < 0 && errno == EINTR)
            continue;
        else
            break;
    }
    if (got == n)
        return 0;
#endif
    {
        int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
        if (fd < 0)
            return -1;
        got = 0;
        while (got < n) {
            ssize_t r = read(fd, buf + got, n - got);
            if (r > 0)
                got += (size_t)r;
            else if (r < 0 && errno == EINTR)
                continue;
            else
                break;
        }
        close(fd);
    }
    return got == n ? 0 : -1;
}

/* Draws the key.  Without a kernel source (a sandbox with neither), the
 * clocks, the process id and two addresses (ASLR) are mixed instead:
 * far weaker, but still not a constant a file could be written against. */
static void draw_key(void)
{
    unsigned char b[16];
    if (kernel_random(b, sizeof b) == 0) {
        memcpy(&sip_k0, b, 8);
        memcpy(&sip_k1, b + 8, 8);
        return;
    }
    {
        struct timespec a, m;
        uint64_t x;
        clock_gettime(CLOCK_REALTIME, &a);
        clock_gettime(CLOCK_MONOTONIC, &m);
        x = (uint64_t)a.tv_sec * 1000000007ull ^ (uint64_t)a.tv_nsec ^
            ((uint64_t)m.tv_nsec << 21) ^ ((uint64_t)getpid() << 40) ^
            (uint64_t)(uintptr_t)&a ^ (uint64_t)(uintptr_t)&draw_key;
        sip_k0 = splitmix(&x);
        sip_k1 = splitmix(&x);
    }
}

/* ------------------------------------------------------------------ */
/* SipHash-1-3                                                          */
/* ------------------------------------------------------------------ */

static inline uint64_t rotl(uint64_t x, int b)
{
    return (x << b) | (x >> (64 - b));
}

#define SIPROUND                                                        \
    do {                                                                \
        v0 += v1; v1 = rotl(v1, 13); v1 ^= v0; v0 = rotl(v0, 32);       \
        v2 += v3; v3 = rotl(v3, 16); v3 ^= v2;                          \
        v0 += v3; v3 = rotl(v3, 21); v3 ^= v0;                          \
        v2 += v1; v1 = rotl(v1, 17); v1 ^= v2; v2 = rotl(v2, 32);       \
    } while (0)

/* SipHash-1-3 (one round per 8-byte word, three to finish) of the n bytes
 * at s under the process key, folded to 32 bits.  Words are read in host
 * order: the value only has to agree within this process.  Only the
 * name's own bytes are read.  The table compares whole names, so the hash
 * only decides probe lengths. */
uint32_t xc_name_hash(const char *s, size_t n)
{
    uint64_t v0, v1, v2, v3, m, b = (uint64_t)n << 56;
    size_t i, whole = n & ~(size_t)7;
    if (!__atomic_load_n(&key_ready, __ATOMIC_ACQUIRE)) {
        (void)pthread_once(&key_once, draw_key);
        __atomic_store_n(&key_ready, 1, __ATOMIC_RELEASE);
    }
    v0 = sip_k0 ^ 0x736f6d6570736575ull;
    v1 = sip_k1 ^ 0x646f72616e646f6dull;
    v2 = sip_k0 ^ 0x6c7967656e657261ull;
    v3 = sip_k1 ^ 0x7465646279746573ull;
    for (i = 0; i < whole; i += 8) {
        memcpy(&m, s + i, 8);
        v3 ^= m;
        SIPROUND;
        v0 ^= m;
    }
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    if ((n & 7) != 0 && n >= 8) {
        /* The tail as the high bytes of the name's last 8 (its own bytes
         * only), shifted down: the same value as the loop below. */
        memcpy(&m, s + n - 8, 8);
        b |= m >> (64 - 8 * (n & 7));
    } else
#endif
    for (i = 0; i < (n & 7); i++)
        b |= (uint64_t)(unsigned char)s[whole + i] << (8 * i);
    v3 ^= b;
    SIPROUND;
    v0 ^= b;
    v2 ^= 0xff;
    SIPROUND;
    SIPROUND;
    SIPROUND;
    m = v0 ^ v1 ^ v2 ^ v3;
    return (uint32_t)(m ^ (m >> 32));
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
    xc_st_advise_huge(ns, ncap * sizeof *ns);
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

