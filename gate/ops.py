"""The handlers of the scenario operations, registered on the operations registry.

:mod:`gate.operations` lists every operation (its name, compiler and
needs); this module gives each its handler, ``run(run, step)``, given the
:class:`~gate.scenario_run.ScenarioRun` and the compiled step, and joins
the two in :data:`OPS` (an :class:`OpSpec` per operation, in the registry's
order: an operation without a handler, or a handler of no operation, is an
error at import).  A handler uses only the run's public step API
(:class:`~gate.scenario_run.ScenarioRun`: ``attempt``, ``get``,
``served``, ``record``, ``open``, ``close``, ``first_piece``, ``check`` and
its declared attributes).  Handlers of the contract families live in their
own modules (:mod:`gate.race_ops`, :mod:`gate.state_ops`, :mod:`gate.face_ops`,
:mod:`gate.trace_check`, :mod:`gate.check_probe`); the rest are here.
Nothing below this module imports it: the registry's readers (the schema,
the step compiler, the program generator) read :mod:`gate.operations`.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from xcache.faults import corrupt
from xcache.faults.corrupt import replace_same_size
from xcache.gate import (
    CannotRun,
    check_probe,
    corruptions,
    face_ops,
    race_ops,
    state_ops,
    trace_check,
)
from xcache.gate.operations import (
    OPEN_FAULTS,
    OPERATIONS,
    VALUE_NEEDS,
    Compiler,
    Operation,
    value_needs,
)

__all__ = ["HANDLERS", "OPEN_FAULTS", "OPS", "VALUE_NEEDS", "OpSpec",
           "value_needs"]

Handler = Callable[[Any, dict[str, Any]], None]


# -- handlers of the plain operations ----------------------------------------

def _open(run: Any, step: dict[str, Any]) -> None:
    run.open()


def _get(run: Any, step: dict[str, Any]) -> None:
    for _ in range(step["repeat"]):
        for k in step["keys"]:
            run.get(*k)


def _getmany(run: Any, step: dict[str, Any]) -> None:
    for b in step["batches"]:
        ok, n = run.attempt(run.backend.getmany, list(b))
        if ok:
            run.published = n
        if step.get("then_get"):
            for k in b:
                run.get(*k)


def _pin(run: Any, step: dict[str, Any]) -> None:
    run.attempt_each(step["keys"], run.backend.pin)


def _unpin(run: Any, step: dict[str, Any]) -> None:
    run.attempt_each(step["keys"], run.backend.unpin)


def _prefetch(run: Any, step: dict[str, Any]) -> None:
    if step.get("stalled"):
        return race_ops.stalled_prefetch(run, step)
    call = (run.backend.prefetch_speculative if step.get("speculative")
            else run.backend.prefetch)
    ok, n = run.attempt(call, list(step["keys"]))
    if ok:
        run.published = n


def _hold_layer(run: Any, step: dict[str, Any]) -> None:
    """Hold the step's keys (one layer) in one call, kept under its label."""
    keys = step["keys"]
    layer = keys[0][0] if keys else run.target.layout["layers"][0]
    if any(la != layer for la, _ in keys):
        raise run.fail("a hold_layer step names "
                        "keys of more than one layer")
    holds = run.layer_holds
    label = str(step.get("label", ""))
    holds[label] = None  # taken, if only by a call that failed
    ok, got = run.attempt(run.backend.hold_layer, layer, [e for _, e in keys])
    if ok:
        handle, data = got
        for k, d in zip(keys, data, strict=True):
            run.served(k, d)
        holds[label] = handle


def _unhold_many(run: Any, step: dict[str, Any]) -> None:
    """Give back every hold of a labelled hold_layer (again: misuse); with
    ``spent_at``, the handles with a spent one put at that index (past the
    end: last): misuse, all or none, so every hold stays."""
    label = str(step.get("label", ""))
    holds = run.layer_holds
    if label not in holds:
        raise run.fail(f"unhold_many of label "
                        f"{label!r}, which no hold_layer step took")
    if holds[label] is not None:  # (nothing to give back of a failed call)
        if "spent_at" in step:  # misuse: nothing may change, all stay held
            run.attempt(run.backend.unhold_many, holds[label],
                        step["spent_at"])
        else:
            run.attempt(run.backend.unhold_many, holds[label])


def _drain(run: Any, step: dict[str, Any]) -> None:
    run.backend.drain()


def _reset(run: Any, step: dict[str, Any]) -> None:
    run.backend.reset()


def _inject(run: Any, step: dict[str, Any]) -> None:
    """Arm the step's fault; a placed one (``place``) is handed its shard's
    path in the scratch copy and the byte's offset in that file."""
    place = step.get("place")
    if place is not None:
        piece = run.target.pieces(*place["key"])[place["piece"]]
        step = {**step, "place": {
            "path": str(run.scratch / Path(piece.shard).name),
            "offset": piece.offset + place["at"]}}
    run.backend.inject(step)


def _inject_alloc(run: Any, step: dict[str, Any]) -> None:
    run.backend.inject_alloc(step)


def _clear(run: Any, step: dict[str, Any]) -> None:
    run.backend.clear()


def _corrupt(run: Any, step: dict[str, Any]) -> None:
    """Open a corrupted copy; the error (kind and offset) is what is checked."""
    run.close()
    shard = run.target.corrupt_shard
    if step["kind"] in corruptions.INDEX_KINDS:  # the index, not a shard
        shard = shard.with_name(corruptions.INDEX_NAME)
    dst = run.scratch / shard.name
    if dst.is_symlink():
        dst.unlink()  # never write through to the user's file

    name = f"make_{step['kind']}"
    make = getattr(corruptions, name, None) or getattr(corrupt, name)
    claimed = make(shard, dst).offset
    try:
        run.backend = run.make(run.scratch)
    except Exception as e:  # noqa: BLE001 - the kind is what is checked
        run.last_error = run.make.kind_of(e)
        run.error_offset = getattr(e, "offset", None)
    else:
        run.last_error = run.error_offset = None
    run.offset_as_claimed = run.error_offset == claimed


def _open_fault(run: Any, step: dict[str, Any]) -> None:
    """Open a fresh copy with the step's open fault armed.

    The outcome is ``last_error``; ``open_files`` the descriptors the cache
    holds afterwards.  A cache that opened stays open with the fault armed
    until ``clear`` (it may open files later); one that failed is closed
    and the fault disarmed.
    """
    run.close()
    run.target.populate(run.scratch, run.private)
    run.make.inject_open(step)
    ok, backend = run.attempt(run.make, run.scratch)
    if ok:
        run.backend = backend
    else:
        run.make.clear_open()
    run.extra["open_files"] = run.make.open_files()


def _trace_over(run: Any, step: dict[str, Any]) -> None:
    """Put a file of ``size`` bytes at the cache's trace path (starting with
    the trace's magic, or its first ``size`` bytes, with ``magic``; else
    ``'u'`` bytes), then open a fresh traced cache over it: the outcome is
    ``last_error``, and ``trace_kept`` whether a refused open left the file
    as it was (None when the open succeeded)."""
    from xcache.oracle.traces.engine_dump import ENGINE_MAGIC  # noqa: PLC0415

    run.close()
    run.target.populate(run.scratch, run.private)
    size = int(step.get("at", 0))
    body = (ENGINE_MAGIC + b"\0" * size)[:size] if step.get("magic") \
        else b"u" * size
    path = trace_check.trace_path(run.scratch)
    path.write_bytes(body)
    ok, backend = run.attempt(run.make, run.scratch)
    if ok:
        run.backend = backend
    run.extra["trace_kept"] = None if ok else path.read_bytes() == body


def _replace(run: Any, step: dict[str, Any]) -> None:
    for p in sorted(run.scratch.glob("*.safetensors")):
        replace_same_size(p)


def _truncate(run: Any, step: dict[str, Any]) -> None:
    """Cut the shard holding the key's first bytes (in file order), or its
    ``piece``, there, or ``at`` bytes into that piece (capped at its last
    byte)."""
    first = run.changed_piece(step)
    path = run.scratch / Path(first.shard).name
    if path.is_symlink():
        raise run.fail(f"{path} would be "
                        "truncated through a symlink")
    at = max(0, min(step.get("at", 0), first.nbytes - 1))
    with open(path, "r+b") as f:
        f.truncate(first.offset + at)


def _shard_in_place(run: Any, step: dict[str, Any]) -> Path:
    """The shard holding the step's key's first bytes (or its ``piece``),
    a private copy."""
    path = run.scratch / Path(run.changed_piece(step).shard).name
    if path.is_symlink():
        raise run.fail(f"{path} would be "
                        f"changed through a symlink by a {step['op']} step")
    return path


def _ctime_moved(path: Path, before: int) -> None:
    """Make sure ``path``'s status change time is not ``before`` any more.

    The kernel stamps it with a coarse clock, so a change made within the
    same tick as the last one may leave it as it was; each ``utime`` (of
    the times the file has now) moves it again, until it differs (bounded:
    the clock ticks every few milliseconds).
    """
    end = time.monotonic() + 5.0
    while os.stat(path).st_ctime_ns == before:
        if time.monotonic() > end:
            raise CannotRun(f"{path}: its ctime did not move within 5 s")
        time.sleep(0.002)
        st = os.stat(path)
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


def _touch(run: Any, step: dict[str, Any]) -> None:
    """Move the mtime of the key's shard on by ``by_s`` seconds (default 1):
    the same file, size and bytes, modified in place as far as stat says."""
    path = _shard_in_place(run, step)
    st = os.stat(path)
    by = int(float(step.get("by_s", 1)) * 1e9)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + by))


def _rewrite(run: Any, step: dict[str, Any]) -> None:
    """Rewrite the key's first piece (or its ``piece``) in place (every byte
    inverted): the same file and size; with ``keep_mtime`` its mtime is put
    back afterwards (``utime``), so only the ctime tells (docs/LAYOUT.md,
    faults F27)."""
    first = run.changed_piece(step)
    path = _shard_in_place(run, step)
    st = os.stat(path)
    fd = os.open(path, os.O_RDWR)
    try:
        data = os.pread(fd, first.nbytes, first.offset)
        os.pwrite(fd, bytes(255 - b for b in data), first.offset)
    finally:
        os.close(fd)
    if step.get("keep_mtime"):
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    _ctime_moved(path, st.st_ctime_ns)


def _trace(run: Any, step: dict[str, Any]) -> None:
    run.extra.update(trace_check.take(run))


def _break_check(run: Any, step: dict[str, Any]) -> None:
    run.extra.update(check_probe.probe(run, step))


def _check(run: Any, step: dict[str, Any]) -> None:
    run.check(step)


#: The handler of every operation of the registry, by its name.
HANDLERS: dict[str, Handler] = {
    "open": _open, "get": _get, "getmany": _getmany, "prefetch": _prefetch,
    "hold_layer": _hold_layer, "unhold_many": _unhold_many, "drain": _drain,
    "pin": _pin, "unpin": _unpin, "stream": state_ops.stream, "reset": _reset,
    "inject": _inject, "inject_alloc": _inject_alloc, "clear": _clear,
    "corrupt": _corrupt, "open_fault": _open_fault, "replace": _replace,
    "truncate": _truncate, "touch": _touch, "rewrite": _rewrite,
    "trace_over": _trace_over,
    "background_get": race_ops.background_get,
    "await_read": race_ops.await_read, "waiting_get": race_ops.waiting_get,
    "join": race_ops.join, "unstall": race_ops.unstall,
    "await_waiting": race_ops.await_waiting,
    "background_next": race_ops.background_next, "hold": state_ops.hold,
    "release": state_ops.release, "release_copy": state_ops.release_copy,
    "stream_open": state_ops.stream_open, "stream_next": state_ops.stream_next,
    "stream_rest": state_ops.stream_rest, "trace": _trace,
    "set_step": trace_check.set_step,
    "break_check": _break_check, "face_get": face_ops.face_get,
    "face_hold_layer": face_ops.face_hold_layer,
    "face_stream": face_ops.face_stream, "face_read": face_ops.face_read,
    "face_release": face_ops.face_release, "face_drop": face_ops.face_drop,
    "container_read": face_ops.container_read,
    "check": _check,
}


@dataclass(frozen=True)
class OpSpec:
    """One operation of the registry with the handler that runs it."""

    run: Handler
    operation: Operation

    @property
    def compile(self) -> Compiler | None:
        """The operation's compiler (:attr:`gate.operations.Operation.compile`)."""
        return self.operation.compile

    @property
    def needs(self) -> tuple[str, ...]:
        """The capabilities the operation needs of every backend."""
        return self.operation.needs

    @property
    def when(self) -> dict[str, tuple[str, ...]]:
        """More capabilities needed when a field of the step is set."""
        return self.operation.when

    def needs_of(self, step: dict[str, Any]) -> list[str]:
        """The capabilities this step needs."""
        return self.operation.needs_of(step)


def _register() -> dict[str, OpSpec]:
    """Each operation of the registry with its handler; one without, or a
    handler of no operation, is an error at import."""
    if set(HANDLERS) != set(OPERATIONS):
        raise ImportError(
            "gate.ops: handlers and the operations registry differ: "
            f"{sorted(set(HANDLERS) ^ set(OPERATIONS))}")
    return {name: OpSpec(HANDLERS[name], op) for name, op in OPERATIONS.items()}


#: Every scenario operation with its handler, in the registry's order.
OPS: dict[str, OpSpec] = _register()
