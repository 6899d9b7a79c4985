"""One scenario variant played against one backend: :class:`ScenarioRun`.

A run opens its backend on a fresh copy of the container, runs the
variant's compiled steps through the operation table (:data:`gate.ops.OPS`)
and judges each check against the values it pins -- or, in a derived
variant, against the judge's own run -- reporting a PASS or FAIL line, or
an N/A line naming the capability the backend lacks.  Which scenarios and
variants run, on which backends and within what time, is
:mod:`gate.scenarios`.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from xcache.gate import CannotRun, error_fields, race_ops
from xcache.gate.backend_api import BackendFactory, Declined, Errors
from xcache.gate.containers import Target
from xcache.gate.expr import ExprError, evaluate
from xcache.gate.operations import value_needs
from xcache.gate.ops import OPS
from xcache.gate.report import Report, format_value
from xcache.gate.steps import names_of

__all__ = ["ScenarioRun"]

#: Values the judge leaves out of its values when it cannot know them (a
#: count that timing decides: oracle.reading_cache ``queue_fallbacks``): a
#: derived check then does not judge them.
TIMED_VALUES = frozenset({"queue_fallbacks"})

#: What a backend's capabilities lack to judge a check's values, by the
#: capabilities and the values' names (both immutable).
_MISSING: dict[Any, dict[tuple[str, ...], list[str]]] = {}


class StepCannotRun(Exception):
    """A step this backend cannot run where the judge ran it (its state
    differs): reported as the scenario's failed completion."""


class NoBackend(Exception):
    """A step needing the backend after its open failed (the run's failure)."""


class ScenarioRun:
    """Runs one scenario variant's compiled steps against one backend.

    ``make`` opens the backend over a folder and declares its capabilities;
    ``needs`` are what the variant's cache options need of it
    (:func:`gate.backend_api.option_needs`).

    The step API, all an op handler (:mod:`gate.ops`) uses: :meth:`attempt`
    (a call whose outcome is recorded), :meth:`record` and
    :meth:`note_failure` (an outcome met elsewhere: a background call, a
    stream's item), :meth:`get`, :meth:`served` (a payload judged),
    :meth:`attempt_each`, :meth:`open`, :meth:`close`, :meth:`first_piece`,
    :meth:`fail` and :meth:`check`; and the declared attributes: ``backend``,
    ``make``, ``target``, ``scratch``, ``private``, ``sc``, ``extra`` (the
    values a probe step sets for the next check), ``published``,
    ``last_error``, ``error_offset``, ``offset_as_claimed``, and what the
    handlers keep by label between steps (``layer_holds``, ``held_refs``,
    ``held_copies``, ``released_labels``, ``open_streams``, ``face_held``,
    ``race``, ``trace_of``/``trace_seen``) and ``face`` (the records of the
    Python face's calls since the last check, :mod:`gate.face_ops`).
    """

    def __init__(self, scenario: dict[str, Any], variant: dict[str, Any],
                 steps: list[dict[str, Any]], target: Target, scratch: Path,
                 make: BackendFactory, report: Report,
                 needs: list[str] | tuple[str, ...] = ()) -> None:
        self.sc, self.steps, self.target = scenario, steps, target
        self.var = variant
        self.variant = variant.get("suffix", "")
        self.variant_expect = variant.get("expect", {})
        #: the checks' keys a derived variant takes from the oracle's run
        self.derive: dict[str, list[str]] | None = variant.get("derive")
        self.scratch, self.make = scratch, make
        self.report = report
        #: the backend's kind (``engine``, ``oracle``, an outside cache's label)
        self.backend_name: str = make.name
        #: the capabilities the variant's cache options need
        self.needs = list(needs)
        #: what the backend lacks that a step before needed: every check
        #: from there on is N/A naming it
        self.lacking: list[str] = []
        self.backend: Any = None
        self.reads = self.wrong = 0
        self.published: int | None = None
        #: values a probe step (trace, break_check) sets for the next check
        self.extra: dict[str, Any] = {}
        #: the outcome (failure kind or None) of every call of a key since
        #: the last check, in order
        self.errors: list[str | None] = []
        #: the structured fields of each of those failures (gate.error_fields)
        self.error_fields: list[list[Any] | None] = []
        self.last_error: str | None = None
        self.error_offset: int | None = None
        #: whether the last corrupt step's error named the byte its
        #: corruptor claims (faults/corrupt.py conventions)
        self.offset_as_claimed: bool | None = None
        #: whether a step changes or replaces a file (bytes served after it
        #: may be another file's)
        self.changes_files = any(
            s.get("op") in ("truncate", "touch", "rewrite", "replace",
                            "corrupt") for s in steps)
        #: files a step changes in place: private copies, never symlinks
        self.private = frozenset(
            Path(self.first_piece(s["key"]).shard).name for s in steps
            if s.get("op") in ("truncate", "touch", "rewrite"))
        # -- what the op handlers keep between steps, by label ---------------
        #: ``hold_layer`` label -> its handle (None: the call failed)
        self.layer_holds: dict[str, Any] = {}
        #: ``hold`` label -> the references taken, and their copies
        #: (backends with ``op:hold_copy``)
        self.held_refs: dict[str, list[Any]] = {}
        self.held_copies: dict[str, list[Any]] = {}
        #: the labels a ``release`` step gave back
        self.released_labels: set[str] = set()
        #: ``stream_open`` label -> its stream (None: the open failed)
        self.open_streams: dict[str, Any] = {}
        #: a face step's label -> the face's objects it keeps, and the
        #: records of the face's calls since the last check (gate.face_ops)
        self.face_held: dict[str, list[Any]] = {}
        self.face: list[list[Any]] = []
        #: the race ops' background calls and counted waits (gate.race_ops)
        self.race = race_ops.RaceState()
        #: the backend whose trace records a ``trace`` step has taken, and
        #: how many (gate.trace_check)
        self.trace_of: Any = None
        self.trace_seen = 0

    # -- the step API: what an op handler (gate.ops) may call -----------------

    def first_piece(self, key: tuple[int, int]) -> Any:
        """The piece of ``key`` that comes first in file order."""
        return min(self.target.pieces(*key), key=lambda p: (p.shard, p.offset))

    def changed_piece(self, step: dict[str, Any]) -> Any:
        """The piece a file-changing step (truncate, touch, rewrite) acts on:
        its ``piece`` (an index in the key's pieces), else the first in
        file order."""
        key = step["key"]
        if "piece" in step:
            return self.target.pieces(*key)[step["piece"]]
        return self.first_piece(key)

    def fail(self, message: str) -> CannotRun:
        """The error for a step this scenario cannot run (to raise), naming it."""
        return CannotRun(f"scenario {self.sc['name']}: {message}")

    def close(self) -> None:
        """Close the backend; a close that fails is a failed check, not a stop.

        An engine that leaks a shard's descriptor is refused by the fault
        injector's close (``open handle(s)``): that is the engine's failure
        to report, on the scenario's line, not a replay that cannot run.
        """
        backend, self.backend = self.backend, None
        if backend is None:
            return
        try:
            backend.close()
        except CannotRun:
            raise
        except Exception as e:  # noqa: BLE001 - reported as a failed check
            self.report.add(self.sc["name"] + self.variant, self.backend_name,
                            "the backend closed cleanly" + self.variant, False,
                            f"{type(e).__name__}: {e}", "a clean close",
                            f"{type(e).__name__}: {e}")

    def open(self, fresh: bool = True) -> None:
        """Close the backend and open it again (on a fresh copy if ``fresh``)."""
        self.close()
        if fresh:
            self.target.populate(self.scratch, self.private)
        self.backend = self.make(self.scratch)

    def record(self, failure: BaseException | None) -> None:
        """Record one call's outcome: ``failure`` None (it succeeded) or what it
        raised, whose kind becomes ``last_error`` and is appended to ``errors``
        (its structured fields to ``error_fields``)."""
        if failure is None:
            self.last_error = None
            self.errors.append(None)
            self.error_fields.append(None)
            return
        self.last_error = self.make.kind_of(failure)
        self.errors.append(self.last_error)
        self.error_fields.append(error_fields.project(failure, self.last_error))

    def note_failure(self, failure: BaseException) -> None:
        """``last_error`` becomes ``failure``'s kind, not recorded as a call of
        its own (a stream's item that failed)."""
        self.last_error = self.make.kind_of(failure)

    def attempt(self, call: Any, *args: Any) -> tuple[bool, Any]:
        """Call ``call(*args)`` and :meth:`record` its outcome: (succeeded, value).

        A CannotRun ends the scenario instead.
        """
        try:
            value = call(*args)
        except CannotRun:
            raise
        except Exception as e:  # noqa: BLE001 - kinds are compared by checks
            self.record(e)
            return False, None
        self.record(None)
        return True, value

    def get(self, layer: int, expert: int) -> None:
        """A ``get`` of one key: its outcome recorded, its payload judged
        (:class:`NoBackend` when no backend is open: its open failed)."""
        if self.backend is None:
            raise NoBackend(f"get(layer {layer}, expert {expert}): no cache "
                            "is open (the open before it failed)")
        ok, data = self.attempt(self.backend.get, layer, expert)
        if ok:
            self.served((layer, expert), data)

    def served(self, key: tuple[int, int], data: bytes) -> None:
        """Count one served payload, and whether its bytes are wrong."""
        self.reads += 1
        if (key not in self.target.keys or
                not self.target.serves(*key, data)):
            self.wrong += 1  # a key outside the layout is never served

    def attempt_each(self, keys: list[tuple[int, int]], call: Any) -> None:
        """:meth:`attempt` ``call(layer, expert)`` for each key, in order."""
        for k in keys:
            self.attempt(call, *k)

    def run(self) -> None:
        """Execute every step, reporting each check; a crash is a failed check."""
        try:
            self.lacking = self.make.capabilities.missing(self.needs)
            if not self.lacking:
                try:
                    self.open()
                except Declined as e:  # options it may refuse: N/A
                    self.lacking = list(e.needs)
            for i, step in enumerate(self.steps):
                try:
                    self._step(step)
                except CannotRun as e:
                    if self.make.reference or not self.var.get("judge_ran"):
                        raise
                    # the judge ran this very step: what stops it here is
                    # the state this backend reached (a key it does not
                    # hold where the judge held it), a failed check
                    raise StepCannotRun(
                        f"step {i + 1} ({step.get('op', 'check')}) cannot "
                        f"run on this backend, though the judge ran it: {e}"
                    ) from None
            if self.make.reference:
                self.var["judge_ran"] = True
        except CannotRun:
            raise
        except Exception as e:  # noqa: BLE001 - the backend broke mid-scenario
            self.report.add(self.sc["name"] + self.variant, self.backend_name,
                            "scenario ran to completion" + self.variant, False,
                            f"{type(e).__name__}: {e}", "completion",
                            f"{type(e).__name__}: {e}")
        finally:
            self.close()

    def _step(self, step: dict[str, Any]) -> None:
        """Run one step through the op table, unless the backend lacks its needs."""
        op = step.get("op", "check")
        spec = OPS.get(op)
        if spec is None:
            raise CannotRun(f"scenario {self.sc['name']}: unknown op {op!r}")
        if not self.lacking:
            self.lacking = self.make.capabilities.missing(
                [*spec.needs_of(step), *step.get("needs", [])])
        if self.lacking and op != "check":
            return  # the state it would make is unknown: later checks are N/A
        spec.run(self, step)

    def _layout_expect(self, step: dict[str, Any]) -> dict[str, int]:
        """A derived check's values computed from the layout (``expect_layout*``)."""
        exprs = {**step.get("expect_layout", {}),
                 **step.get(f"expect_layout_{self.backend_name}", {})}
        names = names_of(self.sc, self.target.quantities)
        try:
            return {k: evaluate(v, names) for k, v in exprs.items()}
        except ExprError as e:
            raise CannotRun(f"scenario {self.sc['name']}: check {step['name']}: "
                            f"{e}") from e

    def _not_applicable(self, step: dict[str, Any], missing: list[str]) -> None:
        """Report a check N/A: the backend lacks ``missing``."""
        self.report.na(self.sc["name"] + self.variant, self.backend_name,
                       step["name"] + self.variant, missing)
        self.reads = self.wrong = 0
        self.errors = []
        self.error_fields = []
        self.extra = {}
        self.face = []

    def check(self, step: dict[str, Any]) -> None:
        """Judge one ``check`` step: a PASS, FAIL or N/A line per its values."""
        name = step["name"]
        expect = {**step["expect"], **self.variant_expect.get(name, {}),
                  **step.get(f"expect_{self.backend_name}", {})}
        caps = self.make.capabilities
        if not caps.has("exact:victims") and not self.make.reference and \
                self.var.get("victim_free", {}).get(name):
            # the judge has evicted nothing yet (nor can the cache have
            # dropped a sticky failure: DesignView.victim_free): no value
            # rests on a victim choice, so a cache choosing its own victims
            # (a sampled policy, sticky failures) is judged exactly here
            caps = _with_victims(caps)
        judged = (*expect, *(self.derive or {}).get(name, []),
                  *step.get("expect_layout", {}),
                  *step.get(f"expect_layout_{self.backend_name}", {}))
        if judged not in _MISSING.setdefault(caps, {}):  # (a program's checks
            # judge one list of values hundreds of times)
            _MISSING[caps][judged] = caps.missing(
                [n for k in judged for n in value_needs(k)])
        missing = self.lacking or list(_MISSING[caps][judged])
        judge_na: list[str] = []
        if not missing and self.derive is not None and not self.make.reference:
            # the judge could not give this check's values: no value of it
            # is judged (partial checks included)
            judge_na = missing = self.var.get("derived_na", {}).get(name, [])
        unjudged: list[str] = []
        if missing and not self.lacking and not judge_na and getattr(
                self.make, "partial_checks", False):
            # judge the values it has; those it lacks are named N/A
            pinned = [*expect, *(self.derive or {}).get(name, []),
                      *step.get("expect_layout", {}),
                      *step.get(f"expect_layout_{self.backend_name}", {})]
            unjudged = [k for k in dict.fromkeys(pinned)
                        if caps.missing(value_needs(k))]
            if len(unjudged) < len(dict.fromkeys(pinned)):
                missing = []
        if missing:
            if self.derive is not None and self.make.reference:
                self.var.setdefault("derived_na", {})[name] = [
                    f"{m} (of {self.backend_name}, the judge)" for m in missing]
            self._not_applicable(step, missing)
            return
        values = self.backend.values() if self.backend is not None else {}
        values.update(reads=self.reads, wrong_reads=self.wrong,
                      published=self.published, last_error=self.last_error,
                      error_offset=self.error_offset, errors=self.errors,
                      error_fields=self.error_fields, face=self.face,
                      offset_as_claimed=self.offset_as_claimed)
        if caps.has("op:concurrent"):
            values.update(race_ops.values(self))
        values.update(self.extra)
        if self.derive is not None:
            derived = self.var.setdefault("derived", {})
            if self.make.reference:
                # a derived variant: the judge's values become the pinned ones
                derived[name] = {k: values.get(k)
                                 for k in self.derive.get(name, [])
                                 if k in values or k not in TIMED_VALUES}
                free = getattr(self.backend, "victim_free", None)
                self.var.setdefault("victim_free", {})[name] = bool(
                    free is not None and free())
            theirs = {k for f, pins in step.items()
                      if f.startswith("expect_") and isinstance(pins, dict)
                      and not f.startswith("expect_layout")
                      and f != f"expect_{self.backend_name}" for k in pins}
            expect.update({k: v for k, v in derived.get(name, {}).items()
                           if k in expect or k not in theirs})
            if self.var.get("layout", True):
                expect.update(self._layout_expect(step))
        if caps.errors is Errors.FAILED:  # only "failed or not" is compared
            for k in ("last_error", "errors"):
                if k in expect:
                    expect[k] = _coarse(expect[k])
        kinds = getattr(self.make, "kinds", None)
        if kinds is not None and caps.errors is Errors.TYPED:
            for k in ("last_error", "errors"):  # what the backend can name
                if k in expect:
                    expect[k] = _nameable(expect[k], kinds)
        if kinds is not None:  # a failure is its kind alone: no byte offset
            for k in ("error_offset", "error_fields", "offset_as_claimed"):
                if expect.pop(k, None) is not None or k in step["expect"]:
                    unjudged.append(k)
        if not caps.has("exact:victims"):
            # which calls fail rests on the victims but for misuse: only
            # misuse is compared (gate/outside/designs.py)
            for k in ("last_error", "errors"):
                if k in expect:
                    expect[k] = _misuse_only(expect[k])
                    values[k] = _misuse_only(values.get(k))
        if "relations" in values:  # what must hold whatever the design
            expect.setdefault("relations", [])
            if not self.changes_files:  # every byte served is the file's
                expect.setdefault("wrong_reads", 0)
            expect.setdefault("held_changed", 0)  # (gate/contracts.py
            # VALUE_OWNERS: they count against their own contracts)
        near = _near_hits(getattr(self.make, "hit_bound", None), unjudged,
                          expect, values)
        for k in unjudged:
            expect.pop(k, None)
        unjudged = [f"{k} ({', '.join(caps.missing(value_needs(k))) or KIND_ONLY})"
                    for k in dict.fromkeys(unjudged)
                    if not (near and k == "hits")]
        bad = {k: values.get(k) for k, want in expect.items()
               if values.get(k) != want}
        near_text = ""
        if near:
            want, slack = near
            got = values.get("hits")
            near_text = (f"hits {format_value(got)} (a sampled policy: "
                         f"within {slack:g} of the exact policy's {want})")
            if not (isinstance(got, int) and abs(got - want) <= slack):
                expect["hits"] = want
                bad["hits"] = got
        if "wrong_reads" in expect:
            detail = f"{values['wrong_reads']} of {values['reads']} reads wrong"
            others = [k for k in expect if k not in ("wrong_reads", "reads")]
        else:
            detail, others = "", list(expect)
        parts = [detail] if detail else []
        parts += [f"{k} {format_value(values.get(k))}" for k in others
                  if not (near_text and k == "hits")]
        parts += [near_text] if near_text else []
        text = ", ".join(parts)
        if unjudged:
            text += "; N/A " + ", ".join(unjudged)
        if bad:
            text += "; expected " + ", ".join(
                f"{k} {format_value(expect[k])}" for k in bad)
        self.report.add(self.sc["name"] + self.variant, self.backend_name,
                        name + self.variant, not bad, text,
                        expect, {k: values.get(k) for k in expect})
        self.reads = self.wrong = 0
        self.errors = []
        self.error_fields = []
        self.extra = {}
        self.face = []


#: the fewest demand requests on which a sampled policy's hits are judged
#: against the exact policy's (within its bound); fewer: N/A
NEAR_MIN_REQUESTS = 100


def _near_hits(bound: float | None, unjudged: list[str],
               expect: dict[str, Any], values: dict[str, Any]
               ) -> tuple[int, float] | None:
    """(the exact policy's hits, the slack allowed) when a sampled policy's
    hits are judged within its bound on this check, else None."""
    if bound is None or "hits" not in unjudged or \
            not isinstance(expect.get("hits"), int):
        return None
    requests = values.get("requests")
    if not isinstance(requests, int) or requests < NEAR_MIN_REQUESTS:
        return None
    return expect["hits"], bound * requests


#: why a failure's offset and fields are not judged on an outside cache
KIND_ONLY = "a shim names a failure by its kind alone"

#: the failure kinds that are not the name of a format check
#: (faults/kinds.py)
_NOT_FORMAT = frozenset({"short_read", "io", "changed", "nomem", "not_found",
                         "all_pinned", "misuse", "budget", "failed"})


def _nameable(value: Any, kinds: frozenset[str]) -> Any:
    """An expected failure kind (or list of them) as a backend naming only
    ``kinds`` names it: every format check's name is ``format``."""
    if isinstance(value, list):
        return [_nameable(v, kinds) for v in value]
    if value is None or value in kinds or value in _NOT_FORMAT or \
            "format" not in kinds:
        return value
    return "format"


def _misuse_only(value: Any) -> Any:
    """A failure kind (or list of them) with every kind but misuse, and
    success, made one: what a backend whose victims are its own is
    compared on."""
    if isinstance(value, list):
        return [_misuse_only(v) for v in value]
    return value if value == "misuse" else "*"


def _coarse(value: Any) -> Any:
    """An expected failure kind (or list of them) as an untyped backend gives it."""
    if isinstance(value, list):
        return [_coarse(v) for v in value]
    return None if value is None else "failed"


def _with_victims(caps: Any) -> Any:
    """``caps`` judged on the values that rest on victims (``exact:victims``)."""
    return dataclasses.replace(caps, inexact=caps.inexact - {"victims"})
