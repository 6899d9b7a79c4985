"""A refused allocation of the loader's tables names how many keys they were for."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from xcache import engine, fixtures
from xcache.engine import alloc


@pytest.mark.parametrize("preset,keys", [("granite-mini", 24), ("k3-mini", 24),
                                         ("mixtral-mini", 32)])
def test_the_nomem_message_counts_the_keys(tmp_path: Path, preset: str,
                                           keys: int) -> None:
    """Each refusal met while the loader sizes its tables says the real key count."""
    folder = tmp_path / preset
    fixtures.generate(preset, folder)
    seen = set()
    with engine.Container(folder) as cont:
        lay = engine.layout.resolve(folder, container=cont)
        for n in range(1, 40):
            alloc.fail_alloc(n)
            try:
                engine.ExpertCache(cont, layout=lay, n_slots=8).close()
            except engine.OutOfMemoryError as e:
                found = re.search(r"expert tables of (\d+) keys", str(e))
                if found:
                    seen.add(int(found.group(1)))
            else:
                break
            finally:
                alloc.disarm()
    assert seen == {keys}
