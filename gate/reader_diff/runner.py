"""The run: draw the corruptions, open each with both readers, report differences."""

from __future__ import annotations

import json
import random
import re
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from xcache.gate.reader_diff import combined, edges
from xcache.gate.reader_diff.compare import (
    _QUOTED,
    Verdict,
    compare,
    engine_verdict,
    found_fact,
    named_tensor,
    oracle_verdict,
)
from xcache.gate.reader_diff.containers import (
    Header,
    Sharded,
    base_sharded,
    base_single,
)
from xcache.gate.reader_diff.drawn import DRAWN_RULES, sweep
from xcache.gate.reader_diff.folders import folder_edges, judge_folder
from xcache.gate.reader_diff.header_rules import HEADER_RULES, Expect, _draw
from xcache.gate.reader_diff.index_rules import INDEX_RULES
from xcache.gate.reader_diff.paths import path_probes
from xcache.gate.reader_diff.plan import judge_want

#: Corruptions a default replay draws, and their seed (pinned: the same
#: files every run; ``run_checks`` takes others for a longer search).
DEFAULT_CASES = 280
DEFAULT_SEED = 26


@dataclass
class Outcome:
    """What one class of corruptions gave: how many, and the first disagreement."""

    name: str
    cases: int = 0
    refused: int = 0
    failures: list[str] = field(default_factory=list)




_NUMBER_BYTES = frozenset(b"-+.eE0123456789")


def _number_start(raw: bytes, engine_at: int, oracle_at: int) -> int:
    """The offset a JSON syntax error must have: the oracle's, or a number's start.

    The engine reports a malformed number (``01``, ``1.``, ``-``) at its
    first byte; Python's parser stops inside or just after it.  So the
    engine's offset is right when it is at most the oracle's and only
    number bytes lie between the two.
    """
    if engine_at <= oracle_at and all(b in _NUMBER_BYTES
                                      for b in raw[engine_at:oracle_at]):
        if engine_at == oracle_at or raw[engine_at - 1] not in _NUMBER_BYTES:
            return engine_at
    return oracle_at


#: Kinds whose offset both readers compute by one rule.
SAME_OFFSET = frozenset({"not_utf8", "length", "header_too_large"})


def _header_text(raw: bytes) -> bytes:
    """The header's JSON bytes of a file (empty when its prefix says none fits)."""
    n = int.from_bytes(raw[:8], "little") if len(raw) >= 8 else 0
    return raw[8:8 + n] if 8 + n <= len(raw) else b""


def judge(engine: Any, path: Path, h: Header, expect: Expect) -> tuple[Verdict,
                                                                      str | None]:
    """Write ``h`` at ``path``, open it with both readers: the oracle's verdict and
    the first disagreement (None if they agree, field by field)."""
    doc = h.write(path)
    raw = path.read_bytes()
    mine, theirs = engine_verdict(engine, path), oracle_verdict(path)
    if expect.strict and not mine.kind == theirs.kind == expect.kind:
        return theirs, (f"the rule breaks {expect.kind} (the file's only problem): "
                        f"engine {mine.kind} ({mine.message}), oracle "
                        f"{theirs.kind} ({theirs.message})")
    want = None
    if mine.kind == theirs.kind and mine.kind is not None:
        if expect.kind is not None and expect.kind != theirs.kind:
            return theirs, (f"the rule breaks {expect.kind}, the oracle says "
                            f"{theirs.kind} ({theirs.message})")
        placed = (expect.key is not None or expect.value is not None
                  or expect.at is not None)
        if theirs.kind in ("too_short", "header_past_end"):
            want = len(raw)
        elif theirs.kind in SAME_OFFSET:
            want = theirs.offset
        elif theirs.kind == "json" and (expect.number or expect.numbers
                                        or (expect.kind == "json" and placed)):
            want = expect.offset(doc, None, h.top)
        elif theirs.kind == "json" and expect.kind in (None, "json"):
            # where the oracle's parser stopped, when it says (a number
            # out of range is found after parsing: no position)
            want = theirs.offset if theirs.offset != 8 else None
            if want is not None and mine.offset is not None:
                want = _number_start(raw, mine.offset, want)
        elif not expect.oracle:
            want = expect.offset(doc, named_tensor(theirs.detail), h.top)
    bad = compare(mine, theirs, want)
    if bad is None and mine.kind is not None and mine.kind == theirs.kind:
        if expect.message is not None and expect.message not in mine.message:
            bad = (f"{mine.kind}: the message lacks '{expect.message}': "
                   f"{mine.message}")
        else:
            bad = found_fact(mine, _header_text(raw), 8)
    return theirs, bad


def header_cases(engine: Any, folder: Path, n: int, seed: int) -> Outcome:
    """``n`` single-file corruptions drawn from ``seed``; their disagreements."""
    out = Outcome("headers")
    rng = random.Random(f"reader-diff headers {seed}")
    rules = HEADER_RULES + DRAWN_RULES
    for i in range(n):
        h = base_single(rng)
        rule = _draw(rng, rules)
        expect = rule(rng, h)
        _judge_one(engine, folder / f"h{i:04d}-{rule.__name__[2:]}.safetensors",
                   h, expect, out)
    return out


def _judge_one(engine: Any, path: Path, h: Any, expect: Any, out: Outcome) -> None:
    """Write, judge and remove one header case, counting it in ``out``."""
    theirs, bad = judge(engine, path, h, expect)
    out.cases += 1
    out.refused += theirs.kind is not None
    if bad is not None:
        out.failures.append(f"{path.name}: {bad}")
    path.unlink()


def _safe(label: str) -> str:
    """A label as part of a file name."""
    return re.sub(r"[^\w.,+=-]", "_", label)[:120]


def sweep_cases(engine: Any, folder: Path, seed: int) -> Outcome:
    """One file per class of every generator (:func:`~gate.reader_diff.drawn.sweep`),
    the path probes, every two faults in one header
    (:func:`~gate.reader_diff.combined.pairs`), the numbers at their limits
    (:func:`~gate.reader_diff.edges.number_edges`), every header order of
    a few ranges (:func:`~gate.reader_diff.edges.range_orders`) and the folder edges
    (:func:`~gate.reader_diff.folders.folder_edges`); their disagreements."""
    out = Outcome("sweeps")
    rng = random.Random(f"reader-diff sweeps {seed}")
    for i, (label, h, expect) in enumerate(sweep(rng)):
        _judge_one(engine, folder / f"s{i:04d}-{label}.safetensors", h,
                   expect, out)
    for label, bad in path_probes(engine, folder / "paths"):
        out.cases += 1
        out.refused += 1
        if bad is not None:
            out.failures.append(f"{label}: {bad}")
    for tag, cases in (("c", combined.pairs(random.Random(
            f"reader-diff combined {seed}"))), ("e", edges.number_edges(
            random.Random(f"reader-diff edges {seed}"))),
                       ("r", edges.range_orders())):
        for i, (label, plan, problems) in enumerate(cases):
            path = folder / f"{tag}{i:04d}-{_safe(label)}.safetensors"
            theirs, bad = judge_want(engine, path, plan, problems)
            _count(out, path.name, theirs, bad)
            path.unlink()
    rng = random.Random(f"reader-diff folders {seed}")
    for i, c in enumerate(folder_edges(rng)):
        box = folder / f"f{i:03d}"
        box.mkdir()
        bad = judge_folder(engine, box / _safe(c.label), c)
        _count(out, c.label, Verdict(c.oracle), bad)
        box.rmdir()
    return out


def _count(out: Outcome, label: str, theirs: Verdict, bad: str | None) -> None:
    out.cases += 1
    out.refused += theirs.kind is not None
    if bad is not None:
        out.failures.append(f"{label}: {bad}")


def index_cases(engine: Any, folder: Path, n: int, seed: int) -> Outcome:
    """``n`` sharded containers with a broken index (or shard); disagreements."""
    out = Outcome("indexes")
    rng = random.Random(f"reader-diff indexes {seed}")
    for i in range(n):
        s = base_sharded(rng)
        rule = _draw(rng, INDEX_RULES)
        where, path = rule(rng, s)
        d = folder / f"x{i:04d}-{rule.__name__[2:]}"
        doc = s.write(d)
        mine, theirs = engine_verdict(engine, d), oracle_verdict(d)
        out.cases += 1
        out.refused += theirs.kind is not None
        want = None
        if mine.kind == "index" == theirs.kind and path is not None:
            want = doc.keys[path] if where == "key" else doc.values[path]
        elif mine.kind == "json" == theirs.kind and where == "json":
            want = theirs.offset  # the bracket past the limit, by one rule
        bad = compare(mine, theirs, want)
        if bad is None and mine.kind == "index" == theirs.kind:
            bad = _index_names(mine, theirs, s)
        if bad is None and mine.kind == theirs.kind and mine.kind in ("json",
                                                                       "index"):
            bad = found_fact(mine, doc.text, 0) if s.index.pairs else None
        if bad is not None:
            out.failures.append(f"{d.name}: {bad}")
        shutil.rmtree(d)
    return out


def _index_names(mine: Verdict, theirs: Verdict, s: Sharded) -> str | None:
    """A container name the oracle's index error quotes and the engine's lacks."""
    for q in _QUOTED.finditer(theirs.detail):
        name = q.group(1)
        if name in ("None",) or len(name) > 200:
            continue
        if name in s.shards or name in [k for k, _ in s.wmap().pairs] or \
                any(name == t for h in s.shards.values() for t in h.top.keys()):
            if name not in mine.message:
                return (f"index: the message does not name {json.dumps(name)} "
                        f"of the oracle's '{theirs.detail}': {mine.message}")
    return None


def run_checks(engine: Any, work: Path, report: Any, n: int = DEFAULT_CASES,
               seed: int = DEFAULT_SEED) -> list[str]:
    """Run the reader differential; one check line a class in ``report``."""
    shm = Path("/dev/shm")
    folder = Path(tempfile.mkdtemp(prefix="xc-reader-diff-",
                                   dir=shm if shm.is_dir() else work))
    try:
        outs = [header_cases(engine, folder, n * 3 // 4, seed),
                index_cases(engine, folder, n - n * 3 // 4, seed),
                sweep_cases(engine, folder, seed)]
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    names = []
    for o in outs:
        name = f"reader-diff-{o.name}"
        names.append(name)
        detail = (f"{o.cases} corruptions (seed {seed}), {o.refused} refused"
                  if not o.failures else
                  f"{len(o.failures)} of {o.cases} differ; first: {o.failures[0]}")
        report.add(name, "engine", name, not o.failures, detail, 0,
                   len(o.failures))
    return names

