"""The fuzz corpus replayed without atheris: every input, engine and oracle reader.

``hunt/fuzz/corpus/`` holds the seeds (``python -m xcache.hunt.fuzz seed``) and
the inputs the coverage-guided fuzzer found reaching new code; each is
decoded as the fuzz target decodes it (``hunt.fuzz.inputs``) and must open
or fail the same way in both readers (``hunt.fuzz.verdicts``), with no
crash -- under CI's sanitizer run too.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from xcache.hunt.fuzz import inputs
from xcache.hunt.fuzz.verdicts import compare_oracle

CORPUS = Path(__file__).resolve().parents[2] / "hunt" / "fuzz" / "corpus"
FILES = sorted(p for p in CORPUS.iterdir() if p.is_file())


def test_the_corpus_is_there_and_small():
    """The corpus holds every seed and stays under 1 MB."""
    names = {p.name for p in FILES}
    assert "seed-index" in names and "seed-k3-mini-model-00001-of-00001" in names
    assert sum(p.stat().st_size for p in FILES) < 1_000_000


@pytest.mark.parametrize("path", FILES, ids=[p.name for p in FILES])
def test_corpus_input_gets_the_same_verdict(path, tmp_path):
    """One corpus input: engine and oracle agree (documented exceptions aside)."""
    compare_oracle(inputs.materialise(path.read_bytes(), tmp_path))


def test_the_seeds_open(tmp_path):
    """Every seed is a valid container in the engine."""
    for p in FILES:
        if p.name.startswith("seed-"):
            d = tmp_path / p.name
            d.mkdir()
            assert compare_oracle(inputs.materialise(p.read_bytes(), d)).accepted, (
                p.name
            )
