"""Seeded differential programs: generated scenarios judged by the oracle.

A *program* is a scenario (docs/SCENARIOS.md) that no one wrote: a seed, a
container and an option set give, through :func:`generate`, a sequence of
steps over every public operation of the cache -- get, getmany, hold and
release, ``hold_layer`` and ``unhold_many``, pin and unpin, prefetch plain
and speculative, drain, streams (taken whole, and opened, taken in part
and finished later), reset, trace records, files replaced, the faults
(short reads, EIO, EINTR storms, partial reads, refused allocations, a
truncated shard, a corrupted one) -- with a share of misuse (keys outside
the layout, an expert named twice, a second release, unpin of an unpinned
expert) whose error kinds are compared.  After every step a check compares
everything both backends report (:data:`COMPARED`: bytes served, every
counter the oracle models, residency, holds, pins, the error kind of each
call, ``check()``): the oracle runs first and its values are the expected
ones (a derived variant of :mod:`gate.scenarios`), the engine must match.

Generation is deterministic from (seed, container, option set) and never
depends on timing: with read-ahead threads every prefetch is followed by a
drain, faults are armed only around calls whose reads meet them in a fixed
order, and a labelled stream is made only when its misses surely find a
slot (tracked conservatively from the holds and pins taken); a
``hold_layer`` is made so too, or with more experts than surely free
slots, or under an armed fault, where it may be refused all or none.

:func:`shrink` reduces a failing program by delta debugging over its steps,
then over the keys of each step, and :func:`pinned` turns the result into a
scenario file with the oracle's values written in (it fails the same way
when pinned: :func:`run_one` on it reports the same first failing check).
``gate/scenarios/programs.json`` lists the programs every replay runs.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gate import SCENARIO_DIR, CannotRun
from gate.backend import COUNTERS, Fact, option_needs
from gate.backends import factory
from gate.containers import Target, make_target
from gate.report import Report
from gate.scenarios import WATCHDOG, ScenarioRun, run_bounded
from gate.steps import NotApplicable, cache_options, compile_steps

#: The programs file every replay runs (a JSON object, see docs/SCENARIOS.md).
PROGRAMS_FILE = SCENARIO_DIR / "programs.json"

#: The option sets a program's cache may take, by name.
OPTION_SETS: dict[str, dict[str, Any]] = {
    "plain": {"batch_threads": 1},
    "pool": {"batch_threads": 2},
    "chunked": {"chunk_bytes": 256, "batch_threads": 1},
    "direct": {"direct": True, "batch_threads": 1},
    "direct-chunked": {"direct": True, "chunk_bytes": 4096, "batch_threads": 1},
    "readers": {"io_threads": 2, "batch_threads": 1},
    "verify": {"verify": True, "batch_threads": 1},
    "traced": {"trace": True, "batch_threads": 1},
}

#: Counters the oracle does not model (time, page-cache origin).
_UNMODELLED = {"spec_adjusted_hits", "load_ns",
               "page_cache_loads", "page_cache_bytes", "device_loads",
               "device_bytes", "unknown_loads"}

#: What every check of a program compares, engine against oracle.
COMPARED: tuple[str, ...] = (
    *(c for c in COUNTERS if c not in _UNMODELLED),
    *(f.value for f in Fact),
    "reads", "errors", "published", "last_error",
    # each failure's layer, expert and offset (gate.error_fields)
    "error_fields",
)

#: Corruptions a program's last step may make of its container.
CORRUPTIONS = ("too_short", "header_too_large", "header_past_end", "length",
               "offsets", "dtype")

#: The fault kinds a program arms (an ``eintr`` storm is a persistent one).
FAULTS = ("eof", "eio", "eintr", "partial", "eintr_storm")


class _Gen:
    """The state a program's generator tracks, conservatively."""

    def __init__(self, rng: random.Random, target: Target,
                 opts: dict[str, Any], n_slots: int) -> None:
        self.rng, self.opts, self.n_slots = rng, opts, n_slots
        q = target.quantities
        self.n_keys, self.E, self.k = q["N"], q["E"], q["k"]
        self.layers = list(target.layout["layers"])
        self.readers = bool(opts.get("io_threads"))
        self.steps: list[dict[str, Any]] = []
        self.holds: dict[str, int] = {}      # hold label -> references
        self.layer_holds: dict[str, int] = {}  # hold_layer label -> experts
        self.released: list[tuple[str, str]] = []  # (op, label) given back
        self.pinned: dict[int, int] = {}     # flat key -> pins asked
        self.stream: tuple[str, int] | None = None  # open label, keys
        self.serial = 0
        # a small hot set makes hits, the rest of the keys misses
        self.hot = rng.sample(range(self.n_keys), min(self.n_keys, 2 * self.k))

    # -- helpers -------------------------------------------------------------

    def key(self) -> int:
        """A flat key index: mostly from the hot set."""
        if self.rng.random() < 0.6:
            return self.rng.choice(self.hot)
        return self.rng.randrange(self.n_keys)

    def keys(self, most: int) -> list[int]:
        """One to ``most`` distinct flat key indices."""
        n = self.rng.randint(1, max(1, min(most, self.n_keys)))
        out: list[int] = []
        while len(out) < n:
            k = self.key()
            if k not in out:
                out.append(k)
        return out

    def busy(self) -> int:
        """Slots that may be held, pinned or reserved now (an upper bound)."""
        stream = self.stream[1] if self.stream else 0
        return (sum(self.holds.values()) + sum(self.layer_holds.values())
                + sum(1 for v in self.pinned.values() if v > 0) + stream)

    def room(self) -> int:
        """Slots surely free for new misses."""
        return self.n_slots - self.busy()

    def label(self, prefix: str) -> str:
        self.serial += 1
        return f"{prefix}{self.serial}"

    def add(self, step: dict[str, Any]) -> None:
        self.steps.append(step)

    def read_ahead(self, keys: list[int], speculative: bool) -> None:
        step: dict[str, Any] = {"op": "prefetch", "keys": keys}
        if speculative:
            step["speculative"] = True
        if self.readers:  # the reads end before anything is compared
            step["then"] = "drain"
        self.add(step)
        if self.readers:
            self.add({"op": "drain"})

    # -- operations ------------------------------------------------------------

    def op_get(self) -> None:
        self.add({"op": "get", "keys": self.keys(3)})

    def op_getmany(self) -> None:
        self.add({"op": "getmany", "keys": self.keys(self.k + 1),
                  **({"then_get": True} if self.rng.random() < 0.3 else {})})

    def op_prefetch(self) -> None:
        self.read_ahead(self.keys(self.k), self.rng.random() < 0.5)

    def op_drain(self) -> None:
        self.add({"op": "drain"})

    def op_hold(self) -> None:
        if self.busy() >= self.n_slots // 2:
            return self.op_give_back()
        label = self.label("h")
        keys = self.keys(2)
        self.holds[label] = len(keys)
        self.add({"op": "hold", "keys": keys, "label": label})
        return None

    def op_give_back(self) -> None:
        rng = self.rng
        if self.released and rng.random() < 0.15:  # a second release: misuse
            op, label = rng.choice(self.released)
            self.add({"op": op, "label": label})
            return
        if self.holds and (not self.layer_holds or rng.random() < 0.5):
            label = rng.choice(sorted(self.holds))
            del self.holds[label]
            self.released.append(("release", label))
            self.add({"op": "release", "label": label})
        elif self.layer_holds:
            label = rng.choice(sorted(self.layer_holds))
            del self.layer_holds[label]
            self.released.append(("unhold_many", label))
            self.add({"op": "unhold_many", "label": label})
        elif self.pinned:
            self.op_unpin()

    def op_hold_layer(self) -> None:
        rng = self.rng
        li = rng.randrange(len(self.layers))
        base = li * self.E
        if rng.random() < 0.12:  # misuse: an expert twice, or too many
            e = rng.randrange(self.E)
            raw = ([["layer_first", e], ["layer_first", e]]
                   if rng.random() < 0.5 else
                   [["layer_first", i % self.E] for i in range(self.n_slots + 1)])
            self.add({"op": "hold_layer", "raw": raw, "label": self.label("m")})
            return
        if rng.random() < 0.2:  # perhaps too few slots: refused all or none
            n = rng.randint(1, min(self.E, self.n_slots))
            label = self.label("L")
            self.layer_holds[label] = n  # (an upper bound: it may hold none)
            self.add({"op": "hold_layer", "label": label, "keys": [
                base + e for e in rng.sample(range(self.E), n)]})
            return None
        # every expert may miss: hits and misses alike need a slot of their own
        most = min(self.k + 1, self.E, self.room() - 1)
        if most < 1:
            return self.op_give_back()
        n = rng.randint(1, most)
        experts = rng.sample(range(self.E), n)
        label = self.label("L")
        self.layer_holds[label] = n
        self.add({"op": "hold_layer", "keys": [base + e for e in experts],
                  "label": label})
        return None

    def op_pin(self) -> None:
        if self.busy() >= self.n_slots // 2:
            return self.op_unpin()
        k = self.key()
        self.pinned[k] = self.pinned.get(k, 0) + 1
        self.add({"op": "pin", "keys": [k]})
        return None

    def op_unpin(self) -> None:
        live = sorted(k for k, v in self.pinned.items() if v > 0)
        if live and self.rng.random() < 0.8:
            k = self.rng.choice(live)
            self.pinned[k] -= 1
        else:  # perhaps unpinned, perhaps never pinned: misuse then
            k = self.key()
        self.add({"op": "unpin", "keys": [k]})

    def op_stream(self) -> None:
        most = min(self.k + 1, self.room() - 1)
        if most < 1:
            return self.op_give_back()
        keys = self.keys(most)
        if self.stream is None and not self.readers and self.rng.random() < 0.5:
            label = self.label("s")
            self.stream = (label, len(keys))
            first = [k for k in keys if self.rng.random() < 0.3]
            # opened, taken in part, finished: compared after each (the
            # model leaves the misses under way until they are read)
            self.add({"op": "stream_open", "keys": keys, "label": label,
                      **({"get_first": first[:1]} if first else {})})
            self.add({"op": "stream_next", "label": label,
                      "count": self.rng.randint(0, len(keys))})
            self.add({"op": "stream_rest", "label": label})
            self.stream = None
            return None
        self.add({"op": "stream", "keys": keys})
        return None

    def op_stream_rest(self) -> None:
        if self.stream is not None:
            self.add({"op": "stream_rest", "label": self.stream[0]})
            self.stream = None

    def op_reset(self) -> None:
        self.add({"op": "reset"})

    def op_misuse(self) -> None:
        rng = self.rng
        bad = rng.choice([["layer_last+1", 0], ["layer_first", "E"],
                          ["layer_first", -1], ["layer_first-1", 0]])
        op = rng.choice(["get", "pin", "unpin", "prefetch", "getmany"])
        self.add({"op": op, "raw": [bad]})

    def op_trace(self) -> None:
        if self.opts.get("trace"):
            self.add({"op": "trace"})

    def op_fault(self) -> None:
        """Arm one fault, make one call that meets it, disarm."""
        if self.stream is not None:  # a reservation's read would meet it
            return self.op_stream_rest()
        rng = self.rng
        kind = rng.choice(FAULTS)
        if rng.random() < 0.2:
            self.add({"op": "inject_alloc", "nth": 1})
        elif kind == "eintr_storm":
            self.add({"op": "inject", "fault": "eintr", "nth": 1,
                      "persistent": True})
        else:
            step: dict[str, Any] = {"op": "inject", "fault": kind,
                                    "nth": rng.randint(1, 3)}
            if kind == "partial":
                step.update(arg=rng.choice([1, 7, 100]),
                            persistent=rng.random() < 0.5)
            self.add(step)
        serial = (self.opts.get("batch_threads", 2) == 1 and not self.readers
                  and not self.opts.get("direct"))
        most = min(self.k, self.E, self.room() - 1)
        if serial and self.steps[-1]["op"] == "inject" and most >= 1 \
                and rng.random() < 0.3:  # a read of the layer's fails: none held
            li = rng.randrange(len(self.layers))
            label = self.label("L")
            self.layer_holds[label] = most
            self.add({"op": "hold_layer", "label": label, "keys": [
                li * self.E + e for e in rng.sample(range(self.E),
                                                    rng.randint(1, most))]})
        elif serial and rng.random() < 0.5:
            self.add({"op": "getmany", "keys": self.keys(self.k)})
        else:
            self.add({"op": "get", "keys": self.keys(2)})
        self.steps[-2]["then"] = self.steps[-1]["op"]  # armed, met, cleared
        self.steps[-1]["then"] = "clear"
        self.add({"op": "clear"})
        return None

    def op_truncate(self) -> None:
        k = self.key()
        self.add({"op": "truncate", "key": k, "then": "get",
                  "at": self.rng.choice([0, 1, 100, 4096])})
        self.add({"op": "get", "keys": [k]})

    def op_replace(self) -> None:
        self.add({"op": "replace", "then": "get"})
        self.add({"op": "get", "keys": self.keys(2)})

    def op_held_read(self, rng: random.Random) -> None:
        """A get whose read a stall holds (if it reads), the calls over its key
        meanwhile, the release: checked once, after the join.

        The key may be resident (the get then hits and reads nothing): the
        wait ends either way (``or_ended``), and the stall is then replaced
        by a harmless fault so that no later read meets it.
        """
        k = self.key()
        steps: list[dict[str, Any]] = [
            {"op": "inject", "fault": "stall", "nth": 1},
            {"op": "background_get", "keys": [k]},
            {"op": "await_read", "or_ended": True},
            {"op": "inject", "fault": "delay", "nth": 1, "arg": 0},
            {"op": "getmany", "keys": [k, *self.keys(self.k)][:self.k + 1]},
            {"op": "background_get", "keys": [k]},
            {"op": "await_waiting", "if_held": True},
            {"op": "unstall"}, {"op": "join"}, {"op": "clear"}]
        if rng.random() < 0.5:  # a prefetch instead: it skips the key too
            steps[4] = {"op": "prefetch", "keys": steps[4]["keys"]}
            if self.readers:  # its reads end (the held one is a get's)
                steps.insert(5, {"op": "drain"})
        for st in steps[:-1]:
            st["then"] = "held"
        for st in steps:
            self.add(st)

    def op_file_time(self, rng: random.Random) -> None:
        """With verify: a shard's mtime moved alone, or rewritten in place
        with its mtime put back, then gets (refused: changed)."""
        k = self.key()
        step: dict[str, Any] = ({"op": "touch", "key": k} if rng.random() < 0.5
                                else {"op": "rewrite", "key": k,
                                      "keep_mtime": True})
        self.add({**step, "then": "get"})
        self.add({"op": "get", "keys": [k, *self.keys(1)]})


#: Operation -> weight in a program (sums need not be 100).
_WEIGHTS: dict[str, int] = {
    "get": 16, "getmany": 8, "prefetch": 8, "drain": 2, "hold": 6,
    "give_back": 8, "hold_layer": 8, "pin": 4, "unpin": 4, "stream": 6,
    "stream_rest": 3, "reset": 2, "misuse": 5, "trace": 3, "fault": 8,
}


def generate(seed: int, target: Target, option_set: str = "plain",
             policy: str | None = None, length: int = 24,
             policies: list[str] | None = None) -> dict[str, Any]:
    """The program (a scenario dict) of ``seed`` on ``target`` with ``option_set``.

    ``policy`` is the cache's policy, else one drawn from ``policies``
    (default: the oracle's).  ``length`` operations are drawn; some make
    more than one step (a fault is armed, met and cleared).  Every step is
    followed by a check of :data:`COMPARED`.
    """
    from oracle.cache import POLICIES  # noqa: PLC0415

    if option_set not in OPTION_SETS:
        raise CannotRun(f"program option set {option_set!r} is not one of "
                        f"{', '.join(OPTION_SETS)}")
    rng = random.Random(f"{seed}/{target.ref}/{option_set}/{policy}")
    q = target.quantities
    opts: dict[str, Any] = {**OPTION_SETS[option_set], "faults": True}
    if policy is None:
        policy = rng.choice(sorted(policies or POLICIES))
    opts["policy"] = policy
    n_slots = rng.randint(q["k"] + 2, max(q["k"] + 2, min(3 * q["k"], q["N"])))
    opts["n_slots"] = n_slots
    gen = _Gen(rng, target, opts, n_slots)
    names = list(_WEIGHTS)
    weights = [_WEIGHTS[n] for n in names]
    for _ in range(length):
        getattr(gen, "op_" + rng.choices(names, weights)[0])()
    gen.op_stream_rest()
    tail = rng.random()
    if tail < 0.25:
        gen.op_truncate()
    elif tail < 0.35 and opts.get("verify"):
        gen.op_replace()
    elif tail < 0.55:
        gen.add({"op": "corrupt", "kind": rng.choice(CORRUPTIONS)})
    else:  # no tail: perhaps a read held under way, a file changed in place
        # (drawn from a generator of their own: the steps above stay as
        # they were before these existed)
        held = random.Random(f"{seed}/{target.ref}/{option_set}/{policy}/held")
        if held.random() < 0.5:
            gen.op_held_read(held)
        if opts.get("verify") and held.random() < 0.5:
            gen.op_file_time(held)
    return {
        "name": f"program-{target.ref}-{option_set}-{seed}",
        "title": f"generated program: seed {seed}, {target.ref}, "
                 f"{option_set}, {policy}",
        "container": target.ref, "cache": opts,
        "program": {"seed": seed, "option_set": option_set},
        **({"requires": ["contiguous == 1"]} if opts.get("direct") else {}),
        "steps": with_checks(gen.steps),
    }


def with_checks(ops: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The operation steps each followed by a derived check (numbered).

    A step with ``"then"`` is checked together with the one after it (a
    prefetch with its drain, a fault with the call that meets it, a stream
    opened with its end).
    """
    out: list[dict[str, Any]] = []
    for i, step in enumerate(ops):
        out.append(step)
        if step.get("then") and i + 1 < len(ops):
            continue
        out.append({"op": "check", "name": f"step {i + 1} {step['op']}",
                    "expect": ({"wrong_reads": 0} if step["op"] == "corrupt"
                               else {"wrong_reads": 0, "invariants": "clean"})})
    return out


def operations(program: dict[str, Any]) -> list[dict[str, Any]]:
    """The program's steps without its checks."""
    return [s for s in program["steps"] if s.get("op", "check") != "check"]


def _compared(steps: list[dict[str, Any]]) -> dict[str, list[str]]:
    """The derived keys of each check: :data:`COMPARED`, and what its op adds."""
    out: dict[str, list[str]] = {}
    before: dict[str, Any] = {}
    for s in steps:
        if s.get("op", "check") != "check":
            before = s
            continue
        keys = list(COMPARED)
        if before.get("op") == "trace":
            keys += ["trace", "trace_records"]
        out[s["name"]] = keys
    return out


class _Quiet(Report):
    """A report that prints nothing: a program's checks are summed up."""

    def add(self, scenario: str, backend: str, name: str, ok: bool,
            detail: str, expected: Any, actual: Any) -> None:
        """Record one check silently."""
        self.checks.append({"scenario": scenario, "backend": backend,
                            "check": name, "passed": ok, "detail": detail,
                            "expected": expected, "actual": actual})

    def skip(self, scenario: str, reason: str) -> None:
        """Record one skip silently."""
        self.skipped.append({"scenario": scenario, "reason": reason})

    def na(self, scenario: str, backend: str, name: str,
           missing: list[str]) -> None:
        """Record one N/A silently."""
        self.not_applicable.append({"scenario": scenario, "backend": backend,
                                    "check": name, "missing": list(missing)})


class Outcome:
    """One program's run: its checks, and the first that failed (or None)."""

    def __init__(self, report: Report, variant: dict[str, Any]) -> None:
        self.report = report
        self.variant = variant
        self.failure: dict[str, Any] | None = (report.failed or [None])[0]

    @property
    def failed(self) -> bool:
        """Whether a check failed."""
        return self.failure is not None

    def signature(self) -> tuple[str, str] | None:
        """How it failed: (the backend, its first wrong value).

        The first wrong value in the order of :data:`_FIRST` then
        :data:`COMPARED`, so a shrunk program that fails with more or fewer
        counters off still fails the same way.
        """
        if self.failure is None:
            return None
        who = str(self.failure["backend"])
        expected, actual = self.failure.get("expected"), self.failure.get("actual")
        if not isinstance(expected, dict) or not isinstance(actual, dict):
            return who, str(self.failure.get("detail", ""))
        bad = [k for k, v in expected.items() if actual.get(k) != v]
        order = [*_FIRST, *COMPARED]
        bad.sort(key=lambda k: order.index(k) if k in order else len(order))
        return who, bad[0] if bad else ""


#: The wrong values that say most of how a program failed, first.
_FIRST = ("wrong_reads", "invariants", "errors", "last_error", "held",
          "pinned", "resident")


#: ``backends(target, opts)``: the factories a program runs on, the judge
#: (``reference``) first; None is the oracle and the engine.
Backends = Callable[[Target, dict[str, Any]], list[Any]] | None


def run_one(engine: Any, work: Path, program: dict[str, Any],
            target: Target | None = None, timeout: float = 60.0,
            derived: bool = True, backends: Backends = None) -> Outcome:
    """Run one program (or pinned scenario, ``derived=False``) on both backends.

    The oracle runs first; with ``derived`` its values are the expected
    ones of every check's :data:`COMPARED` keys.  The scratch copies live
    under ``work/scratch``.  ``backends`` replaces the engine by another
    cache under test (gate/outside); the variant's ``judged`` names them.
    """
    if target is None:
        target = make_target(str(program["container"]), work)
    report = _Quiet()
    try:
        steps = compile_steps(program, target)
    except NotApplicable as e:
        report.skip(program["name"], str(e))
        return Outcome(report, {})
    opts = cache_options(program, target, dict(program["cache"]))
    variant: dict[str, Any] = {"suffix": "", "cache": {}, "expect": {}}
    if derived:
        variant["derive"] = _compared(steps)
    run_one.serial += 1  # type: ignore[attr-defined]
    makers = (backends(target, opts) if backends is not None else
              [factory(kind, engine, target, opts)
               for kind in ("oracle", "engine")])
    variant["judged"] = [m.name for m in makers if not m.reference]
    for make in makers:
        run = ScenarioRun(program, variant, steps, target,
                          work / "scratch" / f"p{run_one.serial}-{make.name}",  # type: ignore[attr-defined]
                          make, report, option_needs(opts))
        run_bounded(run, timeout)
    return Outcome(report, variant)


run_one.serial = 0  # type: ignore[attr-defined]


def pinned(program: dict[str, Any], outcome: Outcome) -> dict[str, Any]:
    """``program`` as a scenario file: the oracle's values written in as pins."""
    derived = outcome.variant.get("derived", {})
    sc = {k: v for k, v in program.items() if k != "program"}
    steps = []
    for s in program["steps"]:
        if s.get("op", "check") == "check":
            s = {**s, "expect": {**s["expect"], **derived.get(s["name"], {})}}
        steps.append(s)
    sc["steps"] = steps
    return sc


def _rebuild(program: dict[str, Any], ops: list[dict[str, Any]]
             ) -> dict[str, Any] | None:
    """The program with ``ops`` as its steps, or None if it would not run.

    Labels must be taken before they are given back or read on; a step
    joined (``"then"``) to a step no longer after it is checked alone; a
    stream's ``get_first`` keeps only keys the stream still names (as
    generated: a get of a key outside it is another program).
    """
    ops = [{k: v for k, v in s.items() if k != "then"}
           if s.get("then") and (i + 1 == len(ops) or ops[i + 1]["op"] != s["then"])
           else s for i, s in enumerate(ops)]
    ops = [{**s, "get_first": [k for k in s["get_first"] if k in s["keys"]]}
           if "get_first" in s and isinstance(s.get("keys"), list) else s
           for s in ops]
    taken: set[str] = set()
    for s in ops:
        op = s["op"]
        if op in ("hold", "hold_layer", "stream_open"):
            taken.add(str(s.get("label", "")))
        elif op in ("release", "unhold_many", "stream_next", "stream_rest"):
            if str(s.get("label", "")) not in taken:
                return None
            if op == "stream_rest":
                taken.discard(str(s.get("label", "")))
    return {**program, "steps": with_checks(ops)}


def _ddmin(items: list[Any], fails: Callable[[list[Any]], bool]) -> list[Any]:
    """Delta debugging (ddmin): a 1-minimal sublist of ``items`` that fails."""
    n = 2
    while len(items) >= 2:
        size = max(1, len(items) // n)
        chunks = [items[i:i + size] for i in range(0, len(items), size)]
        reduced = False
        for i in range(len(chunks)):
            rest = [x for j, c in enumerate(chunks) if j != i for x in c]
            if rest and fails(rest):
                items, n, reduced = rest, max(n - 1, 2), True
                break
        if not reduced:
            if n >= len(items):
                break
            n = min(len(items), 2 * n)
    return items


def shrink(engine: Any, work: Path, program: dict[str, Any],
           target: Target | None = None, budget_s: float = 120.0,
           log: Callable[[str], None] | None = None,
           backends: Backends = None) -> dict[str, Any]:
    """A minimal program that fails as ``program`` does (:meth:`Outcome.signature`).

    Delta debugging over the operation steps, then over the keys of each
    step that names several; stops improving after ``budget_s`` seconds.
    """
    if target is None:
        target = make_target(str(program["container"]), work)
    want = run_one(engine, work, program, target,
                   backends=backends).signature()
    if want is None:
        raise CannotRun(f"{program['name']}: passes; nothing to shrink")
    end = time.monotonic() + budget_s
    tries = 0

    def fails(ops: list[dict[str, Any]]) -> bool:
        nonlocal tries
        if time.monotonic() > end:
            return False
        cand = _rebuild(program, ops)
        if cand is None:
            return False
        tries += 1
        try:
            got = run_one(engine, work, cand, target,
                          backends=backends).signature()
        except CannotRun:
            return False
        return got == want

    ops = _ddmin(operations(program), fails)
    for i in range(len(ops)):
        keys = ops[i].get("keys")
        if isinstance(keys, list) and len(keys) > 1:
            def fails_keys(ks: list[Any], i: int = i) -> bool:
                return fails([*ops[:i], {**ops[i], "keys": ks}, *ops[i + 1:]])
            ops[i] = {**ops[i], "keys": _ddmin(list(keys), fails_keys)}
    if log is not None:
        log(f"shrunk {program['name']}: {len(operations(program))} -> "
            f"{len(ops)} steps in {tries} runs")
    out = _rebuild(program, ops)
    assert out is not None
    return {**out, "name": program["name"] + "-shrunk"}


def load_programs(path: Path = PROGRAMS_FILE) -> list[dict[str, Any]]:
    """The pinned programs: every (container, option set, seed) the file lists."""
    from gate.schema import check_programs  # noqa: PLC0415
    from oracle.bounded import UserFileError, load_json  # noqa: PLC0415

    try:
        data = load_json(path)
    except UserFileError as e:
        raise CannotRun(str(e)) from None
    except OSError as e:
        raise CannotRun(f"{path}: cannot read the programs file "
                        f"({e.strerror or e})") from None
    check_programs(data, path, tuple(OPTION_SETS))
    return [{"container": row["container"], "option_set": opt, "seed": seed,
             "length": row.get("length", data.get("length", 24))}
            for row in data["programs"] for opt in row["option_sets"]
            for seed in row["seeds"]]


def search_plan(n: int, seed: int) -> list[dict[str, Any]]:
    """``n`` more programs for a longer search: containers and options by seed."""
    import fixtures  # noqa: PLC0415

    rng = random.Random(seed)
    presets = sorted(p for p in fixtures.PRESETS if p.endswith("-mini"))
    return [{"container": rng.choice(presets),
             "option_set": rng.choice(sorted(OPTION_SETS)),
             "seed": rng.randrange(1 << 30), "length": rng.choice([24, 40])}
            for _ in range(n)]


def run_programs(engine: Any, work: Path, report: Report,
                 plan: list[dict[str, Any]], progress: bool = False,
                 shrink_failures: bool = True,
                 policies: list[str] | None = None,
                 first_failure: bool = False, backends: Backends = None,
                 restrict: Callable[[dict[str, Any], Target],
                                    dict[str, Any] | list[str]] | None = None
                 ) -> list[str]:
    """Run every program of ``plan``: one check line each in ``report``.

    The first failing program is shrunk (:func:`shrink`) and printed as a
    scenario file that can be pinned as it is (the others are listed: a
    broken engine often fails many).  Returns the programs' names.
    ``backends`` as :func:`run_one`; ``restrict(program, target)`` gives
    the program the cache under test can run (gate/outside/programs.py),
    or the capabilities it lacks for any of it: the program is then N/A.
    """
    targets: dict[str, Target] = {}
    names = []
    shrunk = False
    t0 = time.monotonic()
    for i, row in enumerate(plan):
        ref = row["container"]
        if ref not in targets:
            targets[ref] = make_target(ref, work)
        target = targets[ref]
        program = generate(row["seed"], target, row["option_set"],
                           length=row.get("length", 24), policies=policies)
        if restrict is not None:
            kept = restrict(program, target)
            if isinstance(kept, list):  # the capabilities it lacks
                names.append(program["name"])
                report.na(program["name"], "cache", program["name"], kept)
                continue
            program = kept
        out = run_one(engine, work, program, target, backends=backends)
        names.append(program["name"])
        n_checks = len(out.report.checks)
        if out.failed:
            f = out.failure
            assert f is not None
            report.add(program["name"], f["backend"], program["name"], False,
                       f"{f['check']}: {f['detail']}", f["expected"],
                       f["actual"])
            if shrink_failures and shrunk:
                print("  not shrunk: one failing program is shrunk a run")
            elif shrink_failures and WATCHDOG.is_stuck():
                print("  not shrunk: the engine is stuck (a run timed out)")
            elif shrink_failures:
                shrunk = True
                try:
                    small = shrink(engine, work, program, target, log=print,
                                   backends=backends)
                except CannotRun as e:  # it passed when run again
                    print(f"  not shrunk: {e} when run again (a failure "
                          "that does not repeat)")
                else:
                    again = run_one(engine, work, small, target,
                                    backends=backends)
                    print(f"  scenario of {small['name']} (pin it as "
                          f"gate/scenarios/{small['name']}.json):")
                    print(json.dumps(pinned(small, again), indent=1))
            if first_failure:
                break
        elif out.report.skipped:
            report.skip(program["name"], out.report.skipped[0]["reason"])
        else:
            report.add(program["name"], ", ".join(out.variant.get(
                "judged", ["engine"])), program["name"], True,
                       f"{n_checks} checks", None, None)
        if progress and ((i + 1) % 10 == 0 or i + 1 == len(plan)):
            print(f"  programs: {i + 1} of {len(plan)} run, "
                  f"{len(report.failed)} failed, "
                  f"{time.monotonic() - t0:.1f} s", flush=True)
    return names
