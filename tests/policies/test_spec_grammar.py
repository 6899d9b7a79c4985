"""Malformed policy parameters are refused with a message listing the valid ones."""

from __future__ import annotations

import pytest

from tests.helpers import K3_LAYOUT
from xcache import engine

LFRU_VALID = "valid parameters: sample, seed (as key=unsigned integer)"


@pytest.fixture(scope="module")
def container(k3_shard):
    """An open k3-mini container for the module."""
    with engine.Container(str(k3_shard)) as c:
        yield c


@pytest.mark.parametrize("param", [
    "sample=", "sample=123456789012345678901234", "sample=x", "samp=3",
    "samplee=3", "=3"])
def test_each_malformed_parameter_is_named(container, param):
    """An empty, overlong, non-numeric, or misspelt parameter names itself."""
    with pytest.raises(engine.MisuseError) as ei:
        engine.ExpertCache(container, **K3_LAYOUT,
                           n_slots=8, top_k=4, policy=f"lfru:{param}")
    assert str(ei.value) == f"policy lfru: bad parameter '{param}'; {LFRU_VALID}"


def test_a_zero_hotness_period_is_refused(container):
    """Halving every 0 requests makes no sense: the period must be at least 1."""
    with pytest.raises(engine.MisuseError) as ei:
        engine.ExpertCache(container, **K3_LAYOUT, n_slots=8, top_k=4,
                           policy="hotness:period=0")
    assert str(ei.value) == "policy hotness: period must be at least 1"
