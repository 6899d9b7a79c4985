/*
 * shim.c -- the gate's adapter over fetchcache (docs/OUTSIDE_CACHES.md).
 *
 * fetchcache does no I/O of its own: it is given the gate's fetch
 * (xcs_layout.fetch, [design] io = "callback") through a small callback
 * that turns the gate's status into fetchcache's byte count.  Holds are
 * given back as a whole set (fc_release_all), prefetch returns nothing,
 * failures are sticky and the policy is fetchcache's sampled LRU, each
 * declared in xcs.toml's [design].  The io_threads option is its n_readers.
 */
#include "xcs_shim.h"
#include "fetchcache.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

typedef struct shim {
    fc_cache *c;
    uint64_t expert_bytes;
    xcs_fetch_fn fetch;
    void *fetch_ctx;
} shim;

/* fetchcache's status as the gate's XCS_E* code. */
static int code(int rc)
{
    switch (rc) {
    case FC_OK: return XCS_OK;
    case FC_EINVAL: return XCS_EMISUSE;
    case FC_ENOMEM: return XCS_ENOMEM;
    case FC_EBUSY: return XCS_EFULL;
    case FC_EFETCH: return XCS_EIO;
    case FC_ESHORT: return XCS_ESHORT;
    default: return XCS_EFAILED;
    }
}

/* fetchcache's callback over the gate's fetch: len bytes on success, 0 (a
 * short read, FC_ESHORT) when a file ended early, -1 (FC_EFETCH) else. */
static ssize_t fetch_cb(void *user, int layer, int expert, void *dst, size_t len)
{
    const shim *s = user;
    int rc = s->fetch(s->fetch_ctx, layer, expert, dst, len);
    return rc == XCS_OK ? (ssize_t)len : rc == XCS_ESHORT ? 0 : -1;
}

/* Opens a fetchcache of n_slots experts fed by the gate's fetch; refuses
 * (XCS_EMISUSE) a policy other than lru or more readers than it starts. */
static int fcs_open(const xcs_layout *lay, void **out)
{
    assert(lay != NULL && out != NULL && lay->options != NULL);
    if (lay->fetch == NULL || strcmp(lay->policy, "lru") != 0)
        return XCS_EMISUSE;
    shim *s = calloc(1, sizeof *s);
    if (s == NULL)
        return XCS_ENOMEM;
    s->expert_bytes = lay->expert_bytes;
    s->fetch = lay->fetch;
    s->fetch_ctx = lay->fetch_ctx;
    fc_options o = {
        .n_layers = lay->n_layers, .n_experts = lay->n_experts,
        .expert_bytes = (size_t)lay->expert_bytes, .n_slots = lay->n_slots,
        .n_readers = lay->options->io_threads, .seed = 0,
        .fetch = fetch_cb, .user = s,
    };
    int rc = fc_create(&o, &s->c);
    if (rc != FC_OK) {
        free(s);
        return code(rc);
    }
    *out = s;
    return XCS_OK;
}

/* Drains and frees the cache; NULL is ignored. */
static void fcs_close(void *h)
{
    if (h == NULL)
        return;
    fc_destroy(((shim *)h)->c);
    free(h);
}

/* A demand get: the expert's bytes, held until release_all. */
static int fcs_get(void *h, int layer, int expert, const void **data, size_t *len)
{
    shim *s = h;
    const void *p;
    int rc = fc_get(s->c, layer, expert, &p);
    if (rc != FC_OK)
        return code(rc);
    *data = p;
    *len = (size_t)s->expert_bytes;
    return XCS_OK;
}

/* Gives back every hold taken since the last call. */
static int fcs_release_all(void *h)
{
    fc_release_all(((shim *)h)->c);
    return XCS_OK;
}

/* Queues read-ahead of the n keys; fetchcache reports nothing, so 0. */
static int fcs_prefetch(void *h, const int *keys, int n)
{
    assert(n >= 0 && (n == 0 || keys != NULL));
    int *lx = malloc(2 * (size_t)n * sizeof *lx + 1);
    if (lx == NULL)
        return XCS_ENOMEM;
    for (int i = 0; i < n; i++) {
        lx[i] = keys[2 * i];
        lx[n + i] = keys[2 * i + 1];
    }
    fc_prefetch(((shim *)h)->c, lx, lx + n, n);
    free(lx);
    return 0;
}

/* Waits until no read is under way. */
static int fcs_drain(void *h)
{
    fc_drain(((shim *)h)->c);
    return XCS_OK;
}

/* Zeroes the counters (the gauges are state, kept). */
static int fcs_reset(void *h)
{
    fc_stats_reset(((shim *)h)->c);
    return XCS_OK;
}

/* The counters fetchcache keeps and its READY and FETCHING gauges. */
static int fcs_stats(void *h, xcs_stats *out)
{
    fc_stats st;
    fc_stats_get(((shim *)h)->c, &st);
    memset(out, 0, sizeof *out);
    out->v[XCS_REQUESTS] = st.requests;
    out->v[XCS_HITS] = st.hits;
    out->v[XCS_MISSES] = st.misses;
    out->v[XCS_EVICTIONS] = st.evictions;
    out->v[XCS_PREFETCH_LOADS] = st.prefetch_loads;
    out->v[XCS_LOAD_FAILURES] = st.failures;
    out->v[XCS_READY_SLOTS] = (uint64_t)st.resident;
    out->v[XCS_INFLIGHT_SLOTS] = (uint64_t)st.in_flight;
    out->v[XCS_PREFETCH_FIRST_USES] = st.prefetch_hits;
    out->present = 1u << XCS_REQUESTS | 1u << XCS_HITS | 1u << XCS_MISSES |
                   1u << XCS_EVICTIONS | 1u << XCS_PREFETCH_LOADS |
                   1u << XCS_LOAD_FAILURES | 1u << XCS_READY_SLOTS |
                   1u << XCS_INFLIGHT_SLOTS | 1u << XCS_PREFETCH_FIRST_USES;
    return XCS_OK;
}

/* 1 if the key is READY, 0 if not; XCS_EMISUSE outside the layout. */
static int fcs_resident(void *h, int layer, int expert)
{
    int st = fc_peek(((shim *)h)->c, layer, expert);
    return st < 0 ? code(st) : st == FC_SLOT_READY;
}

/* fetchcache's own walk of its state: 0 sound, else 1 and its message. */
static int fcs_check(void *h, char *msg, size_t cap)
{
    return fc_check(((shim *)h)->c, msg, cap) != 0;
}

static const xcs_vtable table = {
    .abi = XCS_ABI,
    .name = "fetchcache",
    .open = fcs_open,
    .close = fcs_close,
    .get = fcs_get,
    .prefetch = fcs_prefetch,
    .drain = fcs_drain,
    .reset = fcs_reset,
    .stats = fcs_stats,
    .resident = fcs_resident,
    .check = fcs_check,
    .release_all = fcs_release_all,
};

/* The table the gate calls. */
const xcs_vtable *xcs_shim(void)
{
    return &table;
}
