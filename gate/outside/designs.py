"""The designs an outside cache may declare, and how the gate judges each.

Real expert caches differ from this project's engine in ways that are
designs, not defects: holds given back as a whole set, a prefetch that
returns nothing, a batch that takes one layer or reads in disk order, pins
that are a flag, a sampled policy, a failed read that stays in its slot
until the next get reports it.  The manifest's ``[design]`` table
(:func:`check_design`) declares them, and each is judged in one of two
ways (docs/OUTSIDE_CACHES.md "Designs"):

- **played**: the judge plays the same design.  The calls of a scenario
  reach both the oracle and the cache through one :class:`DesignView`, so
  a batch split by layer or sorted by offset, a prefetch of keys inside
  the layout only, holds given back when the last of a set is, are made
  alike on both sides and the oracle's values stay exact.  Flag pins are
  played on the judge's side only (its pins nest), and so are sticky
  failures (a failed key's next get reports the failure, unread) while the
  cache cannot have evicted a failed slot.
- **judged by what must hold**: a design whose choices the oracle cannot
  know (a sampled victim, a failed slot kept, a batch that may evict what
  it names) makes the cache lack ``exact:victims``: every value that rests
  on which key was evicted (residents, hits, misses, bytes read, what was
  served) is named N/A in each check, failures are compared by misuse
  alone, and what holds for any victim is still judged exactly -- bytes
  served, holds, the cache's own check, the counters' relations and held
  bytes left unchanged (``relations``), and, for a sampled policy, hits
  within the declared bound of the exact policy on a real trace.  A check
  before which the judge evicted nothing (and, for sticky failures, the
  cache can have evicted no failed slot) rests on no victim: there every
  value is judged exactly (``victim_free``, gate/scenario_run.py).

Any declared design makes every scenario derived: the judge's values are
the expected ones, never the values pinned for this project's engine.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

from xcache.gate import CannotRun
from xcache.gate.backend_api import Backend, BackendFactory, Key

#: each design field, its default first, and what each value means
FIELDS: dict[str, tuple[str, ...]] = {
    "holds": ("each", "whole-set"),
    "failures": ("freed", "sticky"),
    "prefetch": ("counted", "silent"),
    "batch": ("protects", "unprotected"),
    "batch_order": ("given", "offset"),
    "batch_layers": ("any", "one"),
    "policy": ("exact", "sampled"),
    "io": ("own", "callback"),
    "reads": ("exact", "aligned"),
    "batch_room": ("partial", "whole"),
    "refused_gets": ("uncounted", "counted"),
    # a prefetched load not yet used when the counters reset: a plain hit
    # in the new window (docs/CACHE.md), or still a first use there
    "first_uses": ("windowed", "kept"),
}

#: the hit bound a sampled policy is held to when the manifest names none:
#: |hits - the exact policy's hits| at most this share of the requests
HIT_BOUND = 0.05


@dataclasses.dataclass(frozen=True)
class Design:
    """One cache's declared design (every field at its default: none)."""

    holds: str = "each"
    failures: str = "freed"
    prefetch: str = "counted"
    batch: str = "protects"
    batch_order: str = "given"
    batch_layers: str = "any"
    policy: str = "exact"
    io: str = "own"
    reads: str = "exact"
    batch_room: str = "partial"
    refused_gets: str = "uncounted"
    first_uses: str = "windowed"
    hit_bound: float = HIT_BOUND

    def inexact(self) -> list[str]:
        """Why the victims are not the oracle's to know (empty: they are)."""
        why = []
        if self.policy == "sampled":
            why.append("policy = sampled")
        if self.failures == "sticky":
            why.append("failures = sticky")
        if self.batch == "unprotected":
            why.append("batch = unprotected")
        return why

    def inexact_names(self) -> frozenset[str]:
        """The ``exact:`` capabilities the cache lacks by this design."""
        out = {"victims"} if self.inexact() else set()
        if self.reads == "aligned":
            out.add("io_bytes")
        return frozenset(out)

    def declared(self) -> dict[str, str]:
        """The fields that differ from the default, by name."""
        return {f: getattr(self, f) for f, values in FIELDS.items()
                if getattr(self, f) != values[0]}


def check_design(table: Any, path: Path) -> Design:
    """The ``[design]`` table of ``path`` as a :class:`Design` (``CannotRun``
    naming the field when it is not one)."""
    if not isinstance(table, dict):
        raise CannotRun(f"{path}: design must be a table ([design])")
    out: dict[str, Any] = {}
    for key, v in table.items():
        if key == "hit_bound":
            if isinstance(v, bool) or not isinstance(v, (int, float)) or \
                    not 0 <= v <= 1:
                raise CannotRun(f"{path}: design.hit_bound must be a number "
                                f"from 0 to 1, not {v!r}")
            out[key] = float(v)
            continue
        if key not in FIELDS:
            raise CannotRun(f"{path}: design.{key} is no design field "
                            f"(fields: {', '.join([*FIELDS, 'hit_bound'])})")
        if v not in FIELDS[key]:
            raise CannotRun(f"{path}: design.{key} must be one of "
                            f"{', '.join(repr(x) for x in FIELDS[key])}, "
                            f"not {v!r}")
        out[key] = v
    if "hit_bound" in out and out.get("policy") != "sampled":
        raise CannotRun(f"{path}: design.hit_bound bounds a sampled policy: "
                        "declare policy = \"sampled\" with it")
    return Design(**out)


def alters(design: Design, flag_pins: bool) -> Any:
    """``altered(scenario)``: whether a scenario has a step whose call the
    design (or flag pins) makes otherwise than this project's engine, so
    that the values pinned for the engine do not apply and the judge's are
    taken (its variants derived at home too).  None when nothing is."""
    ops: set[str] = set()
    if design.holds == "whole-set":
        ops |= {"hold", "release"}
    if design.prefetch == "silent":
        ops.add("prefetch")
    if design.batch_layers == "one" or design.batch_order == "offset":
        ops |= {"getmany", "prefetch"}
    if design.batch_room == "whole":
        ops.add("getmany")
    if flag_pins:
        ops |= {"pin", "unpin"}
    if design.failures == "sticky":  # a failed read is reported again
        ops |= {"inject", "truncate", "touch", "rewrite", "replace"}
    if design.first_uses == "kept":
        ops.add("reset")
    # a get refused for want of a slot is a request and a miss there: every
    # scenario that meets one (its checks name the refusal, all_pinned)
    refusals = design.refused_gets == "counted"
    if not ops and not refusals:
        return None

    def altered(sc: dict[str, Any]) -> bool:
        steps = sc.get("steps", [])
        return any(st.get("op") in ops for st in steps) or refusals and any(
            "all_pinned" in st.get("expect", {}).get("errors", ())
            for st in steps)
    return altered


class DesignMisuse(Exception):
    """A release of a reference the view has no hold of (misuse)."""


class DesignFull(Exception):
    """A whole-room batch that cannot place every key (all_pinned)."""


class DesignView(Backend):
    """A backend seen through a declared design (one view per side).

    The cache's side and the judge's side each get one; every played
    design is applied here alike to both, so that the oracle makes the
    same calls the cache is given.  ``judge``: this view is the oracle's
    (flag pins are played on it).  ``order``: the sort key of a key by
    where its payload starts on disk (``batch_order = offset``);
    ``inside``: whether a key is in the layout.
    """

    def __init__(self, inner: Backend, design: Design, judge: bool,
                 flag_pins: bool, order: Callable[[Key], Any],
                 inside: Callable[[Key], bool],
                 kind_of: Callable[[BaseException], str] = Backend.kind_of
                 ) -> None:
        self.inner, self.design, self.judge = inner, design, judge
        self.kind_of_inner = kind_of
        #: the judge's gets refused for want of a slot in this counter
        #: window (``refused_gets = counted``)
        self.refused = 0
        self.flag_pins = flag_pins and judge
        self.order, self.inside = order, inside
        self.capabilities = inner.capabilities
        #: whole-set holds: references not given back, and those given back
        #: whose set is still open
        self.open_refs: set[Any] = set()
        self.given: list[Any] = []
        self.pinned: set[Key] = set()
        #: sticky failures played on the judge: each key whose read failed
        #: and the failure its next get reports; ``sticky_certain`` stays
        #: True while the cache can have had to evict none of them (every
        #: miss found a slot beside the residents and the failed slots)
        self.sticky: dict[Key, BaseException] = {}
        self.sticky_certain = True

    def _played(self) -> bool:
        return self.judge and self.design.failures == "sticky"

    def _sticky(self, call: Callable[[int, int], Any], layer: int,
                expert: int) -> Any:
        """A demand access on the judge of a sticky-failure cache: a key
        whose read failed reports that failure again, unread (a request and
        a miss), and is then free; a read that fails now leaves its key so."""
        if not self._played() or not self.sticky_certain:
            return call(layer, expert)
        key = (layer, expert)
        if key in self.sticky:
            failure = self.sticky.pop(key)
            self.inner.refused_get(layer, expert)
            raise failure
        if self.sticky:
            v = self.inner.values()
            resident = {tuple(k) for k in v.get("resident", [])}
            if key not in resident and \
                    len(resident) + len(self.sticky) >= int(v["n_slots"]):
                self._uncertain()  # the cache may evict a failed slot
        try:
            return call(layer, expert)
        except Exception as e:
            if self.kind_of_inner(e) in ("io", "short_read", "changed"):
                self.sticky[key] = e
            raise

    def _batch_failures(self, call: Callable[[], Any]) -> Any:
        """A batch or prefetch on the judge of a sticky-failure cache: a
        load it fails leaves a failed slot the judge does not play, so the
        sticky failures are no longer certain."""
        if not self._played():
            return call()
        before = self.inner.values().get("load_failures", 0)
        if self.sticky:  # what a batch makes of a failed slot is the cache's
            self._uncertain()
        try:
            return call()
        finally:
            if self.inner.values().get("load_failures", 0) != before:
                self._uncertain()

    def _uncertain(self) -> None:
        """The cache may have dropped a failed slot: from now on the judge
        plays no sticky failure (a failed key is read again, as the engine
        does), and no value rests on one being kept (``victim_free``)."""
        self.sticky_certain = False
        self.sticky.clear()

    def _counted(self, call: Callable[..., Any], *args: Any) -> Any:
        """``call(*args)``; on the judge of a cache counting refused gets, a
        refusal for want of a slot is counted (:meth:`values`)."""
        try:
            return call(*args)
        except Exception as e:
            if self.judge and self.design.refused_gets == "counted" and \
                    self.kind_of_inner(e) == "all_pinned":
                self.refused += 1
            raise

    # -- holds ---------------------------------------------------------------
    def hold(self, layer: int, expert: int) -> tuple[Any, bytes]:
        """The inner hold, its reference kept for the set."""
        ref, data = self._sticky(
            lambda lay, e: self._counted(self.inner.hold, lay, e), layer, expert)
        if self.design.holds == "whole-set":
            self.open_refs.add(ref)
        return ref, data

    def release(self, ref: Any) -> None:
        """One release; with whole-set holds the set is given back with its last."""
        if self.design.holds != "whole-set":
            self.inner.release(ref)
            return
        if ref not in self.open_refs:
            raise DesignMisuse(f"release of a reference no hold of the set "
                               f"has ({ref!r})")
        self.open_refs.discard(ref)
        self.given.append(ref)
        if not self.open_refs:
            given, self.given = self.given, []
            release_set = getattr(self.inner, "release_set", None)
            if release_set is not None:
                release_set(given)
            else:
                for r in given:
                    self.inner.release(r)

    def get(self, layer: int, expert: int) -> bytes:
        """A demand access: with whole-set holds a hold given back at once."""
        if self.design.holds != "whole-set":
            return self._sticky(
                lambda lay, e: self._counted(self.inner.get, lay, e),
                layer, expert)
        ref, data = self.hold(layer, expert)
        self.release(ref)
        return data

    # -- batches -------------------------------------------------------------
    def _groups(self, keys: list[Key]) -> list[list[Key]]:
        """The calls a batch is made as: one per layer (``batch_layers =
        one``; a key outside the layout alone first, to be refused), each
        in disk order (``batch_order = offset``)."""
        groups = [list(keys)]
        if self.design.batch_layers == "one":
            bad = [k for k in keys if not self.inside(k)]
            if bad:
                return [[bad[0]]]
            by: dict[int, list[Key]] = {}
            for k in keys:
                by.setdefault(k[0], []).append(k)
            groups = list(by.values())
        if self.design.batch_order == "offset":
            groups = [sorted(g, key=lambda k: (not self.inside(k),
                                               self.order(k) if self.inside(k)
                                               else 0)) for g in groups]
        return groups

    def getmany(self, keys: list[Key]) -> int:
        """The batch as the design makes it: the published counts summed.

        ``batch_room = whole``: on the judge, a batch (each call of it) that
        cannot place every key it names refuses before it reads anything,
        as ``all_pinned`` (:meth:`_room`).
        """
        total = 0
        for g in self._groups(keys):
            if self.judge and self.design.batch_room == "whole":
                self._room(g)
            total += self._batch_failures(lambda g=g: self.inner.getmany(g))
        return total

    def _room(self, keys: list[Key]) -> None:
        """Raise :class:`DesignFull` unless the slots can take every key of
        a batch: free ones, and residents it does not name that are neither
        held nor pinned."""
        if not all(self.inside(k) for k in keys):
            return  # refused as misuse by the call itself
        v = self.inner.values()
        resident = {tuple(k) for k in v.get("resident", [])}
        kept = {tuple(k[:2]) for k in [*v.get("holding", []),
                                       *v.get("pinned", [])]}
        named = set(keys)
        needed = len(named - resident)
        free = int(v["n_slots"]) - len(resident)
        evictable = len(resident - named - kept)
        if needed > free + evictable:
            raise DesignFull(f"a batch of {len(named)} keys needs {needed} "
                             f"slots; {free} free and {evictable} evictable")

    def prefetch(self, keys: list[Key]) -> int:
        """Read-ahead; a silent one takes keys inside the layout only and
        returns nothing (0), its failures unreported."""
        if self.design.prefetch != "silent":
            return sum(self._batch_failures(lambda g=g: self.inner.prefetch(g))
                       for g in self._groups(keys))
        keys = [k for k in keys if self.inside(k)]
        for g in self._groups(keys):
            if not g:
                continue
            if self.judge:
                try:
                    self._batch_failures(lambda g=g: self.inner.prefetch(g))
                except Exception:  # noqa: BLE001,S110 - a silent prefetch
                    pass  # reports nothing; what it left is judged later
            else:
                self.inner.prefetch(g)
        return 0

    # -- pins ----------------------------------------------------------------
    def pin(self, layer: int, expert: int) -> None:
        """A pin; on the judge of a flag-pin cache, a second pin is none."""
        if self.flag_pins and (layer, expert) in self.pinned:
            return
        self.inner.pin(layer, expert)
        if self.flag_pins:
            self.pinned.add((layer, expert))

    def unpin(self, layer: int, expert: int) -> None:
        """An unpin; on the judge of a flag-pin cache it clears the flag, and
        clearing the flag of a resident expert not pinned changes nothing."""
        key = (layer, expert)
        if self.flag_pins and key not in self.pinned and \
                [layer, expert] in self.inner.values().get("resident", []):
            return
        self.inner.unpin(layer, expert)
        self.pinned.discard(key)

    # -- the rest as the inner backend has it ---------------------------------
    def values(self) -> dict[str, Any]:
        """The inner backend's values; on the judge of a cache counting
        refused gets, each one a request and a miss."""
        v = self.inner.values()
        if self.refused:
            for k in ("requests", "misses"):
                if k in v:
                    v[k] += self.refused
            if "hit_rate" in v and v.get("requests"):
                v["hit_rate"] = v["hits"] / v["requests"]
        return v

    def victim_free(self) -> bool:
        """Whether no value yet rests on a victim (gate/scenario_run.py):
        the inner backend evicted nothing, and no sticky failure played is
        in doubt."""
        inner = getattr(self.inner, "victim_free", None)
        return bool(inner is not None and inner()) and (
            not self._played() or self.sticky_certain)

    def reset(self) -> None:
        """The inner reset: a new counter window (refused gets too); on the
        judge of a cache whose first uses outlive a window
        (``first_uses = kept``), the unused prefetch marks are kept."""
        if self.judge and self.design.first_uses == "kept":
            self.inner.reset(keep_marks=True)
        else:
            self.inner.reset()
        self.refused = 0

    def close(self) -> None:
        """Close the inner backend."""
        self.inner.close()


def _delegate(name: str) -> Callable[..., Any]:
    def call(self: DesignView, *args: Any, **kw: Any) -> Any:
        return getattr(self.inner, name)(*args, **kw)
    call.__name__ = name
    call.__doc__ = f"The inner backend's {name}."
    return call


for _name in ("prefetch_speculative", "hold_layer", "unhold_many", "drain",
              "stream_open", "copy_ref", "release_copy", "start_get",
              "waiting_get", "await_reads", "start_call", "unstall",
              "reads_held", "await_waiting", "wait_hits", "trace_records",
              "trace_file", "set_step",
              # the Python face (op:lifetime) is the engine's own and no
              # design plays it: the judge runs it as it is, and a cache
              # lacking it is N/A there
              "face", "container_has", "container_read",
              "break_check", "inject", "inject_alloc", "clear"):
    setattr(DesignView, _name, _delegate(_name))


def designed(make: BackendFactory, design: Design, target: Any, judge: bool,
             flag_pins: bool = False) -> BackendFactory:
    """``make`` with every backend it opens seen through ``design``
    (``judge``: the oracle's factory; ``flag_pins``: the cache's pins are
    a flag, which the judge then plays)."""
    layers = set(target.layout["layers"])
    n_experts = int(target.layout["n_experts"])

    def inside(k: Key) -> bool:
        return k[0] in layers and 0 <= k[1] < n_experts

    def order(k: Key) -> Any:
        first = target.pieces(*k)[0]
        return (Path(first.shard).name, first.offset)

    flag = judge and flag_pins
    inner_kind = make.kind_of

    def kind_of(exc: BaseException) -> str:
        if isinstance(exc, DesignMisuse):
            return "misuse"
        if isinstance(exc, DesignFull):
            return "all_pinned"
        return inner_kind(exc)

    opener = make.open
    return dataclasses.replace(
        make, kind_of=kind_of,
        open=lambda folder: DesignView(opener(folder), design, judge, flag,
                                       order, inside, inner_kind))
