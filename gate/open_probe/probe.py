"""The engine's seams the probe drives: the allocation countdown and its outcomes."""

from __future__ import annotations

import gc
import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from xcache.gate.open_probe.files import (
    FUSED_TEMPLATE,
    LAYERS,
    MAX_N,
    N_EXPERTS,
    TEMPLATE,
    TENSORS,
    Files,
    expert_bytes,
)


class Probe:
    """The engine under test, its allocation seam and the failures found."""

    def __init__(self, engine: Any, files: Files) -> None:
        self.engine = engine
        self.files = files
        self.alloc = importlib.import_module("xcache.engine.alloc")
        self.sim = importlib.import_module("xcache.engine.sim")
        lib_mod = importlib.import_module("xcache.engine._lib")
        self.lib, self.ffi = lib_mod.lib(), lib_mod.ffi()
        self.failures: list[str] = []
        self.cases = 0

    def fail(self, what: str) -> None:
        """Record one failure."""
        self.failures.append(what)

    def live(self) -> int:
        """The engine's live allocations (after collecting garbage if asked)."""
        return self.alloc.live()

    def settled_live(self, base: int) -> int:
        """Allocations made since ``base`` still live, or 0.

        Garbage is collected before a leak is believed (an arena goes with
        the last view of it); fewer than ``base`` (an older object collected
        meanwhile) is no leak of this call.
        """
        d = self.live() - base
        if d > 0:
            gc.collect()
            d = self.live() - base
        return max(d, 0)

    def c_error(self) -> tuple[int, int, int, int, str]:
        """This thread's C error record: (code, offset, layer, expert, msg)."""
        e = self.lib.xc_last_error()
        return (int(e.code), int(e.offset), int(e.layer), int(e.expert),
                self.ffi.string(e.message).decode("utf-8", "replace"))


@dataclass
class Outcome:
    """One run of a countdown: the n armed, its result or error, refusals."""

    n: int
    result: Any = None
    error: Any = None
    fired: int = 0
    leaked: int = 0


def countdown(p: Probe, what: str, op: Callable[[], Any],
              close: Callable[[Any], None], nomem_ok: Callable[[str], bool],
              may_survive: bool = False) -> Outcome | None:
    """Refuse the n-th allocation of ``op`` for n = 1, 2, ... until none is met.

    Each refused run must raise the engine's ``nomem`` error with no offset,
    layer or expert and a message ``nomem_ok`` accepts, and leave the live
    count at its baseline (``close`` undoes a success first); a run that met
    a refusal must fail unless ``may_survive``.  Returns the first run that
    met no refusal (its result still open), or None after a failure.
    """
    err_t = p.engine.EngineError
    for n in range(1, MAX_N + 1):
        p.cases += 1
        base = p.live()
        f0 = p.alloc.stats().failures
        out = Outcome(n)
        p.alloc.fail_alloc(n)
        try:
            out.result = op()
        except err_t as e:
            out.error = e
        finally:
            p.alloc.disarm()
        out.fired = p.alloc.stats().failures - f0
        if out.fired == 0:
            if out.error is not None:
                p.fail(f"{what}: fails without a refused allocation "
                       f"(n={n}): {out.error}")
                return None
            return out
        if out.error is None:
            ok = may_survive
            if not ok:
                p.fail(f"{what}: allocation {n} was refused yet the open "
                       "succeeded")
            close(out.result)
            out.result = None
            if not ok:
                return None
        else:
            e = out.error
            fields = (e.kind, e.offset, e.layer, e.expert)
            if fields != ("nomem", None, None, None):
                p.fail(f"{what}: allocation {n} refused: error (kind, offset, "
                       f"layer, expert) {fields}, not ('nomem', None, None, "
                       f"None): {e}")
                return None
            if not nomem_ok(str(e)):
                p.fail(f"{what}: allocation {n} refused: message {str(e)!r} "
                       "is none of the documented no-memory forms")
                return None
            out.error = None
        del out.result
        leaked = p.settled_live(base)
        if leaked:
            p.fail(f"{what}: allocation {n} refused: {leaked} allocation(s) "
                   "left behind")
            return None
    p.fail(f"{what}: still meets a refused allocation at n={MAX_N}")
    return None


def check_cache(p: Probe, what: str, cache: Any) -> None:
    """Every expert byte-exact (gets and a hold_layer), then check()."""
    for layer in LAYERS:
        for e in range(N_EXPERTS):
            x = cache.get(layer, e)
            views = x.tensors
            got = b"".join(views[t].tobytes() for t, _, _ in TENSORS)
            del views
            x.release()
            if got != expert_bytes(layer, e):
                p.fail(f"{what}: layer {layer} expert {e} reads other bytes")
                return
    cache.check()


def open_cache(p: Probe, cont: Any, fused: bool, **opts: Any) -> Any:
    """An ``ExpertCache`` of the probe's layout (fused or per expert) over ``cont``."""
    return p.engine.ExpertCache(
        cont, expert_template=FUSED_TEMPLATE if fused else TEMPLATE,
        tensors=[t for t, _, _ in TENSORS], layers=list(LAYERS),
        n_experts=N_EXPERTS, **opts)


def close_if_open(x: Any) -> None:
    """Close ``x`` unless it is None (an open that was refused)."""
    if x is not None:
        x.close()
