"""The gate's trace and break_check steps on both backends (k3-mini)."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from xcache import engine
from xcache.gate import CannotRun
from xcache.gate.backend_api import BackendFactory
from xcache.gate.backend_factory import EngineBackend, OracleBackend
from xcache.gate.check_probe import BREAK_NAMES, BREAKS, probe
from xcache.gate.containers import Target, make_target
from xcache.gate.report import Report
from xcache.gate.scenario_run import ScenarioRun
from xcache.gate.trace_check import take, trace_path


@pytest.fixture(scope="module")
def k3(tmp_path_factory: pytest.TempPathFactory) -> Target:
    """The k3-mini preset as the gate generates it."""
    return make_target("k3-mini", tmp_path_factory.mktemp("k3"))


def _backends(k3: Target, tmp_path: Path, **opts: Any
              ) -> tuple[EngineBackend, OracleBackend]:
    folder = tmp_path / "c"
    shutil.copytree(k3.pristine, folder)
    o = {"n_slots": 6, **opts}
    return EngineBackend(engine, folder, k3, o), OracleBackend(folder, k3, o)


def _run(k3: Target, backend: Any) -> ScenarioRun:
    """A scenario run named ``probe`` whose backend is ``backend``."""
    sc = {"name": "probe", "container": "k3-mini", "cache": {}, "steps": []}
    kind = EngineBackend if backend is None else type(backend)
    make = BackendFactory.of(kind, lambda folder: None)
    run = ScenarioRun(sc, {}, [], k3, Path("/nonexistent"), make, Report())
    run.backend = backend
    return run


def test_the_trace_file_sits_beside_the_folder(tmp_path):
    """The engine's trace file is the scratch folder's name plus .xctrace."""
    assert trace_path(tmp_path / "engine-3") == tmp_path / "engine-3.xctrace"


def test_both_backends_give_the_same_records(k3, tmp_path):
    """Gets, a batch and a stream: the engine's file equals the oracle's model."""
    eng, orc = _backends(k3, tmp_path, trace=True)
    try:
        for b in (eng, orc):
            b.get(0, 1)
            b.get(0, 1)
            b.getmany([(0, 2), (0, 1), (0, 2)])
            b.stream_rest(b.stream_begin([(0, 3), (0, 2)]))
        want = [[0, 1, "get", "miss"], [0, 1, "get", "hit"],
                [0, 2, "prefetch", "issued"], [0, 1, "prefetch", "resident"],
                [0, 2, "prefetch", "duplicate"], [0, 3, "stream", "miss"],
                [0, 2, "stream", "hit"]]
        header = {"magic": "XCTRACE1", "version": 1, "record_bytes": 24,
                  "fingerprint": "d6e8b69733720ffe", "layer_limit": 1,
                  "n_experts": 24, "top_k": 4, "n_slots": 6, "reserved": 0}
        re_, ro = _run(k3, eng), _run(k3, orc)
        assert take(re_) == take(ro) == {
            "trace": want, "trace_records": 7, "trace_steps": [0] * 7,
            "trace_header": header,
            "trace_file": {"bytes": 48 + 7 * 24, "records": 7, "trailing": "",
                           "reserved": [], "sha256": "44179baa79b70940"}}
        eng.get(0, 4)
        orc.get(0, 4)
        # the records since the last take; the file whole, all 8 of them
        assert take(re_) == take(ro) == {
            "trace": [[0, 4, "get", "miss"]], "trace_records": 1,
            "trace_steps": [0], "trace_header": header,
            "trace_file": {"bytes": 48 + 8 * 24, "records": 8, "trailing": "",
                           "reserved": [], "sha256": "d9c566f324e52fde"}}
    finally:
        eng.close()
        orc.close()


def test_a_trace_step_needs_the_trace_option(k3, tmp_path):
    """Without "trace": true in the cache options a trace step cannot run."""
    eng, orc = _backends(k3, tmp_path)
    try:
        for b in (eng, orc):
            with pytest.raises(CannotRun) as e:
                take(_run(k3, b))
            assert str(e.value) == ('a trace step needs "trace": true in the '
                                    'cache options')
            with pytest.raises(CannotRun) as e:
                b.set_step(3)
            assert str(e.value) == ('a set_step step needs "trace": true in '
                                    'the cache options')
        with pytest.raises(CannotRun) as e:
            take(_run(k3, None))
        assert str(e.value) == "a trace step needs an open cache"
    finally:
        eng.close()
        orc.close()


def test_check_names_the_broken_prefetch_accounting(k3, tmp_path):
    """With an unused resident prefetch, a prefetch load too many is INV-PREFETCH."""
    eng, orc = _backends(k3, tmp_path)
    try:
        for b in (eng, orc):
            b.get(0, 0)
            b.getmany([(0, 1), (0, 2)])
            b.get(0, 1)
        assert eng.values()["prefetch_unused_resident"] == 1
        step = {"op": "break_check", "what": "PREFETCH"}
        assert probe(_run(k3, eng), step) == {"check_broken": "INV-PREFETCH"}
        assert probe(_run(k3, orc), step) == {"check_broken": "INV-PREFETCH"}
        assert eng.values()["invariants"] == "clean"  # the hook restored it
    finally:
        eng.close()
        orc.close()


@pytest.mark.parametrize("what,extra", [
    ("CLOCK", {"slot": 1, "variant": 0}), ("KEY_TWICE", {"slot": 0, "other": 1}),
    ("INDEX", {"slot": 1}), ("EMPTY_FIELD", {"slot": "empty", "variant": 2}),
    ("COUNTERS", {"variant": 3}), ("READS", {})])
def test_each_break_is_named_as_the_table_says(k3, tmp_path, what, extra):
    """The engine's check() names each break as BREAK_NAMES does; clean after."""
    eng, orc = _backends(k3, tmp_path)
    try:
        eng.get(0, 0)
        eng.get(0, 1)
        got = probe(_run(k3, eng), {"what": what, **extra})
        assert got == {"check_broken": BREAK_NAMES[what]}
        assert eng.values()["invariants"] == "clean"
    finally:
        eng.close()
        orc.close()


def test_bad_break_steps_are_named(k3, tmp_path):
    """An unknown break, a key in no slot or no free slot: CannotRun saying which."""
    eng, orc = _backends(k3, tmp_path, n_slots=5)
    try:
        run = _run(k3, eng)
        with pytest.raises(CannotRun) as e:
            probe(run, {"what": "SLOW"})
        assert str(e.value) == ("scenario probe: break_check what 'SLOW' is not "
                                f"one of {', '.join(BREAK_NAMES)}")
        with pytest.raises(CannotRun) as e:
            probe(run, {"what": "INDEX", "slot": 3})
        assert str(e.value) == ("scenario probe: break_check names key 3 = "
                                "(0, 3), which holds no slot")
        for x in range(5):
            eng.get(0, x)
        with pytest.raises(CannotRun) as e:
            probe(run, {"what": "EMPTY_FIELD", "slot": "empty", "variant": 0})
        assert str(e.value) == ("scenario probe: break_check names an empty "
                                "slot but every slot is in use")
        with pytest.raises(CannotRun) as e:
            probe(_run(k3, None), {"what": "READS"})
        assert str(e.value) == "scenario probe: break_check needs an open cache"
    finally:
        eng.close()
        orc.close()


def test_a_break_caught_by_another_test_than_its_id_fails(k3, tmp_path, monkeypatch):
    """check() naming the right invariant but another test's id fails the check,
    naming both ids; a step whose check_id contradicts BREAKS cannot run."""
    eng, orc = _backends(k3, tmp_path)
    try:
        eng.get(0, 0)
        run = _run(k3, eng)
        step = {"what": "READS", "check_id": "inflight.reads"}
        assert probe(run, step) == {"check_broken": "INV-INFLIGHT"}
        monkeypatch.setitem(BREAKS, ("READS", -1, None), "inflight.holds")
        assert probe(run, {"what": "READS"}) == {"check_broken": (
            "INV-INFLIGHT at [inflight.reads], not [inflight.holds] (check() said "
            "'INV-INFLIGHT: [inflight.reads] 0 slots in flight but 1 reads under "
            "way')")}
        with pytest.raises(CannotRun) as e:
            probe(run, step)
        assert str(e.value) == ("scenario probe: break_check READS says check_id "
                                "'inflight.reads', BREAKS says 'inflight.holds'")
        assert probe(_run(k3, orc), {"what": "READS"}) == {
            "check_broken": "INV-INFLIGHT"}  # the oracle tells no message
        assert eng.values()["invariants"] == "clean"
    finally:
        eng.close()
        orc.close()
