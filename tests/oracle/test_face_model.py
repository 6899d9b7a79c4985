"""The oracle's model of the Python face (docs/CACHE.md "The Python face")."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from xcache.gate.containers import make_target
from xcache.oracle.cache import Misuse
from xcache.oracle.errors import IOFailure, ShortRead
from xcache.oracle.face import Face
from xcache.oracle.reading_cache import ReadingCache


@pytest.fixture(scope="module")
def k3(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """The k3-mini target (folder and layout)."""
    return make_target("k3-mini", tmp_path_factory.mktemp("face-model"))


def _face(k3: Any, n_slots: int = 6) -> tuple[Face, ReadingCache]:
    """A face over a fresh reading cache of k3-mini, one batch thread."""
    cache = ReadingCache(Path(k3.pristine), k3.layout,
                         k3.quantities["expert_bytes"],
                         {"n_slots": n_slots, "batch_threads": 1})
    return Face(cache), cache


def _held(cache: ReadingCache) -> list[list[int]]:
    return cache.values()["holding"]


def test_a_second_release_and_a_view_after_the_release_are_misuse(k3):
    """An expert's data is its payload while held; after release() it and a
    second release() are refused, and nothing changes."""
    face, cache = _face(k3)
    ex = face.get(0, 1)
    assert ex.data.nbytes == 1632 and ex.data.tobytes() == cache.payload[(0, 1)]
    assert list(ex.tensors) == k3.layout["tensors"]
    assert [a.nbytes for a in ex.tensors.values()] == [512, 32] * 3
    ex.release()
    for reach in (lambda: ex.release(), lambda: ex.data, lambda: ex.tensors):
        with pytest.raises(Misuse, match=r"^expert \(0, 1\) was released$"):
            reach()
    assert _held(cache) == []
    cache.close()


def test_a_with_block_gives_back_and_lets_the_exception_out(k3):
    """Left by an exception, a layer hold's block gives every hold back and the
    exception comes out; views and a release after it are misuse."""
    face, cache = _face(k3)
    hold = face.hold_layer(0, [1, 2])
    with pytest.raises(KeyError, match="inside"), hold as views:
        assert _held(cache) == [[0, 1, 1], [0, 2, 1]]
        assert views[1]["w1.weight_scale"].nbytes == 32
        raise KeyError("inside")
    assert _held(cache) == []
    with pytest.raises(Misuse, match=r"^layer 0 experts \[1, 2\] were released$"):
        hold.release()
    with pytest.raises(Misuse, match="^the hold of these views was released"):
        views[0]["w1.weight_packed"]
    released = face.get(0, 3)
    with released:
        released.release()  # the block's end then gives back nothing
    assert _held(cache) == []
    cache.close()


def test_hold_layer_validates_the_count_first_then_keys_then_repeats(k3):
    """More experts than slots is refused before a bad key or a repeat, and a
    refused call holds nothing."""
    face, cache = _face(k3, n_slots=5)
    with pytest.raises(Misuse, match="^hold_layer: 6 experts cannot be held at "
                       "once in 5 slots$"):
        face.hold_layer(0, [0, 0, 99, 1, 2, 3])
    with pytest.raises(Misuse, match=r"^\(layer 0, expert 99\) is not a key"):
        face.hold_layer(0, [0, 0, 99])
    with pytest.raises(Misuse, match="^hold_layer: layer 0 expert 0 is named "
                       "twice$"):
        face.hold_layer(0, [0, 1, 0])
    assert cache.values()["requests"] == 0
    cache.inject({"fault": "eio", "nth": 2})
    with pytest.raises(IOFailure) as e:
        face.hold_layer(0, [2, 3, 4])
    assert (e.value.layer, e.value.expert) == (0, 3)
    assert _held(cache) == [] and cache.values()["resident"] == [[0, 2], [0, 4]]
    cache.close()


def test_a_stream_raises_its_first_failure_after_the_rest_then_stops(k3):
    """Two reads fail: the other experts are yielded, then the first failure
    in the order given, then iteration stops; no hold is left."""
    face, cache = _face(k3)
    face.get(0, 1).release()
    cache.inject({"fault": "eio", "nth": 1})
    cache.inject({"fault": "eof", "nth": 1, "second": True})
    st = face.stream([(0, 2), (0, 1), (0, 3), (0, 4)])
    got = []
    for _ in range(2):
        ex = next(st)
        got.append(ex.key)
        ex.release()
    assert got == [(0, 1), (0, 4)]
    with pytest.raises(IOFailure) as e:
        next(st)
    assert not isinstance(e.value, ShortRead)
    assert (e.value.layer, e.value.expert) == (0, 2)
    with pytest.raises(StopIteration):
        next(st)
    assert _held(cache) == [] and cache.values()["load_failures"] == 2
    cache.close()


def test_close_reads_the_unread_misses_and_drops_an_unraised_failure(k3):
    """Closed early, a stream reads what it reserved, gives back what it did
    not yield, raises nothing, and stops; its yields stay held."""
    face, cache = _face(k3)
    cache.inject({"fault": "eio", "nth": 1})
    st = face.stream([(0, 6), (0, 7), (0, 8)])
    kept = next(st)
    assert kept.key == (0, 7)
    st.close()
    st.close()
    with pytest.raises(StopIteration):
        next(st)
    values = cache.values()
    assert values["holding"] == [[0, 7, 1]]
    assert values["resident"] == [[0, 7], [0, 8]]
    assert values["load_failures"] == 1
    cache.close()


def test_a_dropped_expert_or_layer_hold_gives_back_at_once(k3):
    """Dropped unreleased, what a face object held is given back once it is garbage."""
    face, cache = _face(k3)
    ex = face.get(0, 1)
    hold = face.hold_layer(0, [2, 3])
    views = hold.views
    del ex, hold
    assert _held(cache) == [[0, 2, 1], [0, 3, 1]]  # the views keep the hold
    del views
    assert _held(cache) == []
    cache.close()


@pytest.mark.parametrize("at", [0, 1, 2])
def test_unhold_many_with_a_spent_handle_gives_back_nothing(k3, at):
    """unhold_many is all or none: a spent handle first, between or last among
    good ones is misuse naming it, and every hold stays; then the good ones
    given back alone are all released."""
    _, cache = _face(k3)
    refs, _ = cache.hold_layer(0, [1, 2])
    given = list(refs)
    given.insert(at, None)
    with pytest.raises(Misuse, match=rf"^unhold_many: handle {at} of 3 holds "
                                     "nothing now$"):
        cache.unhold_many(given)
    assert _held(cache) == [[0, 1, 1], [0, 2, 1]]
    cache.unhold_many(refs)
    assert _held(cache) == []
    with pytest.raises(Misuse, match=r"^unhold_many: handle 0 of 2 holds"):
        cache.unhold_many(refs)  # given back already: refused, as the engine's
    cache.close()


def test_container_reads_see_the_file_as_it_is_now(k3, tmp_path):
    """Container.read_bytes in the model: the file's bytes; after a shard is
    cut short, a short read; rewritten in place, its new bytes, or with
    verify the refusal 'changed'; the failures name no key."""
    import shutil

    from xcache.oracle.call_outcomes import FileChanged

    folder = tmp_path / "copy"
    shutil.copytree(k3.pristine, folder)
    piece = k3.pieces(0, 3)[0]
    shard = folder / Path(piece.shard).name
    caches = [ReadingCache(folder, k3.layout, k3.quantities["expert_bytes"],
                           {"n_slots": 6, "batch_threads": 1, "verify": v})
              for v in (False, True)]
    before = caches[0].container_read(piece.name)
    assert len(before) == piece.nbytes == 512
    with open(shard, "r+b") as f:
        f.seek(piece.offset)
        f.write(bytes(255 - b for b in before))
    assert caches[0].container_read(piece.name) == bytes(255 - b for b in before)
    with pytest.raises(FileChanged) as changed:
        caches[1].container_read(piece.name)
    assert (changed.value.layer, changed.value.expert) == (None, None)
    with open(shard, "r+b") as f:
        f.truncate(piece.offset + 10)
    with pytest.raises(ShortRead) as short:
        caches[0].container_read(piece.name)
    assert (short.value.layer, short.value.expert) == (None, None)
    for c in caches:
        c.close()
