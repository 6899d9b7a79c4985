"""The reader differential's generators, sweeps, path probes and message facts."""

from __future__ import annotations

import random
import re
from pathlib import Path
from typing import Any

import pytest

from xcache import engine
from xcache.gate import reader_diff
from xcache.gate.reader_diff import drawn, paths
from xcache.gate.reader_diff import generators as gen
from xcache.gate.reader_diff.compare import (
    Verdict,
    compare,
    describe,
    found_fact,
    quoted,
)
from xcache.gate.reader_diff.runner import sweep_cases
from xcache.oracle.safetensors import _number_in_range, _too_deep


def _effective_exponent(text: str) -> tuple[int, int]:
    """(significand digits, exponent) of a number as the official rule reads it."""
    m = re.fullmatch(r"-?(\d+)(?:\.(\d+))?[eE]\+?(\d+)", text)
    assert m is not None, text
    whole, frac, exp = m.group(1), m.group(2) or "", int(m.group(3))
    return len((whole + frac).lstrip("0")), exp - len(frac)


def test_numbers_straddle_the_largest_double_at_every_width() -> None:
    """Below is in range and above out of it for every width the double rounding
    does not blur (up to 17 digits), over 40 seeds."""
    for seed in range(40):
        for w in range(1, 18):
            assert _number_in_range(gen.number_text(random.Random(seed), w, "below"))
            assert not _number_in_range(gen.number_text(random.Random(seed), w,
                                                        "above"))


def test_a_20_digit_significand_meets_the_1e289_entry() -> None:
    """Every 20-digit draw just above the largest double is read as a significand
    past 1.7977e19 times 10^289, and is out of range."""
    for seed in range(20):
        text = gen.number_text(random.Random(seed), 20, "above")
        digits, exp = _effective_exponent(text)
        sig = int(re.sub(r"[^\d]", "", text.split("e")[0].split("E")[0]).lstrip("0"))
        assert (digits, exp) == (20, 289), text
        assert 17976931348623157081 <= sig <= 2**64 - 1, text
        assert not _number_in_range(text)


def test_the_bad_pieces_say_where_and_what() -> None:
    """Each bad piece names its kind, the byte the engine points at and its words."""
    rng = random.Random(1)
    e = gen._bad_escape(rng, b"\x01")
    assert (e.spelled, e.kind, e.at, e.message) == (b"\\\x01", "json", 0,
                                                   "bad escape '\\?'")
    assert gen._bad_escape(rng, b"x").message == "bad escape '\\x'"
    assert gen._bad_escape(rng, b"\x7f").message == "bad escape '\\?'"
    h = gen._bad_hex(random.Random(3), "below-0")
    assert h.kind == "json" and h.message == "bad hex digit in \\u escape"
    assert h.spelled[h.at:h.at + 1] in [bytes([c]) for c in gen.NOT_HEX["below-0"]]
    low = gen._bad_surrogate(random.Random(5), 0)
    assert low.message == "lone low surrogate \\u" + low.spelled.decode()[2:].upper()
    labels = [p.label for p in gen.every_bad_piece(random.Random(0))]
    assert labels == (["hex-9-A", "hex-F-a", "hex-above-f", "hex-below-0",
                       "hex-non-ascii"] + ["escape-bad"] * 11
                      + ["surrogate-low", "surrogate-high", "surrogate-unpaired"]
                      + [f"utf8-bad-{c}" for c in sorted(gen.NOT_UTF8)
                         for _ in gen.NOT_UTF8[c]])
    assert len(labels) == 19 + 29  # every sequence that is not UTF-8


def test_a_drawn_name_decodes_to_its_pieces() -> None:
    """A valid name's spelling decodes (as JSON) to its value; a bad one's offset
    is inside its spelling."""
    import json

    for seed in range(50):
        nm = gen.draw_name(random.Random(seed), False, prefix="t.")
        assert json.loads(nm.spelled.decode()) == nm.value
        bad = gen.draw_name(random.Random(seed), True)
        assert bad.value is None and 0 < bad.at < len(bad.spelled)


def test_every_width_class_is_drawn() -> None:
    """valid_piece of each width is that many UTF-8 bytes once decoded."""
    for w in (1, 2, 3, 4):
        for seed in range(10):
            p = gen.valid_piece(random.Random(seed), w)
            assert p.value is not None
            assert len(p.value.encode("utf-8")) == (1 if p.label == "escape-short"
                                                    else w)


def test_a_quoted_name_is_cut_at_200_bytes() -> None:
    """The quote the engine's message holds: 200 bytes, a cut sequence replaced."""
    assert quoted("a" * 199 + "é") == '"' + "a" * 199 + '\ufffd"'
    assert quoted("a" * 300) == '"' + "a" * 200 + '"'
    assert quoted("x.é") == '"x.é"'


def test_what_a_byte_is_described_as() -> None:
    """describe names what the byte at an offset starts."""
    text = b'{"a" 7, [x'
    assert [describe(text, i) for i in (0, 1, 5, 6, 8, 9, 10)] == [
        "an object", "a string", "a number", "an unexpected character",
        "an array", "an unexpected character", "the end of the JSON"]


def test_a_message_that_found_the_wrong_thing_fails() -> None:
    """found_fact flags 'found an array' where the byte is a number."""
    text = b'{7: 1}'
    ok = Verdict("json", 9, "f: byte 9: expected a string, found a number")
    assert found_fact(ok, text, 8) is None
    wrong = Verdict("json", 9, "f: byte 9: expected a string, found an array")
    assert found_fact(wrong, text, 8) == (
        "json: the message says it found an array, the byte at 9 is a number: "
        "f: byte 9: expected a string, found an array")


def test_different_data_starts_fail() -> None:
    """An accepted container whose data start differs from 8 + N is named."""
    a = Verdict(starts={"x.safetensors": 72, "": 0})
    b = Verdict(starts={"x.safetensors": 64, "": 0})
    assert compare(a, b, None) == (
        "data starts (xc_st_shard_data_start): engine {'x.safetensors': 72, "
        "'': 0}, oracle {'x.safetensors': 64, '': 0}")


def test_the_oracle_finds_the_first_bracket_past_level_127() -> None:
    """_too_deep: brackets in strings (escaped quotes included) do not count."""
    deep = "[" * 128 + "]" * 128
    assert _too_deep(deep) == 127
    assert _too_deep("[" * 127 + "]" * 127) == -1
    s = '{"a": "[[[\\"[[", "b": ' + deep + "}"
    assert _too_deep(s) == s.index("[" * 128) + 126
    assert _too_deep('["é", ' + deep + "]") == len('["é", ') + 126


def test_the_sweep_meets_every_class() -> None:
    """One file per class: every bad piece, width, site at both sides of the
    depth limit, each width of number above the largest double, token and
    non-name."""
    labels = [label for label, _, _ in drawn.sweep(random.Random(0))]
    assert len(labels) == 130
    # the length prefix at its bound: 10^8 - 1 and 10^8 allowed, past it not
    assert [la for la in labels if la.startswith("prefix-")] == [
        "prefix-99999999", "prefix-100000000", "prefix-100000001",
        f"prefix-{2**63}", f"prefix-{2**64 - 1}"]
    for site in drawn.SITES:
        assert f"depth-{site}-127" in labels and f"depth-{site}-128" in labels
    assert ({"numbers-below", "numbers-near"}
            | {f"number-above-{w}" for w in range(1, 23)}) <= set(labels)
    assert {f"names-width-{w}" for w in (1, 2, 3, 4)} <= set(labels)
    assert sum(la.startswith("name-utf8-bad-") for la in labels) == sum(
        map(len, gen.NOT_UTF8.values()))


def test_the_engine_agrees_on_the_sweeps_and_the_paths(tmp_path: Path) -> None:
    """The default sweep, path probes, pairs of faults, number edges, range
    orders and folder edges (117 + 842 + 402 + 216 + 48 files): no
    disagreement."""
    out = sweep_cases(engine, tmp_path, reader_diff.DEFAULT_SEED)
    assert out.failures == []
    assert (out.cases, out.refused) == (1653, 1560)


class _Changed:
    """The real engine with one thing about its errors changed."""

    def __init__(self, change: str) -> None:
        self.change = change
        self.EngineError = engine.EngineError
        self._lib = engine._lib if change != "no-lib" else None

    def Container(self, path: str) -> Any:  # noqa: N802 - the engine's name
        """Open with the real engine; re-raise its error changed."""
        try:
            return engine.Container(path)
        except engine.EngineError as e:
            msg, kind = str(e), e.kind
            if self.change == "found":
                msg = msg.replace("found a number", "found an array")
            elif self.change == "escape":
                msg = msg.replace("'\\?'", "'\\\x01'")
            elif self.change == "quote":
                msg = msg.replace('tensor "', 'tensor "x', 1)
            elif self.change == "not_found" and kind == "not_found":
                kind = "io"
            raise engine.EngineError(msg, kind=kind, offset=-1 if e.offset is None
                                     else e.offset) from None


@pytest.mark.parametrize(("change", "words"), [
    ("found", "the message says it found an array"),
    ("escape", "the message lacks 'bad escape"),
    ("quote", "the message does not quote"),
    ("not_found", "kind: engine io"),
])
def test_a_changed_fact_fails_the_sweeps(tmp_path: Path, change: str, words: str
                                         ) -> None:
    """An engine whose messages found another thing, print a bad escape raw, quote
    another name, or call a missing path an I/O error fails the sweeps."""
    out = sweep_cases(_Changed(change), tmp_path, reader_diff.DEFAULT_SEED)
    assert any(words in f for f in out.failures), out.failures[:3]


def test_a_short_path_is_opened_after_the_suffix_bytes(tmp_path: Path) -> None:
    """The C reader opens 'n' laid out after '.jso' as the shard it is."""
    short = tmp_path / "s"
    short.mkdir()
    paths._shard(short / "n")
    assert paths._raw_open(engine, short, "n") is None
    assert paths._raw_open(_Changed("no-lib"), short, "n") is None


def test_the_oracle_on_an_empty_folder_and_a_huge_index(tmp_path: Path) -> None:
    """An empty folder is not_found; an index past 100,000,000 bytes is index at 0."""
    from xcache.gate.reader_diff.compare import oracle_verdict

    (tmp_path / "e").mkdir()
    assert oracle_verdict(tmp_path / "e").kind == "not_found"
    big = tmp_path / "b"
    big.mkdir()
    with open(big / reader_diff.INDEX_NAME, "wb") as f:
        f.truncate(100_000_001)
    v = oracle_verdict(big)
    assert (v.kind, v.offset, v.detail) == (
        "index", 0, "the index is 100000001 bytes, above the limit of 100000000")


def test_an_index_nested_past_the_limit_is_json(tmp_path: Path) -> None:
    """x_depth: below the limit both accept, past it both say json at one byte."""
    from xcache.gate.reader_diff.index_rules import x_depth

    kinds = set()
    for seed in range(40):
        rng = random.Random(seed)
        s = reader_diff.base_sharded(rng)
        x_depth(rng, s)
        d = tmp_path / f"x{seed}"
        s.write(d)
        mine, theirs = (reader_diff.engine_verdict(engine, d),
                        reader_diff.oracle_verdict(d))
        assert (mine.kind, mine.offset) == (theirs.kind, theirs.offset)
        kinds.add(mine.kind)
    assert kinds == {None, "json"}


def test_a_dimension_that_wraps_is_schema(tmp_path: Path) -> None:
    """wrap_case: 2^64 k as a dimension of an empty tensor in the writers' spelling
    is schema at that dimension, for both readers."""
    from xcache.gate.reader_diff.runner import judge

    for seed in range(6):
        rng = random.Random(seed)
        h = reader_diff.base_single(rng)
        expect = drawn.wrap_case(rng, h)
        theirs, bad = judge(engine, tmp_path / f"w{seed}.safetensors", h, expect)
        assert (theirs.kind, bad) == ("schema", None)
        assert b'"shape":[' in (tmp_path / f"w{seed}.safetensors").read_bytes()
