"""The reader differential at the format's edges: two faults in one header, the
numbers at their limits, the container's edges (gate/reader_diff/combined.py,
edges.py, folders.py, plan.py), pinned for the default seed with exact values."""

from __future__ import annotations

import itertools
import random
from pathlib import Path

import pytest

from xcache import engine
from xcache.gate import reader_diff
from xcache.gate.reader_diff import combined, edges, folders
from xcache.gate.reader_diff.doc import Raw
from xcache.gate.reader_diff.plan import (
    Plan,
    base_plan,
    data_faults,
    judge_want,
    tensor,
    want,
)

SEED = reader_diff.DEFAULT_SEED


def _pairs() -> list[tuple[str, Plan, list]]:
    return list(combined.pairs(random.Random(f"reader-diff combined {SEED}")))


def _edges() -> list[tuple[str, Plan, list]]:
    return list(edges.number_edges(random.Random(f"reader-diff edges {SEED}")))


def _verdict(plan: Plan, problems: list, tmp_path: Path) -> tuple:
    """(engine kind, oracle kind) the rules give for ``plan``, as written."""
    path = tmp_path / "v.safetensors"
    doc = plan.header().write(path)
    w = want(plan, doc, problems, path.stat().st_size)
    return w.engine, w.oracle


# -- the numbers -------------------------------------------------------------

def test_the_limits_are_the_edges_of_48_53_and_64_bits() -> None:
    """Every limit a dimension or an offset meets, exactly."""
    assert edges.LIMITS == (
        0, 1, 4294967295, 4294967296, 281474976710655, 281474976710656,
        281474976710657, 1125899906842624, 9007199254740992, 9007199254740993,
        9223372036854775807, 9223372036854775808, 18446744073709551615,
        18446744073709551616, 18446744073709551617, 100000000000000000000)


def test_every_limit_is_drawn_in_every_form_and_spelling() -> None:
    """For the default seed: each limit as a dimension beside a zero and as an
    offset, each spelling at a shape and an offset element, 0 to 9
    dimensions; each in the compact (fast path) and a spaced spelling."""
    labels = [label for label, _, _ in _edges()]
    assert len(labels) == len(set(labels)) == 402
    for tag in ("compact", "spaced"):
        for v in edges.LIMITS:
            for form in edges.DIM_FORMS:
                assert f"dim-{form}-{v}-{tag}" in labels
            for form in edges.OFFSET_FORMS:
                assert f"offsets-{form}-{v}-{tag}" in labels
        for s in edges.SPELLINGS:
            for site in ("shape", "data_offsets"):
                assert f"spelling-{site}-{s!r}-{tag}" in labels
        for dims in (0, 1, 7, 8, 9):
            assert f"dims-{dims}-0-{tag}" in labels
        assert {f"dims-9-bad-0-{tag}", f"dims-9-bad-7-{tag}",
                f"offsets-0-items-{tag}", f"offsets-1-items-{tag}"} <= set(labels)


@pytest.mark.parametrize(("label", "shape", "verdict"), [
    # a byte size of 0, refused all the same: a dimension past 48 bits
    ("dim-0,v-1125899906842624-compact", [0, 2**50], ("overflow", "overflow")),
    ("dim-v,0-281474976710656-spaced", [2**48, 0], ("overflow", "overflow")),
    ("dim-0,v-281474976710655-compact", [0, 2**48 - 1], (None, None)),
    # multiplied left to right: past 64 bits before the zero
    ("dim-v,v,0-4294967296-compact", [2**32, 2**32, 0], ("overflow", "overflow")),
    ("dim-v,v,0-4294967295-compact", [2**32 - 1, 2**32 - 1, 0], (None, None)),
    ("dim-0,v,v-4294967296-compact", [0, 2**32, 2**32], (None, None)),
    ("dim-v,65536,0-281474976710655-spaced", [2**48 - 1, 65536, 0], (None, None)),
    # past 64 bits: no unsigned integer at all
    ("dim-0,v-18446744073709551616-compact", [0, 2**64], ("schema", "schema")),
    ("dim-v,0-18446744073709551615-compact", [2**64 - 1, 0],
     ("overflow", "overflow")),
])
def test_a_dimension_at_a_limit(tmp_path: Path, label: str, shape: list,
                                verdict: tuple) -> None:
    """The drawn file holds the dimension exactly, and the rules' verdict."""
    plan, problems = next((p, q) for lab, p, q in _edges() if lab == label)
    z = next(e for e in plan.entries if e.name == "z")
    assert z.get("shape") == shape and z.get("data_offsets")[0] == z.get(
        "data_offsets")[1]
    assert _verdict(plan, problems, tmp_path) == verdict


@pytest.mark.parametrize(("spelling", "site", "verdict"), [
    ("012", "shape", ("json", "json")), ("-0", "shape", ("schema", "schema")),
    ("-0", "data_offsets", ("schema", "schema")),
    ("+1", "data_offsets", ("json", "json")), ("1e2", "shape", ("schema", "schema")),
    ("1.0", "data_offsets", ("schema", "schema")),
    ("1.", "shape", ("json", "json")), (" % ", "shape", (None, None)),
])
def test_a_spelling(tmp_path: Path, spelling: str, site: str, verdict: tuple
                    ) -> None:
    """Leading zeros and no JSON are json, a sign, an exponent or a fraction a
    wrong type, whitespace about the digits nothing (both spellings)."""
    for tag in ("compact", "spaced"):
        label = f"spelling-{site}-{spelling!r}-{tag}"
        plan, problems = next((p, q) for lab, p, q in _edges() if lab == label)
        assert _verdict(plan, problems, tmp_path) == verdict


def test_the_classes_of_an_element() -> None:
    """classify: the grammar first, then the sign, then the field's limit."""
    c = edges.classify
    assert c(Raw("012"), "shape")[0] == "json"
    assert c(Raw(" 012"), "shape")[:2] == ("json", 1)
    assert c(Raw("-0"), "shape")[0] == "schema"
    assert c(2**48, "data_offsets") == ("schema", 0, "exceeds the limit")
    assert c(2**48, "shape") == (None, 0, "")
    assert c(2**64, "shape") == ("schema", 0, "exceeds the limit")
    assert c(Raw("\t7\n"), "data_offsets") == (None, 1, "")


def test_every_header_order_of_the_ranges_names_one_tensor(tmp_path: Path) -> None:
    """range_orders: all 6 orders of (0, 3) and each two of the 9 ranges; in
    every order of one set the rules name the same kind and tensor."""
    cases = list(edges.range_orders())
    assert len(cases) == 36 * 6
    by_set: dict[frozenset, set] = {}
    for label, plan, _ in cases:
        ranges = frozenset(label.removeprefix("ranges-").split("_"))
        path = tmp_path / "r.safetensors"
        doc = plan.header().write(path)
        w = want(plan, doc, [], path.stat().st_size)
        named = (w.engine, str(w.engine_name).split(".", 1)[-1])
        by_set.setdefault(ranges, set()).add(named)
    assert len(by_set) == 36 and all(len(v) == 1 for v in by_set.values())
    assert by_set[frozenset({"0-3", "9-0", "4-7"})] == {("offsets", "4-7")}


# -- two faults -------------------------------------------------------------------

#: The faults of an entry's own value, each its own problem of step 5.
ENTRY_FAULTS = ("not-object", "dtype-unknown", "dtype-type", "missing", "twice",
                "nine", "elem-bad", "elem-malformed", "offsets-count",
                "extra-malformed")

#: Two faults that can never stand in one plan: the metadata written whole
#: beside a pair of it, the first occurrence of a name renamed.
INHERENT = {"meta-dup+meta-not-object", "meta-nul+meta-not-object",
            "meta-value+meta-not-object", "meta-not-object+meta-not-object"}


def test_every_two_faults_meet_in_both_orders() -> None:
    """For the default seed every two faults stand in one header, the first's
    entry before the second's and after it; with a duplicated name the other
    fault in its first occurrence and in its second."""
    seen: dict[str, set[str]] = {p: set() for p in combined.PLACEMENTS}
    for label, _, _ in _pairs():
        for p in combined.PLACEMENTS:
            if f"-{p}-" in label:
                seen[p].add(label.split(f"-{p}-")[0])
    every = {f"{a}+{b}" for a, b in
             itertools.combinations_with_replacement(combined.FAULTS, 2)}
    assert every - seen["first-before"] == INHERENT
    assert {x for x in every if x.split("+")[0] != x.split("+")[1]} - seen[
        "second-before"] == INHERENT - {"meta-not-object+meta-not-object"}
    for other in ENTRY_FAULTS + ("overflow", "size", "range", "empty-limit"):
        pair = "+".join(sorted(["dup", other], key=list(combined.FAULTS).index))
        assert pair in seen["same-entry"], pair
        assert pair in seen["on-source"], pair


def test_a_duplicate_wins_over_its_own_entrys_problem(tmp_path: Path) -> None:
    """The class H06 breaks: a name's second occurrence whose entry fails to
    parse is a duplicate, for both readers, at the second name."""
    met = set()
    for label, plan, problems in _pairs():
        if not label.startswith("dup+") or "-same-entry-" not in label:
            continue
        other = label.split("+")[1].split("-same-entry-")[0]
        if other not in ENTRY_FAULTS:
            continue
        assert len(problems) >= 2
        malformed = any(q.kind == "json" for q in problems)
        assert _verdict(plan, problems, tmp_path) == (
            "duplicate", "json" if malformed else "duplicate")
        met.add(other)
    assert met == set(ENTRY_FAULTS)


def test_empty_tensors_past_48_bits_are_drawn(tmp_path: Path) -> None:
    """The class H07 breaks: an empty tensor (its range empty) with a dimension
    past 48 bits is overflow in both readers; the pairs draw it too."""
    hits = 0
    for label, plan, _ in _pairs():
        if "empty-limit" not in label:
            continue
        for z in plan.entries:
            if str(z.name).startswith("z.") and z.fields is not None:
                b, e = z.get("data_offsets")
                if b == e and any(d > 2**48 - 1 for d in z.get("shape")):
                    hits += 1
    assert hits >= 3
    assert [2**48 - 1, 2**16 + 1, 0] in combined.OVERFLOWS
    assert [0, 2**50] in combined.OVERFLOWS


def test_the_spreads_straddle_the_duplicate_checks_look_ahead() -> None:
    """gap-16 and gap-17 put the two entries exactly 16 and 17 apart (the
    look-ahead of dup_check), ends the first and the last."""
    rng = random.Random(0)
    for n in (18, 19, 20):
        i, k = combined.spots(rng, n, "gap-16")
        assert k - i == 16
        i, k = combined.spots(rng, n, "gap-17")
        assert k - i == 17
    assert combined.spots(rng, 9, "ends") == (0, 8)
    assert combined.spots(rng, 9, "late") == (7, 8)
    labels = [label for label, _, _ in _pairs()]
    for spread in combined.SPREADS:
        assert sum(f"-{spread}" in la for la in labels) > 50


def test_check_major_against_tensor_by_tensor() -> None:
    """Steps 6-9 as each reader runs them: a wrong size before an overflow in
    offset order is the engine's overflow (check-major) and the oracle's size
    (its first failing tensor); one tensor's problems agree."""
    rng = random.Random(1)
    p = base_plan(rng, 2, meta=False)
    a, b = p.tensors()
    a.field("dtype").value = "I64" if a.get("dtype") != "I64" else "U8"
    b.field("shape").value = [2**48]
    eng, ora, _ = data_faults(p)
    assert (eng.kind, eng.entry, ora.kind, ora.entry) == ("overflow", b, "size", a)
    q = Plan([tensor("z", "U8", [2**40, 2**40, 0], 0, 0)], b"")
    eng, ora, _ = data_faults(q)
    assert eng.kind == ora.kind == "overflow"
    q = Plan([tensor("z", "U8", [0, 2**40, 2**40], 0, 0)], b"")
    assert data_faults(q)[:2] == (None, None)


# -- the container's edges -----------------------------------------------------

def test_every_folder_edge_is_drawn() -> None:
    """Every metadata pattern, every name leaving the folder, the plain odd
    names, every total_size spelling: one container each."""
    cases = list(folders.folder_edges(random.Random(f"reader-diff folders {SEED}")))
    labels = [c.label for c in cases]
    assert {f"meta-{p}" for p in folders.META_PATTERNS} <= set(labels)
    assert {f"name-{n}" for n in folders.OUTSIDE} <= set(labels)
    assert {"name-dot", "name-dotdot", "name-empty", "name-nul", "name-backslash",
            "name-symlink-out", "name-symlink-absolute", "name-dangling",
            "name-a-folder", "name-the-index"} <= set(labels)
    assert sum(la.startswith("total-") for la in labels) == len(edges.SPELLINGS) + 2
    verdict = {c.label: (c.engine, c.oracle) for c in cases}
    for n in folders.OUTSIDE:
        assert verdict[f"name-{n}"] == ("index", "index")
    assert verdict["name-backslash"] == verdict["name-symlink-out"] == (None, None)
    assert verdict["name-a-folder"] == ("io", "io")
    differ = next(c for c in cases if c.label == "meta-differ")
    names = list(differ.s.shards)
    first = min(names, key=lambda n: n.encode())
    assert differ.metadata == dict(folders.META_PATTERNS["differ"][
        names.index(first)])
    assert next(c for c in cases if c.label == "meta-first-none").metadata == {}


def test_shard_names_sort_as_bytes() -> None:
    """The drawn shard names: 'model-10' before 'model-2', 'B' before 'a'."""
    assert sorted(folders.NAMES, key=lambda n: n.encode()) == list(folders.NAMES)


# -- both readers on every drawn case ------------------------------------------

def test_both_readers_follow_the_rules_on_every_pair(tmp_path: Path) -> None:
    """Every drawn pair: each reader's kind, the engine's offset, the names."""
    for i, (label, plan, problems) in enumerate(_pairs()):
        _, bad = judge_want(engine, tmp_path / f"c{i}.safetensors", plan, problems)
        assert bad is None, f"{label}: {bad}"


def test_both_readers_follow_the_rules_on_every_edge(tmp_path: Path) -> None:
    """Every number edge and every folder edge."""
    for i, (label, plan, problems) in enumerate(_edges()):
        _, bad = judge_want(engine, tmp_path / f"e{i}.safetensors", plan, problems)
        assert bad is None, f"{label}: {bad}"
    for i, c in enumerate(folders.folder_edges(
            random.Random(f"reader-diff folders {SEED}"))):
        box = tmp_path / f"f{i}"
        box.mkdir()
        bad = folders.judge_folder(engine, box / "c", c)
        assert bad is None, f"{c.label}: {bad}"


class _Lenient:
    """The real engine, but accepting what it refuses for one reason."""

    def __init__(self, words: str) -> None:
        self.words = words
        self.EngineError = engine.EngineError
        self._lib = engine._lib

    def Container(self, path: str):  # noqa: N802 - the engine's name
        """Open with the real engine; an error with ``words`` becomes a table."""
        try:
            return engine.Container(path)
        except engine.EngineError as e:
            if self.words not in str(e):
                raise
            return _Empty()


class _Empty:
    shards: list = []
    metadata: dict = {}

    def __enter__(self):
        return self

    def __exit__(self, *a) -> None:
        return None

    def tensors(self) -> list:
        return []


@pytest.mark.parametrize("words", ["above the 48-bit limit", "appears twice",
                                   "is not a plain file name"])
def test_an_engine_that_lets_an_edge_through_fails_the_sweeps(
        tmp_path: Path, words: str) -> None:
    """An engine accepting a dimension past 48 bits, a duplicate or a shard
    outside the folder fails reader-diff-sweeps."""
    from xcache.gate.reader_diff.runner import sweep_cases

    out = sweep_cases(_Lenient(words), tmp_path, SEED)
    assert out.failures and all("engine accepts" in f or "tensor tables" in f
                                or "metadata" in f for f in out.failures[:5])
