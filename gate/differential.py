"""The gate's differential checks beside the scenarios: readers and the simulator.

Four checks every default replay runs after the scenarios and programs,
each cheap (about three seconds together):

- :mod:`gate.reader_diff`: a few hundred seeded corruptions of headers and
  indexes, the engine's reader against the oracle's, field by field;
- :mod:`gate.sim_check`: the C simulator against the oracle's policies on
  a shipped trace, exact counts;
- :mod:`gate.open_probe`: opening things and the C face -- refused
  allocations during every open, leaks at close, policy parameters and
  budgets, layouts only a C caller gives, whole messages;
- :mod:`gate.tensor_reads`: every tensor of the home presets read through
  ``engine.Container`` plain, with verify and with O_DIRECT, byte for byte
  the oracle's.

Each runs in a worker thread under the watchdog's time
(:data:`gate.scenarios.WATCHDOG`): an engine that loops forever in its
parser or simulator fails the check at the timeout instead of hanging
the gate.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from xcache.gate import open_probe, reader_diff, sim_check, tensor_reads
from xcache.gate.report import Discard
from xcache.gate.scenarios import WATCHDOG

#: Seconds a differential check may take when the watchdog sets no cap.
DEFAULT_TIMEOUT_S = 120.0


def _bounded(name: str, report: Any, run: Callable[[Any], list[str]]
             ) -> list[str]:
    """Run ``run(report)`` in a daemon thread; a failed check if it is stuck."""
    timeout = WATCHDOG.cap or DEFAULT_TIMEOUT_S
    out: list[list[str]] = []
    raised: list[BaseException] = []
    sink: list[Any] = [report]

    class Late(Discard):
        """The report a stuck check writes to once it was given up on."""

    def target() -> None:
        try:
            out.append(run(_Forward(sink)))
        except BaseException as e:  # noqa: BLE001 - handed to the caller
            raised.append(e)

    worker = threading.Thread(target=target, daemon=True, name=f"check {name}")
    worker.start()
    worker.join(timeout)
    if worker.is_alive():
        sink[0] = Late()
        report.add(name, "engine", f"{name} ran to completion", False,
                   f"timed out after {timeout:g} s", "completion",
                   f"timed out after {timeout:g} s")
        return [name]
    if raised:
        if isinstance(raised[0], Exception):  # the engine raised: a failure
            report.add(name, "engine", name, False,
                       f"raised {type(raised[0]).__name__}: {raised[0]}",
                       "no exception", type(raised[0]).__name__)
            return [name]
        raise raised[0]
    return out[0]


class _Forward:
    """A report that forwards to whichever report ``sink[0]`` is now."""

    def __init__(self, sink: list[Any]) -> None:
        self._sink = sink

    def add(self, *args: Any) -> None:
        """Forward one check."""
        self._sink[0].add(*args)


def run_all(engine: Any, work: Path, report: Any) -> list[str]:
    """Run the reader differential, the simulator check, the open probe and the
    tensor reads; the check names."""
    names = _bounded("reader-diff", report,
                     lambda r: reader_diff.run_checks(engine, work, r))
    names += _bounded("sim-counts", report,
                      lambda r: sim_check.run_checks(engine, r))
    names += _bounded("open-probe", report,
                      lambda r: open_probe.run_checks(engine, work, r))
    names += _bounded("tensor-reads", report,
                      lambda r: tensor_reads.run_checks(engine, work, r))
    return names
