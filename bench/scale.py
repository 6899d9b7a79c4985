"""Per-access cost at real-model scale: every policy, 1k to 32k slots.

Traces (plain mode, each access a get released at once):
- ``kimi``: a synthetic routing trace of Kimi-K3's shape, 92 MoE layers x
  384 experts, top-8 per token and layer (35,328 keys);
- ``deepseek``: the same of DeepSeek-V3's shape, 58 x 256, top-8 (14,848);
- ``olmoe``: the real trace fixtures/traces/olmoe_299.jsonl (1,024 keys, so
  its sizes are 256 and 768 slots, not 1k..32k).
Synthetic routing: per layer a fixed popularity (Zipf, exponent 1.0, over a
random permutation of the experts) whose hot set drifts by a random swap
every token; each (token, layer) takes 8 distinct experts by Gumbel top-k.

Simulator: ``engine.sim.simulate`` over the key array in memory, beside
libcachesim's ``process_trace`` of the same trace as an oracleGeneral file
in the same run (LRU, FIFO, LFU, ARC, S3-FIFO; libcachesim has no LFRU or
hotness, so those two show ours alone).  Every shared policy must report
libcachesim's misses exactly (docs/CACHE.md "Equal to libCacheSim";
tests/policies/test_libcachesim_cells.py checks them cell by cell).
libcachesim's ``process_trace`` has a start cost (reader and cache set-up,
about 0.3-0.6 s on this machine) that a short trace does not amortise, so
its rate is shown whole and net of that cost (the time of the trace's first
1,000 accesses alone).  Best of
``--rounds``.

Live cache: bench/scale_live.c on a 92 x 384 container of 64-byte experts,
opened through an io vtable whose reads return at once (no copy, no page
cache): ns per get+release hit (resident keys, shuffled: every slot's
memory in play), per miss (a cycle of keys never resident) and per hit of
8 resident keys in turn (the bookkeeping alone), C only; beside the
shuffled hit, its floor: the same keys walked over plain arrays of the
cache's sizes with one dependent random access per structure a hit
touches (index entry, slot record, policy node) and nothing else, so
``hit / floor`` is what the cache adds at that size and ``growth ours /
growth floor`` what it adds to the memory hierarchy's own growth.  Best
of ``--live-rounds`` (default 3), the hit, floor and hit-of-8 arms
alternating within each round.

Last lines: per policy, the growth of the simulator's ns per access and of
the live hit (with the floor's growth and their quotient) and miss cost
from the smallest to the largest size (goal <= 1.5x), and the live hit
cost at 32k slots (goal < 100 ns).
``--sizes``, ``--accesses`` and ``--rounds`` make bigger runs.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from xcache import fixtures  # noqa: E402
from xcache.engine._build import SEAM_SOURCES  # noqa: E402
from xcache.engine.sim import POLICIES as _SIM_POLICIES  # noqa: E402
from xcache.engine.sim import simulate  # noqa: E402
from xcache.oracle.policies import LIBCACHESIM  # noqa: E402
from xcache.oracle.traces import load_trace, write_oracle_general_keys  # noqa: E402

TRACES = Path(os.environ.get("XC_TRACES_DIR") or ROOT / "fixtures" / "traces")
#: Every policy of the engine's table (engine.sim.POLICIES without Belady).
POLICIES = tuple(p for p in _SIM_POLICIES if p != "belady")
SHAPES = {"kimi": (92, 384), "deepseek": (58, 256)}
TOP_K = 8


def synthetic(n_layers: int, n_experts: int, accesses: int, seed: int) -> np.ndarray:
    """Keys (layer * n_experts + expert) of a skewed, drifting top-8 trace."""
    rng = np.random.default_rng(seed)
    tokens = -(-accesses // (n_layers * TOP_K))
    logp = np.log(1.0 / np.arange(1, n_experts + 1))
    perm = np.stack([rng.permutation(n_experts) for _ in range(n_layers)])
    out = np.empty((tokens, n_layers, TOP_K), np.uint32)
    base = (np.arange(n_layers) * n_experts)[:, None]
    for t in range(tokens):
        a, b = rng.integers(0, n_experts, 2)
        layer = rng.integers(0, n_layers)
        perm[layer, [a, b]] = perm[layer, [b, a]]
        score = logp[None, :] + rng.gumbel(size=(n_layers, n_experts))
        top = np.argpartition(-score, TOP_K, axis=1)[:, :TOP_K]
        out[t] = base + np.take_along_axis(perm, top, axis=1)
    return out.reshape(-1)[:accesses]


def best(fn, rounds: int) -> tuple[float, int]:
    """Best wall time of ``rounds`` calls of fn, and its (equal) result."""
    times, res = [], None
    for _ in range(rounds):
        t0 = time.perf_counter()
        r = fn()
        times.append(time.perf_counter() - t0)
        assert res in (None, r), (res, r)
        res = r
    return min(times), res


def sim_rows(name: str, keys: np.ndarray, sizes: list[int], rounds: int,
             tmp: str) -> dict[tuple[str, int], float]:
    """Print simulator vs libcachesim rates; returns ns per access of ours."""
    try:
        import libcachesim as lcs
    except ImportError:  # pragma: no cover - the bench's environment has it
        lcs = None
    n = len(keys)
    path = os.path.join(tmp, f"{name}.oracleGeneral")
    write_oracle_general_keys(keys, path)
    theirs = {} if lcs is None else {p: getattr(lcs, c)
                                     for p, c in LIBCACHESIM.items()}
    tiny = os.path.join(tmp, f"{name}.head.oracleGeneral")
    write_oracle_general_keys(keys[:1000], tiny)
    n_keys = int(keys.max()) + 1
    ns: dict[tuple[str, int], float] = {}
    print(f"\n{name}: {n:,} accesses, {n_keys:,} keys")
    for slots in sizes:
        for policy in POLICIES:
            ours_s, ours_m = best(lambda p=policy, s=slots: simulate(
                keys, p, s, "plain")["misses"], rounds)
            ns[(policy, slots)] = ours_s / n * 1e9
            line = (f"  {policy:<8} {slots:>6} slots  miss ratio "
                    f"{ours_m / n:6.3f}  ours {n / ours_s / 1e6:7.2f} M/s")
            if policy in theirs:
                def run(p=policy, s=slots, f=path, m=n) -> int:
                    reader = lcs.TraceReader(f, lcs.TraceType.ORACLE_GENERAL_TRACE)
                    ratio, _ = theirs[p](cache_size=s).process_trace(reader)
                    return round(ratio * m)
                lcs_s, lcs_m = best(run, rounds)
                start, _ = best(lambda p=policy, s=slots: run(p, s, tiny, 1000),
                                rounds)
                net = max(lcs_s - start, 1e-9)
                assert lcs_m == ours_m, (policy, slots, ours_m, lcs_m)
                line += (f"  libcachesim {n / lcs_s / 1e6:6.2f} M/s, net of "
                         f"its start {n / net / 1e6:6.2f} M/s  ratio "
                         f"{lcs_s / ours_s:6.2f}x, net {net / ours_s:6.2f}x")
            print(line, flush=True)
    return ns


def live_rows(exe: Path, shard: Path, sizes: list[int], rounds: int,
              misses: int) -> dict[tuple[str, int], tuple[float, ...]]:
    """Print the live cache's C hit and miss cost per policy and size."""
    out: dict[tuple[str, int], tuple[float, ...]] = {}
    layers, experts = SHAPES["kimi"]
    print("\nlive cache, C, 92 x 384 container, reads that return at once:")
    for slots in sizes:
        for policy in POLICIES:
            res = subprocess.run([str(exe), str(shard), str(layers), str(experts),
                                  str(slots), policy, str(rounds), str(misses)],
                                 check=True,
                                 capture_output=True, text=True).stdout.split()
            hit, miss, hot = float(res[0]), float(res[1]), float(res[2])
            flo = float(res[5])
            out[(policy, slots)] = (hit, miss, hot, flo)
            print(f"  {policy:<8} {slots:>6} slots  hit {hit:7.1f} ns "
                  f"(floor {flo:6.1f}, {hit / flo:5.2f}x)  "
                  f"miss {miss:8.1f} ns  hit of 8 keys {hot:6.1f} ns", flush=True)
    return out


def container(tmp: Path) -> Path:
    """A 92 x 384 container of one 64-byte tensor per expert."""
    layers, experts = SHAPES["kimi"]
    spec = {
        "name": "scale-kimi", "seed": 92, "layers": list(range(layers)),
        "experts": experts, "top_k": TOP_K,
        "expert_template": "model.layers.{layer}.mlp.experts.{expert}.{tensor}",
        "expert_tensors": [{"name": "w.weight", "dtype": "U8", "shape": [1, 64]}],
        "layout": "contiguous", "shards": 1, "index": True,
        "spec_in_header": False,
    }
    fixtures.generate(spec, tmp / "kimi")
    return next((tmp / "kimi").glob("*.safetensors"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="1024,4096,16384,32768",
                    help="comma-separated slot counts (default 1k..32k)")
    ap.add_argument("--accesses", type=int, default=1_000_000,
                    help="accesses per synthetic trace (default 1 M)")
    ap.add_argument("--rounds", type=int, default=2,
                    help="best of this many runs (default 2)")
    ap.add_argument("--live-rounds", type=int, default=3,
                    help="live cache: best of this many rounds (default 3)")
    ap.add_argument("--live-misses", type=int, default=50_000,
                    help="misses per live round (default 50,000)")
    ap.add_argument("--skip-live", action="store_true")
    ap.add_argument("--skip-sim", action="store_true")
    a = ap.parse_args()
    sizes = [int(s) for s in a.sizes.split(",")]
    sim: dict[str, dict[tuple[str, int], float]] = {}
    live: dict[tuple[str, int], tuple[float, ...]] = {}
    with tempfile.TemporaryDirectory() as tmp_s:
        tmp = Path(tmp_s)
        if not a.skip_sim:
            for i, (name, (nl, ne)) in enumerate(SHAPES.items()):
                keys = synthetic(nl, ne, a.accesses, 1000 + i)
                sim[name] = sim_rows(name, keys, sizes, a.rounds, tmp_s)
            olmoe = load_trace(TRACES / "olmoe_299.jsonl")
            keys = np.tile(olmoe.keys(), 8).astype(np.uint32)
            sim["olmoe"] = sim_rows("olmoe", keys, [256, 768], a.rounds, tmp_s)
        if not a.skip_live:
            csrc = ROOT / "engine" / "csrc"
            exe = tmp / "scale_live"
            subprocess.run(["gcc", "-std=c11", "-D_GNU_SOURCE", "-O2", "-pthread",
                            "-I", str(csrc), str(ROOT / "bench" / "scale_live.c"),
                            *(str(p) for p in sorted(csrc.glob("*.c"))
                      if p.name not in SEAM_SOURCES), "-o", str(exe)],
                           check=True)
            live = live_rows(exe, container(tmp), sizes, a.live_rounds,
                             a.live_misses)
    lo, hi = sizes[0], sizes[-1]
    print(f"\ngrowth {lo} -> {hi} slots (goal <= 1.5x); live hit of 8 keys "
          f"at {hi} (goal < 100 ns):")
    for policy in POLICIES:
        parts = [f"sim {name} {d[(policy, hi)] / d[(policy, lo)]:.2f}x"
                 for name, d in sim.items() if (policy, hi) in d]
        if live:
            h0, m0, k0, f0 = live[(policy, lo)]
            h1, m1, k1, f1 = live[(policy, hi)]
            parts += [f"live hit {h1 / h0:.2f}x (floor {f1 / f0:.2f}x, "
                      f"ours / floor {(h1 / h0) / (f1 / f0):.2f})",
                      f"live miss {m1 / m0:.2f}x",
                      f"hit of 8 keys {k1 / k0:.2f}x, {k1:.1f} ns"]
        print(f"  {policy:<8} " + ", ".join(parts))


if __name__ == "__main__":
    main()
