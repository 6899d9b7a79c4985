/*
 * shim.c -- the adapter of directcache (examples/directcache) to the gate's
 * outside-cache table (gate/outside/xcs_shim.h, docs/OUTSIDE_CACHES.md).
 *
 * directcache finds its experts itself: it lists the container folder and
 * parses every shard's header (op:reader), so open() hands it only the
 * folder and the slot count, then checks that what it found is the layout
 * the gate describes.  Its keys are the gate's (layer position, expert).
 *
 * The one translation is the payload order: directcache serves an expert
 * as w1|w3|w2; the gate expects w1|w2|w3, the tensor order of the container
 * xcs.toml declares.  get() copies the expert, reordered, into a buffer of
 * the key's own that lives while the gate holds the key; every get() copies
 * the cache's current bytes again, so bytes changed under a hold still show.
 */
#include "xcs_shim.h"
#include "directcache.h"

#include <assert.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct dshim {
    dc_cache *c;
    int experts;
    size_t keys;               /* layers * experts */
    size_t w1, w3, w2, bytes;  /* tensor sizes, payload size */
    unsigned char **buf;       /* [key]: the reordered payload while held */
    unsigned *holds;           /* [key]: holds the gate took of it */
} dshim;

/* A dc_status as an XCS_E* code; a count passes through.  DC_ESTATE (a
 * call the key's state refuses: release without a hold, pin of a key not
 * resident) is XCS_ENOTFOUND. */
static int xcs_code(int rc)
{
    static const int map[] = {XCS_OK, XCS_EMISUSE, XCS_EFORMAT, XCS_EIO,
                              XCS_ESHORT, XCS_ENOMEM, XCS_EFULL, XCS_ENOTFOUND};
    return rc >= 0 ? rc : rc >= DC_ESTATE ? map[-rc] : XCS_EFAILED;
}

/* Frees the cache, the held copies and the shim; NULL is ignored. */
static void ds_close(void *h)
{
    dshim *s = h;
    if (s == NULL)
        return;
    dc_close(s->c);
    for (size_t k = 0; s->buf != NULL && k < s->keys; k++)
        free(s->buf[k]);
    free(s->buf);
    free(s->holds);
    free(s);
}

/* Opens directcache on the folder with the layout's slot count.  Returns
 * 0; XCS_EMISUSE for a policy other than "fifo" or batch_threads above 1;
 * the cache's refusal (XCS_EFORMAT, XCS_EIO, ...); or XCS_EFAILED when the
 * cache found another layout than the gate's. */
static int ds_open(const xcs_layout *lay, void **out)
{
    assert(lay != NULL && out != NULL && lay->n_slots > 0);
    /* FIFO only; a batch is read on the caller's thread: batch_threads 0
     * (the default) or 1 is what it does, more it cannot honour. */
    const xcs_options *o = lay->options;
    if (strcmp(lay->policy, "fifo") != 0 ||
        (o->size >= offsetof(xcs_options, batch_threads) + sizeof o->batch_threads &&
         o->batch_threads > 1))
        return XCS_EMISUSE;
    dshim *s = calloc(1, sizeof *s);
    char err[512];
    if (s == NULL)
        return XCS_ENOMEM;
    int rc = dc_open(lay->folder, (size_t)lay->n_slots, &s->c, err, sizeof err);
    if (rc != DC_OK) {
        ds_close(s);
        return xcs_code(rc);
    }
    dc_info in;
    dc_get_info(s->c, &in);
    int same = in.layers == lay->n_layers && in.experts == lay->n_experts &&
               in.expert_bytes == lay->expert_bytes;
    for (int l = 0; same && l < in.layers; l++)
        same = in.layer_ids[l] == lay->layer_ids[l];
    if (!same) {
        fprintf(stderr, "directcache shim: %s: the cache found %d layers x %d experts "
                "of %zu bytes, the gate %d x %d of %llu\n", lay->folder, in.layers,
                in.experts, in.expert_bytes, lay->n_layers, lay->n_experts,
                (unsigned long long)lay->expert_bytes);
        ds_close(s);
        return XCS_EFAILED;
    }
    s->experts = in.experts;
    s->keys = (size_t)in.layers * (size_t)in.experts;
    s->w1 = in.w1_bytes, s->w3 = in.w3_bytes, s->w2 = in.w2_bytes;
    s->bytes = in.expert_bytes;
    s->buf = calloc(s->keys, sizeof *s->buf);
    s->holds = calloc(s->keys, sizeof *s->holds);
    if (s->buf == NULL || s->holds == NULL) {
        ds_close(s);
        return XCS_ENOMEM;
    }
    *out = s;
    return XCS_OK;
}

/* A demand access: dc_get's hold, served as w1|w2|w3 from the key's copy. */
static int ds_get(void *h, int layer, int expert, const void **data, size_t *len)
{
    dshim *s = h;
    const unsigned char *p;
    assert(s != NULL && data != NULL && len != NULL);
    int rc = dc_get(s->c, layer, expert, (const void **)&p);
    if (rc != DC_OK)
        return xcs_code(rc);
    size_t k = (size_t)layer * (size_t)s->experts + (size_t)expert;
    if (s->buf[k] == NULL && (s->buf[k] = malloc(s->bytes)) == NULL) {
        dc_release(s->c, layer, expert);
        return XCS_ENOMEM;
    }
    memcpy(s->buf[k], p, s->w1);
    memcpy(s->buf[k] + s->w1, p + s->w1 + s->w3, s->w2);
    memcpy(s->buf[k] + s->w1 + s->w2, p + s->w1, s->w3);
    s->holds[k]++;
    *data = s->buf[k];
    *len = s->bytes;
    return XCS_OK;
}

/* Gives one hold back; the key's copy is freed with its last hold. */
static int ds_release(void *h, int layer, int expert)
{
    dshim *s = h;
    assert(s != NULL);
    int rc = dc_release(s->c, layer, expert);
    if (rc != DC_OK)
        return xcs_code(rc);
    size_t k = (size_t)layer * (size_t)s->experts + (size_t)expert;
    if (s->holds[k] > 0 && --s->holds[k] == 0) {
        free(s->buf[k]);
        s->buf[k] = NULL;
    }
    return XCS_OK;
}

/* A batch of one layer (the manifest's batch_layers = "one"): dc_load_layer
 * of its experts; a key of another layer is misuse.  Returns the loads. */
static int ds_getmany(void *h, const int *keys, int n)
{
    dshim *s = h;
    assert(s != NULL && (keys != NULL || n == 0));
    if (n <= 0)
        return n == 0 ? 0 : XCS_EMISUSE;
    int *ex = malloc((size_t)n * sizeof *ex), rc = DC_OK;
    if (ex == NULL)
        return XCS_ENOMEM;
    for (int i = 0; i < n; i++) {
        ex[i] = keys[2 * i + 1];
        if (keys[2 * i] != keys[0])
            rc = DC_EARG;
    }
    if (rc == DC_OK)
        rc = dc_load_layer(s->c, keys[0], ex, n);
    free(ex);
    return xcs_code(rc);
}

/* Sets the key's pin flag (a resident key only). */
static int ds_pin(void *h, int layer, int expert)
{
    assert(h != NULL);
    return xcs_code(dc_pin(((dshim *)h)->c, layer, expert));
}

/* Clears the key's pin flag (a resident key only). */
static int ds_unpin(void *h, int layer, int expert)
{
    assert(h != NULL);
    return xcs_code(dc_unpin(((dshim *)h)->c, layer, expert));
}

/* Starts a new window of every counter. */
static int ds_reset(void *h)
{
    assert(h != NULL);
    dc_reset_stats(((dshim *)h)->c);
    return XCS_OK;
}

/* The cache's counters; payload bytes and slots in flight it does not keep. */
static int ds_stats(void *h, xcs_stats *out)
{
    dc_stats st;
    assert(h != NULL && out != NULL);
    dc_get_stats(((dshim *)h)->c, &st);
    memset(out, 0, sizeof *out);
    const struct { int bit; uint64_t v; } kept[] = {
        {XCS_REQUESTS, st.requests}, {XCS_HITS, st.hits}, {XCS_MISSES, st.misses},
        {XCS_EVICTIONS, st.evictions}, {XCS_IO_BYTES, st.bytes_read},
        {XCS_PREFETCH_LOADS, st.batch_loads}, {XCS_LOAD_FAILURES, st.load_failures},
        {XCS_SHORT_READS, st.short_reads}, {XCS_IO_ERRORS, st.io_errors},
        {XCS_READY_SLOTS, st.resident}};
    for (size_t i = 0; i < sizeof kept / sizeof kept[0]; i++) {
        out->present |= 1ull << kept[i].bit;
        out->v[kept[i].bit] = kept[i].v;
    }
    return XCS_OK;
}

/* 1 if the key is resident, 0 if not, XCS_EMISUSE outside the layout. */
static int ds_resident(void *h, int layer, int expert)
{
    int r = 0;
    assert(h != NULL);
    int rc = dc_query(((dshim *)h)->c, layer, expert, &r, NULL, NULL);
    return rc != DC_OK ? xcs_code(rc) : r;
}

/* The cache's own invariant check: 0 sound, 1 with its reason in msg. */
static int ds_check(void *h, char *msg, size_t cap)
{
    assert(h != NULL);
    return dc_check(((dshim *)h)->c, msg, cap) != 0;
}

static const xcs_vtable table = {
    .abi = XCS_ABI,
    .name = "directcache",
    .open = ds_open,
    .close = ds_close,
    .get = ds_get,
    .release = ds_release,
    .getmany = ds_getmany,
    .pin = ds_pin,
    .unpin = ds_unpin,
    .reset = ds_reset,
    .stats = ds_stats,
    .resident = ds_resident,
    .check = ds_check,
};

/* The table the gate calls. */
const xcs_vtable *xcs_shim(void)
{
    return &table;
}
