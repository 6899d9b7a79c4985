"""A run of the engine in a process of its own: a crash is a verdict.

The engine under test is C: a planted bug, a mutant or a real defect can
make it abort on an ``assert``, fault or hang, and in the gate's own
process that ends the gate with a signal and no verdict (CI reads a dead
job, not a failed check).  :func:`run_forked` runs one scenario or
program variant on one backend in a forked child -- the parent's state as
it is, the engine already loaded -- which sends each line the run reports
back over a pipe as it is made.  The parent replays them into its report
and waits for the child's end within the run's bound:

- the child ends by itself: its lines are the run's, nothing else;
- the child is killed by a signal or exits without finishing: the lines
  it sent stand, and one failed check ``scenario ran to completion``
  names the signal (``the engine's process was killed by SIGABRT
  (Aborted)``) or the status;
- the child outlives the bound: it is killed, and the run fails as a
  thread-bound run does (``timed out after N s``), with nothing left
  running behind.

``XC_GATE_IN_PROCESS=1`` runs every run in the gate's process (a
debugger's choice); so does a platform without ``fork``.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import select
import signal
import struct
import time
from typing import Any

from xcache.gate import CannotRun

#: the environment variable that keeps every run in the gate's process
IN_PROCESS_ENV = "XC_GATE_IN_PROCESS"

_FRAME = struct.Struct("<I")


def wanted(make: Any) -> bool:
    """Whether runs of the factory ``make`` go to a process of their own."""
    return bool(getattr(make, "contained", False)) and hasattr(os, "fork") \
        and os.environ.get(IN_PROCESS_ENV, "") != "1"


class _Sender:
    """A report stand-in in the child: every call becomes one frame."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def send(self, item: tuple[Any, ...]) -> None:
        """Write one pickled frame (its length first), all of it."""
        data = pickle.dumps(item)
        view = memoryview(_FRAME.pack(len(data)) + data)
        while view:
            view = view[os.write(self.fd, view):]

    def __getattr__(self, name: str) -> Any:
        def call(*args: Any, **kwargs: Any) -> None:
            self.send(("call", name, args, kwargs))
        return call


def _child(run: Any, fd: int) -> None:
    """Run ``run`` reporting through ``fd``; never returns."""
    status = 0
    try:
        sender = _Sender(fd)
        run.report = sender
        try:
            run.run()
            sender.send(("done",))
        except CannotRun as e:
            sender.send(("cannot", str(e)))
        except BaseException as e:  # noqa: BLE001 - told to the parent
            sender.send(("raised", f"{type(e).__name__}: {e}"))
    except BaseException:  # noqa: BLE001 - the pipe itself failed
        status = 3
    finally:
        os._exit(status)


def _frames(buf: bytearray) -> list[Any]:
    """The whole frames at the front of ``buf``, taken off it."""
    out = []
    while len(buf) >= _FRAME.size:
        (n,) = _FRAME.unpack_from(buf)
        if len(buf) < _FRAME.size + n:
            break
        out.append(pickle.loads(bytes(buf[_FRAME.size:_FRAME.size + n])))
        del buf[:_FRAME.size + n]
    return out


def _death(status: int) -> str:
    """How a child that did not finish ended, in words."""
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        try:
            what = signal.Signals(sig).name
        except ValueError:
            what = f"signal {sig}"
        return (f"the engine's process was killed by {what} "
                f"({signal.strsignal(sig) or what})")
    return (f"the engine's process exited with status "
            f"{os.WEXITSTATUS(status)} before the run ended")


def run_forked(run: Any, timeout: float, name: str) -> tuple[bool, bool]:
    """Run ``run`` in a forked child within ``timeout`` seconds.

    Returns (finished in time, timed out).  Every line the child reported
    is in ``run.report``; a child that died adds one failed check naming
    how.  ``CannotRun`` raised in the child is raised here.
    """
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child
        os.close(r)
        _child(run, w)
    os.close(w)
    buf = bytearray()
    end: Any = None
    deadline = time.monotonic() + timeout
    timed_out = False
    ended = False
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                timed_out = True
                break
            ready, _, _ = select.select([r], [], [], left)
            if not ready:
                continue
            data = os.read(r, 1 << 20)
            if not data:
                break
            buf += data
            for item in _frames(buf):
                if item[0] == "call":
                    getattr(run.report, item[1])(*item[2], **item[3])
                else:
                    end = item
        ended = True
    finally:  # a hang, or an interrupt here (Ctrl-C): the child goes too
        os.close(r)
        if timed_out or not ended:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        _, status = os.waitpid(pid, 0)
    if timed_out:
        run.report.add(name, run.backend_name, f"{name} ran to completion",
                       False, f"timed out after {timeout:g} s", "completion",
                       f"timed out after {timeout:g} s")
        return False, True
    if end is not None and end[0] == "cannot":
        raise CannotRun(end[1])
    if end is None or end[0] == "raised":
        why = _death(status) if end is None else end[1]
        run.report.add(name, run.backend_name,
                       f"scenario ran to completion{run.variant}", False,
                       f"EngineCrashed: {why}", "completion",
                       f"EngineCrashed: {why}")
        return False, False
    return True, False
