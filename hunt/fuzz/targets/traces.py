"""Targets over a routing trace: ``replay.py lab`` and ``replay.py predict``.

Each case is one seed trace (every format ``oracle.traces.read_trace``
reads), changed (a JSONL line's field, raw bytes), or run with a hostile
option; predict's also with a changed trace as ``--train OTHER``.
"""

from __future__ import annotations

import json
from pathlib import Path

from hypothesis import strategies as st

from xcache.hunt.fuzz.case import PY, ROOT, SEED, Case, Target
from xcache.hunt.fuzz.mutate import _opt, byte_edit, dump_json, mutated_doc

LAB_OPTS = ["--policies", "lru", "--slots", "4", "--executor", "thread",
            "--workers", "1", "--quiet"]
PREDICT_OPTS = ["--predictors", "previous,pair", "--slots", "4", "--quiet"]

#: Trace seeds and the options each needs.
TRACES = {
    "trace.jsonl": [],
    "trace-megatron.jsonl": ["--format", "megatron"],
    "trace.txt": [],
    "trace.i32": ["--top-k", "2", "--layers", "2"],
    "trace.pairs": ["--format", "pairs"],
    "trace.csv": [],
    "trace.xctrace": [],
    "trace.oracleGeneral": [],
}
#: Options one target needs for one trace seed.
TRACE_TARGET_OPTS = {("lab", "trace.oracleGeneral"): ["--mode", "plain"]}


def _trace_args(d: Path, target: str) -> list[str]:
    """The trace file present in case folder ``d`` and its format options."""
    for name, opts in TRACES.items():
        if (d / name).exists():
            return [name, *opts, *TRACE_TARGET_OPTS.get((target, name), [])]
    raise AssertionError(f"no trace in {d}")


TARGETS = (
    Target("lab", lambda d: [PY, str(ROOT / "replay.py"), "lab",
                             *_trace_args(d, "lab"), "out", *LAB_OPTS], ()),
    Target("predict", lambda d: [PY, str(ROOT / "replay.py"), "predict",
                                 *_trace_args(d, "predict"), "out", *PREDICT_OPTS],
           ()),
)


@st.composite
def trace_case(draw: st.DrawFn, target: str, options: bool = True) -> Case:
    """lab / predict over one seed trace, changed, or (``options``) with a
    hostile option; ``target`` other than lab reads traces with steps."""
    # predict refuses an oracleGeneral trace whatever else is given (no steps)
    name = draw(st.sampled_from([t for t in TRACES if target == "lab"
                                 or t != "trace.oracleGeneral"]))
    data = (SEED / name).read_bytes()
    if options and draw(st.integers(0, 3)) == 0:
        opts = (["--top-k", "--layers", "--experts", "--slots", "--policies",
                 "--workers"] if target == "lab" else
                ["--top-k", "--layers", "--experts", "--slots", "--split",
                 "--budget", "--k", "--expert-bytes", "--predictors",
                 "--policy"])
        args, names = draw(_opt(opts))  # or the trace the option contradicts
        return Case(target, f"{name} with {' '.join(args)}", {name: data}, args,
                    names + (name,))
    if target == "predict" and options and draw(st.integers(0, 4)) == 0:
        # --train OTHER: a second trace, changed, beside an unchanged one
        new_b, note = draw(byte_edit((SEED / "trace.jsonl").read_bytes()))
        return Case(target, f"--train train.jsonl: {note}",
                    {"trace.jsonl": (SEED / "trace.jsonl").read_bytes(),
                     "train.jsonl": new_b}, ["--train", "train.jsonl"],
                    ("train.jsonl",))
    if name.endswith(".jsonl") and draw(st.booleans()):
        lines = [json.loads(x) for x in data.decode().splitlines()]
        i = draw(st.integers(0, len(lines) - 1))
        new, note = draw(mutated_doc(lines[i]))
        lines_b = [json.dumps(x).encode() for x in lines]
        lines_b[i] = dump_json(new)
        return Case(target, f"{name} line {i + 1}: {note}",
                    {name: b"\n".join(lines_b) + b"\n"}, [], (name,))
    new_b, note = draw(byte_edit(data))
    return Case(target, f"{name}: {note}", {name: new_b}, [], (name,))


STRATEGIES = {
    "lab": lambda: trace_case("lab"),
    "predict": lambda: trace_case("predict"),
}
