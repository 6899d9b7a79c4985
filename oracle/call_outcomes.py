"""What a call of the oracle's reading cache hands back; the failures only it has.

A call made now hands back an :class:`Ended` (it ended: its outcome) or an
:class:`AtRelease` (made at a stall's release); :class:`FileChanged` and
:class:`OutOfMemory` are failures :class:`oracle.reading_cache.ReadingCache`
raises that the cache model has no class for (each names its kind in the
words of ``faults.kinds``); :class:`WaitsForever` is a wait nobody would
end.  Never imports ``engine`` or ``gate``.
"""

from __future__ import annotations

from typing import Any

from xcache.oracle.errors import OracleError


class ModelOnlyFailure(OracleError):
    """A failure the reading cache models that its cache model has no class for."""

    kind = ""


class FileChanged(ModelOnlyFailure):
    """A load refused because the file changed (docs/CACHE.md "Files changed").

    It names the key whose load was refused, as the model's failure did
    (the engine's error record names it too).
    """

    kind = "changed"

    def __init__(self, failure: BaseException) -> None:
        super().__init__(str(failure))
        self.layer = getattr(failure, "layer", None)
        self.expert = getattr(failure, "expert", None)


class OutOfMemory(ModelOnlyFailure):
    """An operation refused for want of memory (a modelled allocation fault)."""

    kind = "nomem"


class WaitsForever(Exception):
    """A wait the engine would never see end (nobody would wake it)."""


class Ended:
    """A call that ended before it was handed back: its (succeeded, value)."""

    def __init__(self, ok: bool, value: Any) -> None:
        self._outcome = (ok, value)

    def wait(self, timeout: float) -> bool:
        """It has ended."""
        return True

    def outcome(self) -> tuple[bool, Any]:
        """(True, value) or (False, exception)."""
        return self._outcome


class AtRelease:
    """A call the model makes at a stall's release (:meth:`ReadingCache.unstall`)."""

    def __init__(self) -> None:
        self._out: tuple[bool, Any] | None = None

    def end(self, outcome: tuple[bool, Any]) -> None:
        """The call was made: its (succeeded, value)."""
        self._out = outcome

    def wait(self, timeout: float) -> bool:
        """Whether it was made (never before the release: then it is stuck)."""
        return self._out is not None

    def outcome(self) -> tuple[bool, Any]:
        """(True, value) or (False, exception)."""
        assert self._out is not None
        return self._out


#: What a call made now hands back.
Outcome = Ended | AtRelease
