"""One vocabulary of failure kinds: every engine and oracle exception maps to
the engine's status name, format errors to their check, anything else to a
kind that matches nothing."""

from __future__ import annotations

import pytest

from xcache.engine import errors as eerr
from xcache.faults.kinds import kind_of, model_failure
from xcache.oracle import errors as oerr


def _engine(cls: type[eerr.EngineError]) -> eerr.EngineError:
    """An engine exception of ``cls`` as the C boundary would raise it."""
    return cls("message", status=-1, kind="x")


@pytest.mark.parametrize("exc, kind", [
    (eerr.FileChangedError, "changed"), (eerr.ShortReadError, "short_read"),
    (eerr.EngineIOError, "io"), (eerr.OutOfMemoryError, "nomem"),
    (eerr.BudgetError, "budget"), (eerr.MisuseError, "misuse"),
    (eerr.NotFoundError, "not_found"), (eerr.AllPinnedError, "all_pinned"),
])
def test_engine_exceptions_map_to_their_status_name(exc, kind):
    """Each engine exception class is its status name (FileChanged before IO)."""
    assert kind_of(_engine(exc)) == kind


@pytest.mark.parametrize("exc, kind", [
    (oerr.ShortRead, "short_read"), (oerr.IOFailure, "io"), (oerr.Budget, "budget"),
    (oerr.Misuse, "misuse"), (oerr.NotFound, "not_found"),
    (oerr.AllPinned, "all_pinned"),
])
def test_oracle_exceptions_map_to_the_same_names(exc, kind):
    """The oracle's exception of each family has the engine's name for it."""
    args = (0, 3) if issubclass(exc, oerr.IOFailure) else ()  # layer, expert
    assert kind_of(exc("message", *args)) == kind


def test_format_errors_are_named_by_their_check():
    """A container that failed validation is the check's own name on both sides."""
    assert kind_of(oerr.OracleFormatError("offsets", 8, "f.safetensors")) == "offsets"
    err = eerr.FormatError("bad", status=-100, kind="duplicate")
    assert kind_of(err) == "duplicate"


def test_anything_else_matches_no_kind():
    """A foreign exception is other:<class>, so no comparison matches it by accident."""
    assert kind_of(KeyError("x")) == "other:KeyError"
    assert kind_of(RuntimeError()) == "other:RuntimeError"


def test_model_failure_is_short_for_short_reads_and_io_otherwise():
    """The oracle model's injected failure: short for a short read, io for the rest."""
    assert model_failure(oerr.ShortRead("m", 0, 3)) == "short"
    assert model_failure(oerr.IOFailure("m", 0, 3)) == "io"
    assert model_failure(_engine(eerr.ShortReadError)) == "short"
    assert model_failure(_engine(eerr.EngineIOError)) == "io"
    assert model_failure(_engine(eerr.FileChangedError)) == "io"
