"""Countdown fault loops, the SQLite way (STYLE §10, DESIGN §6).

:func:`countdown` runs an operation with a fault armed at N = 1, 2, 3, ...
until one run completes without meeting the fault; after every run it checks
that the run ended in success or a documented error, and hands the run to a
``check`` callback that asserts the state is sound.  :class:`K3Harness` is
the state check for the expert cache over a k3-mini container: ``check()``
clean, no INFLIGHT slot, nothing partial published (every READY expert
byte-exact against ``fixtures.expected_bytes``), earlier residents intact,
counters equal to the oracle model fed the same failures, and descriptors
and engine allocations back to their baseline once everything is closed.
"""

from __future__ import annotations

import gc
import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from xcache import engine, fixtures
from xcache.engine import alloc
from xcache.faults.io import Fault, IOFaults
from xcache.oracle.cache import CacheModel
from xcache.oracle.cache_types import COUNTERS

Key = tuple[int, int]


@dataclass
class Run:
    """One run of a countdown: the N armed, what the op did, and the fault's count."""

    n: int
    result: Any = None
    error: BaseException | None = None
    fired: int = 0


def countdown(op: Callable[[], Any], arm: Callable[[int], None],
              disarm: Callable[[], int], check: Callable[[Run], None],
              max_n: int, *,
              allowed: tuple[type[BaseException], ...] = ()) -> list[Run]:
    """Run ``op`` with the fault armed at N = 1, 2, ... until it no longer meets it.

    ``arm(n)`` arms the fault at the nth event from now; ``disarm()`` disarms
    it and returns how many events met it.  Each run must return or raise
    one of ``allowed`` (anything else propagates); ``check(run)`` asserts the
    state after it.  Stops after the first run whose fault never fired and
    returns every run; failing to get there within ``max_n`` is an
    AssertionError.
    """
    runs: list[Run] = []
    for n in range(1, max_n + 1):
        run = Run(n)
        arm(n)
        try:
            run.result = op()
        except allowed as exc:  # the documented errors; others propagate
            run.error = exc
        finally:
            run.fired = disarm()
        check(run)
        runs.append(run)
        if run.fired == 0:
            assert run.error is None, (
                f"N={n}: the fault never fired yet the op failed: {run.error!r}")
            return runs
    raise AssertionError(f"the operation still met the fault at N={max_n}")


# -- arming ------------------------------------------------------------------

def io_hooks(faults: IOFaults, kind: str, *, persistent: bool = False,
             arg: int = 0, path_filter: str = ""
             ) -> tuple[Callable[[int], None], Callable[[], int]]:
    """(arm, disarm) for an I/O fault of ``kind`` at the nth matching read."""
    def arm(n: int) -> None:
        faults.arm(Fault(kind, nth=n, persistent=persistent, arg=arg,
                         path_filter=path_filter))

    def disarm() -> int:
        fired = faults.fired
        faults.disarm()
        return fired

    return arm, disarm


def alloc_hooks(*, persistent: bool = False
                ) -> tuple[Callable[[int], None], Callable[[], int]]:
    """(arm, disarm) for the engine's allocation countdown."""
    start = [0]

    def arm(n: int) -> None:
        start[0] = alloc.stats().failures
        alloc.fail_alloc(n, persistent)

    def disarm() -> int:
        alloc.disarm()
        return alloc.stats().failures - start[0]

    return arm, disarm


def thread_hooks(*, persistent: bool = False
                 ) -> tuple[Callable[[int], None], Callable[[], int]]:
    """(arm, disarm) for the engine's thread-start countdown."""
    start = [0]

    def arm(n: int) -> None:
        start[0] = alloc.thread_stats().failures
        alloc.fail_thread_start(n, persistent)

    def disarm() -> int:
        alloc.disarm_thread_start()
        return alloc.thread_stats().failures - start[0]

    return arm, disarm


# -- baselines ---------------------------------------------------------------

def open_fds() -> int:
    """Descriptors this process has open now."""
    return len(os.listdir("/proc/self/fd"))


def n_threads() -> int:
    """Threads of this process now (the cache's C readers included)."""
    return len(os.listdir("/proc/self/task"))


@dataclass(frozen=True)
class Baseline:
    """Open descriptors, live engine allocations and threads at one moment."""

    fds: int
    live: int
    threads: int

    @staticmethod
    def now() -> Baseline:
        """The current counts, after collecting garbage.

        An engine object that is unreachable but not yet collected (from an
        earlier test, say) still holds its descriptors, allocations and
        reader threads; collecting first makes two snapshots comparable.
        """
        gc.collect()
        return Baseline(open_fds(), alloc.live(), n_threads())

    def assert_back(self, what: str) -> None:
        """Assert descriptors and engine allocations are back to this baseline."""
        now = Baseline.now()
        assert now == self, f"{what}: {now} after, {self} before"


def primed_baseline(faults: IOFaults | None, path: Path) -> Baseline:
    """The baseline after one open and close of ``path`` through ``faults``.

    The injector grows its handle table on first use and keeps it until it
    is closed; priming makes that one allocation part of the baseline.
    """
    engine.Container(str(path), io=faults).close()
    return Baseline.now()


# -- the k3-mini cache harness ----------------------------------------------

#: k3-mini's spec (docs/DESIGN.md §3): the layout the harness opens.
K3 = fixtures.preset("k3-mini")


def k3_expected(expert: int, layer: int = 0) -> bytes:
    """k3-mini expert (layer, expert)'s whole payload, from the generator."""
    return b"".join(fixtures.expected_bytes("k3-mini", name)
                    for name in K3.expert_names(layer, expert))


@dataclass
class K3Harness:
    """A fresh container + cache + oracle model over one k3-mini shard.

    ``warm`` keys are loaded (and released) through both before the fault is
    armed; they are the earlier residents that every run must leave intact.
    """

    shard: Path
    faults: IOFaults | None = None
    batch_threads: int = 1
    n_slots: int = 8
    warm: Sequence[Key] = ((0, 0), (0, 1))
    container: Any = field(init=False, default=None)
    cache: Any = field(init=False, default=None)
    model: Any = field(init=False, default=None)

    def open(self) -> K3Harness:
        """Open container, cache and model and warm both."""
        self.container = engine.Container(str(self.shard), io=self.faults)
        self.cache = engine.ExpertCache(self.container, n_slots=self.n_slots,
                                        top_k=K3.top_k, **K3.cache_layout(),
                                        batch_threads=self.batch_threads)
        self.model = CacheModel(K3.layers, K3.n_experts, K3.top_k,
                                expert_bytes=K3.expert_nbytes, n_slots=self.n_slots)
        for key in self.warm:
            self.cache.get(*key).release()
            self.model.release(self.model.get(*key))
        return self

    def close(self) -> None:
        """Close cache and container."""
        if self.cache is not None:
            self.cache.close()
        if self.container is not None:
            self.container.close()
        self.cache = self.container = None

    def to_load(self, keys: Iterable[Key]) -> list[Key]:
        """The keys a getmany of ``keys`` will read, in reservation order."""
        resident = self.model.resident()
        out: list[Key] = []
        for k in keys:
            if k not in resident and k not in out:
                out.append(k)
        return out

    def assert_sound(self, failed: dict[Key, str] | None = None) -> None:
        """Every structural and content promise after a run (see the module doc)."""
        cache, model = self.cache, self.model
        cache.check()
        slots = cache.slots()
        assert all(s["state"] != "inflight" for s in slots), slots
        assert all(s["holds"] == 0 and s["pins"] == 0 for s in slots), slots
        for key in failed or {}:
            assert key not in cache.resident(), f"{key} failed but is resident"
        assert cache.resident() == model.resident()
        got = cache.stats()
        want = model.stats()
        assert {k: got[k] for k in COUNTERS} == {k: want[k] for k in COUNTERS}
        assert got["prefetch_unused_resident"] == want["prefetch_unused_resident"]
        for key in self.warm:
            assert key in cache.resident(), f"earlier resident {key} was lost"
        # Content last: reading a resident takes a (counted) hit on both sides.
        for key in sorted(cache.resident()):
            with cache.get(*key) as e:
                assert e.data.tobytes() == k3_expected(key[1]), (
                    f"{key} published with wrong bytes")
            model.release(model.get(*key))
        assert cache.stats()["hits"] == model.stats()["hits"]
        cache.check()
