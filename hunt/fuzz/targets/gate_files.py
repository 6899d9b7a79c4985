"""Targets over the gate's own files: scenario files and a programs file.

``gate-scenario`` runs one shipped scenario of ``gate/scenarios/``,
changed, as the gate runs its scenario folder; ``gate-programs`` the seed
programs file (``corpus-tools/seed/programs.json``: the shipped
``gate/scenarios/programs.json`` cut to two programs), changed, as
``replay.py --programs-file FILE`` runs it.  Both go through
``hunt.fuzz.gate_files`` on this checkout's engine and the oracle.
The changes are structural: a field of a wrong type, missing or added, a
huge count, key or length, deep nesting, a non-finite number, an unknown
op, option name, option set or fault, binary bytes, and a FIFO or a
folder where the file should be.
"""

from __future__ import annotations

import json

from hypothesis import strategies as st

from xcache.hunt.fuzz.case import DIR, FIFO, PY, ROOT, SEED, Case, Target
from xcache.hunt.fuzz.mutate import byte_edit, dump_json, hostile_value, mutated_doc

SCENARIO_DIR = ROOT / "gate" / "scenarios"
#: The shipped scenarios a case starts from.
SCENARIOS = sorted(p.name for p in SCENARIO_DIR.glob("*.json")
                   if p.name != "programs.json")
PROGRAMS = json.loads((SEED / "programs.json").read_text())

TARGETS = (
    Target("gate-scenario", lambda d: [PY, "-m", "xcache.hunt.fuzz.gate_files",
                                       "scenarios", "scenarios"], (),
           exit1_ok=True),
    Target("gate-programs", lambda d: [PY, "-m", "xcache.hunt.fuzz.gate_files",
                                       "programs", "programs.json"],
           ("programs.json",), exit1_ok=True),
)

#: Names a scenario or a programs file should not hold: the gate must
#: refuse each, naming it.
UNKNOWN_WORDS = ["bogus", "get ", "GET", "n_slot", "policy ", "", "\u00e9",
                 "x" * 300]
#: Fields added to a step, a scenario, its cache options or a programs row.
ADDED_FIELDS = ["op", "keys", "range", "pairs", "raw", "repeat", "batch",
                "batches", "count", "nth", "arg", "at", "key", "fault",
                "kind", "label", "what", "slot", "bound_s", "expect",
                "n_slots", "chunk_bytes", "io_threads", "batch_threads",
                "policy", "let", "requires", "variants", "timeout_s",
                "length", "seeds", "option_sets", "container", "extra"]


@st.composite
def structural(draw: st.DrawFn, doc: dict) -> tuple[object, str]:
    """``doc`` changed: one field (:func:`mutated_doc`), or a gate-specific edit."""
    kind = draw(st.integers(0, 5))
    if kind <= 2:
        return draw(mutated_doc(doc))
    from xcache.hunt.fuzz.mutate import _paths, _set, _show  # noqa: PLC0415

    dicts = [p for p in _paths(doc) if _is(doc, p, dict)]
    lists = [p for p in _paths(doc) if _is(doc, p, list)]
    if kind == 3:  # a field added, or a known word replaced by an unknown one
        path = draw(st.sampled_from(dicts))
        key = draw(st.sampled_from(ADDED_FIELDS + UNKNOWN_WORDS))
        value = draw(st.one_of(hostile_value(), st.sampled_from(UNKNOWN_WORDS)))
        label = ".".join(map(str, path + (key,)))
        return _set(doc, path + (key,), value), f"{label} = {_show(value)}"
    if kind == 4 and lists:  # a list made huge
        path = draw(st.sampled_from(lists))
        n = draw(st.sampled_from([10_001, 100_000, 1_000_000]))
        # plain items: a nested one a million times over would be a huge file
        item = draw(st.sampled_from([0, "N-1", -1, 2**62, None, "x", 1.5, [],
                                     {}]))
        label = ".".join(map(str, path)) or "(whole document)"
        return (_set(doc, path, [item] * n),
                f"{label} = {n:,} x {_show(item)}")
    # a string field made huge, or a key of an object made huge
    path = draw(st.sampled_from(dicts))
    n = draw(st.sampled_from([10_000, 1_000_000]))
    label = ".".join(map(str, path)) or "(whole document)"
    return (_set(doc, path + ("k" * n,), 1),
            f"{label} gains a key of {n:,} characters")


def _is(doc: object, path: tuple, kind: type) -> bool:
    cur = doc
    for p in path:
        cur = cur[p]  # type: ignore[index]
    return isinstance(cur, kind)


@st.composite
def _file(draw: st.DrawFn, rel: str, doc: dict,
          names: tuple[str, ...]) -> tuple[bytes, str]:
    """The bytes of ``rel``: changed structurally, byte-edited, or not a file."""
    kind = draw(st.integers(0, 9))
    if kind == 0:
        marker = draw(st.sampled_from([FIFO, DIR]))
        return marker, f"a {'FIFO' if marker == FIFO else 'folder'}"
    if kind <= 2:
        return draw(byte_edit(json.dumps(doc, indent=1).encode()))
    new, note = draw(structural(doc))
    return dump_json(new), note


@st.composite
def scenario_case(draw: st.DrawFn) -> Case:
    """One shipped scenario, changed, in a scenario folder of its own."""
    name = draw(st.sampled_from(SCENARIOS))
    doc = json.loads((SCENARIO_DIR / name).read_text())
    rel = f"scenarios/{name}"
    data, note = draw(_file(rel, doc, (name,)))
    return Case("gate-scenario", f"{rel}: {note}", {rel: data}, [], (name,))


@st.composite
def programs_case(draw: st.DrawFn) -> Case:
    """The seed programs file, changed."""
    data, note = draw(_file("programs.json", PROGRAMS, ("programs.json",)))
    return Case("gate-programs", f"programs.json: {note}",
                {"programs.json": data}, [], ("programs.json",))


STRATEGIES = {
    "gate-scenario": scenario_case,
    "gate-programs": programs_case,
}
