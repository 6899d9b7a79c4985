/*
 * xc_order_list.c -- key lists: the order of lru, fifo and the queues of
 * s3fifo and arc.
 *
 * A list is a head, a tail and a count; the links live in per-key arrays
 * (one prev, one next per key) shared by every list of a link set, so a
 * key is on at most one list of its set and moving it between the queues
 * of s3fifo or arc is two O(1) relinks, no allocation.  Lists run oldest
 * first: the victim end is the head.  insert_by keeps a list sorted by a
 * per-key value walking from the tail, because the keys a policy inserts
 * nearly always carry the newest tick (a hit, or an insert in stamp
 * order), so the walk usually stops at once.
 */
#include "xc_internal.h"
#include "xc_policy.h"

#include <string.h>

int xc_kl_alloc(xc_klinks *l, uint32_t n_keys, const char *who)
{
    size_t nk = n_keys ? n_keys : 1, i;
    l->prev = xc_malloc(nk * sizeof *l->prev);
    l->next = xc_malloc(nk * sizeof *l->next);
    if (l->prev == NULL || l->next == NULL) {
        xc_kl_free(l);
        return xc_fail(XC_E_NOMEM, -1, -1, -1,
                       "policy %s: no memory for %u keys", who, n_keys);
    }
    for (i = 0; i < nk; i++)
        l->prev[i] = l->next[i] = XC_KNIL;
    return XC_OK;
}

void xc_kl_free(xc_klinks *l)
{
    xc_free(l->prev);
    xc_free(l->next);
    l->prev = l->next = NULL;
}

void xc_kl_init(xc_klist *q)
{
    q->head = q->tail = XC_KNIL;
    q->n = 0;
}

void xc_kl_push(xc_klinks *l, xc_klist *q, uint32_t key)
{
    l->prev[key] = q->tail;
    l->next[key] = XC_KNIL;
    if (q->tail != XC_KNIL)
        l->next[q->tail] = key;
    else
        q->head = key;
    q->tail = key;
    q->n++;
}

void xc_kl_remove(xc_klinks *l, xc_klist *q, uint32_t key)
{
    uint32_t a = l->prev[key], b = l->next[key];
    if (a != XC_KNIL)
        l->next[a] = b;
    else
        q->head = b;
    if (b != XC_KNIL)
        l->prev[b] = a;
    else
        q->tail = a;
    l->prev[key] = l->next[key] = XC_KNIL;
    q->n--;
}

/* Links key (on no list) into q right after `at` (at the front when at is
 * XC_KNIL). */
static void kl_insert_after(xc_klinks *l, xc_klist *q, uint32_t at,
                            uint32_t key)
{
    uint32_t b = at != XC_KNIL ? l->next[at] : q->head;
    l->prev[key] = at;
    l->next[key] = b;
    if (at != XC_KNIL)
        l->next[at] = key;
    else
        q->head = key;
    if (b != XC_KNIL)
        l->prev[b] = key;
    else
        q->tail = key;
    q->n++;
}

void xc_kl_insert_by(xc_klinks *l, xc_klist *q, uint32_t key,
                     const uint64_t *val)
{
    uint32_t at = q->tail;
    while (at != XC_KNIL && val[at] > val[key])
        at = l->prev[at];
    kl_insert_after(l, q, at, key);
}

int xc_kl_check(const xc_klinks *l, const xc_klist *q, const uint8_t *mark,
                uint8_t want, const uint64_t *val, const char *who)
{
    uint32_t k = q->head, last = XC_KNIL;
    size_t n = 0;
#define PLACE(id) \
    xc_fail(XC_E_MISUSE, -1, -1, -1, "[" id "] %s: key %u at position %zu " \
            "of a list is out of place", who, k, n)
    while (k != XC_KNIL && n <= q->n) {
        if (l->prev[k] != last)
            return PLACE("list.prev");
        if (mark && mark[k] != want)
            return PLACE("list.mark");
        if (val && last != XC_KNIL && val[last] > val[k])
            return PLACE("list.order");
        last = k;
        k = l->next[k];
        n++;
    }
#undef PLACE
#define COUNT(id) \
    xc_fail(XC_E_MISUSE, -1, -1, -1, "[" id "] %s: a list holds %zu keys, " \
            "its count says %zu", who, n, q->n)
    if (n != q->n)
        return COUNT("list.count");
    if (last != q->tail)
        return COUNT("list.tail");
#undef COUNT
    return 0;
}
