"""Shared test configuration: hypothesis profiles and the fixtures many files use."""

from __future__ import annotations

import os
import shutil
import signal
import threading
import warnings
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from tests.helpers import write_k3_mini

# The suite drives the engine's test seams (countdowns, fault injector, test
# hooks), which only the instrumented build has (docs/DESIGN.md, "Two
# builds"): the first load takes it, here and in every subprocess a test
# starts.  XC_ENGINE_LIB (CI's sanitizer and coverage builds) still wins.
os.environ.setdefault("XC_TEST_SEAMS", "1")

# The gate forks a process for each engine run (gate/contained.py): a crash
# is a verdict.  Forking a test worker of several hundred MB for each of the
# thousands of runs the suite makes doubled its time (455 s -> over 900 s),
# so the suite keeps them in process, here and in every subprocess a test
# starts; tests/replay/test_contained.py forks on purpose, and the gate's own
# CI stages (replay, mutants) fork as a user's run does.
os.environ.setdefault("XC_GATE_IN_PROCESS", "1")

# `ci` extends hypothesis' built-in profile of that name (derandomized, no
# deadline, no example database); `thorough` runs twenty times the examples.
_ci = settings.get_profile("ci")
settings.register_profile(
    "ci", _ci, suppress_health_check=[HealthCheck.too_slow], database=None
)
settings.register_profile(
    "thorough", settings.get_profile("ci"),
    max_examples=20 * settings.get_profile("ci").max_examples,
)
settings.load_profile(os.environ.get("XC_HYPOTHESIS_PROFILE", "ci"))


@pytest.fixture(scope="session")
def k3_shard(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """k3-mini's shard, generated once and shared read-only by the whole session."""
    return write_k3_mini(tmp_path_factory.mktemp("k3-shared"))


@pytest.fixture
def k3_copy(k3_shard: Path, tmp_path: Path) -> Path:
    """A private, writable copy of k3-mini (its folder) for a test that changes files.

    Copying the folder takes about a millisecond, generating it about 30.
    """
    folder = shutil.copytree(k3_shard.parent, tmp_path / "k3-mini")
    return Path(folder) / k3_shard.name


@pytest.fixture(scope="session")
def mixtral_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A three-shard mixtral-mini folder with its index, shared read-only."""
    from xcache import fixtures

    folder = tmp_path_factory.mktemp("mm-shared") / "mixtral-mini"
    fixtures.generate("mixtral-mini", folder)
    return folder


@pytest.fixture(autouse=True)
def _sigint_as_it_was():
    """Every test leaves Ctrl-C as it found it: the worker's SIGINT handler
    and signal mask are put back after each test, and a test that changed
    them is named in a warning (a later test's SIGINT, or a subprocess
    inheriting an ignored one, would otherwise not be delivered)."""
    main = threading.current_thread() is threading.main_thread()
    handler = signal.getsignal(signal.SIGINT) if main else None
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, []) if main else None
    yield
    if not main:
        return
    changed = []
    if handler is not None and signal.getsignal(signal.SIGINT) is not handler:
        changed.append(f"handler {signal.getsignal(signal.SIGINT)!r}")
    # the C-level disposition too (a library may set SIG_IGN under Python)
    if handler is not None:
        signal.signal(signal.SIGINT, handler)
    if mask is not None and signal.pthread_sigmask(signal.SIG_BLOCK, []) != mask:
        changed.append("signal mask")
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
    if changed:
        warnings.warn(f"the test left SIGINT changed ({', '.join(changed)}); "
                      "put back", stacklevel=1)

