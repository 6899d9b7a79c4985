/*
 * xc_curve.c -- exact miss-ratio curves: LRU's and Belady's misses at every
 * cache size, each in one pass over a trace.
 *
 * Both are stack algorithms (Mattson, Gecsei, Slutz and Traiger, 1970): at
 * every moment the cache of c slots holds the top c keys of one stack, so
 * each access has a stack distance -- the least size at which it hits --
 * and the misses at size c are the first accesses of keys plus the accesses
 * whose distance is above c.  One pass fills a histogram of distances; its
 * suffix sums are the curve.  Keys, modes and the per-layer grouping are
 * xc_sim.c's, and so are its hits: every point equals xc_sim_run at that
 * size (tests/lab/test_curve_exact.py checks many sizes of every shipped
 * trace, both modes).
 *
 * LRU: the stack is recency, and an access's distance is the number of
 * distinct keys used since its key's last use, itself included.  Each key
 * keeps the stamp of its last use; the live stamps are bits of a window of
 * at least 4W stamps (W the distinct keys), counted by a complete binary
 * tree over the window's 64-bit words, so the live stamps after a key's
 * stamp are one walk from its word to the root, the walk that also takes
 * its stamp out.  A full window is renumbered in order (O(W), at most once
 * per 3W accesses).  O(n log W) time, O(W) space besides the per-key arrays.
 *
 * Belady: Mattson's priority stack with next-use priorities.  An access to
 * the key at depth d (0-based; a new key: the first free level) puts it on
 * top and carries the old top down levels 1..d-1: at each level the key of
 * the later next use goes on down and the other stays (where they trade
 * places: a "record"), and the key carried past level d-1 lands at d.
 * That is exactly "each cache of c <= d slots evicts its farthest next
 * use", for every c at once.  Each level is one word, the key's rank
 * (priority above, key below: opt_rank), so a level of the walk is a
 * min/max pair with no branch: the records are about half the levels
 * walked on the shipped traces, the worst case for a branch.  A bound on
 * the ranks of each block of BLOCK levels lets the walk step over blocks
 * with no record, and the level d, set to a rank above all (UNUSED) for
 * the walk, ends it at the end of d's block without a bounds test.  A key
 * leaves its block only as the carried one, so each key keeps its block,
 * not its level, and an access finds its level among its block's BLOCK.
 * Time O(n (D / BLOCK + R)), D the mean depth of an access and R the
 * levels of the blocks with a record (on a shipped 64-expert trace: D
 * 165, R 38, 21.7 records, of W = 974); O(W) space besides the per-key arrays and one
 * next use per access.  Bilardi, Ekanadham and Pattnaik (CF 2017) give O(log W) per
 * access; that is not what is done here.
 *
 * Step mode (the accesses of a step held until the next one starts): no
 * policy evicts a key the current step holds.  For LRU that changes nothing
 * at a size the simulator accepts: the held keys are the most recently
 * used, so the least recently used key is never held while some key is not.
 * For Belady a held key ranks above every other (priority 0, sooner than
 * any next use): still one priority list at every size, so still a stack
 * algorithm.  The held keys are the top of the stack (they tie, so the walk
 * may reorder them among themselves, which no accepted size can see) and
 * get their next uses back when the step ends.  Sizes below the largest step's distinct keys, which
 * the simulator refuses, are reported as UINT64_MAX.
 */
#include "xc_internal.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

/* OPT: levels per block of the skip bounds (block k: levels kB+1 .. kB+B). */
#define BLOCK 8

/* Scratch of one xc_curve_run call, sized for its largest run.  Per-key
 * arrays start at 0 ("none") and every run touches its own keys only (the
 * layers of a per-layer call have disjoint keys), so no run resets them. */
typedef struct curvebuf {
    size_t w_cap;        /* the most distinct keys one run can have */
    size_t t_cap;        /* LRU: stamps in the window, a power of two >= 128 */
    int64_t *last;       /* per key, 0: none; LRU: 1 + stamp; OPT: 1 on
                          * top, else 2 + its block (opt_block) */
    uint64_t *step_of;   /* per key: the step of its last access (from 1) */
    int64_t *knu;        /* OPT, per key: scratch for nxt, then (step) the
                          * priority its last access leaves after the step */
    uint64_t *bits;      /* LRU: live stamps, t_cap bits */
    uint32_t *cnt;       /* LRU: counting tree over the words of bits */
    uint32_t *skey;      /* LRU: key of each stamp */
    uint64_t *stk;       /* OPT: the rank at each depth (opt_rank) */
    uint64_t *bmax;      /* OPT: at least the largest rank of a block */
    unsigned kbits;      /* OPT: the low bits of a rank that hold its key */
    uint64_t kmask;      /* OPT: those bits set */
    int64_t *nxt;        /* OPT: per access of the run, the priority of its
                          * key after it (opt_rank) */
} curvebuf;

static void cbuf_free(curvebuf *b)
{
    xc_free(b->last);
    xc_free(b->step_of);
    xc_free(b->knu);
    xc_free(b->bits);
    xc_free(b->cnt);
    xc_free(b->skey);
    xc_free(b->stk);
    xc_free(b->bmax);
    xc_free(b->nxt);
}

static int cbuf_alloc(curvebuf *b, int opt, uint32_t n_keys, size_t w_cap,
                      size_t n)
{
    size_t t = 128;
    memset(b, 0, sizeof *b);
    if (w_cap > SIZE_MAX / 64)
        return xc_fail(XC_E_NOMEM, -1, -1, -1,
                       "curve: %zu distinct keys is past what fits", w_cap);
    while (t < 4 * w_cap)
        t *= 2;
    b->w_cap = w_cap;
    b->t_cap = t;
    while ((uint64_t)n_keys >> b->kbits != 0) /* kmask: no key */
        b->kbits++;
    b->kmask = (UINT64_C(1) << b->kbits) - 1;
    /* an OPT rank holds a key and a priority up to 2n (opt_rank) */
    if (opt && 2 * (uint64_t)n + 2 >= UINT64_C(1) << (63 - b->kbits))
        return xc_fail(XC_E_NOMEM, -1, -1, -1,
                       "curve: %zu accesses of %u keys is past what fits",
                       n, n_keys);
    b->last = xc_calloc(n_keys, sizeof *b->last);
    b->step_of = xc_calloc(n_keys, sizeof *b->step_of);
    if (opt) {
        b->knu = xc_calloc(n_keys, sizeof *b->knu);
        b->stk = xc_calloc(w_cap + BLOCK + 1, sizeof *b->stk);
        b->bmax = xc_calloc(w_cap / BLOCK + 2, sizeof *b->bmax);
        b->nxt = xc_calloc(n ? n : 1, sizeof *b->nxt);
    } else {
        b->bits = xc_calloc(t / 64, sizeof *b->bits);
        b->cnt = xc_calloc(2 * (t / 64), sizeof *b->cnt);
        b->skey = xc_calloc(t, sizeof *b->skey);
    }
    if (!b->last || !b->step_of ||
        (opt && (!b->knu || !b->stk || !b->bmax || !b->nxt)) ||
        (!opt && (!b->bits || !b->cnt || !b->skey))) {
        cbuf_free(b);
        return xc_fail(XC_E_NOMEM, -1, -1, -1,
                       "curve: no memory for %u keys, %zu distinct, %zu "
                       "accesses", n_keys, w_cap, n);
    }
    return XC_OK;
}

/* Set bits of x (portable: the build targets no popcount instruction). */
static uint32_t ones(uint64_t x)
{
    x = x - ((x >> 1) & 0x5555555555555555ULL);
    x = (x & 0x3333333333333333ULL) + ((x >> 2) & 0x3333333333333333ULL);
    x = (x + (x >> 4)) & 0x0f0f0f0f0f0f0f0fULL;
    return (uint32_t)((x * 0x0101010101010101ULL) >> 56);
}

/* The most distinct keys of one step of keys[0..n-1] (a run whose keys'
 * step_of are 0; they are left set). */
static size_t largest_step(curvebuf *b, const uint32_t *keys,
                           const uint8_t *starts, size_t n)
{
    size_t i, in_step = 0, most = 0;
    uint64_t sid = 0;
    for (i = 0; i < n; i++) {
        if (i == 0 || starts[i]) {
            sid++;
            in_step = 0;
        }
        if (b->step_of[keys[i]] != sid) {
            b->step_of[keys[i]] = sid;
            if (++in_step > most)
                most = in_step;
        }
    }
    return most;
}

/* The LRU window: stamp s is live (bit s of bits) while it is its key's
 * last use.  cnt is a complete binary tree over the nw = t_cap / 64 words
 * (the leaf of word w is nw + w, node x the sum of 2x and 2x + 1): a closed
 * word's leaf is its live stamps; the open word's (the word of `now`) is
 * its live stamps less the stamps handed out in it, and gets its 64 when
 * it closes, so handing out a stamp touches no counter.  Counters count
 * modulo 2^32; no node is read while the open word's deficit is in it
 * (every node read lies left of the word being asked about). */

/* Renumbers the live stamps 0..live-1 in order and rebuilds the window
 * over them.  Returns live, the next stamp. */
static size_t lru_compact(curvebuf *b)
{
    const size_t nw = b->t_cap / 64;
    size_t w, j = 0, x;
    for (w = 0; w < nw; w++) {
        uint64_t m = b->bits[w];
        while (m) {
            uint32_t k = b->skey[w * 64 + ones((m & (~m + 1)) - 1)];
            m &= m - 1;
            b->skey[j] = k;
            b->last[k] = (int64_t)++j;
        }
    }
    memset(b->bits, 0, nw * sizeof *b->bits);
    memset(b->cnt, 0, 2 * nw * sizeof *b->cnt);
    for (w = 0; w < j / 64; w++) {
        b->bits[w] = ~0ULL;
        b->cnt[nw + w] = 64;
    }
    if (j % 64)
        b->bits[j / 64] = (1ULL << (j % 64)) - 1; /* open: its leaf is 0 */
    for (x = nw - 1; x > 0; x--)
        b->cnt[x] = b->cnt[2 * x] + b->cnt[2 * x + 1];
    return j;
}

/* LRU distances of keys[0..n-1] into hist[1..] (hist[0]: first accesses). */
static void lru_pass(curvebuf *b, const uint32_t *keys, size_t n,
                     uint64_t *hist)
{
    const size_t t = b->t_cap, nw = t / 64;
    uint64_t *bits = b->bits;
    uint32_t *cnt = b->cnt;
    size_t i, now = 0, live = 0;
    memset(bits, 0, nw * sizeof *bits);
    memset(cnt, 0, 2 * nw * sizeof *cnt);
    for (i = 0; i < n; i++) {
        uint32_t k = keys[i];
        int64_t s;
        if (now == t) /* before a hit takes its stamp out */
            now = lru_compact(b);
        s = b->last[k] - 1;
        if (s < 0) {
            hist[0]++;
            live++;
            assert(live <= b->w_cap);
        } else {
            /* live stamps <= s: those of its word up to it, and those of
             * the words before it (the left siblings on its leaf's path) */
            size_t wd = (size_t)s / 64, x = nw + wd, d;
            uint32_t bit = (uint32_t)s % 64, q;
            q = ones(bits[wd] & (~0ULL >> (63 - bit)));
            bits[wd] &= ~(1ULL << bit);
            cnt[x]--;
            while (x > 1) {
                q += cnt[x ^ 1] & (0U - (uint32_t)(x & 1));
                x >>= 1;
                cnt[x]--;
            }
            d = live - q + 1;
            assert(q >= 1 && q <= live);
            hist[d]++;
        }
        assert(now < t);
        bits[now / 64] |= 1ULL << (now % 64);
        b->skey[now] = k;
        b->last[k] = (int64_t)++now;
        if (now % 64 == 0) { /* a word closes: its leaf gets its 64 */
            size_t x;
            for (x = nw + now / 64 - 1; x > 0; x >>= 1)
                cnt[x] += 64;
        }
    }
}

/* OPT ranks: a stack entry is one word, (priority << kbits) | key, so one
 * load and one compare weigh two keys and the key travels with its rank.
 * Priority 0 is HELD; t + 1 is a next use at t; n + 1 + t is "not used
 * after t": later than every next use, and a key whose last use is later
 * ranks later, so keys never used again do not trade places among
 * themselves (which of them goes changes no count, none is accessed
 * again).  Held keys tie on priority and differ by key only: the walk may
 * reorder them among the held levels, which changes no cache the mode
 * accepts (each holds all of them).  UNUSED (all bits set) marks a free
 * level and the level being refilled: every carry stops there, and its
 * key bits, kmask, are no key (kmask >= n_keys). */
#define UNUSED UINT64_MAX

static uint64_t opt_rank(const curvebuf *b, int64_t prio, uint32_t key)
{
    assert(prio >= 0 && key < b->kmask);
    return (uint64_t)prio << b->kbits | key;
}

/* One block of the walk, block k: carries the rank *c down its BLOCK
 * levels: at each level the smaller rank (the sooner next use) stays and
 * the larger goes on, with no branch on which (the records of a walk are
 * about half its levels, the worst case for a branch).  The keys left in
 * the block are its own and maybe the carried one, so only that one's
 * block is set in pos (if it goes on, a later block sets it again).
 * Returns the largest rank left in the block, its exact bound. */
static uint64_t opt_block(curvebuf *b, size_t k, uint64_t *c)
{
    uint64_t *stk = b->stk + k * BLOCK + 1, cr = *c, top = 0;
    size_t j;
    b->last[cr & b->kmask] = (int64_t)k + 2;
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC unroll 8
#endif
    for (j = 0; j < BLOCK; j++) {
        uint64_t v = stk[j], lo = v < cr ? v : cr;
        cr = v < cr ? cr : v;
        stk[j] = lo;
        top = lo > top ? lo : top;
    }
    *c = cr;
    return top;
}

/* The depth of key x, which is in block k: the level of the block whose
 * rank has x's key bits (one level has them; UNUSED's are no key), found
 * with no branch (the caller checks the level). */
static size_t opt_find(const curvebuf *b, size_t k, uint32_t x)
{
    const uint64_t *stk = b->stk + k * BLOCK + 1, mask = b->kmask;
    size_t j, at = 0;
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC unroll 8
#endif
    for (j = 0; j < BLOCK; j++)
        at = (stk[j] & mask) == x ? j : at;
    return k * BLOCK + 1 + at;
}

/* Belady's distances of keys[0..n-1] into hist as lru_pass does; step:
 * hold each step's keys (i == 0 or starts[i] != 0 begins a step), and
 * raise *largest to the most distinct keys of a step.  Levels from 1 are
 * in blocks of BLOCK (block k: levels kB+1 .. kB+B); bmax[k] bounds the
 * ranks of block k from above (a walk only lowers ranks; a step's end
 * raises the bound), so a block at or below the carried rank holds no
 * record and is stepped over, and a block walked through gets its exact
 * bound.  An access at depth d puts UNUSED at d and walks the blocks down
 * to d's: the carry lands at d, and the levels past d, which the carry
 * (then UNUSED) cannot displace, keep their keys. */
static void opt_pass(curvebuf *b, const uint32_t *keys, const uint8_t *starts,
                     size_t n, int step, uint64_t *hist, size_t *largest)
{
    uint64_t *stk = b->stk, *bmax = b->bmax;
    int64_t *pos = b->last, *nxt = b->nxt;
    size_t i, size = 0, held = 0, l, k;
    uint64_t sid = 0;
    for (l = 0; l < b->w_cap + BLOCK + 1; l++)
        stk[l] = UNUSED;
    for (k = 0; k <= b->w_cap / BLOCK; k++)
        bmax[k] = UNUSED;
    for (i = 0; i < n; i++)
        b->knu[keys[i]] = -1;
    for (i = n; i-- > 0;) { /* the priority of access i's key after i */
        int64_t nu = b->knu[keys[i]];
        nxt[i] = nu < 0 ? (int64_t)(n + 1 + i) : nu + 1;
        b->knu[keys[i]] = (int64_t)i;
    }
    for (i = 0; i < n; i++) {
        uint32_t x = keys[i];
        int64_t e = nxt[i];
        size_t d, last;
        uint64_t c;
        if (step) {
            if (i == 0 || starts[i]) {
                /* the step ends: its keys, the top `held`, are free again */
                for (l = 0; l < held; l++) {
                    uint32_t kl = (uint32_t)(stk[l] & b->kmask);
                    stk[l] = opt_rank(b, b->knu[kl], kl);
                    if (l > 0 && stk[l] > bmax[(l - 1) / BLOCK])
                        bmax[(l - 1) / BLOCK] = stk[l];
                }
                held = 0;
                sid++;
            }
            if (b->step_of[x] != sid) {
                b->step_of[x] = sid;
                if (++held > *largest)
                    *largest = held;
            }
            b->knu[x] = e; /* its priority when the step ends */
            e = 0;
        }
        if (pos[x] == 0) {
            hist[0]++;
            d = size++; /* a free level: UNUSED already */
            assert(size <= b->w_cap && stk[d] == UNUSED);
        } else {
            d = pos[x] == 1 ? 0 : opt_find(b, (size_t)pos[x] - 2, x);
            assert(d < size && (stk[d] & b->kmask) == x);
            hist[d + 1]++;
        }
        c = stk[0];
        stk[0] = opt_rank(b, e, x);
        pos[x] = 1;
        if (d == 0) /* on top already, or the first key of the run */
            continue;
        stk[d] = UNUSED;
        last = (d - 1) / BLOCK;
        bmax[last] = UNUSED;
        for (k = 0;; k++) /* block `last` is walked: UNUSED > c */
            if (bmax[k] > c) {
                bmax[k] = opt_block(b, k, &c);
                if (k == last)
                    break;
            }
        assert(c == UNUSED);
    }
}

/* One run (a whole trace, or one layer's accesses): its distances added to
 * hist, *largest raised to its largest step (step mode).  Returns its
 * distinct keys. */
static size_t curve_one(curvebuf *b, int opt, int step, const uint32_t *keys,
                        const uint8_t *starts, size_t n, uint64_t *hist,
                        size_t *largest)
{
    uint64_t first = hist[0];
    if (opt) {
        opt_pass(b, keys, starts, n, step, hist, largest);
    } else {
        if (step) {
            size_t most = largest_step(b, keys, starts, n);
            if (most > *largest)
                *largest = most;
        }
        lru_pass(b, keys, n, hist);
    }
    return (size_t)(hist[0] - first);
}

int xc_curve_run(const xc_curve_opts *o, const uint32_t *keys,
                 const uint8_t *step_start, size_t n, uint64_t *misses,
                 size_t n_sizes, xc_curve_result *out)
{
    curvebuf b;
    uint64_t *hist = NULL, compulsory, above;
    size_t i, c, w = 0, w_cap, largest = 1;
    int opt, step, rc = XC_OK;

    if (o == NULL || out == NULL || (n > 0 && keys == NULL) ||
        (n_sizes > 0 && misses == NULL))
        return xc_fail(XC_E_MISUSE, -1, -1, -1,
                       "curve: NULL options, result, keys or misses");
    if (o->policy != NULL && strcmp(o->policy, "lru") != 0 &&
        strcmp(o->policy, "belady") != 0)
        return xc_fail(XC_E_MISUSE, -1, -1, -1,
                       "curve: policy '%s' has no one-pass curve here (lru "
                       "and belady are stack algorithms)", o->policy);
    if (o->n_keys < 1 || (o->mode != XC_SIM_PLAIN && o->mode != XC_SIM_STEP) ||
        (o->mode == XC_SIM_STEP && n > 0 && step_start == NULL) ||
        (o->per_layer && o->n_experts < 1))
        return xc_fail(XC_E_MISUSE, -1, -1, -1,
                       "curve: need n_keys >= 1 (got %u), mode plain or step "
                       "(got %d) with step starts in step mode, n_experts >= "
                       "1 with per_layer (got %u)", o->n_keys, o->mode,
                       o->n_experts);
    for (i = 0; i < n; i++)
        if (keys[i] >= o->n_keys)
            return xc_fail(XC_E_MISUSE, (int64_t)i, -1, -1,
                           "curve: access %zu has key %u >= n_keys %u", i,
                           keys[i], o->n_keys);
    opt = o->policy != NULL && strcmp(o->policy, "belady") == 0;
    step = o->mode == XC_SIM_STEP;
    w_cap = o->per_layer ? o->n_experts : o->n_keys;
    if (w_cap > n)
        w_cap = n;
    if ((rc = cbuf_alloc(&b, opt, o->n_keys, w_cap, n)) != XC_OK)
        return rc;
    hist = xc_calloc(w_cap + 2, sizeof *hist);
    if (hist == NULL) {
        cbuf_free(&b);
        return xc_fail(XC_E_NOMEM, -1, -1, -1,
                       "curve: no memory for %zu distances", w_cap + 2);
    }
    if (!o->per_layer) {
        w = curve_one(&b, opt, step, keys, step_start, n, hist, &largest);
    } else {
        /* Group the accesses by layer (stable), as xc_sim_run does. */
        uint32_t n_layers = (o->n_keys - 1) / o->n_experts + 1, l;
        size_t *start = xc_calloc((size_t)n_layers + 1, sizeof *start);
        uint32_t *sub = xc_malloc((n ? n : 1) * sizeof *sub);
        uint8_t *sub_st = xc_malloc(n ? n : 1);
        if (!start || !sub || !sub_st) {
            rc = xc_fail(XC_E_NOMEM, -1, -1, -1,
                         "curve: no memory to split %zu accesses by layer", n);
        } else {
            for (i = 0; i < n; i++)
                start[keys[i] / o->n_experts + 1]++;
            for (l = 0; l < n_layers; l++)
                start[l + 1] += start[l];
            for (i = 0; i < n; i++) {
                size_t at = start[keys[i] / o->n_experts]++;
                sub[at] = keys[i];
                sub_st[at] = step_start ? step_start[i] : 1;
            }
            for (l = n_layers; l > 0; l--)
                start[l] = start[l - 1];
            start[0] = 0;
            for (l = 0; l < n_layers; l++)
                if (start[l + 1] > start[l]) {
                    size_t wl = curve_one(&b, opt, step, sub + start[l],
                                          sub_st + start[l],
                                          start[l + 1] - start[l], hist,
                                          &largest);
                    if (wl > w)
                        w = wl;
                }
        }
        xc_free(start);
        xc_free(sub);
        xc_free(sub_st);
    }
    if (rc == XC_OK) {
        assert(w <= w_cap);
        compulsory = hist[0];
        /* the misses at c: the first accesses, and those of distance > c */
        above = 0;
        for (c = w; c > 0; c--) {
            if (c <= n_sizes)
                misses[c - 1] = compulsory + above;
            above += hist[c];
        }
        for (c = w + 1; c <= n_sizes; c++)
            misses[c - 1] = compulsory;
        if (!step)
            largest = 1;
        for (c = 1; c < largest && c <= n_sizes; c++)
            misses[c - 1] = UINT64_MAX;
        assert(compulsory + above == n);
        out->requests = n;
        out->compulsory = compulsory;
        out->working_set = w;
        out->min_slots = largest;
    }
    xc_free(hist);
    cbuf_free(&b);
    return rc;
}
