"""The gate's side of the child process an outside cache runs in.

:class:`Host` starts ``python -m xcache.gate.outside.worker`` (the cache's
built module loaded there, never in the gate) and sends it one call at a
time over a pipe.  Whatever the cache does in that process -- ``exit``,
``abort``, a segfault, a deadlock, an allocation without end -- ends
that process only: the call raises :class:`CacheCrashed` (the exit status
or signal, and the last lines the process wrote) or :class:`CacheHung`
(the process is killed), the scenario run it was in fails on that line,
and the next call starts a fresh process.

Each run of a scenario variant or program is one :class:`Session` (one
factory, :class:`gate.outside.backend.OutsideFactory`): its calls share a
deadline, ``bound`` seconds after its first call, so a hang anywhere in
a run is a FAIL within ``--timeout``.  A session that starts while an
older one still has a call in flight, or a cache open (a run the runner
gave up on), kills the process first: every run starts clean.  After
:data:`MAX_HANGS` hangs the later runs are not started (each a FAIL
naming the hangs), so a cache that deadlocks everywhere costs a few
timeouts, not one per scenario.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from xcache.gate import CannotRun

#: how much longer the scenario runner's own bound is than a session's, so
#: that the session's deadline (which kills the process and names the call)
#: comes first
GRACE_S = 2.0

#: hangs after which later runs are not started
MAX_HANGS = 3

#: how long the child may take to load the module and read the table
START_S = 60.0

#: a sanitizer's own verdict lines in what the process wrote
#: (AddressSanitizer's ERROR and SUMMARY, UndefinedBehaviorSanitizer's
#: "runtime error")
SANITIZER_LINE = re.compile(
    r"==\d+==ERROR: |SUMMARY: \w+Sanitizer|\S+:\d+:\d+: runtime error: ")


class CacheFailure(Exception):
    """The cache's process broke a call; ``kind`` is its report class."""

    kind = "crashed"


class CacheCrashed(CacheFailure):
    """The cache's process ended during a call (an exit or a signal)."""


class CacheHung(CacheFailure):
    """A call outlived its run's deadline; the process was killed."""

    kind = "hung"


class ShimBrokeContract(CacheFailure):
    """The shim answered what the contract rules out (NULL data, a length
    above the expert's): refused before any byte was read."""

    kind = "wrong bytes"


class Session:
    """One run's share of the host: its deadline and the caches it has open."""

    def __init__(self, bound: float) -> None:
        self.bound = bound
        self.deadline: float | None = None
        self.abandoned = False
        self.open: set[int] = set()  # handle numbers in this generation
        self.generation = 0

    def remaining(self) -> float:
        """Seconds left to the deadline (set by the first call)."""
        now = time.monotonic()
        if self.deadline is None:
            self.deadline = now + self.bound
        return max(0.0, self.deadline - now)


def describe_status(rc: int) -> str:
    """``exited with status N`` or ``was killed by SIGX (what it means)``."""
    if rc >= 0:
        return f"exited with status {rc}"
    try:
        sig = signal.Signals(-rc)
        return f"was killed by {sig.name} ({signal.strsignal(sig)})"
    except ValueError:
        return f"was killed by signal {-rc}"


class Host:
    """The cache's child process, started on first use and after each death."""

    def __init__(self, so: Path, modname: str, log: Path) -> None:
        self.so, self.modname, self.log = Path(so), modname, Path(log)
        self.lock = threading.Lock()  # one call on the pipe at a time
        self.meta = threading.Lock()  # owner and in_call
        self.proc: subprocess.Popen[bytes] | None = None
        self.tx: Connection | None = None
        self.rx: Connection | None = None
        self.generation = 0
        self.owner: Session | None = None
        self.in_call = False
        self.log_from = 0
        self.hangs: list[str] = []
        self.table: dict[str, Any] = {}
        self.spawns = 0
        #: the address-space cap of the process (bytes), as last set
        self.cap = 0

    # -- the process ----------------------------------------------------------

    def _spawn(self) -> None:
        r1, w1 = os.pipe()
        r2, w2 = os.pipe()
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log, "ab") as logf:
            self.log_from = logf.tell()
            try:
                self.proc = subprocess.Popen(
                    [sys.executable, "-m", "xcache.gate.outside.worker",
                     str(r1), str(w2), str(self.so), self.modname],
                    pass_fds=(r1, w2), stdin=subprocess.DEVNULL, stdout=logf,
                    stderr=logf)
            finally:
                os.close(r1)
                os.close(w2)
        self.tx = Connection(w1, readable=False)
        self.rx = Connection(r2, writable=False)
        self.generation += 1
        self.spawns += 1
        kind, val = self._reply("loading the cache's module", START_S)
        if kind == "load_error":
            self._reap()
            raise CannotRun(f"{self.so}: the built cache did not load: {val}")
        self.cap = int(val)
        self.tx.send(("table", ()))
        self.table = self._result("xcs_shim()", START_S)

    def _tail(self) -> str:
        """The last lines the process wrote since it started."""
        try:
            with open(self.log, "rb") as f:
                f.seek(self.log_from)
                text = f.read()[-(1 << 18):].decode(errors="replace")
        except OSError:
            return ""
        lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
        # a sanitizer's report ends in its shadow legend: its verdict is the
        # ERROR line, the first frame and the SUMMARY line
        verdict = [ln for ln in lines if SANITIZER_LINE.match(ln)]
        if verdict:
            after = lines[lines.index(verdict[0]):]
            first_frame = next((ln for ln in after if ln.startswith("#0 ")), "")
            kept = verdict[:1] + ([first_frame] if first_frame else []) \
                + verdict[1:][-1:]
            return " / ".join(kept)[-600:]
        return " / ".join(lines[-3:])[-400:]

    def _reap(self) -> int:
        """Wait for the process to end (killing it first); its status."""
        proc, self.proc = self.proc, None
        for c in (self.tx, self.rx):
            if c is not None:
                c.close()
        self.tx = self.rx = None
        if proc is None:
            return 0
        try:
            return proc.wait(2.0)
        except subprocess.TimeoutExpired:
            proc.kill()
            return proc.wait()

    def kill(self) -> None:
        """Kill the process now (a call in flight then fails)."""
        proc = self.proc
        if proc is not None and proc.poll() is None:
            proc.kill()

    def close(self) -> None:
        """End the process (at the end of a conformance run)."""
        with self.meta:
            self.kill()
        with self.lock:
            self._reap()

    def _reply(self, what: str, wait: float, bound: float | None = None
               ) -> tuple[str, Any]:
        """One reply, waited for at most ``wait`` seconds (the run's deadline
        ``bound`` seconds after its first call)."""
        assert self.rx is not None
        try:
            if not self.rx.poll(wait):
                self.kill()
                self._reap()
                self.hangs.append(what)
                when = (f"within {wait:.3g} s" if bound is None else
                        f"before its run's deadline ({bound:g} s after the "
                        "run's first call)")
                raise CacheHung(f"{what} did not return {when}; the cache's "
                                "process was killed")
            kind, val = self.rx.recv()
        except (EOFError, OSError) as e:
            rc = self._reap()
            tail = self._tail()
            raise CacheCrashed(
                f"{what}: the cache's process {describe_status(rc)}"
                + (f"; it wrote: {tail}" if tail else "")
                + (f" (its address space was capped at {self.cap >> 20} MiB)"
                   if rc < 0 and self.cap else "")) from e
        return kind, val

    def _result(self, what: str, wait: float, bound: float | None = None
                ) -> Any:
        kind, val = self._reply(what, wait, bound)
        if kind == "violation":
            raise ShimBrokeContract(f"{what}: {val}")
        if kind == "error":
            raise RuntimeError(f"{what}: the gate's worker failed: {val}")
        return val

    # -- calls ----------------------------------------------------------------

    def start(self) -> dict[str, Any]:
        """Start the process and read the shim's table (``Worker.table``)."""
        with self.lock:
            if self.proc is None:
                self._spawn()
            return self.table

    def _take_over(self, session: Session) -> None:
        """Make ``session`` the owner; kill a process an older run left busy."""
        with self.meta:
            old = self.owner
            if old is not None and old is not session:
                old.abandoned = True
                if self.in_call or (old.open and
                                    old.generation == self.generation):
                    self.hangs.append("a run the runner gave up on")
                    self.kill()
            self.owner = session

    def call(self, session: Session, what: str, op: str, *args: Any) -> Any:
        """Run ``op`` in the process for ``session``; its result.

        ``what`` names the call in a failure (``get(layer 3, expert 1)``).
        """
        if session.abandoned:
            raise CacheHung(f"{what}: not made: this run was given up on "
                            "(it outlived the runner's bound)")
        self._take_over(session)
        with self.lock:
            if session.abandoned:
                raise CacheHung(f"{what}: not made: this run was given up on")
            if len(self.hangs) >= MAX_HANGS:
                raise CacheHung(f"{what}: not made: the cache hung "
                                f"{len(self.hangs)} times already (first: "
                                f"{self.hangs[0]})")
            if session.open and session.generation != self.generation:
                raise CacheCrashed(f"{what}: not made: the cache's process "
                                   "ended earlier in this run")
            left = session.remaining()
            if self.proc is None:
                self._spawn()
            session.generation = self.generation
            assert self.tx is not None
            with self.meta:
                self.in_call = True
            try:
                try:
                    self.tx.send((op, args))
                except OSError:
                    pass  # the reply's EOF says how it died
                return self._result(what, left, session.bound)
            finally:
                with self.meta:
                    self.in_call = False

    def alive_for(self, session: Session) -> bool:
        """Whether the process ``session`` opened its caches in still runs."""
        return (self.proc is not None and not session.abandoned
                and session.generation == self.generation)
