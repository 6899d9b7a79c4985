"""What an open cache tells a user about itself: its shape, its repr, its signature."""

from __future__ import annotations

import inspect
from pathlib import Path

from xcache import engine, fixtures


def test_an_open_cache_exposes_its_layout(k3_shard: Path) -> None:
    """layers, n_experts, top_k and policy are the layout's and the options'."""
    with engine.ExpertCache.open(k3_shard.parent, n_slots=8, policy="fifo") as c:
        assert (c.layers, c.n_experts, c.top_k, c.policy) == ((0,), 24, 4, "fifo")


def test_repr_names_the_shape_the_slots_and_what_is_resident(k3_shard: Path) -> None:
    """repr shows policy, layers, experts, top-k, slots and residents; then closed."""
    c = engine.ExpertCache.open(k3_shard.parent, n_slots=8)
    assert repr(c) == ("<ExpertCache 'lru' layer 0 x 24 experts, top-4; "
                       "8 slots of 12,288 bytes, 0 resident>")
    c.get(0, 3).release()
    assert repr(c).endswith("8 slots of 12,288 bytes, 1 resident>")
    c.close()
    assert repr(c) == "<ExpertCache 'lru' layer 0 x 24 experts, top-4; closed>"


def test_repr_of_several_layers(tmp_path: Path) -> None:
    """A span of consecutive MoE layers reads as a range."""
    fixtures.generate("deepseek-mini", tmp_path / "ds")
    with engine.ExpertCache.open(tmp_path / "ds", n_slots=8, policy="arc") as c:
        assert repr(c) == ("<ExpertCache 'arc' layers 1-3 x 16 experts, top-4; "
                           f"8 slots of {c.stride:,} bytes, 0 resident>")


def test_signature_shows_what_a_left_out_layout_keyword_means() -> None:
    """The five layout keywords default to a named sentinel, not a bare object."""
    sig = str(inspect.signature(engine.ExpertCache.__init__))
    assert "object at 0x" not in sig
    assert sig.count("= <from layout>") == 5
