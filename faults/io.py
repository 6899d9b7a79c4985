"""I/O faults under the C code: the engine's fault-injecting vtable, from Python.

The injector is C (``engine/csrc/xc_fault.c``); Python only configures it, so
no Python exception can ever cross a C read.  Pass ``IOFaults.io`` to
``engine.Container(..., io=...)`` and arm a fault before the operation under
test.  The injector is a test seam, in the instrumented engine build only
(docs/DESIGN.md, "Two builds"): with the release build loaded, opening one
raises ``engine._lib.SeamsError`` saying how to load the other.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from xcache.engine import _lib

#: Fault kinds by name, as the C injector numbers them.
KINDS: dict[str, int] = {
    "partial": 1,  # the pread returns at most `arg` bytes (legal; loop continues)
    "eof": 2,      # the pread returns 0: the file seems to end there
    "eio": 3,      # the pread fails with EIO
    "eintr": 4,    # the pread fails with EINTR (the loop must retry)
    "delay": 5,    # sleep `arg` microseconds, then read normally
    "stall": 6,    # block until release() (or disarm), at most `arg` us
    "eagain": 7,   # the pread fails with EAGAIN (retried as EINTR is)
    # `arg` (>= 1) preads in a row fail with EINTR / EAGAIN, then one reads
    # at most `progress` bytes; persistent: the cycle repeats
    "eintr_burst": 8,
    "eagain_burst": 9,
    # page-cache copies (pread_nowait calls only, never preads)
    "nowait_partial": 10,  # copies at most `arg` bytes: the rest is not cached
    "nowait_eagain": 11,   # EAGAIN: the first byte is not cached
    "nowait_eof": 12,      # copies nothing: the file seems to end there
    "nowait_eio": 13,      # fails with EIO (an errno that cannot tell)
}

#: The kinds that meet the loader's page-cache copies (``pread_nowait``)
#: instead of preads.  While one is armed, every other copy is whole (as if
#: the page cache held the file, short only at its real end); while none
#: is, the injector cannot tell (EOPNOTSUPP) and every piece is preaded.
NOWAIT_KINDS = frozenset(k for k in KINDS if k.startswith("nowait_"))

#: The kinds that interleave bursts of interrupts with progress.
BURST_KINDS = frozenset({"eintr_burst", "eagain_burst"})

#: The bound of a stall armed without one: it ends by itself after this.
STALL_BOUND_US = 10_000_000


@dataclass(frozen=True)
class Fault:
    """One armed fault: which kind, at which matching read, for how long.

    ``arg`` is bytes for ``partial`` and ``nowait_partial``, microseconds
    for ``delay`` and the bound of a ``stall`` (0: :data:`STALL_BOUND_US`),
    the interrupts in a row of a burst.  ``progress`` is the most bytes the
    pread after each burst returns (0: as asked).  ``at`` places it: only
    preads covering that byte of a matching file count, and a placed
    ``partial`` returns the bytes before it (``xc_fault_place``; kinds
    ``partial`` to ``eagain`` only).
    """

    kind: str
    nth: int = 1
    persistent: bool = False
    arg: int = 0
    path_filter: str = ""
    at: int | None = None
    progress: int = 0


class IOFaults:
    """A fault-injecting I/O vtable that forwards to the default POSIX one.

    Give ``inner`` (another injector) to forward to it instead, so that two
    faults can be armed at once, each with its own path filter: a read meets
    this injector's fault first, then the inner one's.  Close this injector
    before the inner one.
    """

    def __init__(self, inner: IOFaults | None = None) -> None:
        self._ptr: Any = None
        lib = _lib.seams_lib("the fault injector (faults.io.IOFaults)")
        ffi = _lib.ffi()
        out = ffi.new("xc_fault **")
        _lib.check(lib.xc_fault_open(ffi.NULL if inner is None else inner.io, out))
        self._ptr = out[0]
        self._inner = inner  # this injector forwards to it: keep it alive
        self._outers = 0  # open injectors forwarding to this one
        if inner is not None:
            inner._outers += 1

    @property
    def io(self) -> Any:
        """The ``const xc_io *`` to hand to a container."""
        self._require_open()
        return _lib.lib().xc_fault_io(self._ptr)

    def arm(self, fault: Fault) -> None:
        """Arm ``fault``, replacing any earlier one and restarting the count."""
        self._require_open()
        if fault.kind not in KINDS:
            raise ValueError(f"unknown fault kind {fault.kind!r}; valid: "
                             f"{', '.join(KINDS)}")
        ffi = _lib.ffi()
        flt = fault.path_filter.encode() if fault.path_filter else ffi.NULL
        arg = fault.arg or (STALL_BOUND_US if fault.kind == "stall" else 0)
        _lib.check(_lib.lib().xc_fault_arm(self._ptr, KINDS[fault.kind],
                                           fault.nth, int(fault.persistent),
                                           arg, flt))
        if fault.progress:
            if fault.progress < 0:
                raise ValueError(f"burst progress {fault.progress}: below 0")
            _lib.check(_lib.lib().xc_fault_progress(self._ptr, fault.progress))
        if fault.at is not None:
            if fault.at < 0:
                raise ValueError(f"fault placed at byte {fault.at}: below 0")
            _lib.check(_lib.lib().xc_fault_place(self._ptr, fault.at))

    def disarm(self) -> None:
        """Let every read through unchanged (a stalled one is let go)."""
        self._require_open()
        _lib.lib().xc_fault_disarm(self._ptr)

    def release(self) -> None:
        """Let every read stalled now go on and read (``stall`` faults)."""
        self._require_open()
        _lib.lib().xc_fault_release(self._ptr)

    @property
    def stalled(self) -> int:
        """Preads blocked in a stall now: their reads have begun."""
        self._require_open()
        return int(_lib.lib().xc_fault_stalled(self._ptr))

    @property
    def stall_timeouts(self) -> int:
        """Stalls that ended by their bound rather than a release."""
        self._require_open()
        return int(_lib.lib().xc_fault_stall_timeouts(self._ptr))

    def await_stalled(self, n: int, timeout_s: float) -> bool:
        """Wait at most ``timeout_s`` until ``n`` preads are stalled at once.

        Waits in C in slices of 50 ms, so Ctrl-C still ends it.
        """
        import time  # noqa: PLC0415

        self._require_open()
        lib = _lib.lib()
        end = time.monotonic() + timeout_s
        while True:
            left = end - time.monotonic()
            if lib.xc_fault_await_stalled(self._ptr, n,
                                          int(min(max(left, 0), 0.05) * 1e6)):
                return True
            if left <= 0:
                return False

    @property
    def reads(self) -> int:
        """Matching preads (page-cache copies, for a ``nowait_`` kind) since
        the fault was armed."""
        self._require_open()
        return int(_lib.lib().xc_fault_reads(self._ptr))

    @property
    def fired(self) -> int:
        """How many preads met the fault since it was armed."""
        self._require_open()
        return int(_lib.lib().xc_fault_fired(self._ptr))

    @property
    def open_handles(self) -> int:
        """Descriptors opened through this injector and not yet closed."""
        self._require_open()
        return int(_lib.lib().xc_fault_open_handles(self._ptr))

    def close(self) -> None:
        """Free the injector; MisuseError while a container still reads through it."""
        if self._ptr is not None:
            from xcache.engine._lib import misuse
            if self.open_handles:
                raise misuse(f"the fault injector still has "
                             f"{self.open_handles} open handle(s): close "
                             f"the containers using it first")
            if self._outers:
                raise misuse(f"{self._outers} open fault injector(s) "
                             f"forward to this one: close them first")
            _lib.lib().xc_fault_close(self._ptr)
            self._ptr = None
            if self._inner is not None:
                self._inner._outers -= 1

    def _require_open(self) -> None:
        if self._ptr is None:
            raise ValueError("the fault injector is closed")

    def __enter__(self) -> IOFaults:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
