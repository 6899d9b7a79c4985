"""Fixtures of the fused-expert tests: the two containers and a fault injector."""

from __future__ import annotations

import pytest

from tests.cache.fused_containers import Box, gpt_oss, granite
from xcache.faults.io import IOFaults


@pytest.fixture(scope="module")
def granite_box(tmp_path_factory: pytest.TempPathFactory) -> Box:
    """A three-layer Granite-like container, one shard."""
    return granite(tmp_path_factory.mktemp("granite") / "c")


@pytest.fixture(scope="module")
def oss_box(tmp_path_factory: pytest.TempPathFactory) -> Box:
    """A three-layer GPT-OSS-like container over two shards."""
    return gpt_oss(tmp_path_factory.mktemp("oss") / "c", n_shards=2)


@pytest.fixture()
def faults():
    """A fresh injector, closed after the test."""
    f = IOFaults()
    yield f
    f.close()
