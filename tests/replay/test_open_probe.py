"""The gate's open probe (gate/open_probe.py): its verdicts on the engine and on
engines that break one rule of an open."""

from __future__ import annotations

import gc
from pathlib import Path
from typing import Any

import pytest

from xcache import engine
from xcache.engine import alloc
from xcache.gate import differential, open_probe, reader_diff, sim_check, tensor_reads
from xcache.gate.report import Report


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> open_probe.Files:
    """The probe's containers, written once."""
    return open_probe.Files(tmp_path_factory.mktemp("open-probe"))


def _run(check: str, files: open_probe.Files, eng: Any = engine
         ) -> open_probe.Probe:
    run = dict((n, r) for n, r, _ in open_probe.CHECKS)[check]
    p = open_probe.Probe(eng, files)
    gc.collect()  # as run_checks does
    try:
        run(p)
    finally:
        alloc.disarm()
    return p


@pytest.mark.parametrize(("check", "cases"), [
    ("open-leaks", 24), ("open-params", 342), ("open-messages", 31)])
def test_the_engine_passes_every_check(files: open_probe.Files, check: str,
                                       cases: int) -> None:
    """Every case of each deterministic check, and no failure."""
    p = _run(check, files)
    assert (p.failures, p.cases) == ([], cases)


def test_the_engine_passes_the_c_face(files: open_probe.Files) -> None:
    """The 12 layouts, the NULL arguments and an unknown policy, then two C
    countdowns, a case per refused allocation (their number is the engine's)."""
    p = _run("open-c-face", files)
    assert p.failures == []
    assert p.cases > 14 + 2 * 20


def test_the_engine_passes_the_countdowns(files: open_probe.Files) -> None:
    """Every refused allocation of every open fails cleanly, and the live count
    ends where it began."""
    before = alloc.live()
    p = _run("open-nomem", files)
    assert p.failures == []
    assert p.cases > 1000
    assert alloc.live() == before


def test_the_layout_quantities() -> None:
    """An expert is 32 + 16 bytes, its slot one page plus two alignments."""
    assert (open_probe.EXPERT_BYTES, open_probe.STRIDE, open_probe.N_KEYS) == (
        48, 12288, 6)
    assert open_probe.expert_bytes(1, 0)[:3] == bytes([7, 20, 33])


def test_the_oracle_derived_texts() -> None:
    """The valid policies in the engine's table order and the oracle's
    verdicts on the ends of s3fifo's promote range."""
    assert open_probe.valid_policies() == (
        "lru, fifo, lfu, lfru:sample=N,seed=N, hotness:period=N, "
        "s3fifo:small=N,ghost=N,promote=N, arc, sieve")
    assert open_probe.oracle_verdict("s3fifo:promote=3") is None
    assert open_probe.oracle_verdict("s3fifo:promote=4") == (
        "policy s3fifo: promote is a hit count 1..3")
    assert open_probe.oracle_verdict("lru:x=1") == (
        "policy lru: bad parameter 'x=1'; valid parameters: none (as "
        "key=unsigned integer)")
    assert open_probe.oracle_verdict("nope") == (
        "unknown policy 'nope'; valid: " + open_probe.valid_policies())


def test_the_budget_messages() -> None:
    """The contract's two budget messages, exactly."""
    assert open_probe.budget_message(1, n_slots=1) == (
        "cache budget too small: top_k 1 needs at least 2 slots, n_slots gives "
        "1; n_slots=2 or budget_bytes=24576 (stride 12288 bytes) works")
    assert open_probe.budget_message(2, budget_bytes=36863) == (
        "cache budget too small: top_k 2 needs at least 3 slots, "
        "budget_bytes=36863 holds 2 slots of 12288 bytes; the smallest "
        "budget_bytes that works is 36864")


class _Engine:
    """The engine with ExpertCache replaced by ``cache``."""

    def __init__(self, cache: Any) -> None:
        self.Container = engine.Container
        self.EngineError = engine.EngineError
        self.ExpertCache = cache


def test_an_engine_accepting_promote_4_fails_open_params(
        files: open_probe.Files) -> None:
    """A cache open that lets promote=4 through is named with the oracle's text."""
    def cache(cont: Any, **kw: Any) -> Any:
        if kw.get("policy") == "s3fifo:promote=4":
            kw["policy"] = "s3fifo:promote=3"
        return engine.ExpertCache(cont, **kw)

    p = _run("open-params", files, _Engine(cache))
    assert p.failures == ["ExpertCache policy='s3fifo:promote=4': accepted, "
                          "oracle: 'policy s3fifo: promote is a hit count 1..3'"]


def test_an_engine_opening_too_few_slots_fails_open_params(
        files: open_probe.Files) -> None:
    """A budget of top_k slots that opens anyway fails the budget cases."""
    def cache(cont: Any, **kw: Any) -> Any:
        if kw.get("n_slots") == kw.get("top_k") == 1:
            kw["n_slots"] = 2
        return engine.ExpertCache(cont, **kw)

    p = _run("open-params", files, _Engine(cache))
    assert len(p.failures) == 2
    assert p.failures[0].startswith("ExpertCache(top_k=1, {'n_slots': 1}): "
                                    "None, not ('budget', None, None, None, ")


def test_a_wrong_unknown_policy_list_fails_open_messages(
        files: open_probe.Files) -> None:
    """An unknown-policy message whose list lacks the parameters is named."""
    def cache(cont: Any, **kw: Any) -> Any:
        try:
            return engine.ExpertCache(cont, **kw)
        except engine.MisuseError as e:
            if str(e).startswith("unknown policy"):
                raise engine.MisuseError(str(e).replace(":sample=N,seed=N", ""),
                                         kind="misuse") from None
            raise

    p = _run("open-messages", files, _Engine(cache))
    assert len(p.failures) == 5
    assert p.failures[0].startswith("policy='nope': message \"unknown policy "
                                    "'nope'; valid: lru, fifo, lfu, lfru, ")


def test_countdown_names_a_refusal_that_let_the_open_succeed(
        files: open_probe.Files) -> None:
    """An open that swallows a refused allocation fails at that allocation."""
    p = open_probe.Probe(engine, files)

    def op() -> Any:
        try:
            return engine.Container(str(files.one))
        except engine.EngineError:
            return engine.Container(str(files.one))  # retried: not allowed

    assert open_probe.countdown(p, "retry", op, open_probe.close_if_open,
                                lambda m: True) is None
    assert p.failures == ["retry: allocation 1 was refused yet the open "
                          "succeeded"]


def test_countdown_names_a_leak_and_wrong_fields(files: open_probe.Files,
                                                 monkeypatch: pytest.MonkeyPatch
                                                 ) -> None:
    """A refused open that leaves an allocation behind, or whose error has an
    offset, fails with the allocation's number."""
    p = open_probe.Probe(engine, files)
    kept: list[Any] = []

    def leaky() -> Any:
        alloc.disarm()
        kept.append(engine.Container(str(files.one)))  # unarmed: it stays
        alloc.fail_alloc(1)
        return engine.Container(str(files.one))

    assert open_probe.countdown(p, "leaky", leaky, open_probe.close_if_open,
                                lambda m: True) is None
    assert p.failures[0].startswith("leaky: allocation 1 refused: ")
    assert p.failures[0].endswith(" allocation(s) left behind")
    kept[0].close()

    p = open_probe.Probe(engine, files)

    def offset() -> Any:
        try:
            return engine.Container(str(files.one))
        except engine.OutOfMemoryError as e:
            raise engine.OutOfMemoryError(str(e), kind="nomem", offset=8
                                          ) from None

    assert open_probe.countdown(p, "offset", offset, open_probe.close_if_open,
                                lambda m: True) is None
    assert p.failures[0].startswith(
        "offset: allocation 1 refused: error (kind, offset, layer, expert) "
        "('nomem', 8, None, None), not ('nomem', None, None, None)")


def test_a_leaking_close_fails_open_leaks(files: open_probe.Files,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """A close that leaves the slot arena allocated (its struct and its bytes)
    is named."""
    kept: list[Any] = []
    real_close = engine.ExpertCache.close

    def close(self: Any) -> None:
        kept.append(self._arena)  # the arena's last reference: never freed
        real_close(self)

    monkeypatch.setattr(engine.ExpertCache, "close", close)
    p = _run("open-leaks", files)
    kept.clear()
    assert p.failures[0] == ("ExpertCache(one.safetensors, lru) closed: 2 "
                             "allocation(s) live")
    assert len(p.failures) == 3 * len(open_probe.POLICY_SPECS)


def test_the_probe_is_a_differential_check(monkeypatch: pytest.MonkeyPatch,
                                           tmp_path: Path) -> None:
    """run_all runs the probe after the others: its five lines, all passing."""
    monkeypatch.setattr(reader_diff, "run_checks", lambda e, w, r: [])
    monkeypatch.setattr(sim_check, "run_checks", lambda e, r: [])
    monkeypatch.setattr(tensor_reads, "run_checks", lambda e, w, r: [])
    report = Report()
    names = differential.run_all(engine, tmp_path, report)
    assert names == ["open-nomem", "open-leaks", "open-params", "open-c-face",
                     "open-messages"]
    assert [(c["check"], c["passed"]) for c in report.checks] == [
        (n, True) for n in names]
    assert report.checks[4]["detail"] == (
        "31 cases: messages against the oracle's tables and the contract")


def test_a_nomem_whose_message_names_nothing_fails(files: open_probe.Files
                                                   ) -> None:
    """The container's no-memory forms name one of its files."""
    ok = open_probe.container_nomem([files.one])
    assert ok(f"{files.one}: out of memory (shard path)")
    assert ok(f"{files.one}: no memory for the O_DIRECT probe buffer")
    assert not ok("(container): out of memory (shard path)")


def test_an_index_shard_path_refusal_names_the_index(tmp_path: Path) -> None:
    """The allocation of a shard's joined path, refused, is a nomem naming
    the index file (it named no file: "(container)")."""
    f = open_probe.Files(tmp_path)
    index = f.index / "model.safetensors.index.json"
    messages = []
    for n in range(1, 40):
        alloc.fail_alloc(n)
        try:
            engine.Container(str(f.index)).close()
        except engine.OutOfMemoryError as e:
            messages.append(str(e))
        else:
            break
        finally:
            alloc.disarm()
    assert f"{index}: out of memory (shard path)" in messages
    assert not [m for m in messages if m.startswith("(container)")]

