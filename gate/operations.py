"""The operations registry: every scenario operation's name, compiler and needs.

Every step of a scenario file (docs/SCENARIOS.md "Operations") names one
row of :data:`OPERATIONS`: an :class:`Operation` naming

- ``compile(ctx, step)``, the step's fields made concrete for one container
  (keys, sizes), given a :class:`gate.steps.StepContext`; None when the
  step has nothing to compute;
- ``needs``, the capabilities (:mod:`gate.backend_api`) the backend must have
  for the step to run, and ``when``, more of them needed when a field of
  the step is set.

A step whose backend lacks one of its needs does not run, and every check
after it is ``N/A`` naming what is missing; a check value is ``N/A`` when
the backend lacks what :func:`value_needs` names for it.

This is the one list of the operations: the schema (:mod:`gate.schema`),
the step compiler (:mod:`gate.steps`), the program generator and the
outside cache's program cutter (:mod:`gate.program_gen`,
:mod:`gate.outside.programs`) and docs/SCENARIOS.md (held to it by
tests/replay/test_op_table.py) read it.  It sits low: it imports only the
capability names, and the handlers that run each operation register from
above (:mod:`gate.ops`), so nothing that reads the list imports them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from xcache.gate.backend_api import COUNTERS, FAULT_KINDS, Fact
from xcache.gate.corruptions import INDEX_KINDS

Compiler = Callable[[Any, dict[str, Any]], dict[str, Any]]


@dataclass(frozen=True)
class Operation:
    """One scenario operation: its compiler and what it needs of a backend."""

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
    """``key`` (a flat index), ``at`` and ``piece`` (the index in the key's
    pieces of the one whose shard the step changes; absent: the first in
    file order), and the scattered need."""
    key = ctx.key(step["key"])
    out = {"key": key, "at": ctx.value(step.get("at", 0)),
           **_scattered(ctx, step)}
    if "piece" in step:
        n = len(ctx.target.pieces(*key))
        i = ctx.value(step["piece"])
        if not 0 <= i < n:
            raise ctx.fail(f"{step['op']} piece {i}: the key has pieces "
                           f"0..{n - 1}")
        out["piece"] = i
    return out


def _counts(ctx: Any, step: dict[str, Any]) -> dict[str, Any]:
    """``nth`` and ``arg`` as numbers."""
    return {f: ctx.value(step[f]) for f in ("nth", "arg") if f in step}


def _fault(ctx: Any, step: dict[str, Any]) -> dict[str, Any]:
    """An ``inject`` step: a known fault kind, ``nth`` and ``arg`` as numbers
    (a ``stall``, a read held until ``unstall``, needs ``op:concurrent``: a
    backend without concurrent calls would wait on itself)."""
    if step.get("fault") not in FAULT_KINDS:
        raise ctx.fail(f"inject fault {step.get('fault')!r} is not one of "
                       f"{', '.join(FAULT_KINDS)}")
    if "place" in step:
        return {**_counts(ctx, step), **_placed(ctx, step)}
    out = {**_counts(ctx, step), **_scattered(ctx, step)}
    if step["fault"] == "stall":
        out["needs"] = [*out.get("needs", step.get("needs", [])),
                        "op:concurrent"]
    return out


def _placed(ctx: Any, step: dict[str, Any]) -> dict[str, Any]:
    """A placed ``inject``: ``place`` {``key`` (a flat index), ``piece``
    (its index in the key's pieces, default 0), ``at`` (bytes into it,
    default its middle)} made concrete, and ``fault:placed`` needed instead
    of ``fault:scattered``: the fault lands on the read of that byte
    whatever order and windows the reads take."""
    place = step["place"]
    if not isinstance(place, dict) or "key" not in place:
        raise ctx.fail("inject place must be an object with a key")
    if step["fault"] in ("stall", "delay"):
        raise ctx.fail(f"inject {step['fault']} cannot be placed")
    key = ctx.key(place["key"])
    pieces = ctx.target.pieces(*key)
    i = ctx.value(place.get("piece", 0))
    if not 0 <= i < len(pieces):
        raise ctx.fail(f"inject place piece {i}: the key has pieces 0.."
                       f"{len(pieces) - 1}")
    at = ctx.value(place.get("at", pieces[i].nbytes // 2))
    if not 0 <= at < pieces[i].nbytes:
        raise ctx.fail(f"inject place at {at}: the piece has bytes 0.."
                       f"{pieces[i].nbytes - 1}")
    return {"place": {"key": list(key), "piece": i, "at": at},
            "needs": [*step.get("needs", []), "fault:placed"]}


#: The open faults an ``open_fault`` step arms (the errno each open gets).
OPEN_FAULTS = ("enoent", "eacces", "emfile", "eintr")


def _open_fault_step(ctx: Any, step: dict[str, Any]) -> dict[str, Any]:
    """An ``open_fault`` step: a known open fault, ``nth`` as a number."""
    if step.get("fault") not in OPEN_FAULTS:
        raise ctx.fail(f"open_fault fault {step.get('fault')!r} is not one "
                       f"of {', '.join(OPEN_FAULTS)}")
    return _counts(ctx, step)


def _corrupt(ctx: Any, step: dict[str, Any]) -> dict[str, Any]:
    """A ``corrupt`` step: an index corruption needs a cache that reads the
    index too (``op:reader_index``), beside the shards' headers, and a dtype
    no reader knows one that refuses such a dtype (``op:reader_dtype``)."""
    if step.get("kind") == "dtype":
        return {"needs": [*step.get("needs", []), "op:reader_dtype"]}
    if step.get("kind") not in INDEX_KINDS:
        return {}
    return {"needs": [*step.get("needs", []), "op:reader_index"]}


def _face_stream(ctx: Any, step: dict[str, Any]) -> dict[str, Any]:
    """The keys, and ``count`` as a number when it is given (else: all)."""
    out = {"keys": ctx.keys(step)}
    if "count" in step:
        out["count"] = ctx.value(step["count"])
    return out


_GET_FIRST = {"get_first": ("op:get",)}
_FACE = ("op:lifetime",)

#: Every scenario operation, by the name a step's ``op`` gives.
OPERATIONS: dict[str, Operation] = {
    "open": Operation(),
    "get": Operation(_keys_repeat, ("op:get",)),
    "getmany": Operation(_batches, ("op:getmany",), {"then_get": ("op:get",)}),
    "prefetch": Operation(_keys_repeat, ("op:prefetch",),
                          {"speculative": ("op:prefetch_speculative",),
                           "stalled": ("op:concurrent", "fault:io")}),
    "hold_layer": Operation(_keys, ("op:hold_layer",)),
    "unhold_many": Operation(None, ("op:hold_layer",)),
    "drain": Operation(None, ("op:drain",)),
    "pin": Operation(_keys_repeat, ("pins:flag",)),
    "unpin": Operation(_keys_repeat, ("pins:flag",)),
    "stream": Operation(_stream_keys, ("op:stream",), _GET_FIRST),
    "reset": Operation(None, ("op:reset_stats",)),
    "inject": Operation(_fault, ("fault:io",), {"second": ("fault:io_second",)}),
    "inject_alloc": Operation(_counts, ("fault:alloc",)),
    "clear": Operation(),
    "corrupt": Operation(_corrupt, ("op:reader",)),
    "open_fault": Operation(_open_fault_step, ("fault:open",)),
    "replace": Operation(),
    "truncate": Operation(_key_at),
    "touch": Operation(_key_at),
    "rewrite": Operation(_key_at),
    "background_get": Operation(_keys, ("op:concurrent",)),
    "await_read": Operation(None, ("op:concurrent", "fault:io")),
    "waiting_get": Operation(_keys, ("op:concurrent",)),
    "join": Operation(None, ("op:concurrent",)),
    "unstall": Operation(None, ("op:concurrent", "fault:io")),
    "await_waiting": Operation(None, ("op:concurrent",)),
    "background_next": Operation(None, ("op:concurrent", "op:stream")),
    "hold": Operation(_keys_repeat, ("op:hold",)),
    "release": Operation(None, ("op:hold",)),
    "release_copy": Operation(None, ("op:hold_copy",)),
    "stream_open": Operation(_stream_keys, ("op:stream",), _GET_FIRST),
    "stream_next": Operation(None, ("op:stream",)),
    "stream_rest": Operation(None, ("op:stream",)),
    "trace": Operation(None, ("op:trace",)),
    "set_step": Operation(None, ("op:trace",)),
    "trace_over": Operation(None, ("op:trace",)),
    "break_check": Operation(None, ("op:break_check",)),
    "face_get": Operation(_keys, _FACE),
    "face_hold_layer": Operation(_keys, _FACE),
    "face_stream": Operation(_face_stream, _FACE),
    "face_read": Operation(None, _FACE),
    "face_release": Operation(None, _FACE),
    "face_drop": Operation(None, _FACE),
    "container_read": Operation(_keys, _FACE),
    "check": Operation(),
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
    "trace_steps": ("op:trace",), "trace_header": ("op:trace",),
    "trace_file": ("op:trace",), "trace_kept": ("op:trace",),
    "check_broken": ("op:break_check",),
    "wait_hits": ("op:concurrent",),
    "open_files": ("fault:open",),
    "face": ("op:lifetime",),
}

_FACTS = {f.value for f in Fact}

#: The values that rest on which keys the cache chose to evict: a backend
#: whose victims are its own (lacking ``exact:victims``,
#: gate/outside/designs.py) is not judged on them.  Every counter but the
#: demand requests, the residents, and what was served and published.
VICTIMS = frozenset({*(c for c in COUNTERS if c != "requests"), "resident",
                     "ready_slots", "reads", "published"})


def value_needs(key: str) -> tuple[str, ...]:
    """The capabilities a check pinning value ``key`` needs of the backend.

    A counter needs ``counter:<key>``, a slot fact ``fact:<key>``, the rest
    what :data:`VALUE_NEEDS` says; a name that is none of these needs
    nothing (its value is simply not there: the check fails).
    """
    victims = ("exact:victims",) if key in VICTIMS else ()
    if key == "io_bytes":
        victims += ("exact:io_bytes",)
    if key in VALUE_NEEDS:
        return VALUE_NEEDS[key] + victims
    if key in _FACTS:
        return (f"fact:{key}", *victims)
    if key in COUNTERS:
        return (f"counter:{key}", *victims)
    return ()
