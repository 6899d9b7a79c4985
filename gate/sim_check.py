"""The C trace simulator against the oracle's policies: exact counts on a shipped trace.

``engine.sim.simulate`` (``xc_sim.c``: the live cache's own policy code over
a routing trace) must give, for every policy, both modes, global and
per-layer capacity at a few sizes, exactly the counts the oracle's
simulator (``oracle.sim``) gives: requests, hits, misses, compulsory
misses, reloads and evictions.  The policies are the oracle's registry
(every policy at its defaults, plus :data:`VARIANTS` of those present)
and Belady.  The oracle is pure Python, so its counts for the slice of the
trace the gate replays are pinned in ``gate/sim_counts.json`` (written by
``python -m xcache.gate.sim_check --repin``; ``tests/replay/
test_differential.py`` recomputes every pinned row from the oracle, so the
pin cannot drift from it).  A case with no pinned row (a policy added
since) is judged against the oracle's simulator run there and then, so a
new policy needs no pin; re-pinning only makes the gate faster.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
#: The shipped trace the check replays, and how many of its tokens.
TRACE = ROOT / "fixtures" / "traces" / "olmoe_299.jsonl"
TOKENS = 60
#: The pinned oracle counts.
COUNTS_FILE = Path(__file__).with_name("sim_counts.json")
COUNTS = ("requests", "hits", "misses", "compulsory", "reloads", "evictions")
#: Non-default parameters run besides each policy's defaults (a spec of a
#: policy the registry lacks is left out).
VARIANTS = ("lfru:sample=2,seed=5", "hotness:period=3", "s3fifo:small=50")


def policies() -> tuple[str, ...]:
    """Every oracle policy (then its :data:`VARIANTS`), then Belady."""
    from xcache.oracle.policies import POLICIES  # noqa: PLC0415

    out: list[str] = []
    for name in POLICIES:
        out.append(name)
        out += [v for v in VARIANTS if v.split(":")[0] == name]
    return (*out, "belady")
#: (mode, slots, per_layer): below, near and above the working set of a
#: layer, global and per layer.
SIZES: tuple[tuple[str, int, bool], ...] = (
    ("plain", 150, False), ("step", 256, False), ("plain", 500, False),
    ("step", 700, False), ("plain", 12, True), ("step", 20, True),
)


def _trace() -> Any:
    """The first :data:`TOKENS` tokens of :data:`TRACE`, as an oracle Trace."""
    from xcache.oracle.traces import Trace, load_trace  # noqa: PLC0415

    full = load_trace(TRACE)
    keep = full.token < full.token.min() + TOKENS
    return Trace(full.token[keep], full.layer[keep], full.expert[keep],
                 full.n_layers, full.n_experts, full.top_k)


def cases() -> list[dict[str, Any]]:
    """Every (policy, mode, slots, per_layer) the check runs, without counts."""
    return [{"policy": p, "mode": m, "slots": s, "per_layer": pl}
            for p in policies() for m, s, pl in SIZES]


def oracle_row(case: dict[str, Any], trace: Any = None) -> dict[str, Any]:
    """One case with the oracle simulator's counts (slow: pure Python)."""
    from xcache.oracle.sim import simulate  # noqa: PLC0415

    trace = _trace() if trace is None else trace
    r = simulate(trace, case["policy"], case["slots"], case["mode"],
                 case["per_layer"])
    reloads = r.misses - r.compulsory
    return {**case, **{k: (reloads if k == "reloads" else int(getattr(r, k)))
                       for k in COUNTS}}


def oracle_counts() -> dict[str, Any]:
    """The oracle simulator's counts for every case (slow: pure Python)."""
    trace = _trace()
    rows = [oracle_row(c, trace) for c in cases()]
    return {"trace": TRACE.name, "tokens": TOKENS, "accesses": len(trace.keys()),
            "cases": rows}


def load_counts(path: Path = COUNTS_FILE) -> dict[str, Any]:
    """The pinned counts."""
    return json.loads(Path(path).read_text(encoding="utf-8"))


def run_checks(engine: Any, report: Any, path: Path = COUNTS_FILE) -> list[str]:
    """Replay every case through the C simulator; one check line in ``report``."""
    import importlib  # noqa: PLC0415

    sim = importlib.import_module("xcache.engine.sim")
    pinned = load_counts(path)
    trace = _trace()
    wrong = []
    key = ("policy", "mode", "slots", "per_layer")
    rows = {tuple(c[k] for k in key): c for c in pinned["cases"]}
    unpinned = [c for c in cases() if tuple(c[k] for k in key) not in rows]
    judged = [rows[tuple(c[k] for k in key)] for c in cases()
              if tuple(c[k] for k in key) in rows]
    judged += [oracle_row(c, trace) for c in unpinned]
    for c in judged:
        got = sim.simulate(trace, c["policy"], c["slots"], c["mode"],
                           c["per_layer"])
        if c["policy"] in ("lru", "fifo"):  # the queue path gives the same
            slow = sim.simulate(trace, c["policy"], c["slots"], c["mode"],
                                c["per_layer"], fast_path=False)
            if slow != got:
                got = {**got, "misses": f"{got['misses']} (to_evict: "
                       f"{slow['misses']})"}
        bad = [k for k in COUNTS if got[k] != c[k]]
        if bad:
            wrong.append(f"{c['policy']} {c['mode']} {c['slots']} slots"
                         f"{' per layer' if c['per_layer'] else ''}: "
                         + ", ".join(f"{k} {got[k]} (oracle {c[k]})" for k in bad))
    name = "sim-counts"
    late = (f" ({len(unpinned)} unpinned, run by the oracle now: "
            f"{', '.join(dict.fromkeys(c['policy'] for c in unpinned))})"
            if unpinned else "")
    detail = (f"{len(judged)} runs of {pinned['accesses']} accesses "
              f"({pinned['trace']}), every count equal to the oracle's{late}"
              if not wrong else f"{len(wrong)} of {len(judged)} runs "
              f"differ; first: {wrong[0]}")
    report.add(name, "engine", name, not wrong, detail, 0, len(wrong))
    return [name, curve_check(sim, trace, report)]


#: The exact curves judged: (policy, mode, per_layer).
CURVES: tuple[tuple[str, str, bool], ...] = tuple(
    (p, m, pl) for p in ("lru", "belady") for m in ("plain", "step")
    for pl in (False, True))


def curve_check(sim: Any, trace: Any, report: Any) -> str:
    """The one-pass exact curves (``xc_curve.c``) against the oracle's
    reference (``oracle.curves``: stack distances, plain Python) at every
    size from 1 to the working set: one check line."""
    import numpy as np  # noqa: PLC0415

    from xcache.oracle.curves import trace_curve  # noqa: PLC0415

    wrong = []
    for policy, mode, per_layer in CURVES:
        want = trace_curve(trace, policy, mode, per_layer)
        got = np.asarray(sim.curve(trace, policy, mode=mode,
                                   per_layer=per_layer))
        if got.shape != want.shape or not np.array_equal(got, want):
            n = min(len(got), len(want))
            at = next((i for i in range(n) if got[i] != want[i]), n)
            wrong.append(f"{policy} {mode}{' per layer' if per_layer else ''}"
                         f": {len(got)} sizes (oracle {len(want)}), first "
                         f"differing at {at + 1} slots: "
                         f"{got[at] if at < len(got) else '-'} misses "
                         f"(oracle {want[at] if at < len(want) else '-'})")
    name = "sim-curves"
    detail = (f"{len(CURVES)} exact curves (LRU and Belady, plain and step, "
              "global and per layer), every size equal to the oracle's"
              if not wrong else f"{len(wrong)} of {len(CURVES)} curves differ;"
              f" first: {wrong[0]}")
    report.add(name, "engine", name, not wrong, detail, 0, len(wrong))
    return name


def main(argv: Sequence[str] | None = None) -> int:
    """``--repin``: recompute the oracle's counts and write the pinned file."""
    ap = argparse.ArgumentParser(prog="python -m xcache.gate.sim_check",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--repin", action="store_true",
                    help=f"rewrite {COUNTS_FILE.name} from the oracle")
    ns = ap.parse_args(argv)
    if not ns.repin:
        ap.print_help()
        return 2
    doc = oracle_counts()
    COUNTS_FILE.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {COUNTS_FILE}: {len(doc['cases'])} runs of "
          f"{doc['accesses']} accesses")
    return 0


if __name__ == "__main__":
    sys.exit(main())
