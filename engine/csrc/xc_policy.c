/*
 * xc_policy.c -- the policy table and the spec parser.
 *
 * A spec is "name" or "name:key=value,key=value" with unsigned decimal
 * values.  Everything about a policy except its parameter names lives in its
 * own file; this file only finds it by name and fills its parameters.
 */
#include "xc_internal.h"
#include "xc_policy.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* The policy table: one X(name) per policy, each defined in its own
 * xc_policy_<name>.c as xc_policy_<name>_ops.  Its order is the order
 * xc_policy_name lists them in and the "valid:" message shows.  Adding a
 * policy is its file plus one entry here. */
#define XC_POLICY_TABLE(X) \
    X(lru) X(fifo) X(lfu) X(lfru) X(hotness) X(s3fifo) X(arc)

#define XC_POLICY_DECLARE(n) extern const xc_policy_ops xc_policy_##n##_ops;
XC_POLICY_TABLE(XC_POLICY_DECLARE)
#undef XC_POLICY_DECLARE

static const xc_policy_ops *const table[] = {
#define XC_POLICY_ENTRY(n) &xc_policy_##n##_ops,
    XC_POLICY_TABLE(XC_POLICY_ENTRY)
#undef XC_POLICY_ENTRY
};
#define N_POLICIES (sizeof table / sizeof table[0])

/* ------------------------------------------------------------------ */
/* The table, as xc.h exposes it                                        */
/* ------------------------------------------------------------------ */

int xc_policy_count(void) { return (int)N_POLICIES; }

const char *xc_policy_name(int i)
{
    return i >= 0 && (size_t)i < N_POLICIES ? table[i]->name : NULL;
}

/* Parameter j of policy i, or NULL (param_names is NULL-terminated when
 * shorter than XC_POLICY_MAX_PARAMS). */
static const char *param_name(int i, int j)
{
    if (i < 0 || (size_t)i >= N_POLICIES || j < 0 ||
        j >= XC_POLICY_MAX_PARAMS)
        return NULL;
    for (int k = 0; k < j; k++)
        if (table[i]->param_names[k] == NULL)
            return NULL;
    return table[i]->param_names[j];
}

const char *xc_policy_param_name(int i, int j) { return param_name(i, j); }

uint64_t xc_policy_param_default(int i, int j)
{
    return param_name(i, j) != NULL ? table[i]->param_default[j] : 0;
}

void xc_policy_nop(xc_policy *p, uint32_t key) { (void)p; (void)key; }
void xc_policy_row_nop(xc_policy *p, const xc_pcand *row)
{
    (void)p;
    (void)row;
}
int xc_policy_check_nop(const xc_policy *p) { (void)p; return 0; }

/* ------------------------------------------------------------------ */
/* Key lists                                                            */
/* ------------------------------------------------------------------ */

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

void xc_kl_concat(xc_klinks *l, xc_klist *a, xc_klist *b)
{
    if (b->head == XC_KNIL)
        return;
    if (a->tail != XC_KNIL) {
        l->next[a->tail] = b->head;
        l->prev[b->head] = a->tail;
    } else {
        a->head = b->head;
    }
    a->tail = b->tail;
    a->n += b->n;
    xc_kl_init(b);
}

int xc_kl_check(const xc_klinks *l, const xc_klist *q, const uint8_t *mark,
                uint8_t want, const uint64_t *val, const char *who)
{
    uint32_t k = q->head, last = XC_KNIL;
    size_t n = 0;
    while (k != XC_KNIL && n <= q->n) {
        if (l->prev[k] != last || (mark && mark[k] != want) ||
            (val && last != XC_KNIL && val[last] > val[k]))
            return xc_fail(XC_E_MISUSE, -1, -1, -1,
                           "%s: key %u at position %zu of a list is out of "
                           "place", who, k, n);
        last = k;
        k = l->next[k];
        n++;
    }
    if (n != q->n || last != q->tail)
        return xc_fail(XC_E_MISUSE, -1, -1, -1,
                       "%s: a list holds %zu keys, its count says %zu", who,
                       n, q->n);
    return 0;
}

/* ------------------------------------------------------------------ */
/* Buckets                                                              */
/* ------------------------------------------------------------------ */

int xc_bset_alloc(xc_bset *s, uint32_t n_keys, const char *who)
{
    size_t nk = n_keys ? n_keys : 1, i;
    memset(s, 0, sizeof *s);
    s->n_keys = n_keys;
    s->first = XC_KNIL;
    if (xc_kl_alloc(&s->kl, n_keys, who) != XC_OK)
        return XC_E_NOMEM;
    s->b = xc_calloc(nk + 1, sizeof *s->b);
    s->free_b = xc_malloc((nk + 1) * sizeof *s->free_b);
    s->bucket_of = xc_malloc(nk * sizeof *s->bucket_of);
    s->tick = xc_calloc(nk, sizeof *s->tick);
    if (!s->b || !s->free_b || !s->bucket_of || !s->tick) {
        xc_bset_free(s);
        return xc_fail(XC_E_NOMEM, -1, -1, -1,
                       "policy %s: no memory for %u keys", who, n_keys);
    }
    for (i = 0; i < nk; i++)
        s->bucket_of[i] = XC_KNIL;
    for (i = 0; i <= nk; i++)
        s->free_b[i] = (uint32_t)(nk - i);
    s->n_free = (uint32_t)(nk + 1);
    return XC_OK;
}

void xc_bset_free(xc_bset *s)
{
    xc_kl_free(&s->kl);
    xc_free(s->b);
    xc_free(s->free_b);
    xc_free(s->bucket_of);
    xc_free(s->tick);
    memset(s, 0, sizeof *s);
}

/* Unlinks empty bucket bi from the bucket list and frees it. */
static void bucket_drop(xc_bset *s, uint32_t bi)
{
    xc_bucket *b = &s->b[bi];
    if (b->prev != XC_KNIL)
        s->b[b->prev].next = b->next;
    else
        s->first = b->next;
    if (b->next != XC_KNIL)
        s->b[b->next].prev = b->prev;
    s->free_b[s->n_free++] = bi;
}

/* A new empty bucket of value v right after bucket `after` (first when
 * XC_KNIL). */
static uint32_t bucket_new(xc_bset *s, uint32_t after, uint64_t v)
{
    uint32_t bi = s->free_b[--s->n_free];
    xc_bucket *b = &s->b[bi];
    b->v = v;
    xc_kl_init(&b->l);
    b->prev = after;
    b->next = after != XC_KNIL ? s->b[after].next : s->first;
    if (after != XC_KNIL)
        s->b[after].next = bi;
    else
        s->first = bi;
    if (b->next != XC_KNIL)
        s->b[b->next].prev = bi;
    return bi;
}

void xc_bset_remove(xc_bset *s, uint32_t key)
{
    uint32_t bi = s->bucket_of[key];
    if (bi == XC_KNIL)
        return;
    xc_kl_remove(&s->kl, &s->b[bi].l, key);
    s->bucket_of[key] = XC_KNIL;
    s->n--;
    if (s->b[bi].l.n == 0)
        bucket_drop(s, bi);
}

void xc_bset_place(xc_bset *s, uint32_t key, uint64_t v, uint64_t tick)
{
    uint32_t at = s->bucket_of[key], bi;
    if (at != XC_KNIL) {
        /* start the walk next to the key's bucket, which may go away */
        if (s->b[at].l.n == 1)
            at = s->b[at].prev;
        xc_bset_remove(s, key);
    }
    /* at: the last bucket known to have a value <= v, or XC_KNIL */
    if (at != XC_KNIL && s->b[at].v > v)
        while (at != XC_KNIL && s->b[at].v > v)
            at = s->b[at].prev;
    for (;;) {
        uint32_t nx = at != XC_KNIL ? s->b[at].next : s->first;
        if (nx == XC_KNIL || s->b[nx].v > v)
            break;
        at = nx;
    }
    bi = at != XC_KNIL && s->b[at].v == v ? at : bucket_new(s, at, v);
    s->tick[key] = tick;
    xc_kl_insert_by(&s->kl, &s->b[bi].l, key, s->tick);
    s->bucket_of[key] = bi;
    s->n++;
}

/* Moves bucket gone's keys into bucket keep, in tick order, from the
 * back: each goes in behind the keys of keep that are newer, so a merge
 * costs gone's keys plus the keys of keep newer than gone's oldest. */
static void bucket_merge(xc_bset *s, uint32_t keep, uint32_t gone)
{
    xc_klist *a = &s->b[keep].l, *b = &s->b[gone].l;
    uint32_t at = a->tail;
    while (b->tail != XC_KNIL) {
        uint32_t x = b->tail;
        xc_kl_remove(&s->kl, b, x);
        while (at != XC_KNIL && s->tick[at] > s->tick[x])
            at = s->kl.prev[at];
        kl_insert_after(&s->kl, a, at, x);
        s->bucket_of[x] = keep;
    }
}

void xc_bset_halve(xc_bset *s)
{
    uint32_t bi = s->first;
    while (bi != XC_KNIL) {
        uint32_t nx = s->b[bi].next, pv = s->b[bi].prev;
        s->b[bi].v >>= 1;
        if (pv != XC_KNIL && s->b[pv].v == s->b[bi].v) {
            /* the larger bucket stays; the smaller one's keys move */
            uint32_t keep = s->b[pv].l.n >= s->b[bi].l.n ? pv : bi;
            uint32_t gone = keep == pv ? bi : pv;
            bucket_merge(s, keep, gone);
            bucket_drop(s, gone);
        }
        bi = nx;
    }
}

int64_t xc_bset_first(const xc_bset *s, const xc_pview *v)
{
    xc_pcand row;
    uint32_t bi, k;
    for (bi = s->first; bi != XC_KNIL; bi = s->b[bi].next)
        for (k = s->b[bi].l.head; k != XC_KNIL; k = s->kl.next[k])
            if (v->row(v->ctx, k, &row))
                return k;
    return -1;
}

int xc_bset_check(const xc_bset *s, const char *who)
{
    uint32_t bi, k, last = XC_KNIL;
    size_t n = 0, nb = 0;
    if (s->b == NULL)
        return xc_fail(XC_E_MISUSE, -1, -1, -1, "%s: no state", who);
    for (bi = s->first; bi != XC_KNIL && nb <= s->n; bi = s->b[bi].next) {
        const xc_bucket *b = &s->b[bi];
        if (b->prev != last || (last != XC_KNIL && s->b[last].v >= b->v) ||
            b->l.n == 0)
            return xc_fail(XC_E_MISUSE, -1, -1, -1,
                           "%s: bucket %zu (value %llu) is out of place", who,
                           nb, (unsigned long long)b->v);
        if (xc_kl_check(&s->kl, &b->l, NULL, 0, s->tick, who) != 0)
            return -1;
        for (k = b->l.head; k != XC_KNIL; k = s->kl.next[k])
            if (s->bucket_of[k] != bi)
                return xc_fail(XC_E_MISUSE, -1, -1, -1,
                               "%s: key %u sits in bucket %zu it does not "
                               "name", who, k, nb);
        n += b->l.n;
        last = bi;
        nb++;
    }
    if (n != s->n || nb + s->n_free != (size_t)(s->n_keys ? s->n_keys : 1) + 1)
        return xc_fail(XC_E_MISUSE, -1, -1, -1,
                       "%s: buckets hold %zu keys in %zu buckets, counts say "
                       "%zu keys and %u free buckets", who, n, nb, s->n,
                       s->n_free);
    return 0;
}

/* Appends s to buf (capacity cap, always NUL-terminated), cutting it short
 * when full. */
static void append(char *buf, size_t cap, const char *s)
{
    size_t used = strlen(buf);
    if (used + 1 < cap)
        strncat(buf, s, cap - used - 1);
}

/* Every policy of the table as a spec template, in table order:
 * "lru, fifo, lfu, lfru:sample=N,seed=N, ...". */
static void valid_specs(char *buf, size_t cap)
{
    size_t i, j;
    buf[0] = '\0';
    for (i = 0; i < N_POLICIES; i++) {
        if (i)
            append(buf, cap, ", ");
        append(buf, cap, table[i]->name);
        for (j = 0; j < XC_POLICY_MAX_PARAMS && table[i]->param_names[j]; j++) {
            append(buf, cap, j ? "," : ":");
            append(buf, cap, table[i]->param_names[j]);
            append(buf, cap, "=N");
        }
    }
}

static int bad_name(const char *spec, size_t len)
{
    char valid[256];
    valid_specs(valid, sizeof valid);
    return xc_fail(XC_E_MISUSE, -1, -1, -1, "unknown policy '%.*s'; valid: %s",
                   (int)len, spec, valid);
}

static int bad_param(const xc_policy_ops *ops, const char *what, size_t len)
{
    char valid[128] = "";
    size_t i;
    for (i = 0; i < XC_POLICY_MAX_PARAMS && ops->param_names[i]; i++) {
        if (i)
            strncat(valid, ", ", sizeof valid - strlen(valid) - 1);
        strncat(valid, ops->param_names[i], sizeof valid - strlen(valid) - 1);
    }
    return xc_fail(XC_E_MISUSE, -1, -1, -1,
                   "policy %s: bad parameter '%.*s'; valid parameters: %s "
                   "(as key=unsigned integer)",
                   ops->name, (int)len, what, i ? valid : "none");
}

/* Parses one "key=value" of length len into p->param. */
static int parse_param(xc_policy *p, const char *s, size_t len)
{
    const xc_policy_ops *ops = p->ops;
    const char *eq = memchr(s, '=', len);
    size_t i, klen;
    char num[32], *end;
    unsigned long long v;
    if (eq == NULL)
        return bad_param(ops, s, len);
    klen = (size_t)(eq - s);
    for (i = 0; i < XC_POLICY_MAX_PARAMS && ops->param_names[i]; i++)
        if (strlen(ops->param_names[i]) == klen &&
            memcmp(ops->param_names[i], s, klen) == 0)
            break;
    if (i == XC_POLICY_MAX_PARAMS || ops->param_names[i] == NULL)
        return bad_param(ops, s, len);
    if (len - klen - 1 == 0 || len - klen - 1 >= sizeof num ||
        eq[1] < '0' || eq[1] > '9')
        return bad_param(ops, s, len);
    memcpy(num, eq + 1, len - klen - 1);
    num[len - klen - 1] = '\0';
    errno = 0;
    v = strtoull(num, &end, 10);
    if (errno || *end != '\0')
        return bad_param(ops, s, len);
    p->param[i] = v;
    return XC_OK;
}

int xc_policy_open(xc_policy *p, const char *spec, uint32_t n_keys,
                   size_t n_slots)
{
    const char *colon;
    size_t name_len, i;
    int rc;
    memset(p, 0, sizeof *p);
    if (spec == NULL || *spec == '\0')
        spec = "lru";
    colon = strchr(spec, ':');
    name_len = colon ? (size_t)(colon - spec) : strlen(spec);
    for (i = 0; i < N_POLICIES; i++)
        if (strlen(table[i]->name) == name_len &&
            memcmp(table[i]->name, spec, name_len) == 0)
            break;
    if (i == N_POLICIES)
        return bad_name(spec, name_len);
    p->ops = table[i];
    p->n_keys = n_keys;
    p->n_slots = n_slots ? n_slots : 1;
    memcpy(p->param, p->ops->param_default, sizeof p->param);
    if (colon) {
        const char *s = colon + 1;
        for (;;) {
            const char *comma = strchr(s, ',');
            size_t len = comma ? (size_t)(comma - s) : strlen(s);
            if ((rc = parse_param(p, s, len)) != XC_OK) {
                memset(p, 0, sizeof *p);
                return rc;
            }
            if (!comma)
                break;
            s = comma + 1;
        }
    }
    if ((rc = p->ops->init(p)) != XC_OK) {
        memset(p, 0, sizeof *p);
        return rc;
    }
    return XC_OK;
}

void xc_policy_close(xc_policy *p)
{
    if (p->ops)
        p->ops->fini(p);
    memset(p, 0, sizeof *p);
}
