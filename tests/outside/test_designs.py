"""Declared designs (gate/outside/designs.py): the calls each played design
makes, the manifest's [design] table, and the relations every check judges."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from xcache.gate import CannotRun
from xcache.gate.backend_api import Backend, BackendFactory, Capabilities, Pins
from xcache.gate.containers import make_target
from xcache.gate.operations import value_needs
from xcache.gate.outside.backend import judge_factory, relations
from xcache.gate.outside.designs import (
    Design,
    DesignMisuse,
    DesignView,
    alters,
    check_design,
    designed,
)


class Recorder(Backend):
    """A backend that records the calls it is given and refuses nothing."""

    name = "rec"

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []
        self.serial = 0

    def values(self) -> dict[str, Any]:
        """Nothing resident."""
        return {"resident": []}

    def close(self) -> None:
        """Nothing to free."""

    def hold(self, layer: int, expert: int) -> tuple[Any, bytes]:
        """A new reference."""
        self.serial += 1
        self.calls.append(("hold", layer, expert))
        return self.serial, b"x"

    def release(self, ref: Any) -> None:
        """Recorded."""
        self.calls.append(("release", ref))

    def get(self, layer: int, expert: int) -> bytes:
        """Recorded."""
        self.calls.append(("get", layer, expert))
        return b"x"

    def getmany(self, keys: list[tuple[int, int]]) -> int:
        """Recorded; every key published."""
        self.calls.append(("getmany", list(keys)))
        return len(keys)

    def prefetch(self, keys: list[tuple[int, int]]) -> int:
        """Recorded; every key started."""
        self.calls.append(("prefetch", list(keys)))
        return len(keys)

    def pin(self, layer: int, expert: int) -> None:
        """Recorded."""
        self.calls.append(("pin", layer, expert))

    def unpin(self, layer: int, expert: int) -> None:
        """Recorded."""
        self.calls.append(("unpin", layer, expert))


LAYERS = {3, 5}


def view(design: Design, judge: bool = False, flag: bool = False
         ) -> DesignView:
    """A view over a fresh Recorder: layers 3 and 5 of 4 experts, each key's
    payload starting at offset 100 - 10 * expert."""
    return DesignView(Recorder(), design, judge, flag,
                      order=lambda k: ("s", 100 - 10 * k[1]),
                      inside=lambda k: k[0] in LAYERS and 0 <= k[1] < 4)


def test_one_layer_batches_are_one_call_per_layer_in_first_seen_order():
    """batch_layers = one: a batch over two layers is two calls, each layer's
    keys in their given order, the counts summed."""
    v = view(Design(batch_layers="one"))
    assert v.getmany([(5, 1), (3, 0), (5, 2), (3, 3)]) == 4
    assert v.inner.calls == [("getmany", [(5, 1), (5, 2)]),
                             ("getmany", [(3, 0), (3, 3)])]


def test_one_layer_batch_with_a_key_outside_is_that_key_alone():
    """A key outside the layout is sent alone first, to be refused, and no
    layer of the batch is loaded before it."""
    v = view(Design(batch_layers="one"))
    v.getmany([(3, 0), (4, 1), (5, 9)])
    assert v.inner.calls == [("getmany", [(4, 1)])]


def test_offset_order_sorts_each_batch_by_where_its_payload_starts():
    """batch_order = offset: the keys by their first piece's offset."""
    v = view(Design(batch_order="offset"))
    v.getmany([(3, 0), (3, 2), (3, 1)])
    assert v.inner.calls == [("getmany", [(3, 2), (3, 1), (3, 0)])]


def test_silent_prefetch_takes_keys_inside_only_and_returns_nothing():
    """prefetch = silent: out-of-layout keys never reach either side; 0."""
    v = view(Design(prefetch="silent"))
    assert v.prefetch([(3, 1), (9, 0), (5, 7), (5, 2)]) == 0
    assert v.inner.calls == [("prefetch", [(3, 1), (5, 2)])]


def test_silent_prefetch_on_the_judge_swallows_its_failure():
    """The judge's failed silent prefetch is unreported, as the cache's is;
    the cache's own exception still reaches the runner."""
    def boom(keys: list[Any]) -> int:
        raise OSError("read failed")
    judge, cache = view(Design(prefetch="silent"), judge=True), \
        view(Design(prefetch="silent"))
    judge.inner.prefetch = boom  # type: ignore[method-assign]
    cache.inner.prefetch = boom  # type: ignore[method-assign]
    assert judge.prefetch([(3, 0)]) == 0
    with pytest.raises(OSError):
        cache.prefetch([(3, 0)])


def test_whole_set_holds_are_given_back_with_the_last_of_the_set():
    """holds = whole-set: releases wait until no hold of the set is open,
    then go together; a get is a hold given back at once."""
    v = view(Design(holds="whole-set"))
    a, _ = v.hold(3, 0)
    b, _ = v.hold(3, 1)
    v.release(a)
    assert v.inner.calls == [("hold", 3, 0), ("hold", 3, 1)]
    v.release(b)
    assert v.inner.calls[2:] == [("release", a), ("release", b)]
    v.get(5, 2)
    assert v.inner.calls[4:] == [("hold", 5, 2), ("release", 3)]


def test_whole_set_release_of_a_reference_given_back_is_misuse():
    """A second release of a reference of an open set is refused as misuse."""
    v = view(Design(holds="whole-set"))
    a, _ = v.hold(3, 0)
    v.hold(3, 1)
    v.release(a)
    with pytest.raises(DesignMisuse):
        v.release(a)


def test_whole_set_uses_the_inner_release_set_when_it_has_one():
    """An outside backend's release_all takes the whole set in one call."""
    v = view(Design(holds="whole-set"))
    sets: list[list[Any]] = []
    v.inner.release_set = sets.append  # type: ignore[attr-defined]
    a, _ = v.hold(3, 0)
    b, _ = v.hold(3, 0)
    v.release(b)
    v.release(a)
    assert sets == [[b, a]]


def test_the_judge_plays_flag_pins_and_the_cache_side_passes_them_on():
    """On the judge a second pin is none and one unpin clears it; an unpin
    of a resident expert not pinned changes nothing; the cache gets all."""
    judge = view(Design(), judge=True, flag=True)
    judge.inner.values = lambda: {"resident": [[3, 0], [3, 1]]}  # type: ignore[method-assign]
    judge.pin(3, 0)
    judge.pin(3, 0)
    judge.unpin(3, 0)
    judge.unpin(3, 1)
    judge.unpin(5, 3)
    assert judge.inner.calls == [("pin", 3, 0), ("unpin", 3, 0),
                                 ("unpin", 5, 3)]
    cache = view(Design(), flag=True)
    cache.pin(3, 0)
    cache.pin(3, 0)
    assert cache.inner.calls == [("pin", 3, 0), ("pin", 3, 0)]


def test_a_design_alters_the_scenarios_with_its_calls_only():
    """Only scenarios with a call the design makes otherwise are derived."""
    pins = {"steps": [{"op": "get"}, {"op": "pin"}]}
    batch = {"steps": [{"op": "getmany"}]}
    assert alters(Design(), False) is None
    flag = alters(Design(), True)
    assert flag(pins) and not flag(batch)
    one = alters(Design(batch_layers="one"), False)
    assert one(batch) and not one(pins)
    assert alters(Design(policy="sampled"), False) is None


def test_counted_refusals_alter_the_scenarios_that_meet_a_refusal():
    """A cache counting a get refused for want of a slot derives every
    scenario whose checks name such a refusal (all_pinned), no other."""
    refused = {"steps": [{"op": "get"}, {"op": "check", "name": "c",
                                         "expect": {"errors": ["all_pinned"]}}]}
    failed = {"steps": [{"op": "get"}, {"op": "check", "name": "c",
                                        "expect": {"errors": ["io"]}}]}
    counted = alters(Design(refused_gets="counted"), False)
    assert counted(refused) and not counted(failed)
    assert alters(Design(refused_gets="uncounted"), False) is None


def test_inexact_designs_lack_exact_victims_and_name_why():
    """policy sampled, sticky failures and unprotected batches each make
    the victims the cache's own; residents and hits then need exact:victims."""
    assert Design().inexact() == []
    assert Design(policy="sampled", failures="sticky",
                  batch="unprotected").inexact() == [
        "policy = sampled", "failures = sticky", "batch = unprotected"]
    caps = Capabilities(inexact=frozenset({"victims"}))
    assert not caps.has("exact:victims")
    assert "exact:victims" in value_needs("resident")
    assert "exact:victims" in value_needs("hits")
    assert "exact:victims" not in value_needs("requests")
    assert "exact:victims" not in value_needs("wrong_reads")
    assert Capabilities().without("exact:victims").inexact == {"victims"}


@pytest.mark.parametrize("table, message", [
    ({"holds": "all"}, "design.holds must be one of 'each', 'whole-set', "
                       "not 'all'"),
    ({"speed": "fast"}, "design.speed is no design field (fields: holds, "),
    ({"policy": "sampled", "hit_bound": 2}, "design.hit_bound must be a "
                                             "number from 0 to 1, not 2"),
    ({"hit_bound": 0.1}, "design.hit_bound bounds a sampled policy"),
    ([1], "design must be a table ([design])"),
])
def test_a_bad_design_table_is_one_line_naming_the_field(table: Any,
                                                         message: str):
    """Each wrong [design] field is CannotRun naming the file and the field."""
    with pytest.raises(CannotRun) as e:
        check_design(table, Path("/a/xcs.toml"))
    assert str(e.value).startswith("/a/xcs.toml: " + message)


def test_a_design_table_is_read_whole():
    """Every field and the bound are taken as written."""
    d = check_design({"holds": "whole-set", "policy": "sampled",
                      "hit_bound": 0.1, "io": "callback"}, Path("x"))
    assert d == Design(holds="whole-set", policy="sampled", hit_bound=0.1,
                       io="callback")
    assert d.declared() == {"holds": "whole-set", "policy": "sampled",
                            "io": "callback"}


def test_relations_name_each_one_broken():
    """Every relation a cache's values break is named, none when all hold."""
    good = {"n_slots": 4, "requests": 5, "hits": 2, "misses": 3,
            "ready_slots": 2, "resident": [[0, 1], [0, 2]], "io_bytes": 10,
            "payload_bytes": 10}
    assert relations(good) == []
    bad = {**good, "requests": 6, "ready_slots": 5, "io_bytes": 9}
    assert relations(bad) == ["requests 6 != hits 2 + misses 3",
                              "more residents than the 4 slots",
                              "2 keys resident in 5 ready slots",
                              "io_bytes 9 < payload_bytes 10 published"]
    assert relations({"n_slots": 1}) == []


def test_the_oracle_as_judge_plays_a_whole_set_of_holds(tmp_path: Path):
    """On the real oracle: a key of an open set stays held after its own
    release, and is given back with the set's last."""
    target = make_target("k3-mini", tmp_path)
    opts = {"n_slots": 6, "policy": "lru"}
    judge = judge_factory(target, opts, Capabilities(pins=Pins.COUNT),
                          Design(holds="whole-set"))
    assert isinstance(judge, BackendFactory)
    b = judge(target.pristine)
    try:
        a, _ = b.hold(0, 0)
        c, _ = b.hold(0, 1)
        b.release(a)
        assert b.values()["held"] == 2
        b.release(c)
        assert b.values()["held"] == 0
        with pytest.raises(DesignMisuse):
            b.release(c)
        assert judge.kind_of(DesignMisuse("x")) == "misuse"
    finally:
        b.close()


def test_the_judge_of_a_design_runs_the_python_face(tmp_path: Path):
    """The Python face (op:lifetime) is the engine's own and no design plays
    it: a design's judge hands face, container_has and container_read to
    the oracle as they are."""
    target = make_target("k3-mini", tmp_path)
    judge = judge_factory(target, {"n_slots": 6, "policy": "lru"},
                          Capabilities(pins=Pins.COUNT),
                          Design(refused_gets="counted"))
    b = judge(target.pristine)
    try:
        inner = b.inner
        face = b.face()
        assert face.cache is inner.face().cache  # the oracle's own cache
        held = face.get(0, 0)
        assert b.values()["held"] == 1
        held.release()
        assert b.values()["held"] == 0
        name = next(iter(target.pieces(0, 0))).name
        assert b.container_has(name) is True
        assert b.container_read(name) == inner.container_read(name)
    finally:
        b.close()


def test_designed_leaves_a_factory_of_the_same_kind():
    """The designed factory keeps the inner one's fields and capabilities."""
    inner = BackendFactory("rec", Capabilities(pins=Pins.FLAG),
                           lambda folder: Recorder())

    class T:
        layout = {"layers": [3, 5], "n_experts": 4}
    made = designed(inner, Design(prefetch="silent"), T(), judge=False)
    assert dataclasses.replace(made, open=inner.open,
                               kind_of=inner.kind_of) == inner
    assert made.kind_of(DesignMisuse("x")) == "misuse"
    assert made.kind_of(OSError("x")) == "failed"
    assert isinstance(made(Path(".")), DesignView)


def _declared(tmp: Path, design: str, defect: int = 0) -> dict[str, Any]:
    """tinycache's rows over every scenario with ``design`` (a ``[design]``
    table) joined to its manifest's own (and TC_DEFECT ``defect``)."""
    import contextlib  # noqa: PLC0415
    import io  # noqa: PLC0415

    from tests.helpers import bad_adapter  # noqa: PLC0415
    from xcache.gate.outside import conformance  # noqa: PLC0415

    adapter = bad_adapter(tmp, "    .abi = XCS_ABI,", "    .abi = XCS_ABI,",
                          ("[design]\n", design))
    (tmp / "out").mkdir()
    flags = (f"-DTC_DEFECT={defect}",) if defect else ()
    with contextlib.redirect_stdout(io.StringIO()):
        rows, report = conformance.run(adapter, tmp / "out", tmp / "work", [],
                                       120.0, extra_cflags=flags)
    out = {r["contract"]: r for r in rows}
    out["checks"] = {c["check"]: c["detail"] for c in report.checks
                     if c["backend"] == "tinycache"}
    return out


def test_an_exact_lru_declared_sampled_passes_within_its_bound(tmp_path: Path):
    """tinycache (exact LRU) declared sampled: no FAIL; residents and counts
    are N/A naming exact:victims, the real-routing replay's hits judged
    within the bound (the policies row still passes on them)."""
    rows = _declared(tmp_path, '[design]\npolicy = "sampled"\n')
    checks = rows.pop("checks")
    assert [c for c, r in rows.items() if r["verdict"] == "FAIL"] == []
    assert rows["policies"]["verdict"] == "PASS"
    assert rows["relations"]["verdict"] == "PASS"
    assert checks["policy counters (lru)"] == (
        "0 of 0 reads wrong, requests 320, invariants clean, relations [], "
        "held_changed 0, hits "
        "106 (a sampled policy: within 16 of the exact policy's 106); N/A "
        "misses (exact:victims), evictions (exact:victims), resident "
        "(exact:victims)")
    report = (tmp_path / "out" / "conformance.md").read_text()
    assert "victims: policy = sampled" in report


def test_sticky_failures_declared_by_a_cache_that_frees_them_fail(
        tmp_path: Path):
    """tinycache frees a failed read's slot; declared sticky, the judge plays
    the failure reported to the next get where nothing was evicted: the
    get that reads again instead FAILs io-errors (failed-read-after) and
    counter-windows (state-counters' end of file)."""
    rows = _declared(tmp_path, '[design]\npolicy = "sampled"\n'
                               'failures = "sticky"\n')
    del rows["checks"]
    assert [c for c, r in rows.items() if r["verdict"] == "FAIL"] == [
        "counter-windows", "io-errors"]
    assert rows["io-errors"]["first_failure"].startswith("failed-read-after")


def test_a_held_victim_fails_holds_even_when_victims_are_the_caches(
        tmp_path: Path):
    """With its victims its own, a cache that evicts a held expert (tinycache
    defect 6) still FAILs holds: what must hold is judged exactly."""
    rows = _declared(tmp_path, '[design]\npolicy = "sampled"\n', defect=6)
    del rows["checks"]
    assert [c for c, r in rows.items() if r["verdict"] == "FAIL"] == ["holds"]


def test_the_gates_fetch_gives_up_where_the_engine_does():
    """xcs_fetch.c's bound on interrupted reads is the engine's (xc.h)."""
    import re  # noqa: PLC0415

    from xcache.oracle.bounds import IO_MAX_RETRIES  # noqa: PLC0415

    root = Path(__file__).resolve().parents[2]
    text = (root / "gate" / "outside" / "xcs_fetch.c").read_text()
    got = re.search(r"#define XCS_FETCH_MAX_RETRIES (\d+)", text)
    assert got is not None and int(got.group(1)) == IO_MAX_RETRIES
