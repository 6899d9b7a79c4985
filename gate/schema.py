"""The schemas of the gate's files: every field of a scenario and a programs file.

A scenario file (docs/SCENARIOS.md "The file") and a programs file
(``--programs-file``, docs/SCENARIOS.md "Programs") are checked whole
against one schema each (:mod:`oracle.bounded`'s :class:`~oracle.bounded.Schema`)
as they are loaded, before anything of them runs: each field's type, each
count's range, each string's and list's length, and no field the gate does
not know.  The first field that does not fit is one ``CannotRun`` line
naming the file and the field's path in it ("gate/scenarios/x.json:
steps[3].repeat: expected an integer in 0..100000, got 1e9").

What a field's *value* means on a container (an expression, a key index)
is checked when the steps are compiled (:mod:`gate.steps`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from xcache.gate import CannotRun
from xcache.gate.containers import precheck
from xcache.gate.contracts import CONTRACTS, why_not
from xcache.gate.operations import OPERATIONS
from xcache.oracle.bounded import (
    Anything,
    Either,
    Fields,
    Flag,
    Int,
    Items,
    Number,
    Schema,
    Text,
    UserFileError,
    check_document,
)

#: The largest integer written for a size, a count or a key (an expression's
#: value is bounded where it is computed, :mod:`gate.steps`).
MAX_WRITTEN = 2**31 - 1
#: The most steps of one scenario, items of one list, programs of one file.
MAX_ITEMS = 10_000
#: The longest generated program (operations; the pinned ones have 24 and 40).
MAX_PROGRAM_LENGTH = 1_000


def expr(lo: int = -MAX_WRITTEN, hi: int = MAX_WRITTEN) -> Schema:
    """An integer in ``lo..hi`` or an expression (gate/expr.py) as a short string."""
    return Either(Int(lo, hi), Text(200),
                  words=f"an integer in {lo}..{hi} or an expression")


_KEYS = Items(expr(), MAX_ITEMS)
_PAIRS = Items(Items(expr(), 2, 2), MAX_ITEMS)
_VALUES = Fields(rest=Anything())  # a check's pinned values: compared, not used

#: The range of each count of a step, written or computed.
COUNTS = {"repeat": (0, 100_000), "batch": (1, MAX_ITEMS),
          "count": (0, MAX_ITEMS), "at": (0, MAX_WRITTEN),
          "nth": (0, MAX_WRITTEN), "arg": (0, MAX_WRITTEN)}

#: Every field a step may have (docs/SCENARIOS.md "Operations").
STEP_FIELDS: dict[str, Schema] = {
    "op": Text(40), "name": Text(200), "then": Text(40),
    "keys": _KEYS, "range": Items(expr(), 2, 2), "pairs": _PAIRS, "raw": _PAIRS,
    "wrap": Flag(), "repeat": expr(*COUNTS["repeat"]),
    "batch": expr(*COUNTS["batch"]), "batches": Items(_KEYS, MAX_ITEMS),
    "then_get": Flag(), "speculative": Flag(),
    "get_first": _KEYS, "label": Text(200), "count": expr(*COUNTS["count"]),
    "key": expr(), "at": expr(*COUNTS["at"]), "kind": Text(80),
    "fault": Text(40), "nth": expr(*COUNTS["nth"]), "persistent": Flag(),
    "arg": expr(*COUNTS["arg"]), "second": Flag(),
    "bound_s": Number(0.0, 60.0), "needs": Items(Text(80), 100),
    "what": Text(80), "slot": expr(), "other": expr(), "variant": expr(),
    "check_id": Text(80), "if_held": Flag(), "or_ended": Flag(),
    "keep_mtime": Flag(), "by_s": Number(0.0, 86_400.0),
    "piece": expr(0, MAX_ITEMS), "spent_at": expr(0, MAX_ITEMS),
    "stalled": Flag(), "magic": Flag(), "progress": expr(0, MAX_WRITTEN),
    "with": Text(40, ("end", "raise", "release", "release_raise")),
    "keep": Flag(),
    "step": Int(0, 2**64 - 1),
    "place": Fields({"key": expr(), "piece": expr(), "at": expr()},
                    required=("key",)),
    "contract": Text(40, tuple(CONTRACTS)),
    "value_contracts": Fields(rest=Items(Text(80), 100), max_keys=100),
    **{f"expect{side}": _VALUES for side in ("", "_engine", "_oracle")},
    **{f"expect_layout{side}": Fields(rest=expr())
       for side in ("", "_engine", "_oracle")},
}
#: Step fields of an earlier form of the scenario files, refused with the
#: form that replaced them (before the schema's unknown-field refusal).
OLD_STEP_FIELDS = ("layer", "experts")
#: The fields a step of an op cannot do without.
STEP_REQUIRED: dict[str, tuple[str, ...]] = {
    "check": ("name", "expect"), "truncate": ("key",), "corrupt": ("kind",),
    "inject": ("fault",), "open_fault": ("fault",), "break_check": ("what",),
    "set_step": ("step",),
}

#: The most cache slots a scenario may ask for, and the most bytes of slots
#: (``n_slots * expert_bytes``): a slot count taken on trust would have the
#: oracle and the engine allocate it (10**8 slots: 17 GB of memory).
MAX_SLOTS = 1 << 16
MAX_SLOT_BYTES = 8 << 30
#: The range of each sized cache option, written or computed.
SIZED = {"n_slots": (1, MAX_SLOTS), "chunk_bytes": (0, MAX_WRITTEN),
         "io_threads": (0, 64), "batch_threads": (1, 64),
         "io_depth": (0, MAX_WRITTEN)}

#: The cache options (docs/SCENARIOS.md, ``cache``).
CACHE = Fields({
    **{k: expr(lo, hi) for k, (lo, hi) in SIZED.items()},
    "policy": Text(200), "verify": Flag(), "faults": Flag(), "trace": Flag(),
    "direct": Flag(),
})


def check_counts(step: dict[str, Any]) -> str | None:
    """Why a compiled step's computed count (``repeat``, ``nth``, ...) is
    refused: past the range the schema gives it written as a number."""
    for k, (lo, hi) in COUNTS.items():
        v = step.get(k)
        if isinstance(v, int) and not lo <= v <= hi:
            return f"{k} is {v}; expected {lo}..{hi:,}"
    return None


def check_sized(opts: dict[str, Any], expert_bytes: int) -> str | None:
    """Why computed cache options are refused (a sized one out of range, or
    slots past :data:`MAX_SLOT_BYTES`), or None."""
    for k, (lo, hi) in SIZED.items():
        v = opts.get(k)
        if v is not None and not lo <= v <= hi:
            return f"cache option {k} is {v}; expected {lo}..{hi:,}"
    n = opts.get("n_slots")
    if n is not None and n * expert_bytes > MAX_SLOT_BYTES:
        return (f"cache option n_slots is {n}: {n} slots of {expert_bytes:,} "
                f"bytes are {n * expert_bytes:,} bytes, past the limit of "
                f"{MAX_SLOT_BYTES:,}")
    return None

SCENARIO = Fields({
    "name": Text(200), "title": Text(1000),
    "contracts": Items(Text(40, tuple(CONTRACTS)), 100, 1),
    "container": Text(4096),
    "requires": Items(Text(200), 100), "let": Fields(rest=expr(), max_keys=100),
    "cache": CACHE,
    "variants": Items(Fields({"suffix": Text(200), "cache": CACHE,
                              "expect": Fields(rest=_VALUES)}), 100),
    "every_policy": Flag(), "timeout_s": Number(0.0, 3600.0),
    "steps": Items(Fields(STEP_FIELDS), MAX_ITEMS),
}, required=("name", "container", "cache", "steps"))


def check_scenario(doc: Any, where: str) -> dict[str, Any]:
    """``doc`` if it is a whole scenario; else CannotRun naming file and field."""
    try:
        steps = doc.get("steps") if isinstance(doc, dict) else None
        for i, step in enumerate(steps if isinstance(steps, list) else []):
            for old in OLD_STEP_FIELDS:
                if (isinstance(step, dict) and old in step
                        and step.get("op", "check") != "check"):
                    raise UserFileError(
                        f"{where}: steps[{i}]: step field {old!r} is the old "
                        "form; address keys by flat index with 'keys' or "
                        "'range', or by [layer index, expert] with 'pairs'")
        check_document(doc, SCENARIO, where)
        for i, step in enumerate(doc["steps"]):
            op = step.get("op", "check")
            if op not in OPERATIONS:
                raise UserFileError(f"{where}: steps[{i}].op: unknown op {op!r} "
                                    f"(ops: {', '.join(OPERATIONS)})")
            for f in STEP_REQUIRED.get(op, ()):
                if f not in step:
                    raise UserFileError(f"{where}: steps[{i}]: a {op} step needs "
                                        f"the field {f!r}")
        why = why_not(doc)
        if why is not None:
            raise UserFileError(f"{where}: {why}")
    except UserFileError as e:
        raise CannotRun(str(e)) from None
    return doc


def programs_schema(option_sets: tuple[str, ...]) -> Schema:
    """The schema of a programs file whose rows name these option sets."""
    length = Int(1, MAX_PROGRAM_LENGTH)
    return Fields({
        "about": Text(4000), "length": length,
        "programs": Items(Fields({
            "container": Text(4096), "length": length,
            "option_sets": Items(Text(40, option_sets), 100, 1),
            "seeds": Items(Int(0, 2**63 - 1), MAX_ITEMS, 1),
        }, required=("container", "option_sets", "seeds")), MAX_ITEMS),
    }, required=("programs",))


def check_programs(doc: Any, where: Path | str,
                   option_sets: tuple[str, ...]) -> dict[str, Any]:
    """``doc`` if it is a whole programs file; else CannotRun naming file and field."""
    try:
        check_document(doc, programs_schema(option_sets), str(where))
    except UserFileError as e:
        raise CannotRun(str(e)) from None
    seen: set[str] = set()
    for i, row in enumerate(doc["programs"]):
        if row["container"] not in seen:
            seen.add(row["container"])
            try:
                precheck(row["container"])
            except CannotRun as e:
                raise CannotRun(f"{where}: programs[{i}].container: {e}") from None
    n = sum(len(r["option_sets"]) * len(r["seeds"]) for r in doc["programs"])
    if n > MAX_ITEMS:
        raise CannotRun(f"{where}: programs: {n:,} programs (option sets x "
                        f"seeds of every row), past the limit of {MAX_ITEMS:,}")
    return doc
