"""The scenario operations: one table from op name to its handler and needs.

Every step of a scenario file (docs/SCENARIOS.md "Operations") is one row
of :data:`OPS`: an :class:`OpSpec` naming

- ``run(run, step)``, the handler, given the :class:`~gate.scenario_run.ScenarioRun`
  and the compiled step;
- ``compile(ctx, step)``, the step's fields made concrete for one container
  (keys, sizes), given a :class:`gate.steps.StepContext`; None when the
  step has nothing to compute;
- ``needs``, the capabilities (:mod:`gate.backend`) the backend must have
  for the step to run, and ``when``, more of them needed when a field of
  the step is set.

A step whose backend lacks one of its needs does not run, and every check
after it is ``N/A`` naming what is missing; a check value is ``N/A`` when
the backend lacks what :func:`value_needs` names for it.  Handlers of the
contract families live in their own modules (:mod:`gate.race_ops`,
:mod:`gate.state_ops`, :mod:`gate.trace_check`, :mod:`gate.check_probe`);
the rest are here.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from xcache.gate import CannotRun, check_probe, race_ops, state_ops, trace_check
from xcache.gate.backend import COUNTERS, Fact
from xcache.gate.backend_common import FAULT_KINDS

Handler = Callable[[Any, dict[str, Any]], None]
Compiler = Callable[[Any, dict[str, Any]], dict[str, Any]]


@dataclass(frozen=True)
class OpSpec:
    """One scenario operation: its handler, its compiler and what it needs."""

    run: Handler
    compile: Compiler | None = None
    needs: tuple[str, ...] = ()
    #: step field -> more capabilities needed when the field is set
    when: dict[str, tuple[str, ...]] = field(default_factory=dict)

    def needs_of(self, step: dict[str, Any]) -> list[str]:
        """The capabilities this step needs (``needs`` plus the ``when`` it meets)."""
        out = list(self.needs)
        for f, more in self.when.items():
            if step.get(f):
                out += more
        return out


# -- compilers: a step's fields made concrete (gate/steps.py StepContext) ----

def _keys(ctx: Any, step: dict[str, Any]) -> dict[str, Any]:
    """``keys`` / ``range`` / ``pairs`` / ``raw`` as (layer, expert) keys."""
    return {"keys": ctx.keys(step)}


def _keys_repeat(ctx: Any, step: dict[str, Any]) -> dict[str, Any]:
    """The keys, and ``repeat`` (default 1)."""
    return {"keys": ctx.keys(step), "repeat": ctx.value(step.get("repeat", 1))}


def _stream_keys(ctx: Any, step: dict[str, Any]) -> dict[str, Any]:
    """The keys, ``repeat``, and the ``get_first`` keys (flat indices)."""
    return {**_keys_repeat(ctx, step),
            "get_first": [ctx.key(v) for v in step.get("get_first", [])]}


def _batches(ctx: Any, step: dict[str, Any]) -> dict[str, Any]:
    """``batches`` (lists of flat indices), or the keys cut by ``batch``."""
    if "batches" in step:
        return {"batches": [[ctx.key(v) for v in b] for b in step["batches"]]}
    keys = ctx.keys(step)
    size = ctx.value(step.get("batch", len(keys) or 1))
    if size < 1:
        raise ctx.fail(f"batch {step['batch']} = {size} is below 1")
    return {"batches": [keys[i:i + size] for i in range(0, len(keys), size)]}


def _scattered(ctx: Any, step: dict[str, Any]) -> dict[str, Any]:
    """``needs`` gains ``fault:scattered`` on a container whose experts lie apart."""
    if ctx.target.quantities.get("contiguous", 1):
        return {}
    return {"needs": [*step.get("needs", []), "fault:scattered"]}


def _key_at(ctx: Any, step: dict[str, Any]) -> dict[str, Any]:
    """``key`` (a flat index) and ``at`` (and the scattered need)."""
    return {"key": ctx.key(step["key"]), "at": ctx.value(step.get("at", 0)),
            **_scattered(ctx, step)}


def _counts(ctx: Any, step: dict[str, Any]) -> dict[str, Any]:
    """``nth`` and ``arg`` as numbers."""
    return {f: ctx.value(step[f]) for f in ("nth", "arg") if f in step}


def _fault(ctx: Any, step: dict[str, Any]) -> dict[str, Any]:
    """An ``inject`` step: a known fault kind, ``nth`` and ``arg`` as numbers."""
    if step.get("fault") not in FAULT_KINDS:
        raise ctx.fail(f"inject fault {step.get('fault')!r} is not one of "
                       f"{', '.join(FAULT_KINDS)}")
    return {**_counts(ctx, step), **_scattered(ctx, step)}


#: The open faults an ``open_fault`` step arms (the errno each open gets).
OPEN_FAULTS = ("enoent", "eacces", "emfile", "eintr")


def _open_fault_step(ctx: Any, step: dict[str, Any]) -> dict[str, Any]:
    """An ``open_fault`` step: a known open fault, ``nth`` as a number."""
    if step.get("fault") not in OPEN_FAULTS:
        raise ctx.fail(f"open_fault fault {step.get('fault')!r} is not one "
                       f"of {', '.join(OPEN_FAULTS)}")
    return _counts(ctx, step)


# -- handlers of the plain operations ----------------------------------------

def _open(run: Any, step: dict[str, Any]) -> None:
    run._open()


def _get(run: Any, step: dict[str, Any]) -> None:
    for _ in range(step["repeat"]):
        for k in step["keys"]:
            run._get(*k)


def _getmany(run: Any, step: dict[str, Any]) -> None:
    for b in step["batches"]:
        ok, n = run._attempt(run.backend.getmany, list(b))
        if ok:
            run.published = n
        if step.get("then_get"):
            for k in b:
                run._get(*k)


def _pin(run: Any, step: dict[str, Any]) -> None:
    run._each(step, run.backend.pin)


def _unpin(run: Any, step: dict[str, Any]) -> None:
    run._each(step, run.backend.unpin)


def _prefetch(run: Any, step: dict[str, Any]) -> None:
    call = (run.backend.prefetch_speculative if step.get("speculative")
            else run.backend.prefetch)
    ok, n = run._attempt(call, list(step["keys"]))
    if ok:
        run.published = n


def _hold_layer(run: Any, step: dict[str, Any]) -> None:
    """Hold the step's keys (one layer) in one call, kept under its label."""
    keys = step["keys"]
    layer = keys[0][0] if keys else run.target.layout["layers"][0]
    if any(la != layer for la, _ in keys):
        raise CannotRun(f"scenario {run.sc['name']}: a hold_layer step names "
                        "keys of more than one layer")
    holds = run.__dict__.setdefault("layer_holds", {})
    label = str(step.get("label", ""))
    holds[label] = None  # taken, if only by a call that failed
    ok, got = run._attempt(run.backend.hold_layer, layer, [e for _, e in keys])
    if ok:
        handle, data = got
        for k, d in zip(keys, data, strict=True):
            run._served(k, d)
        holds[label] = handle


def _unhold_many(run: Any, step: dict[str, Any]) -> None:
    """Give back every hold of a labelled hold_layer (again: misuse)."""
    label = str(step.get("label", ""))
    holds = run.__dict__.setdefault("layer_holds", {})
    if label not in holds:
        raise CannotRun(f"scenario {run.sc['name']}: unhold_many of label "
                        f"{label!r}, which no hold_layer step took")
    if holds[label] is not None:  # (nothing to give back of a failed call)
        run._attempt(run.backend.unhold_many, holds[label])


def _drain(run: Any, step: dict[str, Any]) -> None:
    run.backend.drain()


def _reset(run: Any, step: dict[str, Any]) -> None:
    run.backend.reset()


def _inject(run: Any, step: dict[str, Any]) -> None:
    run.backend.inject(step)


def _inject_alloc(run: Any, step: dict[str, Any]) -> None:
    run.backend.inject_alloc(step)


def _clear(run: Any, step: dict[str, Any]) -> None:
    run.backend.clear()


def _corrupt(run: Any, step: dict[str, Any]) -> None:
    """Open a corrupted copy; the error (kind and offset) is what is checked."""
    from xcache.faults import corrupt  # noqa: PLC0415
    from xcache.gate import corruptions  # noqa: PLC0415

    run._close()
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
    run._close()
    run.target.populate(run.scratch, run.private)
    run.make.inject_open(step)
    ok, backend = run._attempt(run.make, run.scratch)
    if ok:
        run.backend = backend
    else:
        run.make.clear_open()
    run.extra["open_files"] = run.make.open_files()


def _replace(run: Any, step: dict[str, Any]) -> None:
    from xcache.faults.corrupt import replace_same_size  # noqa: PLC0415

    for p in sorted(run.scratch.glob("*.safetensors")):
        replace_same_size(p)


def _truncate(run: Any, step: dict[str, Any]) -> None:
    """Cut the shard holding the key's first bytes (in file order) there,
    or ``at`` bytes into that first piece (capped at its last byte)."""
    first = run._first_piece(step["key"])
    path = run.scratch / Path(first.shard).name
    if path.is_symlink():
        raise CannotRun(f"scenario {run.sc['name']}: {path} would be "
                        "truncated through a symlink")
    at = max(0, min(step.get("at", 0), first.nbytes - 1))
    with open(path, "r+b") as f:
        f.truncate(first.offset + at)


def _shard_in_place(run: Any, step: dict[str, Any]) -> Path:
    """The shard holding the step's key's first bytes, a private copy."""
    path = run.scratch / Path(run._first_piece(step["key"]).shard).name
    if path.is_symlink():
        raise CannotRun(f"scenario {run.sc['name']}: {path} would be "
                        f"changed through a symlink by a {step['op']} step")
    return path


def _ctime_moved(path: Path, before: int) -> None:
    """Make sure ``path``'s status change time is not ``before`` any more.

    The kernel stamps it with a coarse clock, so a change made within the
    same tick as the last one may leave it as it was; each ``utime`` (of
    the times the file has now) moves it again, until it differs (bounded:
    the clock ticks every few milliseconds).
    """
    import time  # noqa: PLC0415

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
    """Rewrite the key's first piece in place (every byte inverted): the same
    file and size; with ``keep_mtime`` its mtime is put back afterwards
    (``utime``), so only the ctime tells (docs/LAYOUT.md, faults F27)."""
    first = run._first_piece(step["key"])
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
    run.extra.update(trace_check.take(run.backend))


def _break_check(run: Any, step: dict[str, Any]) -> None:
    run.extra.update(check_probe.probe(run, step))


def _check(run: Any, step: dict[str, Any]) -> None:
    run._check(step)


_GET_FIRST = {"get_first": ("op:get",)}

#: Every scenario operation, by the name a step's ``op`` gives.
OPS: dict[str, OpSpec] = {
    "open": OpSpec(_open),
    "get": OpSpec(_get, _keys_repeat, ("op:get",)),
    "getmany": OpSpec(_getmany, _batches, ("op:getmany",),
                      {"then_get": ("op:get",)}),
    "prefetch": OpSpec(_prefetch, _keys_repeat, ("op:prefetch",),
                       {"speculative": ("op:prefetch_speculative",)}),
    "hold_layer": OpSpec(_hold_layer, _keys, ("op:hold_layer",)),
    "unhold_many": OpSpec(_unhold_many, None, ("op:hold_layer",)),
    "drain": OpSpec(_drain, None, ("op:drain",)),
    "pin": OpSpec(_pin, _keys_repeat, ("pins:flag",)),
    "unpin": OpSpec(_unpin, _keys_repeat, ("pins:flag",)),
    "stream": OpSpec(state_ops.stream, _stream_keys, ("op:stream",), _GET_FIRST),
    "reset": OpSpec(_reset, None, ("op:reset_stats",)),
    "inject": OpSpec(_inject, _fault, ("fault:io",),
                     {"second": ("fault:io_second",)}),
    "inject_alloc": OpSpec(_inject_alloc, _counts, ("fault:alloc",)),
    "clear": OpSpec(_clear),
    "corrupt": OpSpec(_corrupt, None, ("op:reader",)),
    "open_fault": OpSpec(_open_fault, _open_fault_step, ("fault:open",)),
    "replace": OpSpec(_replace),
    "truncate": OpSpec(_truncate, _key_at),
    "touch": OpSpec(_touch, _key_at),
    "rewrite": OpSpec(_rewrite, _key_at),
    "background_get": OpSpec(race_ops.background_get, _keys, ("op:concurrent",)),
    "await_read": OpSpec(race_ops.await_read, None,
                         ("op:concurrent", "fault:io")),
    "waiting_get": OpSpec(race_ops.waiting_get, _keys, ("op:concurrent",)),
    "join": OpSpec(race_ops.join, None, ("op:concurrent",)),
    "unstall": OpSpec(race_ops.unstall, None, ("op:concurrent", "fault:io")),
    "await_waiting": OpSpec(race_ops.await_waiting, None, ("op:concurrent",)),
    "background_next": OpSpec(race_ops.background_next, None,
                              ("op:concurrent", "op:stream")),
    "hold": OpSpec(state_ops.hold, _keys_repeat, ("op:hold",)),
    "release": OpSpec(state_ops.release, None, ("op:hold",)),
    "release_copy": OpSpec(state_ops.release_copy, None, ("op:hold_copy",)),
    "stream_open": OpSpec(state_ops.stream_open, _stream_keys, ("op:stream",),
                          _GET_FIRST),
    "stream_next": OpSpec(state_ops.stream_next, None, ("op:stream",)),
    "stream_rest": OpSpec(state_ops.stream_rest, None, ("op:stream",)),
    "trace": OpSpec(_trace, None, ("op:trace",)),
    "break_check": OpSpec(_break_check, None, ("op:break_check",)),
    "check": OpSpec(_check),
}

#: What a check value needs of the backend beyond being reported, for the
#: values that are not a counter or a slot fact; the runner's own values
#: (``reads``, ``wrong_reads``, ``published``, ``last_error``, ``errors``)
#: need nothing: with an untyped error model (``errors`` ``failed``) the
#: last two are compared as failed or not.
VALUE_NEEDS: dict[str, tuple[str, ...]] = {
    "reads": (), "wrong_reads": (), "published": (), "last_error": (),
    "errors": (),
    "error_offset": ("errors:typed",), "error_fields": ("errors:typed",),
    "offset_as_claimed": ("errors:typed",),
    "invariants": ("op:check",),
    "pinned": ("fact:pinned", "pins:count"),
    "trace": ("op:trace",), "trace_records": ("op:trace",),
    "check_broken": ("op:break_check",),
    "wait_hits": ("op:concurrent",),
    "open_files": ("fault:open",),
}

_FACTS = {f.value for f in Fact}


def value_needs(key: str) -> tuple[str, ...]:
    """The capabilities a check pinning value ``key`` needs of the backend.

    A counter needs ``counter:<key>``, a slot fact ``fact:<key>``, the rest
    what :data:`VALUE_NEEDS` says; a name that is none of these needs
    nothing (its value is simply not there: the check fails).
    """
    if key in VALUE_NEEDS:
        return VALUE_NEEDS[key]
    if key in _FACTS:
        return (f"fact:{key}",)
    if key in COUNTERS:
        return (f"counter:{key}",)
    return ()
