/*
 * xc_sim.c -- trace replay: the cache's victim rules over a routing trace,
 * without bytes, threads or locks.
 *
 * A simulated slot is exactly the row a policy sees (xc_pcand), so the
 * policy files run here unchanged: the same to_evict through the same kind
 * of view (a key is a candidate when it is in a slot the current step does
 * not hold; the candidates in ascending slot order for lfru), the same
 * callbacks in the same order as xc_cache.c (xc_policy.h: a hit is
 * request, hit; a miss is to_evict when no slot is empty, request, evict,
 * insert).  Slots fill in order
 * 0, 1, 2, ... and never empty again, which is the cache's "lowest EMPTY
 * slot first" rule for a run without failed reads.  Replaying a trace here
 * therefore gives the counters a live cache gives for the same gets.
 *
 *   plain mode: each access is a get released at once; nothing protected.
 *   step mode:  the accesses of one step (token, layer) are held until the
 *               step ends, so they are not candidates; a step larger than
 *               the cache is XC_E_MISUSE.
 *
 * Two shortcuts keep replay fast and change no victim:
 * - a policy that declares XC_POLICY_ORDER_LAST_USE / _INSERT (lru, fifo)
 *   is replayed with its slots on a queue in that order (xc_policy.h says
 *   why that is exactly its to_evict; such a policy has no-op callbacks, so
 *   plain mode runs a loop of its own without them); opts.no_fast_path
 *   turns it off so tests can compare the two;
 * - in plain mode every slot is a candidate, so the view's j-th candidate
 *   is slot j; in step mode it steps over the few slots the step holds.
 *
 * Progress (opts.progress): the accesses are replayed in chunks that end
 * where a call is due, so the loops themselves carry no extra test; the
 * count spans every run of one call (per_layer: the layers in order).
 *
 * Belady (farthest next use first; several never used again: the lowest
 * slot) is not a cache policy -- it needs the future -- and lives only here:
 * a heap of the slots' next-use positions, with the same protection rule
 * (a scan when a step holds more slots than the heap sets aside).
 */
#include "xc_internal.h"
#include "xc_policy.h"

#include <stdlib.h>
#include <string.h>

#define NEVER INT64_MAX

/* Scratch shared by every run of one xc_sim_run call. */
typedef struct simbuf {
    size_t cap;            /* slots allocated: min(n_slots, n_keys) */
    size_t n_slots, n_held; /* of the current run, for the view */
    xc_pcand *row;
    int32_t *key_slot;     /* per key: its slot or -1 */
    uint8_t *seen;         /* per key: accessed before */
    uint8_t *prot;         /* per slot: held by the current step */
    int32_t *held;         /* the current step's slots */
    int32_t *prev, *next;  /* queue of slots (fast path) */
    int64_t *slot_next;    /* per slot: next use (belady) */
    int64_t *last;         /* per key: scratch for next-use (belady) */
    int64_t *nxt;          /* per access of the run: next use (belady) */
    struct bent *heap;     /* belady: (next use, slot), farthest on top */
    size_t heap_n, heap_cap;
} simbuf;

/* A belady heap entry: current while slot_next[slot] == next. */
typedef struct bent {
    int64_t next;
    int32_t slot;
} bent;

static void buf_free(simbuf *b)
{
    xc_free(b->row);
    xc_free(b->key_slot);
    xc_free(b->seen);
    xc_free(b->prot);
    xc_free(b->held);
    xc_free(b->prev);
    xc_free(b->next);
    xc_free(b->slot_next);
    xc_free(b->last);
    xc_free(b->nxt);
    xc_free(b->heap);
}

static int buf_alloc(simbuf *b, size_t cap, uint32_t n_keys, size_t n)
{
    memset(b, 0, sizeof *b);
    b->cap = cap;
    b->row = xc_calloc(cap, sizeof *b->row);
    b->key_slot = xc_calloc(n_keys, sizeof *b->key_slot);
    b->seen = xc_calloc(n_keys, 1);
    b->prot = xc_calloc(cap, 1);
    b->held = xc_calloc(cap, sizeof *b->held);
    b->prev = xc_calloc(cap, sizeof *b->prev);
    b->next = xc_calloc(cap, sizeof *b->next);
    b->slot_next = xc_calloc(cap, sizeof *b->slot_next);
    b->last = xc_calloc(n_keys, sizeof *b->last);
    b->nxt = xc_calloc(n ? n : 1, sizeof *b->nxt);
    b->heap_cap = 2 * cap + 64;
    b->heap = xc_calloc(b->heap_cap, sizeof *b->heap);
    if (!b->row || !b->key_slot || !b->seen || !b->prot ||
        !b->held || !b->prev || !b->next || !b->slot_next || !b->last ||
        !b->nxt || !b->heap) {
        buf_free(b);
        return xc_fail(XC_E_NOMEM, -1, -1, -1,
                       "sim: no memory for %zu slots, %u keys, %zu accesses",
                       cap, n_keys, n);
    }
    return XC_OK;
}

/* Progress of one xc_sim_run call: accesses replayed so far over all its
 * runs, and the count at which the callback is next due (UINT64_MAX: no
 * call is due before the final one, made by xc_sim_run itself). */
typedef struct prog {
    int (*fn)(void *ctx, uint64_t done);
    void *ctx;
    uint64_t period, total, done, due;
} prog;

static void prog_init(prog *p, const xc_sim_opts *o, size_t n)
{
    p->fn = o->progress;
    p->ctx = o->progress_ctx;
    p->period = o->progress_every ? o->progress_every : XC_SIM_PROGRESS_EVERY;
    p->total = n;
    p->done = 0;
    p->due = p->fn != NULL && p->period < p->total ? p->period : UINT64_MAX;
}

/* How many of the next `left` accesses run before a call is due. */
static size_t prog_room(const prog *p, size_t left)
{
    uint64_t room = p->due - p->done;
    return room < left ? (size_t)room : left;
}

/* Notes k more accesses replayed and makes the call when it is due (at
 * every multiple of the period below the total).  Nonzero: stop. */
static int prog_add(prog *p, size_t k)
{
    p->done += k;
    if (p->done != p->due)
        return 0;
    p->due = p->total - p->done > p->period ? p->done + p->period : UINT64_MAX;
    return p->fn(p->ctx, p->done) != 0;
}

/* Queue of slots in victim order (fast path): head is the next victim. */
typedef struct queue { int32_t head, tail; } queue;

static void q_unlink(simbuf *b, queue *q, int32_t s)
{
    if (b->prev[s] >= 0) b->next[b->prev[s]] = b->next[s];
    else q->head = b->next[s];
    if (b->next[s] >= 0) b->prev[b->next[s]] = b->prev[s];
    else q->tail = b->prev[s];
}

static void q_push(simbuf *b, queue *q, int32_t s)
{
    b->prev[s] = q->tail;
    b->next[s] = -1;
    if (q->tail >= 0) b->next[q->tail] = s;
    else q->head = s;
    q->tail = s;
}

/* The view (xc_policy.h) over the slots: a key is a candidate when it is
 * in a slot the current step does not hold.  Victims are chosen only when
 * every slot is filled. */
static int view_row(const void *ctx, uint32_t key, xc_pcand *out)
{
    const simbuf *b = ctx;
    int32_t s = b->key_slot[key];
    if (s < 0 || b->prot[s])
        return 0;
    *out = b->row[s];
    return 1;
}

static size_t view_count(const void *ctx)
{
    const simbuf *b = ctx;
    return b->n_slots - b->n_held;
}

/* The j-th unheld slot: j plus the held slots at or below it. */
static void view_nth(const void *ctx, size_t j, xc_pcand *out)
{
    const simbuf *b = ctx;
    size_t s = j, before = 0, i, k;
    do {
        k = before;
        before = 0;
        for (i = 0; i < b->n_held; i++)
            before += (size_t)b->held[i] <= s;
        s = j + before;
    } while (before != k);
    *out = b->row[s];
}

/* The fast path in plain mode: nothing is protected, so the victim is the
 * queue's head.  No policy callback runs -- a policy with a declared order
 * (lru, fifo) has only no-op callbacks -- and only what the queue needs is
 * kept.  Counts as run() would; tests compare the two.  Returns nonzero
 * when the progress callback asked to stop (the accesses replayed by then
 * are counted). */
static int run_queue_plain(simbuf *b, int by_last_use, const uint32_t *keys,
                           size_t n, size_t n_slots, prog *p,
                           xc_sim_result *out)
{
    int32_t *key_slot = b->key_slot, *prev = b->prev, *next = b->next;
    uint8_t *seen = b->seen;
    xc_pcand *row = b->row;
    int32_t head = -1, tail = -1;
    uint64_t hits = 0, compulsory = 0, evictions = 0;
    size_t i = 0, end, filled = 0;
    int stop = 0;
    while (i < n && !stop) {
        size_t from = i;
        end = i + prog_room(p, n - i);
        for (; i < end; i++) {
            uint32_t key = keys[i];
            int32_t s = key_slot[key];
            if (s >= 0) {
                hits++;
                if (by_last_use && s != tail) {
                    /* unlink s (not the tail), push it at the tail */
                    if (prev[s] >= 0) next[prev[s]] = next[s];
                    else head = next[s];
                    prev[next[s]] = prev[s];
                    prev[s] = tail;
                    next[s] = -1;
                    next[tail] = s;
                    tail = s;
                }
                continue;
            }
            compulsory += !seen[key];
            seen[key] = 1;
            if (filled < n_slots) {
                s = (int32_t)filled++;
            } else {
                s = head;
                key_slot[row[s].key] = -1;
                evictions++;
                head = next[s];
                if (head >= 0) prev[head] = -1;
                else tail = -1;
            }
            row[s].key = key;
            key_slot[key] = s;
            prev[s] = tail;
            next[s] = -1;
            if (tail >= 0) next[tail] = s;
            else head = s;
            tail = s;
        }
        stop = prog_add(p, end - from);
    }
    out->requests += i;
    out->hits += hits;
    out->misses += i - hits;
    out->compulsory += compulsory;
    out->evictions += evictions;
    return stop;
}

/* Belady's victim is the unheld slot of farthest next use, the lowest such
 * slot on a tie (only "never again" ties).  A heap of (next use, slot)
 * entries in that order finds it in O(log n): every hit and insert pushes
 * its slot's new entry, entries whose slot has moved on are dropped when
 * they surface, and the heap is rebuilt from the slots when full. */
static int bent_above(const bent *x, const bent *y)
{
    return x->next > y->next || (x->next == y->next && x->slot < y->slot);
}

static void heap_up(bent *h, size_t i)
{
    bent e = h[i];
    while (i > 0 && bent_above(&e, &h[(i - 1) / 2])) {
        h[i] = h[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    h[i] = e;
}

static void heap_down(bent *h, size_t n, size_t i)
{
    bent e = h[i];
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n)
            break;
        if (c + 1 < n && bent_above(&h[c + 1], &h[c]))
            c++;
        if (!bent_above(&h[c], &e))
            break;
        h[i] = h[c];
        i = c;
    }
    h[i] = e;
}

static void heap_pop(simbuf *b)
{
    b->heap[0] = b->heap[--b->heap_n];
    if (b->heap_n)
        heap_down(b->heap, b->heap_n, 0);
}

/* Pushes slot s's current entry; when full, first rebuilds the heap from
 * the filled slots 0..filled-1 (one current entry each). */
static void heap_push(simbuf *b, int32_t s, size_t filled)
{
    if (b->heap_n == b->heap_cap) {
        size_t j;
        b->heap_n = 0;
        for (j = 0; j < filled; j++)
            if ((int32_t)j != s) {
                b->heap[b->heap_n].next = b->slot_next[j];
                b->heap[b->heap_n++].slot = (int32_t)j;
            }
        for (j = b->heap_n / 2; j-- > 0;)
            heap_down(b->heap, b->heap_n, j);
    }
    b->heap[b->heap_n].next = b->slot_next[s];
    b->heap[b->heap_n].slot = s;
    heap_up(b->heap, b->heap_n++);
}

/* The victim: the top current entry of an unheld slot, or -1.  Entries of
 * held slots are set aside and pushed back. */
static int32_t heap_victim(simbuf *b)
{
    bent keep[64];
    size_t n_keep = 0, j;
    int32_t v = -1;
    while (b->heap_n > 0) {
        bent top = b->heap[0];
        if (b->slot_next[top.slot] != top.next) {
            heap_pop(b); /* its slot moved on */
            continue;
        }
        if (!b->prot[top.slot]) {
            v = top.slot;
            break;
        }
        if (n_keep == sizeof keep / sizeof keep[0]) {
            v = -2; /* many held: fall back to the scan */
            break;
        }
        keep[n_keep++] = top;
        heap_pop(b);
    }
    for (j = 0; j < n_keep; j++) {
        b->heap[b->heap_n] = keep[j];
        heap_up(b->heap, b->heap_n++);
    }
    return v;
}

/* One independent cache of n_slots over keys[0..n-1]; adds to *out. */
static int run(const xc_sim_opts *o, simbuf *b, const uint32_t *keys,
               const uint8_t *starts, size_t n, const size_t *pos, prog *p,
               xc_sim_result *out)
{
    const int step = o->mode == XC_SIM_STEP, belady = o->policy != NULL &&
        strcmp(o->policy, "belady") == 0;
    const size_t n_slots = o->n_slots < b->cap ? (size_t)o->n_slots : b->cap;
    xc_policy pol;
    queue q = {-1, -1};
    int fast = 0, rc, stop = 0;
    uint64_t tick = 0;
    size_t i, filled = 0, n_held = 0;

    xc_pview view = {view_row, view_count, view_nth, b};

    b->n_slots = n_slots;
    b->n_held = 0;
    b->heap_n = 0;
    memset(&pol, 0, sizeof pol);
    if (!belady) {
        if ((rc = xc_policy_open(&pol, o->policy, o->n_keys,
                                 (size_t)o->n_slots)) != XC_OK)
            return rc;
        fast = !o->no_fast_path && pol.ops->order != XC_POLICY_ORDER_NONE;
        if (fast && !step) {
            for (i = 0; i < n; i++)
                b->key_slot[keys[i]] = -1;
            stop = run_queue_plain(b, pol.ops->order ==
                                   XC_POLICY_ORDER_LAST_USE, keys, n,
                                   n_slots, p, out);
            xc_policy_close(&pol);
            return stop ? XC_SIM_STOPPED : XC_OK;
        }
    } else {
        for (i = 0; i < n; i++)
            b->last[keys[i]] = NEVER;
        for (i = n; i-- > 0;) {
            b->nxt[i] = b->last[keys[i]];
            b->last[keys[i]] = (int64_t)i;
        }
    }
    for (i = 0; i < n; i++)
        b->key_slot[keys[i]] = -1;

    i = 0;
    while (i < n && !stop) {
        size_t from = i, end = i + prog_room(p, n - i);
        for (; i < end; i++) {
            uint32_t key = keys[i];
            int32_t s = b->key_slot[key];
            if (step && (i == 0 || starts[i])) {
                while (n_held)
                    b->prot[b->held[--n_held]] = 0;
                b->n_held = 0;
            }
            out->requests++;
            if (s >= 0) {
                /* hit: the cache's get step 2 */
                xc_pcand *r = &b->row[s];
                out->hits++;
                r->freq++;
                r->last_use = ++tick;
                if (belady) {
                    b->slot_next[s] = b->nxt[i];
                    heap_push(b, s, filled);
                } else {
                    xc_policy_request(&pol, key);
                    xc_policy_hit(&pol, r);
                    if (fast && pol.ops->order == XC_POLICY_ORDER_LAST_USE) {
                        q_unlink(b, &q, s);
                        q_push(b, &q, s);
                    }
                }
            } else {
                /* miss: get steps 4 and 6 */
                int evict = 0;
                uint32_t old = 0;
                out->misses++;
                if (!b->seen[key]) {
                    b->seen[key] = 1;
                    out->compulsory++;
                }
                if (filled < n_slots) {
                    s = (int32_t)filled++;
                } else if (belady) {
                    int64_t far = -1;
                    size_t j;
                    s = heap_victim(b);
                    if (s == -2)
                        for (j = 0, s = -1; j < n_slots; j++)
                            if (!b->prot[j] && b->slot_next[j] > far) {
                                far = b->slot_next[j];
                                s = (int32_t)j;
                            }
                    evict = 1;
                } else if (fast) {
                    for (s = q.head; s >= 0 && b->prot[s]; s = b->next[s])
                        ;
                    evict = 1;
                } else {
                    int64_t k;
                    pol.want = key; /* cleared after the eviction */
                    pol.want_set = 1;
                    k = pol.ops->to_evict(&pol, &view);
                    if (k >= 0)
                        s = b->key_slot[k];
                    evict = 1;
                }
                if (s < 0) {
                    size_t at = pos ? pos[i] : i;
                    if (!belady)
                        xc_policy_close(&pol);
                    return xc_fail(XC_E_MISUSE, (int64_t)at, -1, -1,
                                   "sim: access %zu (key %u): every one of "
                                   "the %zu slots holds an expert of the "
                                   "current step; step mode needs slots >= "
                                   "the largest step", at, key, n_slots);
                }
                if (evict) {
                    old = b->row[s].key;
                    b->key_slot[old] = -1;
                    out->evictions++;
                }
                if (!belady) {
                    xc_policy_request(&pol, key);
                    if (evict)
                        xc_policy_evict(&pol, old);
                    pol.want_set = 0;
                }
                b->row[s].slot = s;
                b->row[s].key = key;
                b->row[s].freq = 1;
                b->row[s].last_use = b->row[s].insert_tick = ++tick;
                b->key_slot[key] = s;
                if (belady) {
                    b->slot_next[s] = b->nxt[i];
                    heap_push(b, s, filled);
                } else {
                    xc_policy_insert(&pol, &b->row[s]);
                    if (fast) {
                        if (evict)
                            q_unlink(b, &q, s);
                        q_push(b, &q, s);
                    }
                }
            }
            if (step && !b->prot[s]) {
                b->prot[s] = 1;
                b->held[n_held++] = s;
                b->n_held = n_held;
            }
        }
        stop = prog_add(p, end - from);
    }

    while (n_held)
        b->prot[b->held[--n_held]] = 0;
    if (!belady)
        xc_policy_close(&pol);
    return stop ? XC_SIM_STOPPED : XC_OK;
}

int xc_sim_run(const xc_sim_opts *o, const uint32_t *keys,
               const uint8_t *step_start, size_t n, xc_sim_result *out)
{
    xc_sim_result r;
    simbuf b;
    prog p;
    size_t i, cap;
    int rc = XC_OK;

    if (o == NULL || out == NULL || (n > 0 && keys == NULL))
        return xc_fail(XC_E_MISUSE, -1, -1, -1,
                       "sim: NULL options, result or keys");
    if (o->n_slots < 1 || o->n_keys < 1 ||
        (o->mode != XC_SIM_PLAIN && o->mode != XC_SIM_STEP) ||
        (o->mode == XC_SIM_STEP && n > 0 && step_start == NULL) ||
        (o->per_layer && o->n_experts < 1))
        return xc_fail(XC_E_MISUSE, -1, -1, -1,
                       "sim: need n_slots >= 1 (got %llu), n_keys >= 1 (got "
                       "%u), mode plain or step (got %d) with step starts "
                       "in step mode, n_experts >= 1 with per_layer (got %u)",
                       (unsigned long long)o->n_slots, o->n_keys, o->mode,
                       o->n_experts);
    for (i = 0; i < n; i++)
        if (keys[i] >= o->n_keys)
            return xc_fail(XC_E_MISUSE, (int64_t)i, -1, -1,
                           "sim: access %zu has key %u >= n_keys %u", i,
                           keys[i], o->n_keys);
    memset(&r, 0, sizeof r);
    prog_init(&p, o, n);
    cap = o->n_slots < o->n_keys ? (size_t)o->n_slots : o->n_keys;
    if ((rc = buf_alloc(&b, cap, o->n_keys, n)) != XC_OK)
        return rc;
    if (!o->per_layer) {
        rc = run(o, &b, keys, step_start, n, NULL, &p, &r);
    } else {
        /* Group the accesses by layer (stable), one cache per layer. */
        uint32_t n_layers = (o->n_keys - 1) / o->n_experts + 1, l;
        size_t *start = xc_calloc((size_t)n_layers + 1, sizeof *start);
        uint32_t *sub = xc_malloc((n ? n : 1) * sizeof *sub);
        uint8_t *sub_st = xc_malloc(n ? n : 1);
        size_t *pos = xc_malloc((n ? n : 1) * sizeof *pos);
        if (!start || !sub || !sub_st || !pos) {
            rc = xc_fail(XC_E_NOMEM, -1, -1, -1,
                         "sim: no memory to split %zu accesses by layer", n);
        } else {
            for (i = 0; i < n; i++)
                start[keys[i] / o->n_experts + 1]++;
            for (l = 0; l < n_layers; l++)
                start[l + 1] += start[l];
            for (i = 0; i < n; i++) {
                size_t at = start[keys[i] / o->n_experts]++;
                sub[at] = keys[i];
                sub_st[at] = step_start ? step_start[i] : 1;
                pos[at] = i;
            }
            for (l = n_layers; l > 0; l--)
                start[l] = start[l - 1];
            start[0] = 0;
            for (l = 0; l < n_layers && rc == XC_OK; l++)
                if (start[l + 1] > start[l])
                    rc = run(o, &b, sub + start[l], sub_st + start[l],
                             start[l + 1] - start[l], pos + start[l], &p,
                             &r);
        }
        xc_free(start);
        xc_free(sub);
        xc_free(sub_st);
        xc_free(pos);
    }
    buf_free(&b);
    if (rc == XC_OK && p.fn != NULL && p.fn(p.ctx, p.done) != 0)
        rc = XC_SIM_STOPPED; /* the final call: every access replayed */
    if (rc != XC_OK && rc != XC_SIM_STOPPED)
        return rc;
    r.reloads = r.misses - r.compulsory;
    *out = r;
    return rc;
}
