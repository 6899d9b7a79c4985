/*
 * shim.c -- tinycache behind the gate's shim contract (gate/outside/xcs_shim.h).
 *
 * tinycache takes one (path, offset, length) per expert.  An expert stored
 * as one contiguous run is exactly that; an expert whose tensors are
 * scattered (n_pieces runs apart) is served by n_pieces tinycaches, one
 * per run, called in step: each sees the same calls, so their LRU choices
 * agree, and the shim hands out the runs concatenated in a buffer of its
 * own per held key.  The counters are part 0's, prefetch_loads the shim's
 * sum of what tc_prefetch returned (tinycache keeps none).
 */
#include "tinycache.h"
#include "xcs_shim.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct shim {
    int parts, n_layers, n_experts, n_slots;
    tc_cache **tc;           /* one per part */
    unsigned char **joined;  /* per key: the parts concatenated (parts > 1) */
    int *holds;              /* per key: holds the shim handed out */
    const void **given;      /* per key: the pointer the last get handed out */
    uint64_t prefetch_loads;
} shim;

static int code(int tc_rc)
{
    switch (tc_rc) {
    case TC_OK: return XCS_OK;
    case TC_EINVAL: return XCS_EMISUSE;
    case TC_ENOMEM: return XCS_ENOMEM;
    case TC_EIO: return XCS_EIO;
    case TC_EFULL: return XCS_EFULL;
    case TC_EOPEN: return XCS_EIO;  /* a file that would not open */
    default: return tc_rc < 0 ? XCS_EFAILED : tc_rc;
    }
}

static int contiguous(const xcs_layout *l, int key)
{
    const xcs_piece *p = &l->pieces[(size_t)key * (size_t)l->n_pieces];
    for (int i = 1; i < l->n_pieces; i++)
        if (strcmp(p[i].path, p[0].path) != 0 ||
            p[i].offset != p[i - 1].offset + p[i - 1].length)
            return 0;
    return 1;
}

static void shim_close(void *h)
{
    shim *s = h;
    if (!s)
        return;
    for (int p = 0; s->tc && p < s->parts; p++)
        tc_close(s->tc[p]);
    if (s->joined)
        for (int k = 0; k < s->n_layers * s->n_experts; k++)
            free(s->joined[k]);
    free(s->tc);
    free(s->joined);
    free(s->holds);
    free(s->given);
    free(s);
}

/* The options tinycache honours (xcs.toml declares batch_threads: every
 * batch is read on the calling thread, whatever the count asks); one it
 * cannot honour refuses the open. */
static int honoured(const xcs_options *o)
{
    if (o == NULL || o->size < sizeof *o)
        return 1;  /* a gate of ABI 1 gives none */
    return !o->direct && o->chunk_bytes == 0 && o->io_threads == 0 &&
           !o->verify;
}

static int shim_open(const xcs_layout *l, void **out)
{
    if (!honoured(l->options))
        return XCS_EMISUSE;
    int n_keys = l->n_layers * l->n_experts, whole = 1;
    for (int k = 0; k < n_keys && whole; k++)
        whole = contiguous(l, k);
    shim *s = calloc(1, sizeof *s);
    if (!s)
        return XCS_ENOMEM;
    s->parts = whole ? 1 : l->n_pieces;
    s->n_layers = l->n_layers;
    s->n_experts = l->n_experts;
    s->n_slots = l->n_slots;
    s->tc = calloc((size_t)s->parts, sizeof *s->tc);
    s->joined = calloc((size_t)n_keys, sizeof *s->joined);
    s->holds = calloc((size_t)n_keys, sizeof *s->holds);
    s->given = calloc((size_t)n_keys, sizeof *s->given);
    tc_loc *locs = calloc((size_t)n_keys, sizeof *locs);
    int rc = (s->tc && s->joined && s->holds && s->given && locs)
                 ? XCS_OK : XCS_ENOMEM;
    for (int p = 0; p < s->parts && rc == XCS_OK; p++) {
        uint64_t most = 0;
        for (int k = 0; k < n_keys; k++) {
            const xcs_piece *pc = &l->pieces[(size_t)k * (size_t)l->n_pieces];
            locs[k].path = pc[p].path;
            locs[k].offset = pc[p].offset;
            locs[k].length = whole ? l->expert_bytes : pc[p].length;
            if (locs[k].length > most)
                most = locs[k].length;
        }
        rc = code(tc_open(locs, l->n_layers, l->n_experts, l->n_slots,
                          (size_t)(most ? most : 1), &s->tc[p]));
    }
    free(locs);
    if (rc != XCS_OK) {
        shim_close(s);
        return rc;
    }
    *out = s;
    return XCS_OK;
}

static int in_range(const shim *s, int layer, int expert)
{
    return layer >= 0 && layer < s->n_layers && expert >= 0 &&
           expert < s->n_experts;
}

static int shim_get(void *h, int layer, int expert, const void **data,
                    size_t *len)
{
    shim *s = h;
    const void *part[64] = {0};
    size_t plen[64] = {0}, total = 0;
    if (s->parts > 64)
        return XCS_EFAILED;
    for (int p = 0; p < s->parts; p++) {
        int rc = tc_get(s->tc[p], layer, expert, &part[p], &plen[p]);
        if (rc != TC_OK) {
            while (p-- > 0)
                tc_release(s->tc[p], layer, expert);
            return code(rc);
        }
        total += plen[p];
    }
    /* tinycache itself may accept a key outside the layout (no bounds
     * check): it is served, and the gate counts it as a wrong read */
    int key = in_range(s, layer, expert) ? layer * s->n_experts + expert : -1;
    if (s->parts == 1) {
        *data = part[0];
    } else {
        if (key < 0)  /* nowhere to join it: hand out part 0 alone */
            total = plen[0];
        /* a key still held keeps its joined copy where it is: the holder
         * reads it (a realloc could move it and free what it reads) */
        int kept = key >= 0 && s->holds[key] > 0 && s->joined[key];
        unsigned char *buf = key < 0 ? (unsigned char *)part[0]
                             : kept ? s->joined[key]
                                    : realloc(s->joined[key], total ? total : 1);
        if (!buf) {
            for (int p = 0; p < s->parts; p++)
                tc_release(s->tc[p], layer, expert);
            return XCS_ENOMEM;
        }
        if (key >= 0 && !kept) {
            s->joined[key] = buf;
            size_t at = 0;
            for (int p = 0; p < s->parts; p++) {
                memcpy(buf + at, part[p], plen[p]);
                at += plen[p];
            }
        }
        *data = buf;
    }
    *len = total;
    if (key >= 0) {
        s->holds[key]++;
        s->given[key] = *data;
    }
    return XCS_OK;
}

static int shim_release(void *h, int layer, int expert)
{
    shim *s = h;
    int rc = XCS_OK;
    for (int p = 0; p < s->parts; p++) {
        int r = code(tc_release(s->tc[p], layer, expert));
        rc = r != XCS_OK ? r : rc;
    }
    int key = layer * s->n_experts + expert;
    if (rc == XCS_OK && in_range(s, layer, expert) && s->holds[key] > 0)
        s->holds[key]--;
    return rc;
}

static int shim_prefetch(void *h, const int *keys, int n)
{
    shim *s = h;
    int rc = 0;
    for (int p = 0; p < s->parts; p++) {
        int r = tc_prefetch(s->tc[p], keys, n);
        if (p == 0 || r < 0)
            rc = r < 0 ? code(r) : r;
        if (r < 0)
            break;
    }
    if (rc > 0)
        s->prefetch_loads += (uint64_t)rc;
    return rc;
}

/* Calls fn on every part in turn, stopping at the first failure. */
static int each_part(shim *s, int (*fn)(tc_cache *, int, int), int layer,
                     int expert)
{
    int rc = XCS_OK;
    for (int p = 0; p < s->parts && rc == XCS_OK; p++)
        rc = code(fn(s->tc[p], layer, expert));
    return rc;
}

static int shim_pin(void *h, int layer, int expert)
{
    return each_part(h, tc_pin, layer, expert);
}

static int shim_unpin(void *h, int layer, int expert)
{
    return each_part(h, tc_unpin, layer, expert);
}

static int shim_reset(void *h)
{
    shim *s = h;
    for (int p = 0; p < s->parts; p++)
        tc_reset_counts(s->tc[p]);
    s->prefetch_loads = 0;
    return XCS_OK;
}

static int shim_resident(void *h, int layer, int expert)
{
    shim *s = h;
    return tc_resident(s->tc[0], layer, expert);
}

static int shim_stats(void *h, xcs_stats *out)
{
    shim *s = h;
    tc_counts n;
    tc_counts_get(s->tc[0], &n);
    memset(out, 0, sizeof *out);
    out->v[XCS_REQUESTS] = n.lookups;
    out->v[XCS_HITS] = n.hits;
    out->v[XCS_MISSES] = n.misses;
    out->v[XCS_EVICTIONS] = n.evictions;
    out->v[XCS_PREFETCH_LOADS] = s->prefetch_loads;
    uint64_t ready = 0;
    for (int l = 0; l < s->n_layers; l++)
        for (int e = 0; e < s->n_experts; e++)
            ready += (uint64_t)tc_resident(s->tc[0], l, e);
    out->v[XCS_READY_SLOTS] = ready;
    out->v[XCS_INFLIGHT_SLOTS] = 0;  /* every read ends inside its call */
    out->present = 1u << XCS_REQUESTS | 1u << XCS_HITS | 1u << XCS_MISSES |
                   1u << XCS_EVICTIONS | 1u << XCS_PREFETCH_LOADS |
                   1u << XCS_READY_SLOTS | 1u << XCS_INFLIGHT_SLOTS;
    return XCS_OK;
}

/* Held keys must show distinct bytes and be resident; every part must
 * agree on what is resident; no more residents than slots. */
static int shim_check(void *h, char *msg, size_t cap)
{
    shim *s = h;
    int n_keys = s->n_layers * s->n_experts, ready = 0;
    for (int k = 0; k < n_keys; k++) {
        int l = k / s->n_experts, e = k % s->n_experts;
        int res = tc_resident(s->tc[0], l, e);
        ready += res;
        for (int p = 1; p < s->parts; p++)
            if (tc_resident(s->tc[p], l, e) != res) {
                snprintf(msg, cap, "parts disagree on (%d, %d)", l, e);
                return 1;
            }
        if (s->holds[k] && !res) {
            snprintf(msg, cap, "held (%d, %d) is not resident", l, e);
            return 1;
        }
        for (int j = 0; j < k && s->holds[k]; j++)
            if (s->holds[j] && s->given[j] == s->given[k]) {
                snprintf(msg, cap, "one slot handed out twice: (%d, %d) and "
                         "(%d, %d)", j / s->n_experts, j % s->n_experts, l, e);
                return 1;
            }
    }
    if (ready > s->n_slots) {
        snprintf(msg, cap, "%d residents in %d slots", ready, s->n_slots);
        return 1;
    }
    return 0;
}

static const xcs_vtable table = {
    .abi = XCS_ABI,
    .name = "tinycache",
    .open = shim_open,
    .close = shim_close,
    .get = shim_get,
    .release = shim_release,
    .getmany = shim_prefetch,  /* tc_prefetch reads before it returns */
    .prefetch = shim_prefetch,
    .drain = NULL,
    .pin = shim_pin,
    .unpin = shim_unpin,
    .reset = shim_reset,
    .stats = shim_stats,
    .resident = shim_resident,
    .check = shim_check,
};

const xcs_vtable *xcs_shim(void)
{
    return &table;
}
