"""The engine mutants: small realistic bugs, each with the contract it breaks.

Each :class:`Mutant` is one edit of one engine file: ``original`` must occur
exactly once in ``engine/csrc/<file>`` (a path such as ``../cache.py`` names
the Python face), and the mutant is that text replaced by ``replacement``.
The ids are stable: a mutant replay does not catch is a missing scenario, not
a catalogue edit.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

#: Every contract tag the catalogue must cover (docs/QUALITY.md, "Mutation").
CONTRACTS: tuple[str, ...] = (
    "victim", "publish", "short-read", "chunking", "counters", "adjusted-hits",
    "reset", "holds-pins", "getmany", "readahead-order", "policy-lru",
    "policy-fifo", "policy-lfu", "policy-lfru", "policy-hotness",
    "policy-s3fifo", "policy-arc", "reader-check", "index-check", "io-retry",
    "trace", "check", "bounds", "inflight-wait", "stream-claim",
)


@dataclass(frozen=True)
class Mutant:
    """One planted bug: replace ``original`` (occurring once) in ``file``."""

    id: str
    file: str
    original: str
    replacement: str
    description: str
    contract: str

    def path(self, engine_dir: Path) -> Path:
        """The mutated file inside the engine folder ``engine_dir``."""
        p = (Path(engine_dir) / "csrc" / self.file).resolve()
        if not p.is_relative_to(Path(engine_dir).resolve()):
            raise NotApplicable(f"{self.id}: {self.file} is outside the engine "
                                "folder")
        return p


class NotApplicable(Exception):
    """The mutant's snippet does not occur exactly once in its file."""


def apply_mutant(m: Mutant, engine_dir: Path) -> None:
    """Plant mutant ``m`` in the engine folder ``engine_dir`` (edits its file).

    Raises NotApplicable naming the mutant, the file and how many times the
    snippet occurs when that is not exactly once.
    """
    p = m.path(engine_dir)
    if not p.is_file():
        raise NotApplicable(f"{m.id}: no file {m.file} under {engine_dir}/csrc")
    text = p.read_text(encoding="utf-8")
    n = text.count(m.original)
    if n != 1:
        raise NotApplicable(f"{m.id}: its snippet occurs {n} times in "
                            f"{m.file} (it must occur once)")
    p.write_text(text.replace(m.original, m.replacement), encoding="utf-8")


def _m(id: str, file: str, original: str, replacement: str, description: str,
       contract: str) -> Mutant:
    return Mutant(id, file, original, replacement, description, contract)


CATALOGUE: tuple[Mutant, ...] = (
    # -- victim choice and reservation ------------------------------------
    _m("M01", "xc_slot.c",
       "if (s->state != XC_SLOT_READY || SLOT_PROTECTED(s))\n        return 0;",
       "if (s->state != XC_SLOT_READY)\n        return 0;",
       "victim choice ignores holds and pins", "holds-pins"),
    _m("M02", "xc_slot.c",
       "for (i = c->empty_lo; i < c->n_slots; i++)\n"
       "        if (c->slots[i].state == XC_SLOT_EMPTY)\n"
       "            break;\n    c->empty_lo = i;\n",
       "for (i = c->n_slots; i-- > 0;)\n"
       "        if (c->slots[i].state == XC_SLOT_EMPTY)\n"
       "            break;\n    if (i == (size_t)-1)\n        i = c->n_slots;\n",
       "an empty slot is taken from the top, not the lowest", "victim"),
    _m("M03", "xc_slot.c",
       "    oq_sweep(c, 1); /* no untold slot is left: this recurses once */\n"
       "    return xc_slot_victim(c);\n",
       "    for (i = 0; i < c->n_slots; i++)\n"
       "        if (c->slots[i].state == XC_SLOT_READY &&\n"
       "            !SLOT_PROTECTED(&c->slots[i]))\n"
       "            return (int32_t)i; /* untold, never told */\n"
       "    return -1;\n",
       "untold (held-back) inserts become victim candidates", "readahead-order"),
    _m("M04", "xc_slot.c",
       "        c->index[s->key] = -1;\n        xc_policy_evict(&c->pol, s->key);",
       "        xc_policy_evict(&c->pol, s->key);",
       "an evicted key stays in the index (stale lookup)", "victim"),
    _m("M05", "xc_slot.c",
       "        c->stats.evictions++;\n        c->evictions_since_open++;",
       "        c->evictions_since_open++;",
       "evictions are not counted in the window", "counters"),
    # -- publish and short reads ------------------------------------------
    _m("M06", "xc_slot.c",
       "if (rc == XC_OK) {\n        s->state = XC_SLOT_READY;",
       "if (rc == XC_OK || rc == XC_E_SHORT_READ) {\n        s->state = XC_SLOT_READY;",
       "a slot whose read came back short is published", "short-read"),
    _m("M07", "xc_io.c",
       "            if (eof_ok)\n                return XC_OK;\n"
       "            return fail_short(path, offset, len, offset + done);",
       "            return XC_OK;",
       "end of file after part of a read ends it quietly (partial then EOF)",
       "short-read"),
    _m("M08", "xc_io.c",
       "    if (at + got < need_end)\n"
       "        return fail_short(path, want_off, want_len, at + got);\n",
       "",
       "a widened (O_DIRECT) read that ends before the payload is accepted",
       "short-read"),
    _m("M09", "xc_load.c",
       "for (at = begin; at < end && rc == XC_OK;) {",
       "for (at = begin; at < end;) {",
       "a failed chunk does not end the run: a later chunk's success hides it",
       "chunking"),
    _m("M10", "xc_load.c",
       "if (!__builtin_add_overflow(at - at % ld->chunk_bytes,",
       "if (!__builtin_add_overflow(at,",
       "chunks are cut chunk_bytes after the run start, not at multiples",
       "chunking"),
    _m("M11", "xc_load.c",
       "        *asked += stop - at;",
       "        *asked += ld->chunk_bytes ? ld->chunk_bytes : stop - at;",
       "io_bytes counts whole chunks, not the bytes asked", "chunking"),
    _m("M12", "xc_slot.c",
       "        s->generation++;\n",
       "",
       "a republished slot keeps its generation (old references stay valid)",
       "publish"),
    _m("M13", "xc_slot.c",
       "s->freq = kind == XC_KIND_GET || kind == XC_KIND_STREAM ? 1 : 0;",
       "s->freq = 1;",
       "a prefetched expert is published with freq 1", "publish"),
    _m("M14", "xc_slot.c",
       "    xc_slot_finish(c, si, rc, payload_off, asked, ns, kind, src);\n"
       "    pthread_cond_broadcast(&c->ended);\n",
       "    xc_slot_finish(c, si, rc, payload_off, asked, ns, kind, src);\n",
       "a demand read that ends wakes no waiter", "inflight-wait"),
    # -- counters and windows ---------------------------------------------
    _m("M15", "xc_slot.c",
       "    c->stats.requests++;\n    c->stats.misses++;",
       "    c->stats.misses++;",
       "a miss is not counted as a request", "counters"),
    _m("M16", "xc_slot.c",
       "        if (rc == XC_E_SHORT_READ)\n            cs->short_reads++;",
       "        if (rc != XC_E_SHORT_READ)\n            cs->short_reads++;",
       "short reads and I/O errors are counted the wrong way round", "counters"),
    _m("M17", "xc_slot.c",
       "    cs->io_bytes += asked_bytes;",
       "    if (rc == XC_OK)\n        cs->io_bytes += asked_bytes;",
       "io_bytes leaves out the bytes asked by failed loads", "counters"),
    _m("M18", "xc_slot.c",
       "        if (s->unused_prefetch)\n"
       "            c->stats.prefetch_evicted_unused++;",
       "        if (s->unused_prefetch && s->freq)\n"
       "            c->stats.prefetch_evicted_unused++;",
       "an unused prefetch evicted is not counted", "counters"),
    _m("M19", "xc_slot.c",
       "    if (s->window != c->window) {",
       "    if (s->window > c->window) {",
       "a load reserved before reset_stats counts in the new window", "reset"),
    _m("M20", "xc_check.c",
       "    c->window++; /* loads reserved before now belong to the closed window */\n",
       "",
       "reset_stats does not close the window of loads under way", "reset"),
    _m("M21", "xc_check.c",
       "        c->slots[i].unused_prefetch = 0;\n        c->slots[i].unused_spec = 0;",
       "        c->slots[i].unused_spec = 0;",
       "reset_stats keeps the unused-prefetch marks", "reset"),
    # -- adjusted hits -----------------------------------------------------
    _m("M22", "xc_slot.c",
       "    if (s->unused_prefetch) {\n        s->unused_prefetch = 0;\n"
       "        c->stats.prefetch_first_uses++;",
       "    if (s->unused_prefetch) {\n        c->stats.prefetch_first_uses++;",
       "every use of a prefetched expert counts as its first use",
       "adjusted-hits"),
    _m("M23", "../cache.py",
       'd["adjusted_hits_exact"] = d["hits"] - d["prefetch_first_uses"]',
       'd["adjusted_hits_exact"] = d["hits"] - d["prefetch_loads"]',
       "exact adjusted hits subtract every prefetch load", "adjusted-hits"),
    _m("M24", "../cache.py",
       'd["adjusted_hits_aggregate"] = max(d["hits"] - d["prefetch_loads"], 0)',
       'd["adjusted_hits_aggregate"] = d["hits"] - d["prefetch_first_uses"]',
       "aggregate adjusted hits subtract first uses, not loads",
       "adjusted-hits"),
    # -- holds and pins ----------------------------------------------------
    _m("M25", "xc_core.h",
       "#define SLOT_PROTECTED(s) ((s)->holds != 0 || (s)->pins != 0)",
       "#define SLOT_PROTECTED(s) ((s)->holds != 0)",
       "a pinned expert can be chosen as a victim", "holds-pins"),
    _m("M26", "xc_cache.c",
       "    else\n        c->slots[si].pins--;",
       "    else\n        c->slots[si].pins = 0;",
       "unpin drops every pin of the key, not one", "holds-pins"),
    _m("M27", "xc_cache.c",
       "(unsigned)ref->generation);\n    }\n    s->holds--;",
       "(unsigned)ref->generation);\n    }",
       "release does not drop the hold", "holds-pins"),
    # -- getmany -----------------------------------------------------------
    _m("M28", "xc_batch.c",
       "        c->slots[si].holds++; /* protected for the rest of this call */\n"
       "        xc_slot_note(c, &c->slots[si]); /* no longer a policy candidate */\n"
       "        prot[n_prot++] = si;\n",
       "        xc_slot_note(c, &c->slots[si]); /* no longer a policy candidate */\n",
       "getmany does not protect the batch's own resident keys", "getmany"),
    _m("M29", "xc_batch.c",
       "        *out_count = async ? n_resv : n_pub;",
       "        *out_count = n_resv;",
       "getmany returns the reservations, not the loads published", "getmany"),
    _m("M30", "xc_batch.c",
       "        if (c->seen[key] == seq) {",
       "        if (c->seen[key] == seq && si < 0) {",
       "a key named twice in one batch is taken again (touched twice)", "getmany"),
    # -- bounds ------------------------------------------------------------
    _m("M31", "xc_load.c",
       "        expert >= ld->n_experts)",
       "        expert > ld->n_experts)",
       "expert n_experts is accepted as a key (off by one)", "bounds"),
    _m("M32", "xc_load.c",
       "if (lo == ld->n_layers || ld->layers[lo] != layer || expert < 0 ||",
       "if (lo == ld->n_layers || expert < 0 ||",
       "a layer that is not a MoE layer maps to the next one", "bounds"),
    # -- get of an in-flight key, streams ---------------------------------
    _m("M33", "xc_slot.c",
       "        else\n            pthread_cond_wait(&c->ended, &c->mu);",
       "        else\n            break;",
       "get of an in-flight key reads it again instead of waiting",
       "inflight-wait"),
    _m("M34", "xc_slot.c",
       "        waited = 1;\n",
       "",
       "a hit after waiting is recorded as a plain hit", "inflight-wait"),
    _m("M35", "xc_slot.c",
       "        if (c->slots[si].owner == OWNER_STREAM)\n"
       "            xc_slot_claim_read(",
       "        if (c->slots[si].owner == OWNER_CLAIMED)\n"
       "            xc_slot_claim_read(",
       "get waits on a stream's unread reservation instead of claiming it",
       "stream-claim"),
    _m("M36", "xc_slot.c",
       "    xc_slot_finish(c, r.slot, r.rc, r.payload_off, r.asked_bytes, r.ns,\n"
       "                   XC_KIND_STREAM, r.src);",
       "    xc_slot_finish(c, r.slot, r.rc, r.payload_off, r.asked_bytes, r.ns,\n"
       "                   XC_KIND_PREFETCH, r.src);",
       "a claimed stream read is published as a prefetch", "stream-claim"),
    # -- read-ahead and stream stamp order --------------------------------
    _m("M37", "xc_batch.c",
       "            xc_slot_stamp(c, rv[i].slot);\n",
       "",
       "prefetch does not stamp ticks at reservation (completion order wins)",
       "readahead-order"),
    _m("M38", "xc_stream.c",
       "            xc_slot_stamp(c, si);\n",
       "",
       "a stream's misses are not stamped in the order given", "readahead-order"),
    # -- policies ----------------------------------------------------------
    _m("M39", "xc_policy_lru.c",
       "for (k = s->q.head; k != XC_KNIL; k = s->kl.next[k])",
       "for (k = s->q.tail; k != XC_KNIL; k = s->kl.prev[k])",
       "lru evicts the most recently used", "policy-lru"),
    _m("M40", "xc_policy_fifo.c",
       "    s->tick[row->key] = row->insert_tick;\n"
       "    xc_kl_insert_by(&s->kl, &s->q, row->key, s->tick);\n"
       "    s->on[row->key] = 1;\n}\n\n"
       "const xc_policy_ops xc_policy_fifo_ops = {\n"
       "    \"fifo\", {NULL}, {0}, fifo_init, fifo_fini, fifo_to_evict,\n"
       "    xc_policy_nop, xc_policy_row_nop, fifo_on_insert,",
       "    s->tick[row->key] = row->last_use;\n"
       "    xc_kl_insert_by(&s->kl, &s->q, row->key, s->tick);\n"
       "    s->on[row->key] = 1;\n}\n\n"
       "const xc_policy_ops xc_policy_fifo_ops = {\n"
       "    \"fifo\", {NULL}, {0}, fifo_init, fifo_fini, fifo_to_evict,\n"
       "    xc_policy_nop, fifo_on_insert, fifo_on_insert,",
       "fifo orders by last use (lru) instead of insertion", "policy-fifo"),
    _m("M41", "xc_policy_lfu.c",
       "xc_bset_place(p->priv, row->key, row->freq, row->last_use);",
       "xc_bset_place(p->priv, row->key, row->freq, UINT64_MAX - row->last_use);",
       "lfu breaks frequency ties by the most recent use", "policy-lfu"),
    _m("M42", "xc_policy_lfru.c",
       "if (i == 0 || better(&c, &best))",
       "if (i == 0 ? (v->nth(v->ctx, 0, &best), better(&c, &best))\n"
       "                   : better(&c, &best))",
       "lfru's first sample is never taken (candidate 0 is the default)",
       "policy-lfru"),
    _m("M43", "xc_policy_hotness.c",
       "xc_hset_place(&h->bs, row->key, cnt(p, row->key), row->last_use);",
       "xc_hset_place(&h->bs, row->key, cnt(p, row->key), row->slot);",
       "hotness ties go to the first candidate, not the least recent",
       "policy-hotness"),
    _m("M44", "xc_policy_s3fifo.c",
       "q->promote = (unsigned)p->param[P_PROMOTE];",
       "q->promote = 1;",
       "s3fifo's small-queue pass promotes entries hit once", "policy-s3fifo"),
    _m("M45", "xc_policy_arc.c",
       "(n1 > tp || (n1 == tp && from_b2))",
       "(n1 >= tp)",
       "arc evicts from T1 when it is exactly at its target p", "policy-arc"),
    # -- the reader's checks ----------------------------------------------
    _m("M46", "xc_header.c",
       "        if (t[i].begin < expected)",
       "        if (t[i].end < expected)",
       "the overlap check compares the tensor's end, not its begin",
       "reader-check"),
    _m("M47", "xc_header.c",
       "    if (want != sh->file_bytes) {",
       "    if (want > sh->file_bytes) {",
       "trailing bytes after the data buffer are accepted", "reader-check"),
    _m("M48", "xc_header.c",
       "        if (t[i].end - t[i].begin != t[i].nbits)",
       "        if (t[i].end - t[i].begin < t[i].nbits)",
       "a range larger than dtype and shape need is accepted", "reader-check"),
    # -- index checks ------------------------------------------------------
    _m("M49", "xc_index.c",
       "    if (seen != ix.n_map) {",
       "    if (seen > ix.n_map) {",
       "an index entry whose shard lacks the tensor is accepted",
       "index-check"),
    _m("M50", "xc_index.c",
       "    if (ix.have_total && ix.total != sum) {",
       "    if (ix.have_total && ix.total < sum) {",
       "metadata.total_size above the tensors' bytes is accepted",
       "index-check"),
    # -- the I/O retry loop -----------------------------------------------
    _m("M51", "xc_io.c",
       "if ((n == -EINTR || n == -EAGAIN) && ++retries < XC_IO_MAX_RETRIES)",
       "if (n == -EAGAIN && ++retries < XC_IO_MAX_RETRIES)",
       "an interrupted read (EINTR) fails the load instead of retrying",
       "io-retry"),
    _m("M52", "xc_io.c",
       "        done += (size_t)n;\n        retries = 0;\n    }",
       "        done += (size_t)n;\n        retries = 0;\n        break;\n    }",
       "a partial read is not continued: the rest of the buffer is never read",
       "io-retry"),
    # -- trace recording ---------------------------------------------------
    _m("M53", "xc_trace.c",
       "    r[16] = (uint8_t)kind;\n    r[17] = (uint8_t)outcome;",
       "    r[16] = (uint8_t)outcome;\n    r[17] = (uint8_t)kind;",
       "trace records swap kind and outcome", "trace"),
    _m("M54", "xc_slot.c",
       "    xc_trace_put(c, kind, XC_OUT_MISS, key);\n",
       "",
       "a get's miss is not recorded in the trace", "trace"),
    # -- check() itself ----------------------------------------------------
    _m("M55", "xc_check.c",
       "        if (s->last_use > c->tick)\n            CLOCK(\"clock.future\");",
       "        if (s->last_use >= c->tick)\n            CLOCK(\"clock.future\");",
       "check() reports INV-CLOCK on the most recently touched slot",
       "check"),
    _m("M56", "xc_check.c",
       "    if (stats->prefetch_first_uses + stats->prefetch_evicted_unused +\n"
       "            unused_resident(c) != stats->prefetch_loads)",
       "    if (stats->prefetch_first_uses + stats->prefetch_evicted_unused >\n"
       "            stats->prefetch_loads)",
       "check() no longer counts unused resident prefetches (INV-PREFETCH)",
       "check"),
)

#: Mutants replay does not catch yet, each with the reason.  The CI step
#: (`python -m xcache.hunt.mutants --allow-known`) fails only on a survivor that
#: is not listed here; each entry goes when a scenario kills its mutant.
KNOWN_SURVIVORS: dict[str, str] = {}
