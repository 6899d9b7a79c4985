/*
 * shim.c -- the skeleton of an adapter (docs/OUTSIDE_CACHES.md): copy this
 * folder, then fill in the entries your cache has.
 *
 * As it stands it opens nothing but itself and declares nothing
 * (xcs.toml), so `python replay.py --cache examples/skeleton OUT` runs
 * every scenario and reports every contract N/A, naming what it lacks.
 * Each TODO below is one entry of xcs_vtable (gate/outside/xcs_shim.h has
 * the contract of each); declare the capability in xcs.toml when you fill
 * its entry in.
 */
#include "xcs_shim.h"

#include <assert.h>
#include <stdlib.h>

/* TODO: #include "your_cache.h", and keep your cache's handle here. */
typedef struct skeleton {
    int n_slots;
    xcs_options options;  /* the scenario's options: top_k, direct, ... */
} skeleton;

/* Opens a cache over the layout: the files, each expert's pieces (path,
 * offset, length), the slot count and size.  Returns 0 and *out, or a
 * negative XCS_E* code with *out untouched. */
static int skel_open(const xcs_layout *layout, void **out)
{
    assert(layout != NULL && out != NULL);
    skeleton *s = calloc(1, sizeof *s);
    if (s == NULL)
        return XCS_ENOMEM;
    s->n_slots = layout->n_slots;  /* TODO: open your cache here */
    /* The scenario's options (xcs_shim.h xcs_options): honour those
     * xcs.toml declares under options = [...]; refuse (XCS_EMISUSE) one
     * your cache cannot honour.  top_k is the model's, always given. */
    s->options = *layout->options;
    *out = s;
    return XCS_OK;
}

/* Frees the cache and everything it opened; NULL is ignored. */
static void skel_close(void *h)
{
    free(h);  /* TODO: close your cache here */
}

/* Fills *out: a counter your cache keeps has its present bit set. */
static int skel_stats(void *h, xcs_stats *out)
{
    (void)h;
    assert(out != NULL);
    out->present = 0;  /* TODO: e.g. out->v[XCS_REQUESTS] = ...; and its bit */
    return XCS_OK;
}

static const xcs_vtable table = {
    .abi = XCS_ABI,
    .name = "skeleton",
    .open = skel_open,
    .close = skel_close,
    .stats = skel_stats,
    /* TODO, each with its capability in xcs.toml: .get and .release
     * (op:get, op:hold), .getmany (op:getmany), .prefetch (op:prefetch),
     * .drain (op:drain), .pin and .unpin (pins), .reset (op:reset_stats),
     * .resident (fact:resident), .check (op:check). */
};

/* The table the gate calls: the one symbol a shim must define. */
const xcs_vtable *xcs_shim(void)
{
    return &table;
}
