"""The oracle's model of the cache's Python face and its lifetimes.

docs/CACHE.md "The Python face: lifetimes" is the contract: a held expert
(:class:`HeldExpert`, the engine's ``Expert``), one layer held at once
(:class:`LayerHold`), a stream whose yields the consumer holds
(:class:`FaceStream`), each given back exactly once, by ``release()``,
``close()`` or the end of a ``with`` block, and read only while held.
:class:`Face` makes them over a :class:`oracle.reading_cache.ReadingCache`,
whose model counts every hold; this module adds what the face itself
promises: the refusals of a second release and of a view read after the
release (``Misuse``, with the words the contract gives), a ``with`` block
that gives back what is still held and never swallows the block's
exception, and a stream that raises its first failed read once every
other expert was yielded, then stops.

Written from the documents, never from the engine: it imports neither
``engine`` nor ``gate``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

from xcache.oracle.cache import Misuse
from xcache.oracle.errors import NotModelled
from xcache.oracle.layout import expert_pieces
from xcache.oracle.reading_cache import ReadingCache
from xcache.oracle.streams import ModelStream

#: A key: (layer id, expert).
Key = tuple[int, int]

#: The words of the refusal of a layer hold's views read after its release.
VIEWS_RELEASED = ("the hold of these views was released: the slot may show "
                  "another expert now")


class Face:
    """The Python face over one reading cache: ``get``, ``hold_layer``, ``stream``."""

    def __init__(self, cache: ReadingCache) -> None:
        self.cache = cache

    def check_key(self, layer: int, expert: int) -> None:
        """``Misuse`` naming a key outside the layout (docs/CACHE.md ``get`` step 1)."""
        try:
            self.cache.model.key_id(layer, expert)
        except Misuse:
            lay = self.cache.layout
            raise Misuse(f"(layer {layer}, expert {expert}) is not a key of "
                         f"this cache ({len(lay['layers'])} layers, "
                         f"{lay['n_experts']} experts each)") from None

    def tensors(self, key: Key, data: bytes) -> dict[str, np.ndarray]:
        """The payload ``data`` of ``key`` cut into its tensors, in slot order."""
        lay = self.cache.layout
        pieces = expert_pieces(self.cache.reader, lay["expert_template"],
                               lay["tensors"], lay["n_experts"], *key)
        arr = np.frombuffer(data, np.uint8)
        out, at = {}, 0
        for name, piece in zip(lay["tensors"], pieces, strict=True):
            out[name] = arr[at:at + piece.nbytes]
            at += piece.nbytes
        return out

    def get(self, layer: int, expert: int) -> HeldExpert:
        """A held expert (the model's ``get``, reading what a miss reads)."""
        self.check_key(layer, expert)
        ref, data = self.cache.hold(layer, expert)
        return HeldExpert(self, ref, (layer, expert), data)

    def hold_layer(self, layer: int, experts: list[int]) -> LayerHold:
        """``experts`` of ``layer`` held in one call, all or none.

        Validated before anything changes, in the contract's order and
        words: no more experts than slots, every key, no expert twice; then
        the reading cache's ``hold_layer`` (counting, reads, the roll-back
        of a refused call: nothing held after its error).
        """
        n_slots = self.cache.model.n_slots
        if len(experts) > n_slots:
            raise Misuse(f"hold_layer: {len(experts)} experts cannot be held "
                         f"at once in {n_slots} slots")
        for e in experts:
            self.check_key(layer, e)
        seen: set[int] = set()
        for e in experts:
            if e in seen:
                raise Misuse(f"hold_layer: layer {layer} expert {e} is named "
                             "twice")
            seen.add(e)
        refs, data = self.cache.hold_layer(layer, list(experts))
        return LayerHold(self, layer, list(experts), refs, data)

    def stream(self, keys: list[Key]) -> FaceStream:
        """A stream begun now (validated here: a key outside, a key twice)."""
        for k in keys:
            self.check_key(*k)
        seen: set[Key] = set()
        for k in keys:
            if k in seen:
                raise Misuse(f"stream: layer {k[0]} expert {k[1]} is named "
                             "twice")
            seen.add(k)
        return FaceStream(self, _HandingStream(self.cache, list(keys)))


class HeldExpert:
    """One held expert: ``data`` and ``tensors`` while held, ``release()`` once."""

    def __init__(self, face: Face, ref: Any, key: Key, data: bytes) -> None:
        self.face, self.ref, self.key, self.payload = face, ref, key, data
        self.released = False

    def _alive(self) -> None:
        if self.released:
            raise Misuse(f"expert {self.key} was released")

    @property
    def data(self) -> np.ndarray:
        """The payload, read-only; ``Misuse`` once released."""
        self._alive()
        arr = np.frombuffer(self.payload, np.uint8)
        arr.flags.writeable = False
        return arr

    @property
    def tensors(self) -> dict[str, np.ndarray]:
        """Each tensor of the payload by its name; ``Misuse`` once released."""
        self._alive()
        return self.face.tensors(self.key, self.payload)

    def release(self) -> None:
        """Give the hold back; a second release is ``Misuse``, nothing changed."""
        self._alive()
        self.face.cache.release(self.ref)
        self.released = True

    def __enter__(self) -> HeldExpert:
        return self

    def __exit__(self, *exc: object) -> None:
        if not self.released:
            self.release()

    def __del__(self) -> None:
        # dropped unreleased: given back once garbage (its views are copies)
        if not getattr(self, "released", True):
            self.release()


class _Grip:
    """The holds of one layer hold, given back once: by ``release()``, or
    when the hold and every view of it are garbage (they alone refer to it)."""

    def __init__(self, face: Face, refs: list[Any]) -> None:
        self.face, self.refs = face, refs
        self.released = False

    def give_back(self) -> None:
        self.face.cache.unhold_many(self.refs)
        self.released = True

    def __del__(self) -> None:
        if not getattr(self, "released", True):
            self.give_back()


class HeldTensors(Mapping):
    """One expert of a layer hold: its tensors by name, readable while held."""

    def __init__(self, grip: _Grip, key: Key, data: bytes) -> None:
        self.grip, self.key, self.payload = grip, key, data

    def __getitem__(self, name: str) -> np.ndarray:
        if self.grip.released:
            raise Misuse(VIEWS_RELEASED)
        return self.grip.face.tensors(self.key, self.payload)[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self.grip.face.cache.layout["tensors"])

    def __len__(self) -> int:
        return len(self.grip.face.cache.layout["tensors"])


class LayerHold:
    """A layer's experts held at once: ``views``, ``release()`` once, ``with``."""

    def __init__(self, face: Face, layer: int, experts: list[int],
                 refs: list[Any], data: list[bytes]) -> None:
        self.layer, self.experts = layer, experts
        self.grip = _Grip(face, refs)
        self.views = [HeldTensors(self.grip, (layer, e), d)
                      for e, d in zip(experts, data, strict=True)]

    @property
    def released(self) -> bool:
        """Whether the holds were given back."""
        return self.grip.released

    def release(self) -> None:
        """Give every hold back; a second release is ``Misuse``, nothing changed."""
        if self.grip.released:
            raise Misuse(f"layer {self.layer} experts {self.experts} were "
                         "released")
        self.grip.give_back()

    def __enter__(self) -> list[HeldTensors]:
        return self.views

    def __exit__(self, *exc: object) -> None:
        if not self.released:  # released inside the block: nothing more
            self.release()


class _HandingStream(ModelStream):
    """The oracle's stream whose yields stay held: ``handed`` is the last one's ref."""

    handed: Any = None

    def _yield(self, key: Key) -> tuple[Key, bytes]:
        self.handed = self.refs.pop(key)
        return key, self.backend.payload[key]

    def _get(self, key: Key) -> tuple[Key, bytes] | None:
        try:
            ref, data = self.backend.stream_get(key)
        except (NotModelled, AssertionError):
            raise
        except Exception as e:  # noqa: BLE001 - raised at the stream's end
            self.error = self.error or e
            return None
        self.handed = ref
        return key, data


class FaceStream:
    """A stream of held experts (docs/CACHE.md "The Python face: lifetimes").

    Iterating yields :class:`HeldExpert` s, the consumer's to release; a
    failed read does not stop it: the first failure is raised once every
    other expert was yielded, later ones are dropped, and the call after
    that stops.  :meth:`close` (also the ``with`` block's end) first reads
    the misses it reserved that nobody read, then gives back the holds of
    the experts not yet yielded; a failure not yet raised is dropped.
    """

    def __init__(self, face: Face, stream: _HandingStream) -> None:
        self.face, self.stream = face, stream
        self.ended = False

    def __iter__(self) -> FaceStream:
        return self

    def __next__(self) -> HeldExpert:
        if self.ended:
            raise StopIteration
        try:
            got = self.stream.next()
        except (NotModelled, AssertionError):
            raise
        except Exception:
            self.ended = True  # its first failure: the stream is over
            raise
        if got is None:
            self.ended = True
            raise StopIteration
        key, data = got
        return HeldExpert(self.face, self.stream.handed, key, data)

    def close(self) -> None:
        """End the stream: its reads finished, the holds not yielded given back."""
        if self.ended:
            return
        self.ended = True
        st, cache = self.stream, self.face.cache
        for key in list(st.unread_keys):
            st.read_for(key)  # a failure here is counted, raised by nobody
        for ref in st.refs.values():
            cache.model.release(ref)
        st.refs.clear()
        st.error = None
        if st in cache.streams:
            cache.streams.remove(st)

    def __enter__(self) -> FaceStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
