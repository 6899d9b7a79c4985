"""The C trace simulator against the oracle's policies: exact counts on a shipped trace.

``engine.sim.simulate`` (``xc_sim.c``: the live cache's own policy code over
a routing trace) must give, for every policy, both modes, global and
per-layer capacity at a few sizes, exactly the counts the oracle's
simulator (``oracle.sim``) gives: requests, hits, misses, compulsory
misses, reloads and evictions.  The oracle is pure Python, so its counts
for the slice of the trace the gate replays are pinned in
``gate/sim_counts.json`` (written by ``python -m xcache.gate.sim_check
--repin``; ``tests/replay/test_differential.py`` recomputes them from the
oracle, so the pin cannot drift from it).  The gate runs only the C side.
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
#: Every policy, with non-default parameters where they exist, and Belady.
POLICIES = ("lru", "fifo", "lfu", "lfru", "lfru:sample=2,seed=5", "hotness",
            "hotness:period=3", "s3fifo", "s3fifo:small=50", "arc", "belady")
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
            for p in POLICIES for m, s, pl in SIZES]


def oracle_counts() -> dict[str, Any]:
    """The oracle simulator's counts for every case (slow: pure Python)."""
    from xcache.oracle.sim import simulate  # noqa: PLC0415

    trace = _trace()
    rows = []
    for c in cases():
        r = simulate(trace, c["policy"], c["slots"], c["mode"], c["per_layer"])
        reloads = r.misses - r.compulsory
        rows.append({**c, **{k: (reloads if k == "reloads" else
                                 int(getattr(r, k))) for k in COUNTS}})
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
    for c in pinned["cases"]:
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
    detail = (f"{len(pinned['cases'])} runs of {pinned['accesses']} accesses "
              f"({pinned['trace']}), every count equal to the oracle's"
              if not wrong else f"{len(wrong)} of {len(pinned['cases'])} runs "
              f"differ; first: {wrong[0]}")
    report.add(name, "engine", name, not wrong, detail, 0, len(wrong))
    return [name]


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
