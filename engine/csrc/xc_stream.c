/*
 * xc_stream.c -- layer streaming: one layer's keys as a batch of gets that
 * hold, yielded hits first and then in completion order (docs/CACHE.md
 * "stream"; xc_cache.c tells why a reservation nobody reads is claimable).
 */
#include "xc_core.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

static void stream_free(xc_stream *stream)
{
    xc_free(stream->keys);
    xc_free(stream->slot);
    xc_free(stream->rc);
    xc_free(stream->err);
    xc_free(stream->state);
    xc_free(stream->done);
    xc_free(stream);
}

/*
 * stream begin: (1) validate the keys and refuse repeats, (2) count the
 * keys not resident; fewer than split_min_misses: plain gets in next(),
 * nothing changes here, (3) in the order given: READY is a hit (counted,
 * touched, held), INFLIGHT is left for next() to wait for, missing is a
 * miss reserved with its tick stamped now -- the clock a run of holding
 * gets would leave -- and its read queued (or kept for next() when the
 * ring is full or there are no readers); no slot: a plain get, last.
 */
int xc_cache_stream_begin(xc_cache *c, const int32_t *layers,
                          const int32_t *experts, size_t n, xc_stream **out)
{
    xc_stream *stream;
    size_t i, n_missing = 0, n_queued = 0;
    uint64_t seq;
    int rc;

    if (out == NULL || (n > 0 && (layers == NULL || experts == NULL)))
        return xc_fail(XC_E_MISUSE, -1, -1, -1,
                       "stream: NULL key arrays or out");
    if (n >= SIZE_MAX / sizeof(xc_error)) /* the largest per-key array */
        return xc_fail(XC_E_MISUSE, -1, -1, -1,
                       "stream: %zu keys is more than memory can index", n);
    stream = xc_calloc(1, sizeof *stream);
    if (stream != NULL) {
        stream->keys = xc_malloc((n + 1) * sizeof *stream->keys);
        stream->slot = xc_malloc((n + 1) * sizeof *stream->slot);
        stream->rc = xc_calloc(n + 1, sizeof *stream->rc);
        stream->err = xc_calloc(n + 1, sizeof *stream->err);
        stream->state = xc_calloc(n + 1, sizeof *stream->state);
        stream->done = xc_malloc((n + 1) * sizeof *stream->done);
    }
    if (stream == NULL || !stream->keys || !stream->slot || !stream->rc ||
        !stream->err || !stream->state || !stream->done) {
        if (stream)
            stream_free(stream);
        return xc_fail(XC_E_NOMEM, -1, -1, -1,
                       "stream: no memory for %zu keys", n);
    }
    stream->c = c;
    stream->n = n;
    /* (1) validate */
    for (i = 0; i < n; i++)
        if ((rc = xc_load_key(&c->ld, layers[i], experts[i],
                              &stream->keys[i])) != XC_OK) {
            stream_free(stream);
            return rc;
        }
    pthread_mutex_lock(&c->mu);
    seq = ++c->batch_seq;
    for (i = 0; i < n; i++) {
        uint32_t key = stream->keys[i];
        int32_t si = c->index[key];
        if (c->seen[key] == seq) {
            pthread_mutex_unlock(&c->mu);
            stream_free(stream);
            return xc_fail(XC_E_MISUSE, -1, layers[i], experts[i],
                           "stream: layer %d expert %d is named twice",
                           (int)layers[i], (int)experts[i]);
        }
        c->seen[key] = seq;
        /* (2) count what is not resident */
        n_missing += si < 0 || c->slots[si].state != XC_SLOT_READY;
    }
    stream->next_open = c->streams;
    c->streams = stream;
    if (n_missing < (size_t)c->split_min) {
        /* every item a plain get in next(): nothing is held for it now, so
         * an early end has nothing of it to give back */
        memset(stream->state, STREAM_ITEM_DEFER, n);
        stream->plain = 1;
        pthread_mutex_unlock(&c->mu);
        *out = stream;
        return XC_OK;
    }
    /* (3) hits, waits and reservations in the order given */
    for (i = 0; i < n; i++) {
        uint32_t key = stream->keys[i];
        int32_t si = c->index[key];
        if (si >= 0 && c->slots[si].state == XC_SLOT_READY) {
            xc_slot_hit(c, si, key);
            xc_trace_put(c, XC_KIND_STREAM, XC_OUT_HIT, key);
            stream->slot[i] = si;
            stream->state[i] = STREAM_ITEM_HIT;
        } else if (si >= 0) {
            stream->state[i] = STREAM_ITEM_FOREIGN;
        } else if ((si = xc_slot_miss_reserve(c, key)) < 0) {
            stream->state[i] = STREAM_ITEM_DEFER;
        } else {
            xc_trace_put(c, XC_KIND_STREAM, XC_OUT_MISS, key);
            xc_slot_stamp(c, si);
            stream->slot[i] = si;
            c->slots[si].owner = OWNER_STREAM;
            c->slots[si].owner_stream = stream;
            c->slots[si].owner_item = i;
            if (xc_readahead_push(c, si, key, XC_KIND_STREAM, stream, i)) {
                stream->state[i] = STREAM_ITEM_QUEUED;
                n_queued++;
            } else {
                if (c->n_io > 0)
                    c->stats.queue_fallbacks++;
                stream->state[i] = STREAM_ITEM_LOCAL;
            }
        }
    }
    stream->n_queued = n_queued;
    if (n_queued)
        pthread_cond_broadcast(&c->aq_work);
    pthread_mutex_unlock(&c->mu);
    *out = stream;
    return XC_OK;
}

/* Yields stream item i, which is STREAM_ITEM_DONE (mu held). */
static int stream_yield_done(xc_cache *c, xc_stream *stream, size_t i,
                             xc_ref *out, size_t *index)
{
    int32_t layer, expert;
    assert(xc_locked(&c->mu) && stream->c == c && i < stream->n &&
           stream->state[i] == STREAM_ITEM_DONE && out != NULL);
    stream->state[i] = STREAM_ITEM_YIELDED;
    if (index)
        *index = i;
    if (stream->rc[i] == XC_OK) {
        xc_slot_ref(c, stream->slot[i], out);
        return XC_OK;
    }
    if (stream->err[i].code == stream->rc[i])
        return xc_fail_copy(&stream->err[i]); /* the reader's: file, byte */
    xc_load_unkey(&c->ld, stream->keys[i], &layer, &expert);
    return xc_fail(stream->rc[i], -1, layer, expert,
                   "layer %d expert %d: streamed read failed (%s)",
                   (int)layer, (int)expert, xc_status_name(stream->rc[i]));
}

/* Plain get of stream item i (mu held): for the plain mode, keys another
 * read had in flight, and keys that found no slot. */
static int stream_get(xc_cache *c, xc_stream *stream, size_t i, xc_ref *out,
                      size_t *index)
{
    int32_t layer, expert;
    assert(xc_locked(&c->mu) && stream->c == c && i < stream->n &&
           stream->state[i] != STREAM_ITEM_YIELDED && out != NULL);
    stream->state[i] = STREAM_ITEM_YIELDED;
    if (index)
        *index = i;
    xc_load_unkey(&c->ld, stream->keys[i], &layer, &expert);
    return xc_get_locked(c, stream->keys[i], layer, expert,
                         XC_KIND_STREAM, out);
}

/*
 * stream next: (1) the hits, in the order given, (2) reads that have
 * completed, in completion order, (3) keys another read had in flight at
 * begin, once that read ended (a hit then, counted then; a plain get if
 * it failed), (4) our reads the ring could not take, read here, (5) wait
 * for the next completion, (6) keys that found no slot, as plain gets.
 */
int xc_cache_stream_next(xc_stream *stream, xc_ref *out, size_t *index)
{
    xc_cache *c = stream->c;
    size_t i;
    int rc;

    pthread_mutex_lock(&c->mu);
    if (stream->plain) {
        rc = XC_STREAM_END;
        if (stream->plain_next < stream->n)
            rc = stream_get(c, stream, stream->plain_next++, out, index);
        pthread_mutex_unlock(&c->mu);
        return rc;
    }
    for (;;) {
        int waiting = stream->n_queued > 0;
        /* (1) hits in order */
        for (; stream->hit_next < stream->n; stream->hit_next++)
            if (stream->state[stream->hit_next] == STREAM_ITEM_HIT) {
                i = stream->hit_next++;
                stream->state[i] = STREAM_ITEM_YIELDED;
                if (index)
                    *index = i;
                xc_slot_ref(c, stream->slot[i], out);
                pthread_mutex_unlock(&c->mu);
                return XC_OK;
            }
        /* (2) completions */
        if (stream->done_next < stream->n_done) {
            rc = stream_yield_done(c, stream,
                                   stream->done[stream->done_next++], out,
                                   index);
            pthread_mutex_unlock(&c->mu);
            return rc;
        }
        /* (3) another read's keys, once that read ended */
        for (i = 0; i < stream->n; i++) {
            int32_t si;
            if (stream->state[i] != STREAM_ITEM_FOREIGN)
                continue;
            si = c->index[stream->keys[i]];
            if (si >= 0 && c->slots[si].owner == OWNER_STREAM) {
                /* another stream's reservation nobody reads: read it */
                xc_slot_claim_read(c, c->slots[si].owner_stream,
                                     c->slots[si].owner_item);
                si = c->index[stream->keys[i]];
            }
            if (si >= 0 && c->slots[si].state != XC_SLOT_READY) {
                waiting = 1;
                continue;
            }
            rc = stream_get(c, stream, i, out, index);
            pthread_mutex_unlock(&c->mu);
            return rc;
        }
        /* (4) ours to read here; it lands on the completion list */
        for (i = 0; i < stream->n; i++)
            if (stream->state[i] == STREAM_ITEM_LOCAL)
                break;
        if (i < stream->n) {
            xc_slot_claim_read(c, stream, i);
            continue;
        }
        /* (5) wait for a completion */
        if (waiting) {
            pthread_cond_wait(&c->ended, &c->mu);
            continue;
        }
        /* (6) no slot at begin: plain gets, last */
        for (i = 0; i < stream->n; i++)
            if (stream->state[i] == STREAM_ITEM_DEFER) {
                rc = stream_get(c, stream, i, out, index);
                pthread_mutex_unlock(&c->mu);
                return rc;
            }
        pthread_mutex_unlock(&c->mu);
        return XC_STREAM_END;
    }
}

void xc_cache_stream_end(xc_stream *stream)
{
    xc_cache *c;
    size_t i;
    if (stream == NULL)
        return;
    c = stream->c;
    pthread_mutex_lock(&c->mu);
    /* reserved reads are ours: finish them, so no slot stays INFLIGHT */
    for (i = 0; i < stream->n; i++)
        if (stream->state[i] == STREAM_ITEM_LOCAL)
            xc_slot_claim_read(c, stream, i);
    while (stream->n_queued > 0)
        pthread_cond_wait(&c->ended, &c->mu);
    /* give back the holds of what was never yielded */
    for (i = 0; i < stream->n; i++)
        if (stream->state[i] == STREAM_ITEM_HIT ||
            (stream->state[i] == STREAM_ITEM_DONE && stream->rc[i] == XC_OK)) {
            assert(c->slots[stream->slot[i]].holds > 0); /* the stream's */
            c->slots[stream->slot[i]].holds--;
        }
    {
        xc_stream **pp = &c->streams;
        while (*pp != stream)
            pp = &(*pp)->next_open;
        *pp = stream->next_open;
    }
    pthread_mutex_unlock(&c->mu);
    stream_free(stream);
}

