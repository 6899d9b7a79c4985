"""Each lab's example command on the shipped trace and how long it took here.

One table, read by each lab's ``--help`` (its epilog), by the front door's
list of commands (each lab's ``SUMMARY``) and checked against README.md by
``tests/lab/test_runtimes.py`` (README.md gives the same commands and
times), so a new user knows the command to try
first and whether to wait seconds or minutes.  The times are wall-clock
seconds of the command as written, the median of three runs after one
warm-up, on :data:`MACHINE` (with other jobs loading it to 4-5, the
prefetch and time labs took about twice as long: 10 and 15 s).
"""

from __future__ import annotations

from dataclasses import dataclass

#: Where and when the times of :data:`RUNTIMES` were measured.
MACHINE = "an otherwise idle 2-core Intel Xeon VM, 23 GB, 2026-12-03"
#: The shipped trace the examples run on, by its name (any folder; xcache-data).
TRACE = "olmoe_299"


@dataclass(frozen=True)
class Runtime:
    """One lab's example command and its measured wall time."""

    command: str
    seconds: float
    what: str

    def text(self) -> str:
        """``COMMAND takes about N s on MACHINE (what it ran).``"""
        return (f"{self.command} takes about {self.seconds:g} s on {MACHINE} "
                f"({self.what}).")


#: lab name -> its example on the shipped trace.
RUNTIMES: dict[str, Runtime] = {
    "lab": Runtime(f"replay.py lab {TRACE} /tmp/lab --fractions 0.1,0.25,0.5", 0.6,
                   "7 policies and Belady at 3 sizes"),
    "predict": Runtime(f"replay.py predict {TRACE} /tmp/predict --split 0.5 "
                       "--budget 4", 6.0,
                       "5 predictors, k = 1..8, and the --budget what-if"),
    "time": Runtime(f"replay.py time {TRACE} /tmp/time", 5.5,
                    "the default sweep: 26 configurations"),
}


def epilog(lab: str, rest: str) -> str:
    """A lab's ``--help`` epilog: its example and measured time, then ``rest``."""
    return f"Try it on the shipped trace: {RUNTIMES[lab].text()}  {rest}"


def about(lab: str) -> str:
    """``about N s on the shipped trace``, for a lab's one-line summary."""
    return f"about {RUNTIMES[lab].seconds:g} s on {TRACE}"
