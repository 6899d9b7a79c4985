/*
 * xc_testhooks_check.c -- TEST HOOKS ONLY: the breaks of xc_cache_check()'s
 * cross-checks that the field breaks of xc_testhooks.c do not reach.
 *
 * xc_testhooks.c breaks one field per invariant; check() tests far more
 * than one thing per invariant: the owners of in-flight reads against the
 * open streams and the read-ahead ring, every item of an open stream, the
 * ring's counts and entries, and through the policy's check() the order
 * structures of xc_order_list.c, xc_order_buckets.c and xc_order_heaps.c
 * and each policy's own counts.  Each XC_TH_* break here (numbers from
 * XC_TH_CROSS_FIRST, xc_test.h) makes exactly one of those tests fail on a
 * cache whose state has the structure it names, and a variant (the hook's
 * b) picks which test; gate/check_probe.py BREAKS maps every (break,
 * variant) to the source text of the test it reaches and tests/cache/
 * test_check_cross_checks.py fails when a test of check() has none.
 *
 * Every field is changed through POKE, which saves its bytes first, so the
 * hook puts the cache back exactly (in reverse order) after check() ran.
 * Not safe against the cache's read-ahead readers or a concurrent caller:
 * use a cache with io_threads = 0 and no other thread.
 */
#ifndef XC_TEST_SEAMS
#error "xc_testhooks_check.c is a test seam: it is compiled into the instrumented build only (-DXC_TEST_SEAMS; engine/_build.py SEAM_SOURCES)"
#endif
#include "xc_core.h"

#include <assert.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ */
/* The undo log                                                         */
/* ------------------------------------------------------------------ */

#define MAX_POKES 24
typedef struct pokes {
    struct {
        void *at;
        size_t len;
        unsigned char old[64];
    } u[MAX_POKES];
    int n;
} pokes;

static void save(pokes *k, void *at, size_t len)
{
    assert(k->n < MAX_POKES && len <= sizeof k->u[0].old);
    k->u[k->n].at = at;
    k->u[k->n].len = len;
    memcpy(k->u[k->n].old, at, len);
    k->n++;
}

/* lv = v, remembering lv's bytes for undo(). */
#define POKE(k, lv, v) do { save((k), &(lv), sizeof(lv)); (lv) = (v); } while (0)

static void undo(pokes *k)
{
    while (k->n > 0) {
        k->n--;
        memcpy(k->u[k->n].at, k->u[k->n].old, k->u[k->n].len);
    }
}

/* ------------------------------------------------------------------ */
/* Helpers                                                              */
/* ------------------------------------------------------------------ */

/* A READY slot nobody holds, pins or marks: one that may be made a read
 * under way without tripping INV-INFLIGHT's field test. */
static int free_ready(const xc_cache *c, int a)
{
    const slot *s;
    if (a < 0 || (size_t)a >= c->n_slots)
        return 0;
    s = &c->slots[a];
    return s->state == XC_SLOT_READY && !s->holds && !s->pins &&
           !s->unused_prefetch && !s->unused_spec && !s->insert_pending;
}

/* Makes READY slot a a read under way owned by `owner`, unstamped (so the
 * order list and INV-CLOCK have nothing to say about it). */
static void make_inflight(pokes *k, xc_cache *c, int a, uint8_t owner)
{
    POKE(k, c->slots[a].state, XC_SLOT_INFLIGHT);
    POKE(k, c->slots[a].owner, owner);
    POKE(k, c->slots[a].last_use, 0);
    POKE(k, c->n_reads, c->n_reads + 1);
}

/* The first free_ready slot other than a, or -1. */
static int other_free_ready(const xc_cache *c, int a)
{
    size_t i;
    for (i = 0; i < c->n_slots; i++)
        if ((int)i != a && free_ready(c, (int)i))
            return (int)i;
    return -1;
}

/* The lowest key on none of the policy's lists, or XC_KNIL. */
static uint32_t off_key(const xc_ptest *t, uint32_t n_keys)
{
    uint32_t x;
    for (x = 0; x < n_keys; x++)
        if (t->mark[x] == t->mark_none)
            return x;
    return XC_KNIL;
}

/* The policy's test view (its ops' test_view): 0, or -1 when the policy
 * has no private state to break. */
static int view(xc_policy *p, xc_ptest *t)
{
    *t = (xc_ptest){0};
    if (p->priv == NULL || p->ops->test_view == NULL)
        return -1;
    p->ops->test_view(p, t);
    return 0;
}

/* ------------------------------------------------------------------ */
/* The breaks: each returns 0 when it applied, -1 when this cache lacks  */
/* the structure it needs (nothing changed then)                         */
/* ------------------------------------------------------------------ */

/* XC_TH_OWNER_RANGE: a: a free READY slot, made a read with an owner past
 * OWNER_CLAIMED. */
static int br_owner_range(pokes *k, xc_cache *c, int a, int b)
{
    if (!free_ready(c, a))
        return -1;
    make_inflight(k, c, a, OWNER_CLAIMED + 1);
    return 0;
}

/* XC_TH_STREAM_OWNER: a: a slot in flight for item j of an open stream o
 * (STREAM_ITEM_LOCAL, OWNER_STREAM).  b: 0 its item past o's end, 1 o's
 * item names slot -1, 2 o's item names another key, 3 o's item READING,
 * 4 the slot CLAIMED (the item LOCAL). */
static int br_stream_owner(pokes *k, xc_cache *c, int a, int b)
{
    slot *s;
    xc_stream *o;
    size_t j;
    if (a < 0 || (size_t)a >= c->n_slots)
        return -1;
    s = &c->slots[a];
    if (s->state != XC_SLOT_INFLIGHT || s->owner != OWNER_STREAM)
        return -1;
    o = s->owner_stream;
    j = s->owner_item;
    switch (b) {
    case 0: POKE(k, s->owner_item, o->n); break;
    case 1: POKE(k, o->slot[j], -1); break;
    case 2: POKE(k, o->keys[j], (s->key + 1) % c->ld.n_keys); break;
    case 3: POKE(k, o->state[j], STREAM_ITEM_READING); break;
    case 4: POKE(k, s->owner, OWNER_CLAIMED); break;
    default: return -1;
    }
    return 0;
}

/* XC_TH_STREAM_ITEM: a: as for XC_TH_STREAM_OWNER; h is the first item of
 * the same stream that was a hit at begin (STREAM_ITEM_HIT), made: b 0
 * LOCAL naming slot -1, 1 LOCAL naming slot n_slots, 2 LOCAL naming its
 * own READY slot, 3 LOCAL naming slot a (another key), 4 QUEUED naming a
 * with a's key, 5 READING naming a with a's key, 6 LOCAL naming a with
 * a's key; 7 a's read handed to a made-up open stream that names it, so
 * that o's item no longer owns it; 8 o counts one read pending more. */
static int br_stream_item(pokes *k, xc_cache *c, int a, int b,
                          xc_stream *made)
{
    slot *s;
    xc_stream *o;
    size_t h;
    if (a < 0 || (size_t)a >= c->n_slots || b < 0 || b > 8)
        return -1;
    s = &c->slots[a];
    if (s->state != XC_SLOT_INFLIGHT || s->owner != OWNER_STREAM)
        return -1;
    o = s->owner_stream;
    for (h = 0; h < o->n && o->state[h] != STREAM_ITEM_HIT; h++)
        ;
    if (b <= 6 && h == o->n)
        return -1;
    if (b <= 6)
        POKE(k, o->state[h], b == 4 ? STREAM_ITEM_QUEUED
                             : b == 5 ? STREAM_ITEM_READING
                                      : STREAM_ITEM_LOCAL);
    if (b == 0)
        POKE(k, o->slot[h], -1);
    else if (b == 1)
        POKE(k, o->slot[h], (int32_t)c->n_slots);
    else if (b >= 3 && b <= 6)
        POKE(k, o->slot[h], a);
    if (b >= 4 && b <= 6)
        POKE(k, o->keys[h], s->key);
    if (b == 7) {
        made->c = c;
        made->n = 1;
        made->keys[0] = s->key;
        made->slot[0] = a;
        made->state[0] = STREAM_ITEM_LOCAL;
        made->n_queued = 0;
        made->next_open = c->streams;
        POKE(k, c->streams, made);
        POKE(k, s->owner_stream, made);
        POKE(k, s->owner_item, 0);
    }
    if (b == 8)
        POKE(k, o->n_queued, o->n_queued + 1);
    return 0;
}

/* XC_TH_QUEUE_COUNT: the ring empty and idle; b: 0 free READY slot a made
 * a queued read the ring does not hold, 1 the ring counts one entry more,
 * 2 a made a read-ahead read under way the ring does not count, 3 the ring
 * counts one read under way more. */
static int br_queue_count(pokes *k, xc_cache *c, int a, int b)
{
    if (c->aq_n != 0 || c->aq_active != 0 || c->aq_cap < 1)
        return -1;
    if ((b == 0 || b == 2) && !free_ready(c, a))
        return -1;
    switch (b) {
    case 0: make_inflight(k, c, a, OWNER_QUEUED); break;
    case 1: POKE(k, c->aq_n, 1); break;
    case 2: make_inflight(k, c, a, OWNER_ACTIVE); break;
    case 3: POKE(k, c->aq_active, 1); break;
    default: return -1;
    }
    return 0;
}

/* XC_TH_QUEUE_ENTRY: the ring empty and idle, a a free READY slot; b: 0 a
 * made the queued read of the ring's one entry, which names another key;
 * 1 a made a read-ahead read under way that the ring's one entry names,
 * while another free READY slot is the queued read the counts want; 2 a
 * the queued read of the ring's one entry (sound), another free READY slot
 * a read under way, and the ring's depth 1 (XC_TH_QUEUE_DEPTH's count past
 * the depth trips INV-INFLIGHT's count test first). */
static int br_queue_entry(pokes *k, xc_cache *c, int a, int b)
{
    int x;
    if (c->aq_n != 0 || c->aq_active != 0 || c->aq_cap < 1 ||
        !free_ready(c, a) || b < 0 || b > 2)
        return -1;
    x = b >= 1 ? other_free_ready(c, a) : -1;
    if (b >= 1 && x < 0)
        return -1;
    make_inflight(k, c, a, b == 1 ? OWNER_ACTIVE : OWNER_QUEUED);
    if (b >= 1) {
        make_inflight(k, c, x, b == 1 ? OWNER_QUEUED : OWNER_ACTIVE);
        POKE(k, c->aq_active, 1);
    }
    if (b == 2)
        POKE(k, c->aq_cap, 1);
    POKE(k, c->aq_head, 0);
    POKE(k, c->aq_n, 1);
    POKE(k, c->aq[0].slot, a);
    POKE(k, c->aq[0].key,
         b == 0 ? (c->slots[a].key + 1) % c->ld.n_keys : c->slots[a].key);
    return 0;
}

/* XC_TH_LIST: a key list of lru, fifo, arc or s3fifo (xc_kl_check); a: a
 * READY slot whose key K is on one of the policy's lists; b: 0 K's prev
 * link names K, 1 K's mark moved to a key on no list, 2 K's order value 0
 * (K not its list's head), 3 the list counts one key more (and one more
 * key is marked, so the policy's own count agrees), 4 the list's tail
 * names K (K not its tail). */
static int br_list(pokes *k, xc_cache *c, int a, int b)
{
    xc_ptest t;
    xc_klist *q;
    uint32_t key, x;
    if (view(&c->pol, &t) != 0 || t.kl == NULL || a < 0 ||
        (size_t)a >= c->n_slots || c->slots[a].state != XC_SLOT_READY)
        return -1;
    key = c->slots[a].key;
    if (t.mark[key] < t.list_mark || t.mark[key] >= t.list_mark + t.n_lists)
        return -1;
    q = &t.lists[t.mark[key] - t.list_mark];
    x = off_key(&t, c->ld.n_keys);
    switch (b) {
    case 0: POKE(k, t.kl->prev[key], key); break;
    case 1:
        if (x == XC_KNIL)
            return -1;
        POKE(k, t.mark[x], t.mark[key]);
        POKE(k, t.mark[key], t.mark_none);
        break;
    case 2:
        if (t.tick == NULL || q->head == key)
            return -1;
        POKE(k, t.tick[key], 0);
        break;
    case 3:
        if (x == XC_KNIL)
            return -1;
        POKE(k, t.mark[x], t.mark[key]);
        POKE(k, q->n, q->n + 1);
        break;
    case 4:
        if (q->tail == key)
            return -1;
        POKE(k, q->tail, key);
        break;
    default: return -1;
    }
    return 0;
}

/* XC_TH_POLICY_OWN: the policy's own test of its state, by what its test
 * view shows (never by which policy it is).  Lists with their own count
 * (own_marks: lru, fifo, sieve one, arc T1, s3fifo S, M, G): b 0.. a key
 * on no list marked for list b.  arc (arc_p): b 1 the policy told of 0
 * slots, 2 p below 0, 3 p past n_slots, 4 p NaN.  s3fifo (g_cap): b 3
 * the policy told of 0 slots, 4 the ghost capacity one below the ghosts
 * held.  hotness (to_halve): b 0 no count table, 1 no request to the next
 * halving, 2 more than a period to it, 3 one request off, 4 held key K
 * (slot a's) on no bucket, 5 K not held, 6 K's bucket one value up.  Any
 * with a view: b 9 no private state. */
static int br_policy_own(pokes *k, xc_cache *c, int a, int b)
{
    xc_ptest t;
    xc_policy *p = &c->pol;
    uint32_t x, key;
    if (view(p, &t) != 0)
        return -1;
    if (b == 9) {
        POKE(k, p->priv, NULL);
        return 0;
    }
    if (t.kl != NULL) {
        x = off_key(&t, c->ld.n_keys);
        if (b >= 0 && (size_t)b < t.own_marks && (size_t)b < t.n_lists) {
            if (x == XC_KNIL)
                return -1;
            POKE(k, t.mark[x], (uint8_t)(t.list_mark + b));
            return 0;
        }
        if (t.arc_p != NULL && b >= 1 && b <= 4) {
            if (b == 1) POKE(k, p->n_slots, 0);
            else if (b == 2) POKE(k, *t.arc_p, -1.0);
            else if (b == 3) POKE(k, *t.arc_p, (double)p->n_slots + 1.0);
            else POKE(k, *t.arc_p, (double)NAN);
            return 0;
        }
        if (t.g_cap != NULL && b == 3) {
            POKE(k, p->n_slots, 0);
            return 0;
        }
        if (t.g_cap != NULL && b == 4) {
            if (t.lists[2].n == 0)
                return -1;
            POKE(k, *t.g_cap, t.lists[2].n - 1);
            return 0;
        }
        return -1;
    }
    if (t.to_halve == NULL)
        return -1;
    switch (b) {
    case 0: POKE(k, p->count, NULL); return 0;
    case 1: POKE(k, *t.to_halve, 0); return 0;
    case 2: POKE(k, *t.to_halve, p->param[0] + 1); return 0;
    case 3:
        if (p->param[0] < 2)
            return -1;
        POKE(k, *t.to_halve, *t.to_halve == p->param[0] ? *t.to_halve - 1
                                                         : *t.to_halve + 1);
        return 0;
    default: break;
    }
    if (b < 4 || b > 6 || a < 0 || (size_t)a >= c->n_slots ||
        c->slots[a].state != XC_SLOT_READY)
        return -1;
    key = c->slots[a].key;
    if (!t.held[key])
        return -1;
    if (b == 4) POKE(k, t.hset->bucket_of[key], XC_KNIL);
    else if (b == 5) POKE(k, t.held[key], 0);
    else POKE(k, t.hset->b[t.hset->bucket_of[key]].v,
              t.hset->b[t.hset->bucket_of[key]].v + 1);
    return 0;
}

/* Moves bucket bi one place towards the first (swapping it with the one
 * before it, every link consistent), so that the values no longer ascend;
 * for either bucket order. */
#define SWAP_BEFORE(k, B, first, bi) do {                                 \
        uint32_t pa_ = (B)[bi].prev, pp_ = (B)[pa_].prev,                 \
                 nx_ = (B)[bi].next;                                      \
        if (pp_ == XC_KNIL) POKE(k, first, bi);                           \
        else POKE(k, (B)[pp_].next, bi);                                  \
        if (nx_ != XC_KNIL) POKE(k, (B)[nx_].prev, pa_);                  \
        POKE(k, (B)[bi].prev, pp_);                                       \
        POKE(k, (B)[bi].next, pa_);                                       \
        POKE(k, (B)[pa_].prev, bi);                                       \
        POKE(k, (B)[pa_].next, nx_);                                      \
    } while (0)

/* XC_TH_BUCKETS: lfu's buckets (xc_bset_check); a: a READY slot whose key
 * K is on them, in bucket B; b: 0 no bucket array, 1 B's prev names B,
 * 2 B swapped with the bucket before it, 3 B counts no key, 4 K's tick 0
 * (K not B's head), 5 K names another bucket, 6 the structure counts one
 * key more, 7 one free bucket more. */
static int br_buckets(pokes *k, xc_cache *c, int a, int b)
{
    xc_ptest t;
    xc_bset *s;
    uint32_t key, bi;
    if (view(&c->pol, &t) != 0 || t.bset == NULL || a < 0 ||
        (size_t)a >= c->n_slots || c->slots[a].state != XC_SLOT_READY)
        return -1;
    s = t.bset;
    key = c->slots[a].key;
    bi = s->bucket_of[key];
    if (bi == XC_KNIL)
        return -1;
    switch (b) {
    case 0: POKE(k, s->b, NULL); break;
    case 1: POKE(k, s->b[bi].prev, bi); break;
    case 2:
        if (s->b[bi].prev == XC_KNIL)
            return -1;
        SWAP_BEFORE(k, s->b, s->first, bi);
        break;
    case 3: POKE(k, s->b[bi].l.n, 0); break;
    case 4:
        if (s->b[bi].l.head == key)
            return -1;
        POKE(k, s->tick[key], 0);
        break;
    case 5:
        POKE(k, s->bucket_of[key],
             s->b[bi].next != XC_KNIL ? s->b[bi].next
             : s->b[bi].prev != XC_KNIL ? s->b[bi].prev : XC_KNIL);
        if (s->bucket_of[key] == XC_KNIL) {
            undo(k);
            return -1;
        }
        break;
    case 6: POKE(k, s->n, s->n + 1); break;
    case 7: POKE(k, s->n_free, s->n_free + 1); break;
    default: return -1;
    }
    return 0;
}

/* XC_TH_HEAPS: hotness's heap buckets (xc_hset_check); a: a READY slot
 * whose key is in bucket B.  B's chain (head .. tail, left links) must
 * hold 2 keys or more for b 4 to 9 and 12 to 14, 3 or more for 10 and 13;
 * b: 0 B's prev names B, 1 B swapped with the bucket before it, 2 B counts
 * no key, 3 B's root has a parent (B has a root heap), 4 B's tail gone,
 * 5 B's head has a parent, 6 B's tail a left child, 7 B's tail a right
 * child, 8 the tail's parent link cut, 9 the key above the tail given a
 * right child (the tail), 10 B's head key K set in a free bucket of B's
 * value, 11 K's rank one up, 12 the head's child moved right (its rank
 * kept right: leftist order broken), 13 the parent of the key below the
 * head named the tail, 14 that key's tick the head's, 15 B counts one
 * key more, 16 the structure counts one key more, 17 one free bucket
 * more. */
static int br_heaps(pokes *k, xc_cache *c, int a, int b)
{
    xc_ptest t;
    xc_hset *s;
    xc_hbucket *B;
    uint32_t bi, hd, tl, l;
    size_t chain = 0;
    if (view(&c->pol, &t) != 0 || t.hset == NULL || a < 0 ||
        (size_t)a >= c->n_slots || c->slots[a].state != XC_SLOT_READY)
        return -1;
    s = t.hset;
    bi = s->bucket_of[c->slots[a].key];
    if (bi == XC_KNIL)
        return -1;
    B = &s->b[bi];
    hd = B->head;
    tl = B->tail;
    for (l = tl; l != XC_KNIL && chain <= B->n; l = s->up[l])
        if (++chain, l == hd)
            break;
    if (((b >= 4 && b <= 9) || (b >= 12 && b <= 14)) && chain < 2)
        return -1;
    if ((b == 9 || b == 13) && chain < 3)
        return -1;
    l = hd != XC_KNIL ? s->left[hd] : XC_KNIL;
    switch (b) {
    case 0: POKE(k, B->prev, bi); break;
    case 1:
        if (B->prev == XC_KNIL)
            return -1;
        SWAP_BEFORE(k, s->b, s->first, bi);
        break;
    case 2: POKE(k, B->n, 0); break;
    case 3:
        if (B->root == XC_KNIL)
            return -1;
        POKE(k, s->up[B->root], B->root);
        break;
    case 4: POKE(k, B->tail, XC_KNIL); break;
    case 5: POKE(k, s->up[hd], tl); break;
    case 6: POKE(k, s->left[tl], hd); break;
    case 7: POKE(k, s->right[tl], hd); break;
    case 8: POKE(k, s->up[tl], XC_KNIL); break;
    case 9: POKE(k, s->right[s->up[tl]], tl); break;
    case 10:
        if (hd == XC_KNIL || s->n_free == 0)
            return -1;
        POKE(k, s->b[s->free_b[s->n_free - 1]].v, B->v);
        POKE(k, s->bucket_of[hd], s->free_b[s->n_free - 1]);
        break;
    case 11:
        if (hd == XC_KNIL)
            return -1;
        POKE(k, s->rank[hd], s->rank[hd] + 1);
        break;
    case 12:
        POKE(k, s->right[hd], l);
        POKE(k, s->left[hd], XC_KNIL);
        POKE(k, s->rank[hd], s->rank[l] + 1);
        break;
    case 13: POKE(k, s->up[l], tl); break;
    case 14: POKE(k, s->tick[l], s->tick[hd]); break;
    case 15: POKE(k, B->n, B->n + 1); break;
    case 16: POKE(k, s->n, s->n + 1); break;
    case 17: POKE(k, s->n_free, s->n_free + 1); break;
    default: return -1;
    }
    return 0;
}

/* ------------------------------------------------------------------ */
/* The entry point                                                      */
/* ------------------------------------------------------------------ */

int xc_testhook_break_cross(xc_cache *c, int what, int a, int b)
{
    pokes k;
    xc_stream made;
    uint32_t made_key;
    int32_t made_slot;
    uint8_t made_state;
    int rc, applied;

    if (c == NULL)
        return xc_fail(XC_E_MISUSE, -1, -1, -1, "test hook: NULL cache");
    k.n = 0;
    memset(&made, 0, sizeof made);
    made.keys = &made_key;
    made.slot = &made_slot;
    made.state = &made_state;
    pthread_mutex_lock(&c->mu);
    switch (what) {
    case XC_TH_OWNER_RANGE: applied = br_owner_range(&k, c, a, b); break;
    case XC_TH_STREAM_OWNER: applied = br_stream_owner(&k, c, a, b); break;
    case XC_TH_STREAM_ITEM:
        applied = br_stream_item(&k, c, a, b, &made);
        break;
    case XC_TH_QUEUE_COUNT: applied = br_queue_count(&k, c, a, b); break;
    case XC_TH_QUEUE_ENTRY: applied = br_queue_entry(&k, c, a, b); break;
    case XC_TH_LIST: applied = br_list(&k, c, a, b); break;
    case XC_TH_POLICY_OWN: applied = br_policy_own(&k, c, a, b); break;
    case XC_TH_BUCKETS: applied = br_buckets(&k, c, a, b); break;
    case XC_TH_HEAPS: applied = br_heaps(&k, c, a, b); break;
    default: applied = -1;
    }
    pthread_mutex_unlock(&c->mu);
    rc = applied != 0
             ? xc_fail(XC_E_MISUSE, -1, -1, -1, "test hook: bad corruption "
                       "%d (a %d, b %d) for this cache", what, a, b)
             : xc_cache_check(c);
    pthread_mutex_lock(&c->mu);
    undo(&k);
    pthread_mutex_unlock(&c->mu);
    return rc;
}
