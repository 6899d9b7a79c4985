"""Three readers' verdicts on one container, and the rules by which they must agree.

A verdict is :class:`Verdict`: accepted with a tensor table (and metadata),
or refused with a kind and an offset.  The engine (``engine.Container``, the
C reader) and the oracle (``oracle.safetensors``) must agree on accept or
refuse always; on the kind except for :data:`ORACLE_KIND_DIFFERENCES`; on the
offset for the kinds in :data:`ORACLE_SAME_OFFSET`; on the table always.
The official reader (``safetensors``) must agree with the engine on accept
or refuse and on names, dtypes, shapes and metadata, except where the engine
is stricter by docs/DESIGN.md §3 (:data:`OFFICIAL_DIFFERENCES`).

This table of exceptions is the one place both the header fuzz suite
(``tests/reader/test_header_fuzz.py``), the corpus replay
(``tests/reader/test_fuzz_corpus.py``) and the fuzz target read.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

__all__ = [
    "Verdict",
    "engine_verdict",
    "oracle_verdict",
    "official_verdict",
    "ORACLE_KIND_DIFFERENCES",
    "ORACLE_SAME_OFFSET",
    "OFFICIAL_DIFFERENCES",
    "official_difference",
    "compare_oracle",
    "compare_official",
]

INDEX_NAME = "model.safetensors.index.json"

#: One tensor: (name, dtype, shape, shard file name, absolute offset, bytes).
Row = tuple[str, str, tuple[int, ...], str, int, int]


@dataclass
class Verdict:
    """A reader's verdict: ``kind`` None means accepted, ``table`` the tensors."""

    kind: str | None = None
    offset: int | None = None
    message: str = ""
    table: list[Row] = field(default_factory=list)
    metadata: dict[str, str] = field(default_factory=dict)

    @property
    def accepted(self) -> bool:
        """Whether the reader accepted the container."""
        return self.kind is None


# -- the exceptions, each with the line that documents it -------------------

#: (engine kind, oracle kind) pairs the two readers may name for one file;
#: faults/README.md "Known disagreements between engine and oracle on kinds".
ORACLE_KIND_DIFFERENCES: frozenset[tuple[str, str]] = frozenset(
    {
        # 1. check-major (engine) vs tensor by tensor (oracle): a moved end.
        ("offsets", "size"),
        # 2. one JSON pass (engine) vs parse first (oracle): an early problem
        # before a later syntax error.
        ("dtype", "json"),
        ("schema", "json"),
        ("duplicate", "json"),
        # the same for an index: a broken promise of the index before a
        # later syntax error of its JSON.
        ("index", "json"),
    }
)

#: Kinds whose offset both readers compute by the same rule (docs/DESIGN.md
#: §3's table and oracle/safetensors.py's docstring): the rest follow each
#: reader's own documented convention (faults/corrupt.py's docstring).
ORACLE_SAME_OFFSET: frozenset[str] = frozenset(
    {"too_short", "header_too_large", "not_utf8", "length"}
)

#: Where the engine refuses what the official reader accepts, by
#: docs/DESIGN.md §3 (step 5 and the table's step 7): (kind, a phrase of the
#: engine's message) -> the rule.
OFFICIAL_DIFFERENCES: dict[tuple[str, str], str] = {
    ("duplicate", ""): "DESIGN §3 step 5: no name twice, no __metadata__ key "
    "twice (the official reader keeps the last)",
    ("schema", "U+0000"): "DESIGN §3 step 5: names must not contain U+0000",
    ("schema", "more than 8"): "DESIGN §3 step 5: a shape of at most 8 integers",
    ("schema", "exceeds the limit"): "DESIGN §3 step 5: data_offsets below 2^48",
    ("overflow", "48-bit"): "DESIGN §3 step 7: every dimension fits in 48 bits",
    ("overflow", ""): "DESIGN §3 step 7: element count times bits fits in 64 "
    "bits (the official reader's usize arithmetic differs)",
}


#: Disagreements the fuzzers found that are neither fixed nor documented yet
#: (none today): name -> predicate on (engine, other reader).  Each has its
#: smallest input in tests/reader/test_header_fuzz.py (FINDING_CASES); a test
#: fails once it no longer disagrees, and the entry then goes while its input
#: stays as a regression case.
OPEN_FINDINGS: dict[str, Callable[[Verdict, Verdict], bool]] = {
}


def open_finding(mine: Verdict, theirs: Verdict) -> str | None:
    """The open finding that explains a disagreement, or None."""
    for name, pred in OPEN_FINDINGS.items():
        if pred(mine, theirs):
            return name
    return None


def official_difference(v: Verdict) -> str | None:
    """The documented rule that explains the engine refusing ``v``, or None."""
    for (kind, phrase), rule in OFFICIAL_DIFFERENCES.items():
        if v.kind == kind and phrase in v.message:
            return rule
    return None


# -- the readers ------------------------------------------------------------


def engine_verdict(path: str | os.PathLike[str]) -> Verdict:
    """The C reader's verdict (``engine.Container``)."""
    from xcache import engine

    try:
        with engine.Container(path) as c:
            names = [os.path.basename(s) for s in c.shards]
            rows = [
                (t.name, t.dtype, t.shape, names[t.shard], t.offset, t.nbytes)
                for t in c.tensors()
            ]
            return Verdict(table=sorted(rows), metadata=dict(c.metadata))
    except engine.EngineError as e:
        off = None if e.offset is None or e.offset < 0 else e.offset
        return Verdict(kind=e.kind, offset=off, message=str(e))


def oracle_verdict(path: str | os.PathLike[str]) -> Verdict:
    """The oracle reader's verdict (``oracle.safetensors``)."""
    from xcache.oracle.safetensors import OracleFormatError, open_container

    try:
        c = open_container(path)
    except OracleFormatError as e:
        return Verdict(kind=e.kind, offset=e.offset, message=str(e))
    except OSError as e:  # not a verdict of the oracle's: an open finding
        return Verdict(kind="oserror", message=str(e))
    rows = [
        (t.name, t.dtype, t.shape, os.path.basename(t.shard), t.offset, t.nbytes)
        for t in c.tensors()
    ]
    return Verdict(table=sorted(rows), metadata=dict(c.metadata))


def official_verdict(path: str | os.PathLike[str]) -> Verdict:
    """The official reader's verdict on one file (names, dtypes, shapes, metadata)."""
    from safetensors import SafetensorError, safe_open

    try:
        with safe_open(os.fspath(path), "np") as f:
            rows = []
            for k in f.keys():
                s = f.get_slice(k)
                rows.append((k, s.get_dtype(), tuple(s.get_shape()), "", 0, 0))
            return Verdict(table=sorted(rows), metadata=dict(f.metadata() or {}))
    except SafetensorError as e:
        return Verdict(kind="official", message=str(e))


# -- the comparisons --------------------------------------------------------


def compare_oracle(path: str | os.PathLike[str]) -> Verdict:
    """Assert the engine and the oracle agree on ``path``; return the engine's."""
    mine, theirs = engine_verdict(path), oracle_verdict(path)
    where = (
        f"{Path(path)}: engine {mine.kind}@{mine.offset} {mine.message!r}, "
        f"oracle {theirs.kind}@{theirs.offset} {theirs.message!r}"
    )
    if mine.accepted != theirs.accepted or (
        not mine.accepted
        and mine.kind != theirs.kind
        and (mine.kind, theirs.kind) not in ORACLE_KIND_DIFFERENCES
    ):
        if open_finding(mine, theirs):
            return mine
    assert mine.accepted == theirs.accepted, "accept/refuse differs: " + where
    if mine.accepted:
        assert mine.table == theirs.table, "tensor tables differ: " + where
        assert mine.metadata == theirs.metadata, "metadata differs: " + where
        return mine
    if mine.kind != theirs.kind:
        assert (mine.kind, theirs.kind) in ORACLE_KIND_DIFFERENCES, (
            "kinds differ: " + where
        )
    elif mine.kind in ORACLE_SAME_OFFSET:
        assert mine.offset == theirs.offset, "offsets differ: " + where
    return mine


def compare_official(path: str | os.PathLike[str], mine: Verdict) -> str:
    """Assert the official reader agrees with the engine's ``mine``; return the outcome.

    ``"accepted"`` or ``"refused"`` when both agree, else the documented rule
    (from :data:`OFFICIAL_DIFFERENCES`) that explains the difference.
    """
    theirs = official_verdict(path)
    where = f"{path}: engine {mine.kind} {mine.message!r}, official {theirs.message!r}"
    if mine.accepted != theirs.accepted and official_difference(mine) is None:
        found = open_finding(mine, theirs)
        if found:
            return found
    if mine.accepted:
        assert theirs.accepted, (
            "the engine accepts what the official reader refuses: " + where
        )
        got = [(n, d, s) for n, d, s, *_ in mine.table]
        want = [(n, d, s) for n, d, s, *_ in theirs.table]
        assert got == want, "tensor tables differ: " + where
        assert mine.metadata == theirs.metadata, "metadata differs: " + where
        return "accepted"
    if not theirs.accepted:
        return "refused"
    rule = official_difference(mine)
    assert rule is not None, (
        "the engine refuses what the official reader accepts: " + where
    )
    return rule
