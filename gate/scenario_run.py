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

from pathlib import Path
from typing import Any

from xcache.gate import CannotRun, error_fields, race_ops
from xcache.gate.backend import BackendFactory, Errors
from xcache.gate.containers import Target
from xcache.gate.expr import ExprError, evaluate
from xcache.gate.ops import OPS, value_needs
from xcache.gate.report import Report, format_value
from xcache.gate.steps import names_of

__all__ = ["ScenarioRun"]

#: What a backend's capabilities lack to judge a check's values, by the
#: capabilities and the values' names (both immutable).
_MISSING: dict[Any, dict[tuple[str, ...], list[str]]] = {}


class ScenarioRun:
    """Runs one scenario variant's compiled steps against one backend.

    ``make`` opens the backend over a folder and declares its capabilities;
    ``needs`` are what the variant's cache options need of it
    (:func:`gate.backend.option_needs`).
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
        self._backend_name = make.name
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
        #: files a step changes in place: private copies, never symlinks
        self.private = frozenset(
            Path(self._first_piece(s["key"]).shard).name for s in steps
            if s.get("op") in ("truncate", "touch", "rewrite"))

    def _first_piece(self, key: tuple[int, int]) -> Any:
        """The piece of ``key`` that comes first in file order."""
        return min(self.target.pieces(*key), key=lambda p: (p.shard, p.offset))

    def _close(self) -> None:
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
            self.report.add(self.sc["name"] + self.variant, self._backend_name,
                            "the backend closed cleanly" + self.variant, False,
                            f"{type(e).__name__}: {e}", "a clean close",
                            f"{type(e).__name__}: {e}")

    def _open(self, fresh: bool = True) -> None:
        self._close()
        if fresh:
            self.target.populate(self.scratch, self.private)
        self.backend = self.make(self.scratch)

    def _attempt(self, call: Any, *args: Any) -> tuple[bool, Any]:
        """Call ``call(*args)`` and record its outcome: (succeeded, value).

        The outcome (None, or the failure's kind) becomes ``last_error`` and
        is appended to ``errors``; a CannotRun ends the scenario instead.
        """
        try:
            value = call(*args)
        except CannotRun:
            raise
        except Exception as e:  # noqa: BLE001 - kinds are compared by checks
            self.last_error = self.make.kind_of(e)
            self.errors.append(self.last_error)
            self.error_fields.append(error_fields.project(e, self.last_error))
            return False, None
        self.last_error = None
        self.errors.append(None)
        self.error_fields.append(None)
        return True, value

    def _get(self, layer: int, expert: int) -> None:
        ok, data = self._attempt(self.backend.get, layer, expert)
        if ok:
            self._served((layer, expert), data)

    def _served(self, key: tuple[int, int], data: bytes) -> None:
        """Count one served payload, and whether its bytes are wrong."""
        self.reads += 1
        if (key not in self.target.keys or
                not self.target.serves(*key, data)):
            self.wrong += 1  # a key outside the layout is never served

    def _each(self, step: dict[str, Any], call: Any) -> None:
        """Call ``call(layer, expert)`` for each key; the last error is kept."""
        for k in step["keys"]:
            self._attempt(call, *k)

    def run(self) -> None:
        """Execute every step, reporting each check; a crash is a failed check."""
        try:
            self.lacking = self.make.capabilities.missing(self.needs)
            if not self.lacking:
                self._open()
            for step in self.steps:
                self._step(step)
        except CannotRun:
            raise
        except Exception as e:  # noqa: BLE001 - the backend broke mid-scenario
            self.report.add(self.sc["name"] + self.variant, self._backend_name,
                            "scenario ran to completion" + self.variant, False,
                            f"{type(e).__name__}: {e}", "completion",
                            f"{type(e).__name__}: {e}")
        finally:
            self._close()

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
                 **step.get(f"expect_layout_{self._backend_name}", {})}
        names = names_of(self.sc, self.target.quantities)
        try:
            return {k: evaluate(v, names) for k, v in exprs.items()}
        except ExprError as e:
            raise CannotRun(f"scenario {self.sc['name']}: check {step['name']}: "
                            f"{e}") from e

    def _not_applicable(self, step: dict[str, Any], missing: list[str]) -> None:
        """Report a check N/A: the backend lacks ``missing``."""
        self.report.na(self.sc["name"] + self.variant, self._backend_name,
                       step["name"] + self.variant, missing)
        self.reads = self.wrong = 0
        self.errors = []
        self.error_fields = []
        self.extra = {}

    def _check(self, step: dict[str, Any]) -> None:
        name = step["name"]
        expect = {**step["expect"], **self.variant_expect.get(name, {}),
                  **step.get(f"expect_{self._backend_name}", {})}
        caps = self.make.capabilities
        judged = (*expect, *(self.derive or {}).get(name, []),
                  *step.get("expect_layout", {}),
                  *step.get(f"expect_layout_{self._backend_name}", {}))
        if judged not in _MISSING.setdefault(caps, {}):  # (a program's checks
            # judge one list of values hundreds of times)
            _MISSING[caps][judged] = caps.missing(
                [n for k in judged for n in value_needs(k)])
        missing = self.lacking or list(_MISSING[caps][judged])
        if not missing and self.derive is not None and not self.make.reference:
            # the judge could not give this check's values
            missing = self.var.get("derived_na", {}).get(name, [])
        unjudged: list[str] = []
        if missing and not self.lacking and getattr(self.make, "partial_checks",
                                                    False):
            # judge the values it has; those it lacks are named N/A
            pinned = [*expect, *(self.derive or {}).get(name, []),
                      *step.get("expect_layout", {}),
                      *step.get(f"expect_layout_{self._backend_name}", {})]
            unjudged = [k for k in dict.fromkeys(pinned)
                        if caps.missing(value_needs(k))]
            if len(unjudged) < len(dict.fromkeys(pinned)):
                missing = []
        if missing:
            if self.derive is not None and self.make.reference:
                self.var.setdefault("derived_na", {})[name] = [
                    f"{m} (of {self._backend_name}, the judge)" for m in missing]
            self._not_applicable(step, missing)
            return
        values = self.backend.values() if self.backend is not None else {}
        values.update(reads=self.reads, wrong_reads=self.wrong,
                      published=self.published, last_error=self.last_error,
                      error_offset=self.error_offset, errors=self.errors,
                      error_fields=self.error_fields,
                      offset_as_claimed=self.offset_as_claimed)
        if caps.has("op:concurrent"):
            values.update(race_ops.values(self))
        values.update(self.extra)
        if self.derive is not None:
            derived = self.var.setdefault("derived", {})
            if self.make.reference:
                # a derived variant: the judge's values become the pinned ones
                derived[name] = {k: values.get(k)
                                 for k in self.derive.get(name, [])}
            theirs = {k for f, pins in step.items()
                      if f.startswith("expect_") and isinstance(pins, dict)
                      and not f.startswith("expect_layout")
                      and f != f"expect_{self._backend_name}" for k in pins}
            expect.update({k: v for k, v in derived.get(name, {}).items()
                           if k in expect or k not in theirs})
            expect.update(self._layout_expect(step))
        if caps.errors is Errors.FAILED:  # only "failed or not" is compared
            for k in ("last_error", "errors"):
                if k in expect:
                    expect[k] = _coarse(expect[k])
        for k in unjudged:
            expect.pop(k, None)
        unjudged = [f"{k} ({', '.join(caps.missing(value_needs(k)))})"
                    for k in unjudged]
        bad = {k: values.get(k) for k, want in expect.items()
               if values.get(k) != want}
        if "wrong_reads" in expect:
            detail = f"{values['wrong_reads']} of {values['reads']} reads wrong"
            others = [k for k in expect if k not in ("wrong_reads", "reads")]
        else:
            detail, others = "", list(expect)
        parts = [detail] if detail else []
        parts += [f"{k} {format_value(values.get(k))}" for k in others]
        text = ", ".join(parts)
        if unjudged:
            text += "; N/A " + ", ".join(unjudged)
        if bad:
            text += "; expected " + ", ".join(
                f"{k} {format_value(expect[k])}" for k in bad)
        self.report.add(self.sc["name"] + self.variant, self._backend_name,
                        name + self.variant, not bad, text,
                        expect, {k: values.get(k) for k in expect})
        self.reads = self.wrong = 0
        self.errors = []
        self.error_fields = []
        self.extra = {}


def _coarse(value: Any) -> Any:
    """An expected failure kind (or list of them) as an untyped backend gives it."""
    if isinstance(value, list):
        return [_coarse(v) for v in value]
    return None if value is None else "failed"
