"""The gate's Python face steps: their words, labels and share of programs."""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

from xcache.gate.backend_api import Op
from xcache.gate.backend_factory import EngineBackend, OracleBackend
from xcache.gate.face_ops import WORDS, words
from xcache.gate.operations import OPERATIONS, value_needs
from xcache.gate.programs import _rebuild


def test_a_refusal_keeps_the_first_phrase_its_message_holds():
    """The most specific of the contract's phrases wins; another message keeps ""."""
    assert words("the hold of these views was released: the slot may show "
                 "another expert now") == "the hold of these views was released"
    assert words("expert (0, 1) was released") == "was released"
    assert words("layer 0 experts [1, 2] were released") == "were released"
    assert words("hold_layer: layer 0 expert 5 is named twice") == "is named twice"
    assert words("hold_layer: 9 experts cannot be held at once in 5 slots") == \
        "cannot be held at once"
    assert words("the cache is closed") == "the cache is closed"
    assert words("release of a reference of another cache") == ""
    assert len(WORDS) == 7


def test_every_face_step_needs_the_lifetime_capability():
    """The six face_* ops need op:lifetime alone, and so does the face value."""
    face = sorted(op for op in OPERATIONS if op.startswith("face_"))
    assert face == ["face_drop", "face_get", "face_hold_layer", "face_read",
                    "face_release", "face_stream"]
    assert {OPERATIONS[op].needs for op in face} == {("op:lifetime",)}
    assert value_needs("face") == ("op:lifetime",)
    assert Op.LIFETIME in EngineBackend.capabilities.ops
    assert Op.LIFETIME in OracleBackend.capabilities.ops


def test_a_face_label_must_be_taken_before_it_is_used():
    """A shrunk program keeps a face step on a label only after the step taking it."""
    program = {"name": "p", "container": "k3-mini", "cache": {"n_slots": 6},
               "steps": []}
    get = {"op": "face_get", "keys": [0], "label": "f1"}
    for op in ("face_read", "face_release", "face_drop"):
        assert _rebuild(program, [{"op": op, "label": "f1"}]) is None
        assert _rebuild(program, [get, {"op": op, "label": "f1"}]) is not None
    drop = {"op": "face_drop", "label": "f1"}
    assert _rebuild(program, [get, drop, {"op": "face_read",
                                         "label": "f1"}]) is None


def test_the_pinned_programs_draw_every_face_step():
    """Over 96 programs (five containers, each option set, seeds 0-2, as the
    pinned ones were): how many of each face step, of each with block, and
    under an armed fault (exact: generation is deterministic)."""
    from xcache.gate.containers import make_target
    from xcache.gate.programs import generate

    work = Path(os.environ.get("TMPDIR", "/tmp")) / f"xc-facegen-{os.getpid()}"
    targets: dict = {}
    ops: Counter[str] = Counter()
    withs: Counter[str] = Counter()
    faulted: Counter[str] = Counter()
    plan = [{"container": c, "option_set": o, "seed": s, "length": 24}
            for c in ("k3-mini", "mixtral-mini", "deepseek-mini", "granite-mini",
                      "gptoss-mini")
            for o in ("plain", "pool", "chunked", "direct", "direct-chunked",
                      "readers", "verify", "traced")
            if not (o.startswith("direct") and c != "k3-mini")
            for s in range(3)]
    assert len(plan) == 96
    for row in plan:
        ref = row["container"]
        if ref not in targets:
            targets[ref] = make_target(ref, work)
        program = generate(row["seed"], targets[ref], row["option_set"],
                           length=row["length"])
        steps = [s for s in program["steps"] if s["op"] != "check"]
        for before, s in zip([{}, *steps], steps, strict=False):
            if s["op"].startswith("face_"):
                ops[s["op"]] += 1
                withs[s.get("with", "-")] += 1
                faulted[s["op"]] += before.get("op") == "inject"
    assert dict(ops) == {"face_drop": 45, "face_get": 110,
                         "face_hold_layer": 128, "face_read": 42,
                         "face_release": 238, "face_stream": 108}
    assert dict(withs) == {"-": 556, "end": 28, "raise": 32, "release": 24,
                           "release_raise": 31}
    assert +faulted == Counter({"face_hold_layer": 20, "face_stream": 22})


def _without_face(steps: list[dict]) -> list[dict]:
    """A program's operation steps less the face's (its steps, and the
    faults armed for one and cleared after it)."""
    ops = [s for s in steps if s["op"] != "check"]
    out = []
    for i, s in enumerate(ops):
        then = s.get("then", "")
        if s["op"].startswith("face_") or (
                s["op"] == "inject" and (then.startswith("face_") or (
                    then == "inject" and
                    ops[i + 1].get("then", "").startswith("face_")))) or (
                s["op"] == "clear" and ops[i - 1]["op"].startswith("face_")):
            continue
        out.append(s)
    return out


def test_the_face_steps_leave_the_other_steps_as_drawn(monkeypatch):
    """With the face's steps taken out, every pinned program is the one drawn
    with no face step at all (its own generator, its holds given back)."""
    from xcache.gate import program_gen
    from xcache.gate.containers import make_target
    from xcache.gate.programs import generate, load_programs

    work = Path(os.environ.get("TMPDIR", "/tmp")) / f"xc-facegen-{os.getpid()}"
    targets: dict = {}
    rows = load_programs()
    for row in rows:
        ref = row["container"]
        if ref not in targets:
            targets[ref] = make_target(ref, work)
    drawn = [generate(r["seed"], targets[r["container"]], r["option_set"],
                      length=r["length"]) for r in rows]
    monkeypatch.setattr(program_gen, "FACE_SHARE", 0.0)
    for row, program in zip(rows, drawn, strict=True):
        plain = generate(row["seed"], targets[row["container"]],
                         row["option_set"], length=row["length"])
        assert not any(s["op"].startswith("face_") for s in plain["steps"])
        assert plain["cache"] == program["cache"]
        assert _without_face(program["steps"]) == _without_face(plain["steps"])
