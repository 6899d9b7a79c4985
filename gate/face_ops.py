"""Scenario operations on the cache's Python face: its objects' lifetimes.

The other steps drive the cache through its C boundary; these drive the
public Python API (``op:lifetime``, :meth:`gate.backend_api.Backend.face`:
the engine's ``ExpertCache`` itself, the oracle's model of it in
:mod:`oracle.face`), with the same code on both:

- ``face_get`` takes held experts (``Expert``) under a label;
  ``face_hold_layer`` one layer's experts (``LayerHold``), reading every
  view; ``face_stream`` runs a stream, taking ``count`` experts (or all),
  keeping them held under its label (``keep``) or releasing each, then
  ends it (``close()``, or the end of its ``with`` block) and asks it once
  more for an expert (it must stop);
- ``face_read`` reads the views of a label's objects (``Expert.data`` and
  ``.tensors``, a layer hold's ``views[i][name]``), ``face_release``
  releases each of them (again: misuse), ``face_drop`` drops them
  unreleased (what they hold is given back once they are garbage);
- ``with`` on ``face_get``, ``face_hold_layer`` and ``face_stream`` uses
  each object in a ``with`` block that ends (``end``), raises an
  exception of the step's own (``raise``: it must come out of the block,
  the holds given back), or releases (closes) inside the block first
  (``release``, ``release_raise``: the block's end then gives back
  nothing and raises nothing of its own).

Every call is recorded in ``errors`` like any other, and in the check value
``face``: ``[call, key, outcome, words]`` per call, the outcome ``null``
(it returned), a failure kind, ``"stop"`` (the stream's iteration ended)
or ``"planted"`` (the step's exception left the ``with`` block), and for a
misuse the words of the refusal that matter (:data:`WORDS`).  The bytes of
every view read are judged like a ``get``'s.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any

import numpy as np

from xcache.gate import CannotRun
from xcache.gate.error_fields import KEYED
from xcache.oracle.errors import NotModelled

#: The words of a misuse refusal that a ``face`` record keeps (docs/CACHE.md
#: "The Python face: lifetimes"), most specific first: a refusal keeps the
#: first its message holds, or "" when it holds none of them.
WORDS = ("the hold of these views was released", "were released",
         "was released", "is named twice", "cannot be held at once",
         "is not a key of this cache", "the cache is closed")

#: What a ``with`` step's block does (schema and docs/SCENARIOS.md).
WITH = ("end", "raise", "release", "release_raise")


class Planted(Exception):
    """The exception a ``with`` step raises inside its block."""


def words(message: str) -> str:
    """The first of :data:`WORDS` that ``message`` holds, else ""."""
    return next((w for w in WORDS if w in message), "")


def _key(key: Any) -> Any:
    """A key as a check value pins it (a list), or None."""
    return None if key is None else [k if isinstance(k, int) else list(k)
                                     for k in key]


def _note(run: Any, call: str, key: Any, outcome: str | None,
          said: str | None = None) -> None:
    """Append one record to the ``face`` value."""
    run.face.append([call, _key(key), outcome, said])


def _failed(run: Any, call: str, key: Any, exc: BaseException) -> None:
    """Record a call that raised ``exc`` (its kind, key and words).

    Its traceback is dropped: its frames hold the objects the call was
    made with, and a frame holding the exception (a stream's ``raise
    err``) makes a cycle that only a collection would end -- an object
    dropped later (``face_drop``) would then be given back when the
    collector runs, not when it is dropped.
    """
    exc.__traceback__ = None
    run.record(exc)
    kind = run.last_error
    named = (getattr(exc, "layer", None), getattr(exc, "expert", None))
    if kind in KEYED and named != (None, None):  # the key the failed load
        key = named  # names (a container read's names none)
    _note(run, call, key, kind, words(str(exc)) if kind == "misuse" else None)


def _call(run: Any, call: str, key: Any, fn: Callable[..., Any],
          *args: Any, quiet: bool = False) -> tuple[bool, Any]:
    """``fn(*args)`` recorded as face call ``call``: (returned, its value).

    ``quiet``: a call that returns is not recorded (a stream's yield given
    back at once).  A case the judge does not decide cannot run.
    """
    try:
        value = fn(*args)
    except CannotRun:
        raise
    except NotModelled as e:
        raise CannotRun(f"scenario {run.sc['name']}: {call}: {e}") from e
    except Exception as e:  # noqa: BLE001 - kinds are compared by checks
        _failed(run, call, key, e)
        return False, None
    if not quiet:
        run.record(None)
        _note(run, call, key, None)
    return True, value


def _tensor_bytes(run: Any, named: list[tuple[str, bytes]]) -> bytes:
    """The tensors' bytes joined in slot order (nothing if the names are
    not the layout's, in its order: a wrong read)."""
    if [n for n, _ in named] != list(run.target.layout["tensors"]):
        return b""
    return b"".join(b for _, b in named)


def _read_expert(run: Any, key: Any, ex: Any) -> None:
    """Read ``Expert.data`` and ``Expert.tensors``, judging their bytes."""
    ok, data = _call(run, "data", key, lambda: np.asarray(ex.data).tobytes())
    if ok:
        run.served(key, data)
    ok, named = _call(run, "tensors", key, lambda: [
        (n, np.asarray(a).tobytes()) for n, a in ex.tensors.items()])
    if ok:
        run.served(key, _tensor_bytes(run, named))


def _read_views(run: Any, keys: list[Any], views: Any) -> None:
    """Read every tensor of every view of a layer hold, judging their bytes."""
    for key, view in zip(keys, views, strict=True):
        ok, named = _call(run, "views", key, lambda v=view: [
            (n, np.asarray(v[n]).tobytes()) for n in v])
        if ok:
            run.served(key, _tensor_bytes(run, named))


def _with_block(run: Any, obj: Any, key: Any, how: str,
                use: Callable[[Any], None], release: str) -> None:
    """Use ``obj`` in a ``with`` block that does what ``how`` says."""
    try:
        with obj as got:
            use(got)
            if how in ("release", "release_raise"):
                _call(run, release, key, getattr(obj, release))
            if how in ("raise", "release_raise"):
                raise Planted(f"raised inside the with block of {key}")
    except Planted:
        _note(run, "with", key, "planted")
    except CannotRun:
        raise
    except NotModelled as e:
        raise CannotRun(f"scenario {run.sc['name']}: with: {e}") from e
    except Exception as e:  # noqa: BLE001 - kinds are compared by checks
        _failed(run, "with", key, e)
    else:
        _note(run, "with", key, None)


Held = list[tuple[str, Any, Any, Any]]


def _held(run: Any, step: dict[str, Any]) -> Held:
    """The objects kept under the step's label (taken now if new): each as
    (``expert`` or ``layer``, its key or keys, what its records name, it)."""
    return run.face_held.setdefault(str(step.get("label", "")), [])


def face_get(run: Any, step: dict[str, Any]) -> None:
    """Take a held expert of each key through the face, kept under the label."""
    face, held = run.backend.face(), _held(run, step)
    for key in step["keys"]:
        ok, ex = _call(run, "get", key, face.get, *key)
        if not ok:
            continue
        held.append(("expert", key, key, ex))
        if step.get("with"):
            _with_block(run, ex, key, step["with"],
                        lambda got, key=key: _read_expert(run, key, got),
                        "release")


def face_hold_layer(run: Any, step: dict[str, Any]) -> None:
    """Hold the step's keys (one layer) through the face; read every view."""
    keys = step["keys"]
    layer = keys[0][0] if keys else run.target.layout["layers"][0]
    if any(la != layer for la, _ in keys):
        raise run.fail("a face_hold_layer step names keys of more than one "
                       "layer")
    experts = [e for _, e in keys]
    where = (layer, experts)
    face, held = run.backend.face(), _held(run, step)
    ok, hold = _call(run, "hold_layer", where, face.hold_layer, layer, experts)
    if not ok:
        return
    held.append(("layer", keys, where, hold))
    if step.get("with"):
        _with_block(run, hold, where, step["with"],
                    lambda views: _read_views(run, keys, views), "release")
    else:
        _read_views(run, keys, hold.views)


def face_read(run: Any, step: dict[str, Any]) -> None:
    """Read the views of every object of a label (after a release: misuse)."""
    for kind, keys, _, obj in _labelled(run, step):
        if kind == "layer":
            _read_views(run, keys, obj.views)
        else:
            _read_expert(run, keys, obj)


def face_release(run: Any, step: dict[str, Any]) -> None:
    """Release every object of a label (a second time: misuse)."""
    for _, _, where, obj in _labelled(run, step):
        _call(run, "release", where, obj.release)


def container_read(run: Any, step: dict[str, Any]) -> None:
    """Read every tensor of each key through the container's face
    (``Container.read_bytes``), as a user reads weights the cache does not
    hold, and asks whether it holds that name and spellings near it (``in``):
    each call a ``face`` record whose words are the bytes' digest (a
    file changed since the open is read as it is now, or refused as the
    contract says: ``verify``, a shard replaced, a short read)."""
    for key in step["keys"]:
        for name in dict.fromkeys(p.name for p in run.target.pieces(*key)):
            ok, data = _call(run, "container_read", key,
                             run.backend.container_read, name, quiet=True)
            if ok:
                run.record(None)
                _note(run, "container_read", key, None,
                      hashlib.sha256(data).hexdigest()[:16])
            # which spellings of it the container holds: only its own (one
            # with U+0000 or cut short names no tensor)
            near = [name, name + "\0", name + "\0x", name[:-1], name + " ", ""]
            _note(run, "container_has", key, None,
                  "".join("1" if run.backend.container_has(n) else "0"
                          for n in near))


def face_drop(run: Any, step: dict[str, Any]) -> None:
    """Drop the objects of a label unreleased: once garbage, what they held
    is given back (the engine: at its next call, before anything else)."""
    _labelled(run, step)
    del run.face_held[str(step.get("label", ""))]


def _labelled(run: Any, step: dict[str, Any]) -> Held:
    """The objects of the step's label; a label no step took cannot run."""
    label = str(step.get("label", ""))
    if label not in run.face_held:
        raise run.fail(f"{step['op']} of label {label!r}, which no face step "
                       "took")
    return run.face_held[label]


def face_stream(run: Any, step: dict[str, Any]) -> None:
    """Run a stream through the face: ``count`` experts (or all), kept or
    released each, then ended (``close()`` or its ``with`` block), then
    asked once more (it must stop)."""
    face, held = run.backend.face(), _held(run, step)
    keys, count = list(step["keys"]), step.get("count")
    ok, st = _call(run, "stream", None, face.stream, keys)
    if not ok:
        return
    most = len(keys) + 2 if count is None else count

    def take(got: Any) -> None:
        for _ in range(most):
            if not _next(run, got, held, bool(step.get("keep"))):
                return

    if step.get("with"):
        _with_block(run, st, None, step["with"], take, "close")
    else:
        take(st)
        _call(run, "close", None, st.close)
    _next(run, st, held, False)


def _next(run: Any, st: Any, held: Held, keep: bool) -> bool:
    """One expert of the stream, recorded: read, then kept or released.

    False once its iteration stopped; True after a yield or a failure (the
    stream's first failed read, raised once the rest was yielded).
    """
    try:
        ex = next(st)
    except StopIteration:
        _note(run, "next", None, "stop")
        return False
    except CannotRun:
        raise
    except NotModelled as e:
        raise CannotRun(f"scenario {run.sc['name']}: next: {e}") from e
    except Exception as e:  # noqa: BLE001 - kinds are compared by checks
        _failed(run, "next", None, e)
        return True
    key = tuple(ex.key)
    run.record(None)
    _note(run, "next", key, None)
    ok, data = _call(run, "data", key, lambda: np.asarray(ex.data).tobytes(),
                     quiet=True)
    if ok:
        run.served(key, data)
    if keep:
        held.append(("expert", key, key, ex))
    else:
        _call(run, "release", key, ex.release, quiet=True)
    return True
