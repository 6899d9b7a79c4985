"""Calibrate the time lab's model on this machine: ``replay.py time --calibrate MODEL``.

The disk model is measured through the engine's own reads, so it includes
what a miss costs the cache beyond the bytes (its slot, its publish).  A
container of experts is written in ``TMPDIR`` (one layer, each expert one
contiguous 4 KiB-aligned run), and for each queue depth ``q`` of
:data:`DEPTHS` an :class:`engine.ExpertCache` with ``q`` readers (and a
queue deep enough for every key) prefetches every expert once and drains:
with ``q`` reads always in flight, one request takes ``tau = q T / n``
seconds.  That at two request sizes -- 4 KiB and the expert size --
gives each depth's latency and bandwidth (``tau = latency + q s /
bandwidth``, two equations).  The device tier is read with O_DIRECT (the
container opened ``direct=True``; if the file system refuses it, the
pages are dropped with ``posix_fadvise`` before every round instead, and
the model file says so); the page-cache tier from a container read once
before.  Best of :data:`ROUNDS` rounds each, every round visiting every
depth in a rotating order; a throughput that falls with depth is taken for
a disturbed round and raised to the shallower depth's (:func:`envelope`).

The compute model: ``access_s`` is timed as a loop of hits (``get`` and
``release`` of a resident expert); ``expert_s`` is what the busy-loop
kernel of :func:`spin` really takes for the nominal seconds asked
(``--expert-s``, default 100 us), measured; ``layer_s`` is what
``--layer-s`` gives (default 0).  ``page_cache_share`` is 0 (every miss a
device read); pass ``--page-cache-share`` to the lab to change it.
"""

from __future__ import annotations

import datetime
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from lab.timing.model import Compute, Machine, Tier, write_model

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


def open_cache(cont: Any, n: int, threads: int) -> Any:
    """A cache of every expert of the one-layer container, ``threads`` readers."""
    from engine import ExpertCache  # noqa: PLC0415

    return ExpertCache(cont, n_slots=n + 1, top_k=1, layers=(0,), n_experts=n,
                       expert_template=TEMPLATE, tensors=("w",),
                       io_threads=threads, io_depth=max(n, 1), batch_threads=1)


def one_round(cont: Any, n: int, q: int, drop: Path | None) -> tuple[float, dict]:
    """Seconds per request of one round with ``q`` in flight; the counters."""
    from engine import drop_page_cache  # noqa: PLC0415

    if drop is not None:
        drop_page_cache(drop)
    c = open_cache(cont, n, q)
    t0 = time.perf_counter()
    c.prefetch([(0, e) for e in range(n)])
    c.drain()
    dt = time.perf_counter() - t0
    s = c.stats()
    c.close()
    return q * dt / n, s


def per_depth(cont: Any, n: int, drop: Path | None) -> dict[int, tuple[float, dict]]:
    """Each depth's best seconds per request over :data:`ROUNDS` rounds, and counters.

    Every round visits every depth, the order rotating from round to round,
    so a burst of other work on the machine falls on different depths; the
    best round is the least disturbed one (the machine as if idle).
    """
    seen: dict[int, list[tuple[float, dict]]] = {}
    for r in range(ROUNDS):
        k = r % len(DEPTHS)
        for q in DEPTHS[k:] + DEPTHS[:k]:
            seen.setdefault(q, []).append(one_round(cont, n, q, drop))
    out = {}
    for q, runs in seen.items():
        runs.sort(key=lambda x: x[0])
        out[q] = runs[0]
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


def calibrate(expert_bytes: int = 131072, expert_s: float = 1e-4,
              layer_s: float = 0.0, folder: str | None = None,
              say: Any = print) -> Machine:
    """Measure this machine (docs in the module); the model."""
    from engine import Container  # noqa: PLC0415

    tmp = Path(tempfile.mkdtemp(prefix="xc-calibrate-", dir=folder))
    load0 = os.getloadavg()[0]
    try:
        tiers: dict[str, dict[int, list[float]]] = {"device": {}, "page_cache": {}}
        notes: list[str] = []
        n_of: dict[int, int] = {}
        for size in (SMALL, expert_bytes):
            n = max(64, min(256, READ_BYTES // size))
            n_of[size] = n
            path = tmp / f"experts-{size}.safetensors"
            write_container(path, n, size)
            cont = Container(str(path), direct=True)
            drop = None
            if not cont.direct_active:
                notes.append(f"O_DIRECT refused ({cont.direct_note}): device "
                             "reads after posix_fadvise(DONTNEED)")
                cont.close()
                cont = Container(str(path))
                drop = path
            for q, (tau, s) in sorted(per_depth(cont, n, drop).items()):
                tiers["device"].setdefault(q, []).append(tau)
                say(f"  device     {size:>7d} B  qd {q}: {tau * 1e6:8.1f} us/request "
                    f"(device_loads {s['device_loads']}, page_cache_loads "
                    f"{s['page_cache_loads']})")
            cont.close()
            with open(path, "rb") as f:  # warm the page cache
                while f.read(1 << 24):
                    pass
            cont = Container(str(path))
            for q, (tau, s) in sorted(per_depth(cont, n, None).items()):
                tiers["page_cache"].setdefault(q, []).append(tau)
                say(f"  page cache {size:>7d} B  qd {q}: {tau * 1e6:8.1f} us/request "
                    f"(page_cache_loads {s['page_cache_loads']})")
            if size == expert_bytes:
                access = hit_cost(cont, n)
            cont.close()
        built = {}
        for name, by_q in tiers.items():
            small = envelope({q: v[0] for q, v in by_q.items()})
            big = envelope({q: v[1] for q, v in by_q.items()})
            lat, bw = zip(*(fit(small[q], big[q], q, expert_bytes)
                            for q in sorted(by_q)), strict=True)
            built[name] = Tier(tuple(sorted(by_q)), lat, bw)
        compute = Compute(expert_s=spin_cost(expert_s), layer_s=layer_s,
                          access_s=access)
        source = {"calibrated": datetime.datetime.now(datetime.timezone.utc)
                  .isoformat(timespec="seconds"),
                  "host": os.uname().nodename, "folder": str(tmp.parent),
                  "load_before": round(load0, 2),
                  "load_after": round(os.getloadavg()[0], 2),
                  "cpus": os.cpu_count(), "nominal_expert_s": expert_s,
                  "requests": {str(k): v for k, v in n_of.items()},
                  "notes": notes}
        return Machine(built["device"], built["page_cache"], compute, 0.0,
                       expert_bytes, source)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


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
    try:
        with open(path, "a", encoding="utf-8"):
            pass
    except OSError as e:
        print(f"{prog}: --calibrate {path}: cannot write it ({e.strerror or e})",
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
    except OSError as e:
        print(f"{prog}: --calibrate: {e}", file=sys.stderr)
        return 2
    write_model(m, path)
    for name in ("device", "page_cache"):
        t = m.tier(name)
        curve = ", ".join(f"qd {q} {t.throughput(q, size) / 1e6:.0f}"
                          for q in t.qd)
        print(f"{name}: MB/s at {size} B: {curve}")
    c = m.compute
    print(f"compute: expert {c.expert_s * 1e6:.1f} us, layer {c.layer_s * 1e6:.1f} us, "
          f"access {c.access_s * 1e6:.2f} us; load {m.source['load_before']} -> "
          f"{m.source['load_after']}")
    print(f"wrote {path}")
    return 0
