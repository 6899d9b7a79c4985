"""Targets over a model: ``fixtures checkpoint DESC OUT`` and ``replay.py time``.

``checkpoint`` changes the model description (``desc.json``: a field of
the description or of its config, raw bytes, a FIFO or a folder in its
place) or hands a hostile ``--layers`` / ``--experts`` / ``--max-bytes``,
in one of its three forms.  ``time`` / ``time-toml`` run the time lab
over the seed trace with the disk and compute model file changed
(``--model model.json`` or ``model.toml``), or the trace changed (every
format with steps), or a hostile option.
"""

from __future__ import annotations

import json
from pathlib import Path

from hypothesis import strategies as st

from xcache.hunt.fuzz.case import (
    DELETE,
    DIR,
    FIFO,
    PY,
    ROOT,
    SEED,
    SPARSE,
    Case,
    Target,
)
from xcache.hunt.fuzz.mutate import _opt, json_file_case, toml_file_case
from xcache.hunt.fuzz.targets.traces import TRACES, trace_case

FORMS = ("index", "headers", "lfs")
#: The time lab's run kept small: 12 tokens, one size, both schedules.
TIME_OPTS = ["--slots", "4", "--threads", "0,1", "--predictors", "none,previous",
             "--executor", "thread", "--workers", "1", "--quiet"]
#: Options of the time lab a case makes hostile.
TIME_HOSTILE = ["--budget", "--train-fraction", "--expert-bytes", "--tokens",
                "--slots", "--fractions", "--threads", "--depth", "--split",
                "--predictors", "--expert-s", "--layer-s", "--access-s",
                "--page-cache-share", "--policies", "--top-k", "--experts"]


def _time_argv(d: Path, model: str) -> list[str]:
    """The time lab over the trace in ``d`` with the model file ``model``."""
    for name, opts in TRACES.items():
        if (d / name).exists():
            return [PY, str(ROOT / "replay.py"), "time", name, "out", *opts,
                    "--model", model, *TIME_OPTS]
    raise AssertionError(f"no trace in {d}")


TARGETS = (
    Target("checkpoint", lambda d: [PY, "-m", "xcache.fixtures", "checkpoint",
                                    "desc.json", "out"], ("desc.json",)),
    Target("time", lambda d: _time_argv(d, "model.json"), ("model.json",)),
    Target("time-toml", lambda d: _time_argv(d, "model.toml"), ("model.toml",)),
)


@st.composite
def checkpoint_case(draw: st.DrawFn) -> Case:
    """checkpoint DESC OUT --form F: the description changed or an option hostile."""
    form = ["--form", draw(st.sampled_from(FORMS))]
    desc = json.loads((SEED / "desc.json").read_text())
    if draw(st.integers(0, 3)) == 0:
        args, names = draw(_opt(["--layers", "--experts", "--max-bytes"]))
        return Case("checkpoint", f"{form[1]} form with {' '.join(args)}",
                    {}, form + args, names)
    if draw(st.booleans()):  # the config: where the counts are
        c = draw(json_file_case("checkpoint", "desc.json", desc["config"],
                                ("desc.json",)))
        if c.files["desc.json"] in (DELETE, FIFO, DIR) or \
                c.files["desc.json"].startswith(SPARSE):
            return Case("checkpoint", c.note, c.files, form, c.names)
        try:
            config = json.loads(c.files["desc.json"])
        except ValueError:  # raw bytes: the description's config as text
            return Case("checkpoint", f"config: {c.note}", {"desc.json": (
                b'{"model": "x", "shards": 2, "tensors": [], "config": '
                + c.files["desc.json"] + b"}")}, form, ("desc.json",))
        whole = dict(desc, config=config)
        return Case("checkpoint", f"config: {c.note}",
                    {"desc.json": json.dumps(whole).encode()}, form,
                    ("desc.json",))
    c = draw(json_file_case("checkpoint", "desc.json", desc, ("desc.json",)))
    return Case("checkpoint", c.note, c.files, form, c.names)


@st.composite
def time_case(draw: st.DrawFn) -> Case:
    """replay.py time: the model (JSON or TOML) changed, the trace, or an option."""
    which = draw(st.sampled_from(["model", "model", "trace", "option"]))
    model = json.loads((SEED / "model.json").read_text())
    if which == "model":
        if draw(st.booleans()):
            c = draw(json_file_case("time", "model.json", model, ("model.json",)))
        else:
            c = draw(toml_file_case("time-toml", "model.toml", model,
                                    ("model.toml",)))
        return Case(c.target, c.note, {"trace.jsonl": (SEED / "trace.jsonl")
                                       .read_bytes(), **c.files}, [], c.names)
    if which == "option":
        args, names = draw(_opt(TIME_HOSTILE))
        return Case("time", f"trace.jsonl with {' '.join(args)}",
                    {"trace.jsonl": (SEED / "trace.jsonl").read_bytes()}, args,
                    names)
    # the time lab reads a trace as predict does: one with steps
    return draw(trace_case("time", options=False))


STRATEGIES = {
    "checkpoint": checkpoint_case,
    "time": time_case,
}
