"""Each reader's verdict on one container, and the first field on which two differ."""

from __future__ import annotations

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
    #: each shard's data start by file name (``""``: past the last shard)
    starts: dict[str, int] = field(default_factory=dict)


def _data_starts(engine: Any, c: Any) -> dict[str, int]:
    """Each shard's data start as the C reader reports it (``xc_st_shard_data_start``),
    by file name; past the last shard it must report 0 (key ``""``)."""
    lib_of = getattr(getattr(engine, "_lib", None), "lib", None)
    ptr = getattr(c, "_ptr", None)
    if lib_of is None or ptr is None:
        return {}
    lib = lib_of()
    starts = {os.path.basename(s): int(lib.xc_st_shard_data_start(ptr, i))
              for i, s in enumerate(c.shards)}
    starts[""] = int(lib.xc_st_shard_data_start(ptr, len(c.shards)))
    return starts


def engine_verdict(engine: Any, path: Path) -> Verdict:
    """The C reader's verdict on ``path``."""
    try:
        with engine.Container(str(path)) as c:
            names = [os.path.basename(s) for s in c.shards]
            rows = sorted((t.name, t.dtype, tuple(t.shape), names[t.shard],
                           t.offset, t.nbytes) for t in c.tensors())
            return Verdict(table=rows, metadata=dict(c.metadata),
                           starts=_data_starts(engine, c))
    except engine.EngineError as e:
        return Verdict(e.kind, e.offset, str(e),
                       key=(getattr(e, "layer", None), getattr(e, "expert", None)))
    except UnicodeDecodeError as e:  # a name or value the engine decoded wrong
        return Verdict("undecodable", None, f"{path}: {e}")


def oracle_verdict(path: Path) -> Verdict:
    """The oracle reader's verdict on ``path``."""
    from xcache.oracle.errors import NotFound  # noqa: PLC0415
    from xcache.oracle.regular import NotRegularFileError, open_regular  # noqa: PLC0415
    from xcache.oracle.safetensors import OracleFormatError, open_container  # noqa: PLC0415

    try:
        c = open_container(path)
    except OracleFormatError as e:
        return Verdict(e.kind, e.offset, str(e), e.path, e.detail)
    except (NotFound, FileNotFoundError, NotADirectoryError) as e:
        return Verdict("not_found", None, str(e), str(path))
    except NotRegularFileError as e:  # a shard that is a folder, a FIFO: the
        # engine's EngineIOError (docs/DESIGN.md "Only regular files")
        return Verdict("io", None, str(e), e.filename or str(path))
    rows = sorted((t.name, t.dtype, tuple(t.shape), os.path.basename(t.shard),
                   t.offset, t.nbytes) for t in c.tensors())
    starts = {}
    for shard in c.shards():
        with open_regular(shard) as f:  # 8 + N, as the file is written
            starts[os.path.basename(shard)] = 8 + int.from_bytes(f.read(8), "little")
    if starts:
        starts[""] = 0
    return Verdict(table=rows, metadata=dict(c.metadata), starts=starts)


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


def quoted(name: str, precision: int = 200) -> str:
    """How the engine's message quotes ``name``: its first ``precision`` bytes
    (C's ``%.200s``), decoded as the Python face decodes a message."""
    cut = name.encode("utf-8", "surrogatepass")[:precision]
    return '"' + cut.decode("utf-8", "replace") + '"'


#: What the engine's message says it found, by the byte found (docs/DESIGN.md
#: §3: a json error's message describes the byte at its offset).
_FOUND = re.compile(r"found (the end of the JSON|a string|an object|an array|"
                    r"a number|an unexpected character)")


def describe(text: bytes, at: int) -> str:
    """What the byte at ``at`` of a JSON text starts (the end past the text)."""
    if at >= len(text):
        return "the end of the JSON"
    c = text[at:at + 1]
    return {b'"': "a string", b"{": "an object", b"[": "an array"}.get(
        c, "a number" if c in b"-0123456789" else "an unexpected character")


def found_fact(mine: Verdict, text: bytes, base: int) -> str | None:
    """A "found ..." of the engine's message that is not what its offset holds.

    ``text`` is the JSON (a header, an index) and ``base`` its offset in the
    file.
    """
    m = _FOUND.search(mine.message)
    if m is None or mine.offset is None:
        return None
    want = describe(text, mine.offset - base)
    if m.group(1) != want:
        return (f"{mine.kind}: the message says it found {m.group(1)}, the byte "
                f"at {mine.offset} is {want}: {mine.message}")
    return None


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
        if mine.starts and theirs.starts and mine.starts != theirs.starts:
            return (f"data starts (xc_st_shard_data_start): engine {mine.starts}, "
                    f"oracle {theirs.starts}")
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
    if (name is not None and name != "__metadata__" and "\0" not in name
            and (mine.kind in NAME_COMPARED
                 or (theirs.detail.startswith("entry ")
                     and 'tensor "' in mine.message))
            and quoted(name) not in mine.message):
        return (f"{mine.kind}: the message does not quote {quoted(name)} (the "
                f"first 200 bytes of the oracle's tensor): {mine.message}")
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

