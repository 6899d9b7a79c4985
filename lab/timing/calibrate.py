"""Calibrate the time lab's model on this machine: ``replay.py time --calibrate MODEL``.

The disk model is measured through the engine's own reads, so it includes
what a miss costs the cache beyond the bytes (its slot, its publish).  A
container of ``2 n`` experts is written in ``TMPDIR`` (one layer, each
expert one contiguous 4 KiB-aligned run), and for each queue depth ``q`` of
:data:`DEPTHS` an :class:`engine.ExpertCache` with ``q`` readers (and a
queue deep enough for every key) holds ``n`` slots: the steady state a
decoding engine runs in.  A warm-up prefetch of the first half touches
every slot (first-touch page faults and zeroing are paid there, never in a
timed round), and each round then prefetches the other half and drains:
every read evicts a key of the half before and lands in a slot used
before (:class:`Warm`), in a shuffled order (seeded): a decode's reads land
at scattered offsets, and reads in file order would let the layers under
the cache (a drive's or a virtual disk's host read-ahead) serve them
faster than a decode ever sees.  Each round is timed twice at every depth:
with the consumer computing (a busy loop, looking at the counters every
:data:`POLL_S`) until the reads end -- the tier's main curve, the steady
state of a decode, where the consumer holds a core the readers' copies
cannot use -- and with it blocked in ``drain`` (the tier's ``waiting``
curve).  With ``q`` reads always in flight, one request
takes ``tau = q T / n`` seconds.  That at two request sizes -- 4 KiB and
the expert size -- gives each depth's latency and bandwidth (``tau =
latency + q s / bandwidth``, two equations).  The device tier is read with
O_DIRECT (the container opened ``direct=True``; if the file system refuses
it, the pages are dropped with ``posix_fadvise`` before every round
instead, and the model file says so); the page-cache tier from a
container read once before.  Best of :data:`ROUNDS` rounds each, every
round visiting every depth in a rotating order; a throughput that falls
with depth is taken for a disturbed round and raised to the shallower
depth's (:func:`envelope`).

Each tier's ``own_read_factor``: a synchronous miss (``get`` and
``release`` in a cache with no readers, the same ``n`` slots over ``2 n``
experts, warmed the same way: depth 0 of the rotation, at the expert
size) less a hit, over the main curve's ``tau`` at depth 1.  Each tier's
``compute_factor``: the busy-loop kernel's real cost (at the nominal
expert seconds) while one and two readers read that tier, over its cost
alone (:func:`compute_factor`).

The compute model: ``access_s`` is timed as a loop of hits (``get`` and
``release`` of a resident expert); the calls' costs on a warm cache with
two readers (:func:`call_costs`): ``stream_s`` and ``stream_key_s`` from
streams of 1 and 8 resident keys, ``prefetch_s`` from prefetches of one
resident key, ``queue_s`` from prefetches of one missing key with the
readers idle (less the resident one), ``wake_s`` from split streams of one
missing key begun after :data:`STEP_S` of compute, as a decode step begins
them (the wait less the read's ``tau`` and a hit; docs/LABS.md says why),
and ``reserve_s`` from the begins of streams of 8 and of 1 missing keys
with both readers busy on 8 other reads (the difference over 7). Each is
the best of :data:`ROUNDS` rounds of the median over the round's calls.
``expert_s`` is what the busy-loop kernel of :func:`spin` really takes for
the nominal seconds asked (``--expert-s``, default 100 us), measured;
``layer_s`` is what ``--layer-s`` gives (default 0). ``page_cache_share``
is 0 (every miss a device read); pass ``--page-cache-share`` to the lab to
change it.
"""

from __future__ import annotations

import datetime
import json
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from xcache.lab.timing.model import Compute, Machine, Tier, write_model

#: Queue depths measured.
DEPTHS = (1, 2, 3, 4, 6, 8)
#: Rounds per measurement (the best is kept).
ROUNDS = 9
#: The small request size of the two.
SMALL = 4096
#: Bytes of experts each round reads (the count is 64 to 256): short rounds,
#: so that the best of them is one no other process interrupted.
READ_BYTES = 16 << 20
TEMPLATE = "layers.{layer}.experts.{expert}.{tensor}"
#: Seconds the consumer computes (spins) between looks at a round's reads.
POLL_S = 10e-6
#: Compute before each stream timing ``wake_s``: readers idle that long
#: wake far slower than just after a read.
STEP_S = 40e-6
#: How the calibration's lines name a round's consumer.
MODE = {True: "computing", False: "waiting  "}


def write_container(path: Path, n: int, size: int) -> None:
    """One shard of ``n`` experts of ``size`` bytes, 4 KiB-aligned, random bytes."""
    header = {TEMPLATE.format(layer=0, expert=e, tensor="w"): {
        "dtype": "U8", "shape": [size], "data_offsets": [e * size, (e + 1) * size]}
        for e in range(n)}
    text = json.dumps(header).encode()
    text += b" " * (-(8 + len(text)) % 4096)
    with open(path, "wb") as f:
        f.write(len(text).to_bytes(8, "little") + text)
        block = os.urandom(size)
        for _ in range(n):
            f.write(block)
        f.flush()
        os.fsync(f.fileno())


def open_cache(cont: Any, n: int, threads: int, slots: int | None = None) -> Any:
    """A cache over the one-layer container of ``n`` experts, ``threads`` readers.

    ``slots`` defaults to every expert and one more.
    """
    from xcache.engine import ExpertCache  # noqa: PLC0415

    return ExpertCache(cont, n_slots=slots if slots is not None else n + 1,
                       top_k=1, layers=(0,), n_experts=n,
                       expert_template=TEMPLATE, tensors=("w",),
                       io_threads=threads, io_depth=max(n, 1), batch_threads=1,
                       policy="lru")


def halves(n: int) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """The keys of experts ``0..n-1`` and of ``n..2n-1`` of the one layer."""
    return [(0, e) for e in range(n)], [(0, e) for e in range(n, 2 * n)]


class Warm:
    """One depth's cache in the steady state: ``n`` slots over ``2 n`` experts.

    Opened once and kept for every round: the warm-up read of the first
    half touches every slot, and each :meth:`round` reads the other half,
    every read evicting a key of the half before (LRU: the older half) into
    a slot read into before.  ``q`` readers prefetch; ``q == 0`` is the
    synchronous miss: the consumer's own ``get`` and ``release`` of each key.
    """

    def __init__(self, cont: Any, n: int, q: int) -> None:
        from xcache.engine import _lib  # noqa: PLC0415

        self.n, self.q = n, q
        self.cache = open_cache(cont, 2 * n, q, slots=n)
        self._stats = _lib.ffi().new("xc_stats *")
        self._stats_fn = _lib.lib().xc_cache_stats
        self.halves = halves(n)
        self.rng = random.Random(q)
        self._read(self.halves[0], False)
        self.next = 1

    def round(self, drop: Path | None, busy: bool = True) -> tuple[float, dict]:
        """Seconds per request of one round with ``q`` in flight; its counters.

        ``busy``: the consumer computes (spins, looking every :data:`POLL_S`)
        until the round's reads have ended, as in a decode; else it blocks in
        ``drain`` (the tiers' ``waiting`` curves).
        """
        from xcache.engine import drop_page_cache  # noqa: PLC0415

        if drop is not None:
            drop_page_cache(drop)
        c = self.cache
        keys = list(self.halves[self.next])
        self.rng.shuffle(keys)
        self.next ^= 1
        c.reset_stats()
        t0 = time.perf_counter()
        self._read(keys, busy)
        dt = time.perf_counter() - t0
        return max(self.q, 1) * dt / self.n, c.stats()

    def _read(self, keys: list[tuple[int, int]], busy: bool) -> None:
        """Read ``keys``: the consumer's gets (no readers) or a prefetch and wait."""
        c = self.cache
        if self.q == 0:
            for layer, e in keys:
                c.get(layer, e).release()
            return
        c.prefetch(keys)
        if busy:  # the consumer computes while the readers read
            while self._ended() < self.n:
                spin(POLL_S)
        c.drain()

    def _ended(self) -> int:
        """Reads of this round published or failed (one C call, no dict)."""
        self._stats_fn(self.cache._ptr, self._stats)
        return int(self._stats.prefetch_loads + self._stats.load_failures)

    def close(self) -> None:
        """Close the cache."""
        self.cache.close()


def per_depth(cont: Any, n: int, drop: Path | None, own: bool = False
              ) -> dict[tuple[int, bool], tuple[float, dict]]:
    """Each (depth, busy)'s best seconds per request over :data:`ROUNDS` rounds.

    With the counters of that round.  Every round visits every depth, the
    order rotating from round to round, and at each depth reads once with
    the consumer computing and once with it blocked (the order alternating),
    so a burst of other work on the machine falls on different depths and
    modes; the best round is the least disturbed one (the machine as if
    idle).  Each depth keeps its one :class:`Warm` cache from round to round.
    ``own``: depth 0 too, the synchronous miss (key ``(0, True)``), in the
    same rotation.
    """
    depths = ((0,) if own else ()) + tuple(DEPTHS)
    warm = {q: Warm(cont, n, q) for q in depths}
    try:
        seen: dict[tuple[int, bool], list[tuple[float, dict]]] = {}
        for r in range(ROUNDS):
            k = r % len(depths)
            for q in depths[k:] + depths[:k]:
                modes = (True,) if q == 0 else (
                    (True, False) if r % 2 == 0 else (False, True))
                for busy in modes:
                    seen.setdefault((q, busy), []).append(warm[q].round(drop, busy))
    finally:
        for w in warm.values():
            w.close()
    out = {}
    for key, runs in seen.items():
        runs.sort(key=lambda x: x[0])
        out[key] = runs[0]
    return out


def envelope(taus: dict[int, float]) -> dict[int, float]:
    """Per-request times whose throughput ``q / tau`` never falls as ``q`` rises.

    ``q`` requests in flight can always be served as ``q - 1`` plus one
    waiting its turn, so a measured fall is a disturbed round: the time is
    lowered to the shallower depth's throughput.
    """
    out: dict[int, float] = {}
    best_rate = 0.0
    for q in sorted(taus):
        rate = max(q / taus[q], best_rate)
        out[q] = q / rate
        best_rate = rate
    return out


def curve(by_q: dict[int, list[float]], big: int) -> Tier:
    """A tier's curve from each depth's [tau at SMALL, tau at ``big``] (enveloped)."""
    small = envelope({q: v[0] for q, v in by_q.items()})
    large = envelope({q: v[1] for q, v in by_q.items()})
    lat, bw = zip(*(fit(small[q], large[q], q, big) for q in sorted(by_q)),
                  strict=True)
    return Tier(tuple(sorted(by_q)), lat, bw)


def fit(tau_small: float, tau_big: float, q: int, big: int) -> tuple[float, float]:
    """(latency, bandwidth) from tau at SMALL and ``big`` bytes, q in flight."""
    dt = max(tau_big - tau_small, 1e-12)
    bw = q * (big - SMALL) / dt
    lat = max(0.0, tau_small - q * SMALL / bw)
    return lat, bw


def spin(seconds: float) -> None:
    """The synthetic compute kernel: busy for ``seconds`` (holds the GIL)."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def spin_cost(nominal: float, n: int = 2001) -> float:
    """What :func:`spin` of ``nominal`` seconds really takes: the median of ``n`` calls.

    Each call is timed alone, so a call another process interrupted is one
    outlier, not a share of the whole.
    """
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        spin(nominal)
        times.append(time.perf_counter() - t0)
    times.sort()
    return times[n // 2]


def compute_factor(cont: Any, n: int, nominal: float, drop: Path | None = None,
                   depths: tuple[int, ...] = (1, 2), rounds: int = ROUNDS) -> float:
    """How much slower :func:`spin` of ``nominal`` seconds runs while readers read.

    For each depth ``q`` of ``depths`` a :class:`Warm` cache over ``cont``
    (``2 n`` experts, ``n`` slots); each round times ``n`` calls of the
    kernel alone, then prefetches the other half and times calls while the
    ``q`` readers read it (until every read has ended).  The factor is the
    least per-round mean of the calls during reads over the least per-round
    mean alone (the least disturbed rounds of each), pooled over the
    depths; at least 1.
    """
    alone: list[float] = []
    during: list[float] = []
    for q in depths:
        w = Warm(cont, n, q)
        try:
            for _ in range(rounds):
                xs = []
                for _ in range(n):
                    t0 = time.perf_counter()
                    spin(nominal)
                    xs.append(time.perf_counter() - t0)
                alone.append(sum(xs) / len(xs))
                if drop is not None:
                    from xcache.engine import drop_page_cache  # noqa: PLC0415

                    drop_page_cache(drop)
                keys = list(w.halves[w.next])
                w.rng.shuffle(keys)
                w.next ^= 1
                c = w.cache
                c.reset_stats()
                c.prefetch(keys)
                ys = []
                while w._ended() < n:
                    t0 = time.perf_counter()
                    spin(nominal)
                    ys.append(time.perf_counter() - t0)
                c.drain()
                if ys:
                    during.append(sum(ys) / len(ys))
        finally:
            w.close()
    if not during:
        return 1.0
    return max(1.0, min(during) / min(alone))


def hit_cost(cont: Any, n: int) -> float:
    """Seconds of one hit (get and release of a resident expert), best of 9 loops."""
    c = open_cache(cont, n, 0)
    keys = [(0, e) for e in range(n)]
    c.prefetch(keys)
    best = float("inf")
    for _ in range(9):
        t0 = time.perf_counter()
        for layer, e in keys:
            c.get(layer, e).release()
        best = min(best, (time.perf_counter() - t0) / n)
    c.close()
    return best


def _best_median(rounds: list[list[float]]) -> float:
    """The least of the rounds' medians (the least disturbed round's typical call)."""
    return min(statistics.median(r) for r in rounds if r)


def call_costs(cont: Any, n: int, access_s: float, tau_s: float
               ) -> dict[str, float]:
    """The costs of the calls: ``stream_s`` and the others of the module docs.

    ``cont`` holds ``2 n`` experts (in the page cache), ``access_s`` is a
    hit's seconds and ``tau_s`` a reader's read's at depth 1 of the
    container's expert size (long enough that the ``get`` waits for it).
    A cache of ``n`` slots with two readers, one half resident (each round
    reads the other, which the next round finds resident):
    streams of 1 and of 8 resident keys (each released), prefetches of
    one resident key, and -- per key of the other half, the readers idle
    (drained) -- every other one prefetched, then got (``queue_s``), the
    rest a split stream after :data:`STEP_S` of compute (``wake_s``).
    Times below zero (a disturbed difference) are 0.
    """
    c = open_cache(cont, 2 * n, 2, slots=n)
    try:
        hv = halves(n)
        c.prefetch(hv[0])
        c.drain()
        s1: list[list[float]] = []
        s8: list[list[float]] = []
        p1: list[list[float]] = []
        pm: list[list[float]] = []
        gw: list[list[float]] = []
        sr: list[list[float]] = []
        sm: list[list[float]] = []
        for r in range(ROUNDS):
            here = hv[r % 2]  # resident; the round reads the other half
            one = [[k] for k in here]
            eight = [here[i:i + 8] for i in range(0, n - 7, 8)]
            for groups, out in ((one, s1), (eight, s8)):
                xs = []
                for keys in groups:
                    t0 = time.perf_counter()
                    for x in c.stream(keys):
                        x.release()
                    xs.append(time.perf_counter() - t0)
                out.append(xs)
            xs = []
            for keys in one:
                t0 = time.perf_counter()
                c.prefetch(keys, speculative=True)
                xs.append(time.perf_counter() - t0)
            p1.append(xs)
            xs, ys = [], []
            # each evicts one of ``here``
            for i, (layer, e) in enumerate(hv[(r + 1) % 2]):
                c.drain()
                if i % 2 == 0:  # the hand-off's cost to the consumer
                    t0 = time.perf_counter()
                    c.prefetch([(layer, e)], speculative=True)
                    t1 = time.perf_counter()
                    c.get(layer, e).release()
                    xs.append(t1 - t0)
                    continue
                spin(STEP_S)  # as a decode step meets the readers
                t1 = time.perf_counter()
                for x in c.stream([(layer, e)]):
                    ys.append(time.perf_counter() - t1)
                    x.release()
            pm.append(xs)
            gw.append(ys)
            c.drain()
            # with both readers busy on 8 reads: the begin of a stream of 8
            # missing keys, then of one more (no wake-up): per key the difference
            now = hv[(r + 1) % 2]  # resident now; the other half is missing
            gone = hv[r % 2]
            xs, ys = [], []
            for i in range(0, n - 16, 17):
                c.prefetch(gone[i:i + 8])
                t0 = time.perf_counter()
                st8 = c.stream(gone[i + 8:i + 16])
                t1 = time.perf_counter()
                st1 = c.stream(gone[i + 16:i + 17])
                t2 = time.perf_counter()
                for s in (st8, st1):
                    for x in s:
                        x.release()
                c.drain()
                xs.append(t1 - t0)
                ys.append(t2 - t1)
            sm.append(xs)
            sr.append(ys)
            c.drain()
            if xs:
                c.prefetch(now)  # the next round finds this half resident
                c.drain()
    finally:
        c.close()
    t1, t8 = _best_median(s1), _best_median(s8)
    per_key = (t8 - t1) / 7
    prefetch = _best_median(p1)
    return {"stream_key_s": max(0.0, per_key - access_s),
            "stream_s": max(0.0, t1 - per_key),
            "prefetch_s": max(0.0, prefetch - access_s),
            "queue_s": max(0.0, _best_median(pm) - prefetch),
            "wake_s": max(0.0, _best_median(gw) - tau_s - access_s),
            "reserve_s": (max(0.0, (_best_median(sm) - _best_median(sr)) / 7)
                          if any(sm) else 0.0)}


def calibrate(expert_bytes: int = 131072, expert_s: float = 1e-4,
              layer_s: float = 0.0, folder: str | None = None,
              say: Any = print) -> Machine:
    """Measure this machine (docs in the module); the model."""
    from xcache.engine import Container  # noqa: PLC0415

    tmp = Path(tempfile.mkdtemp(prefix="xc-calibrate-", dir=folder))
    load0 = os.getloadavg()[0]
    try:
        # tier -> busy -> depth -> [tau at SMALL, tau at expert_bytes]
        tiers: dict[str, dict[bool, dict[int, list[float]]]] = {
            "device": {True: {}, False: {}}, "page_cache": {True: {}, False: {}}}
        notes: list[str] = []
        n_of: dict[int, int] = {}
        own: dict[str, float] = {}
        slowed: dict[str, float] = {}
        for size in (SMALL, expert_bytes):
            n = requests(size)
            n_of[size] = n
            path = tmp / f"experts-{size}.safetensors"
            write_container(path, 2 * n, size)
            cont = Container(str(path), direct=True)
            drop = None
            if not cont.direct_active:
                notes.append(f"O_DIRECT refused ({cont.direct_note}): device "
                             "reads after posix_fadvise(DONTNEED)")
                cont.close()
                cont = Container(str(path))
                drop = path
            got = per_depth(cont, n, drop, own=size == expert_bytes)
            if size == expert_bytes:
                slowed["device"] = compute_factor(cont, n, expert_s, drop)
            for (q, busy), (tau, s) in sorted(got.items()):
                if q == 0:
                    own["device"] = tau
                    say(f"  device     {size:>7d} B  synchronous miss: "
                        f"{tau * 1e6:8.1f} us (misses {s['misses']}, "
                        f"evictions {s['evictions']})")
                    continue
                tiers["device"][busy].setdefault(q, []).append(tau)
                say(f"  device     {size:>7d} B  qd {q} {MODE[busy]}: "
                    f"{tau * 1e6:8.1f} us/request (device_loads "
                    f"{s['device_loads']}, page_cache_loads "
                    f"{s['page_cache_loads']}, evictions {s['evictions']})")
            cont.close()
            with open(path, "rb") as f:  # warm the page cache
                while f.read(1 << 24):
                    pass
            cont = Container(str(path))
            got = per_depth(cont, n, None, own=size == expert_bytes)
            for (q, busy), (tau, s) in sorted(got.items()):
                if q == 0:
                    own["page_cache"] = tau
                    say(f"  page cache {size:>7d} B  synchronous miss: "
                        f"{tau * 1e6:8.1f} us (misses {s['misses']}, "
                        f"evictions {s['evictions']})")
                    continue
                tiers["page_cache"][busy].setdefault(q, []).append(tau)
                say(f"  page cache {size:>7d} B  qd {q} {MODE[busy]}: "
                    f"{tau * 1e6:8.1f} us/request (page_cache_loads "
                    f"{s['page_cache_loads']}, evictions {s['evictions']})")
            if size == expert_bytes:
                slowed["page_cache"] = compute_factor(cont, n, expert_s)
                access = hit_cost(cont, n)
                calls = call_costs(cont, n, access,
                                   tiers["page_cache"][True][1][1])
            cont.close()
        say("  calls: " + ", ".join(f"{k} {v * 1e6:.2f} us"
                                    for k, v in calls.items()))
        built = {}
        for name, modes in tiers.items():
            main, waiting = (curve(modes[b], expert_bytes) for b in (True, False))
            factor = max(own[name] - access, 1e-9) / main.tau(1, expert_bytes)
            built[name] = Tier(main.qd, main.latency_s, main.bandwidth_Bps, factor,
                               waiting, slowed[name])
        compute = Compute(expert_s=spin_cost(expert_s), layer_s=layer_s,
                          access_s=access, **calls)
        source = {"calibrated": datetime.datetime.now(datetime.timezone.utc)
                  .isoformat(timespec="seconds"),
                  "host": os.uname().nodename, "folder": str(tmp.parent),
                  "load_before": round(load0, 2),
                  "load_after": round(os.getloadavg()[0], 2),
                  "cpus": os.cpu_count(), "nominal_expert_s": expert_s,
                  "requests": {str(k): v for k, v in n_of.items()},
                  "synchronous_miss_s": own,
                  "slots": "warm: n slots over 2 n experts, every slot read "
                           "into before a timed round",
                  "notes": notes}
        return Machine(built["device"], built["page_cache"], compute, 0.0,
                       expert_bytes, source)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def requests(size: int) -> int:
    """Experts per round at request size ``size`` (the container holds twice that)."""
    return max(64, min(256, READ_BYTES // size))


def scratch_bytes(expert_bytes: int) -> int:
    """Bytes the calibration writes in TMPDIR (each expert's header ~100 B)."""
    return sum(2 * requests(s) * (s + 100) + 4096 for s in (SMALL, expert_bytes))


def run_calibration(path: str, expert_bytes: int | None, prog: str,
                    quiet: bool = False, expert_s: float | None = None,
                    layer_s: float | None = None) -> int:
    """The ``--calibrate`` command: measure, write ``path``, print the model; 0 or 2."""
    size = expert_bytes or 131072
    if size < 4096 * 2 or size % 4096:
        print(f"{prog}: --expert-bytes: {size} is not a multiple of 4096 of at "
              "least 8192 (the calibration's requests are 4 KiB-aligned)",
              file=sys.stderr)
        return 2
    def say(line: str) -> None:
        if not quiet:
            print(line, flush=True)

    say(f"calibrating: experts of {size} B and {SMALL} B, queue depths "
        f"{', '.join(map(str, DEPTHS))}, best of {ROUNDS}")
    try:
        m = calibrate(size, expert_s if expert_s is not None else 1e-4,
                      layer_s or 0.0, os.environ.get("TMPDIR"), say)
        write_model(m, path)  # whole, or nothing of it
    except OSError as e:
        print(f"{prog}: --calibrate: {e}", file=sys.stderr)
        return 2
    for name in ("device", "page_cache"):
        t = m.tier(name)
        for label, c in (("", t), (" (consumer waiting)", t.while_waiting())):
            text = ", ".join(f"qd {q} {c.throughput(q, size) / 1e6:.0f}"
                             for q in c.qd)
            print(f"{name}: MB/s at {size} B{label}: {text}")
    c = m.compute
    print("own reads (a synchronous miss over a reader's): " + ", ".join(
        f"{name} x{m.tier(name).own_read_factor:.2f}"
        for name in ("device", "page_cache")))
    print("compute while readers read (the kernel's cost over alone): " + ", ".join(
        f"{name} x{m.tier(name).compute_factor:.2f}"
        for name in ("device", "page_cache")))
    print(f"compute: expert {c.expert_s * 1e6:.1f} us, layer {c.layer_s * 1e6:.1f} us, "
          f"access {c.access_s * 1e6:.2f} us; calls: stream {c.stream_s * 1e6:.2f} + "
          f"{c.stream_key_s * 1e6:.2f}/key, prefetch {c.prefetch_s * 1e6:.2f}, queue "
          f"{c.queue_s * 1e6:.2f}, reserve {c.reserve_s * 1e6:.2f}, wake "
          f"{c.wake_s * 1e6:.2f} us; load "
          f"{m.source['load_before']} -> {m.source['load_after']}")
    print(f"wrote {path}")
    return 0
