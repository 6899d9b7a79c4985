"""Shared test configuration: hypothesis profiles and common fixtures."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

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

#: Real routing traces shared beside the project (read in place);
#: XC_TRACES_DIR overrides it (a git worktree sits one level deeper).
TRACES_DIR = Path(os.environ.get("XC_TRACES_DIR") or
                  Path(__file__).resolve().parents[1].parent / "shared" / "traces")


@pytest.fixture(scope="session")
def k3_shard(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A k3-mini shard shared read-only by the whole session (copy it to change it)."""
    import fixtures

    folder = tmp_path_factory.mktemp("k3-shared") / "k3-mini"
    fixtures.generate("k3-mini", folder)
    return folder / "model-00001-of-00001.safetensors"


@pytest.fixture(scope="session")
def mixtral_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A three-shard mixtral-mini folder with its index, shared read-only."""
    import fixtures

    folder = tmp_path_factory.mktemp("mm-shared") / "mixtral-mini"
    fixtures.generate("mixtral-mini", folder)
    return folder
