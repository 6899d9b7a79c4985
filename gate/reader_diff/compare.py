"""Each reader's verdict on one container, and the first field on which two differ."""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: (engine kind, oracle kind) pairs both readers may name for one file.
KIND_DIFFERENCES: dict[tuple[str, str], str] = {
    ("offsets", "size"): "check-major (engine) vs tensor by tensor (oracle): "
    "a moved end is an overlap for the engine, a wrong size for the oracle",
    ("dtype", "json"): "one JSON pass (engine) vs parse first (oracle)",
    ("schema", "json"): "one JSON pass (engine) vs parse first (oracle)",
    ("duplicate", "json"): "one JSON pass (engine) vs parse first (oracle)",
    ("index", "json"): "one JSON pass (engine) vs parse first (oracle)",
}


@dataclass
class Verdict:
    """One reader's verdict: accepted (``kind`` None) with a table, or an error."""

    kind: str | None = None
    offset: int | None = None
    message: str = ""
    path: str = ""
    detail: str = ""
    table: list[tuple[Any, ...]] = field(default_factory=list)
    metadata: dict[str, str] = field(default_factory=dict)
    key: tuple[int | None, int | None] = (None, None)  #: layer, expert


def engine_verdict(engine: Any, path: Path) -> Verdict:
    """The C reader's verdict on ``path``."""
    try:
        with engine.Container(str(path)) as c:
            names = [os.path.basename(s) for s in c.shards]
            rows = sorted((t.name, t.dtype, tuple(t.shape), names[t.shard],
                           t.offset, t.nbytes) for t in c.tensors())
            return Verdict(table=rows, metadata=dict(c.metadata))
    except engine.EngineError as e:
        return Verdict(e.kind, e.offset, str(e),
                       key=(getattr(e, "layer", None), getattr(e, "expert", None)))


def oracle_verdict(path: Path) -> Verdict:
    """The oracle reader's verdict on ``path``."""
    from oracle.safetensors import OracleFormatError, open_container  # noqa: PLC0415

    try:
        c = open_container(path)
    except OracleFormatError as e:
        return Verdict(e.kind, e.offset, str(e), e.path, e.detail)
    rows = sorted((t.name, t.dtype, tuple(t.shape), os.path.basename(t.shard),
                   t.offset, t.nbytes) for t in c.tensors())
    return Verdict(table=rows, metadata=dict(c.metadata))


_QUOTED = re.compile(r"'((?:[^'\\]|\\.)*)'")
_INT = re.compile(r"(?<![\w.])\d+(?![\w.])")


def named_tensor(detail: str) -> str | None:
    """The tensor an oracle error's detail names first (``'name'``), if any."""
    m = _QUOTED.search(detail)
    if m is None:
        return None
    try:
        import ast  # noqa: PLC0415

        return str(ast.literal_eval("'" + m.group(1) + "'"))
    except (ValueError, SyntaxError):
        return None


#: Kinds whose message must name (as ``"name"``) the tensor the oracle's names.
NAME_COMPARED = frozenset({"dtype", "duplicate", "offsets", "overflow", "bits",
                           "size"})

#: Oracle kinds whose detail's integers the engine's message must all hold
#: (sizes, bits, ends: the same facts in other words).
NUMBERS_COMPARED = frozenset({"size", "bits", "length", "offsets",
                              "header_past_end", "index"})


def compare(mine: Verdict, theirs: Verdict, expected_offset: int | None
            ) -> str | None:
    """The first field on which the two verdicts differ, or None."""
    if (mine.kind is None) != (theirs.kind is None):
        return (f"engine {'accepts' if mine.kind is None else 'refuses'} "
                f"({mine.kind}: {mine.message}), oracle "
                f"{'accepts' if theirs.kind is None else 'refuses'} "
                f"({theirs.kind}: {theirs.message})")
    if mine.kind is None:
        if mine.table != theirs.table:
            diff = [r for r in mine.table if r not in theirs.table][:1]
            return f"tensor tables differ: engine has {diff or mine.table[:1]}"
        if mine.metadata != theirs.metadata:
            return f"metadata: engine {mine.metadata}, oracle {theirs.metadata}"
        return None
    if mine.kind != theirs.kind:
        if (mine.kind, theirs.kind) in KIND_DIFFERENCES:
            return None
        return f"kind: engine {mine.kind} ({mine.message}), oracle {theirs.kind}"
    if mine.key != (None, None):  # a format error concerns no key
        return (f"{mine.kind}: the error names layer {mine.key[0]} expert "
                f"{mine.key[1]} ({mine.message})")
    if expected_offset is not None and mine.offset != expected_offset:
        return (f"{mine.kind} offset: engine {mine.offset}, expected "
                f"{expected_offset} ({mine.message})")
    if theirs.path and os.path.basename(theirs.path) not in mine.message:
        return (f"{mine.kind}: the message does not name the file "
                f"{os.path.basename(theirs.path)}: {mine.message}")
    name = named_tensor(theirs.detail)
    if (name is not None and name != "__metadata__" and mine.kind in NAME_COMPARED
            and json.dumps(name) not in mine.message):
        return (f"{mine.kind}: the message does not name {json.dumps(name)}: "
                f"{mine.message}")
    if theirs.kind in NUMBERS_COMPARED:
        have = set(_INT.findall(mine.message))
        detail = theirs.detail.removeprefix("8 + N = ")
        if theirs.kind == "offsets":  # the range; "after E" is the oracle's own
            detail = detail.split(" after ")[0]
        missing = [n for n in _INT.findall(detail) if n not in have]
        if missing:
            return (f"{mine.kind}: the message lacks {', '.join(missing)} of "
                    f"the oracle's '{theirs.detail}': {mine.message}")
    return None

