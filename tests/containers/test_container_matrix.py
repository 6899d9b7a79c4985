"""The gate's whole scenario set passes with ``--container`` on the matrix's cells.

The matrix (tests/containers/matrix.py) is every preset and twins of every
real-model description in fixtures/models/ at scales 0.01, 0.05 and 0.1
with several layer and expert selections (a dense leading layer and the
multi-token-prediction layer where the model has them).  It is too slow for
CI whole, so by default a seeded sample of cells runs:

* ``XC_MATRIX_SEED`` (default 20261201) seeds the sample;
* ``XC_MATRIX_SAMPLE`` (default 8) is how many cells it takes;
* ``XC_MATRIX_CELLS`` (comma-separated cell names) runs those cells instead;
* ``XC_MATRIX=all`` runs the whole matrix.

The huge-sparse preset is a cell only with ``--huge`` (for time:
tests/containers/matrix.py says why); tests/containers/test_huge_sparse.py
runs a seeded sample of its scenarios (``XC_HUGE_SEED``, printed) and holds
what made it fail.

The seed and the chosen cells are printed at collection (``pytest -s``) and
named in every failure, so a failing cell reruns alone with
``XC_MATRIX_CELLS=NAME`` or ``python -m tests.containers.matrix NAME``.
"""

from __future__ import annotations

import os
import random

import pytest

from tests.containers.matrix import DIRECT_ONLY, HUGE, Cell, all_cells, run_cell

DEFAULT_SEED = 20261201
DEFAULT_SAMPLE = 8
#: a twin with few keys skips the scenarios that need more, with a reason
#: (the found-* scenarios and hold-layer-gives-back name flat keys of their home
#: container, the programs' shrunk findings: a twin without them skips them,
#: saying which key is outside); check-cross-s3fifo's breaks need its home's
#: five slots filled as written, so a top-k above 4 skips it, naming k)
ALLOWED_SKIPS = {DIRECT_ONLY, "batch-residents-pins", "key-bounds",
                 "found-claim-wait-hit", "found-direct-partial",
                 "found-fused-chunked-eio", "found-release-twice",
                 "found-stream-of-residents-open", "found-unhold-twice",
                 "found-stream-get-between-reads",
                 "found-verify-replaced", "found-verify-truncated",
                 "hold-layer-gives-back", "hold-layer-no-slot",
                 "check-cross-s3fifo",
                 # shrunk findings: their home's keys, slots and reads
                 "found-stream-victim-hit",
                 # a trace over three MoE layers or more (L >= 3)
                 "trace-file", "trace-gapped-layers"}
#: scenarios a top-1 model (Llama-4-Scout, Switch-Transformers) skips by
#: their own requirement (two stalled reads at once: 2*k >= 3)
TOP_1_SKIPS = {"stalled-reads"}


def _choose() -> tuple[str, list[Cell]]:
    """(how the cells were chosen, the cells): all, named ones or a seeded sample."""
    cells = all_cells()
    by_name = {c.name: c for c in cells}
    if os.environ.get("XC_MATRIX") == "all":
        return f"the whole matrix ({len(cells)} cells)", cells
    named = [n.strip() for n in os.environ.get("XC_MATRIX_CELLS", "").split(",")
             if n.strip()]
    if named:
        unknown = [n for n in named if n not in by_name]
        if unknown:
            raise pytest.UsageError(f"XC_MATRIX_CELLS: no cell {unknown[0]!r}; "
                                    f"python -m tests.containers.matrix --list")
        return "XC_MATRIX_CELLS", [by_name[n] for n in named]
    seed = int(os.environ.get("XC_MATRIX_SEED", DEFAULT_SEED))
    n = int(os.environ.get("XC_MATRIX_SAMPLE", DEFAULT_SAMPLE))
    return (f"XC_MATRIX_SEED={seed} XC_MATRIX_SAMPLE={n}",
            random.Random(seed).sample(cells, min(n, len(cells))))


HOW, CELLS = _choose()
print(f"container matrix: {HOW}: {', '.join(c.name for c in CELLS)}")


def test_matrix_covers_every_preset_model_scale_and_selection():
    """The matrix names each preset, each model at each scale, dense-lead and MTP."""
    from tests.containers.matrix import DATA, SCALES
    from xcache import fixtures

    cells = all_cells()
    assert {c.preset for c in cells if c.preset} == set(fixtures.PRESETS) - {HUGE}
    assert f"preset:{HUGE}" in {c.name for c in all_cells(huge=True)}
    models = {p.stem for p in DATA.glob("*.json")}
    assert {(c.model, c.scale) for c in cells if c.model} == {
        (m, s) for m in models for s in SCALES}
    names = {c.name for c in cells}
    assert len(names) == len(cells)
    for s in SCALES:  # DeepSeek-V3: dense layer 2 leads MoE 3-4; layer 61 is MTP
        first = next(c for c in cells if c.name == f"deepseek-v3@{s}:first")
        assert first.expand_layers == (2, 3, 4)
        mtp = next(c for c in cells if c.name == f"deepseek-v3@{s}:mtp")
        assert mtp.expand_layers == (60, 61)
    for s in SCALES:  # Qwen3-Next: the MTP block's own expert group
        mtp = next(c for c in cells if c.name == f"qwen3-next-80b-a3b@{s}:mtp")
        assert (mtp.expand_layers, mtp.group) == ((47,), "mtp")
    assert not any(c.name.endswith(":mtp") for c in cells
                   if c.model not in (None, "deepseek-v3", "qwen3-next-80b-a3b",
                                       "glm-4.5-air"))


@pytest.mark.nosan  # runs the gate's scenario set in process
@pytest.mark.parametrize("cell", CELLS, ids=[c.name for c in CELLS])
def test_every_scenario_passes_on_the_cell(cell, tmp_path):
    """`replay.py --container CELL`, in process: no check fails; skips are named."""
    out = run_cell(cell, tmp_path)
    rerun = f"(chosen by {HOW}; rerun: XC_MATRIX_CELLS={cell.name})"
    assert out.ok, f"{out.line()} {rerun}\n" + "\n".join(out.failed[:10])
    odd = [s for s, why in out.skipped if s not in ALLOWED_SKIPS
           and not (s in TOP_1_SKIPS and why.endswith("here k = 1"))]
    assert not odd, f"{cell.name}: unexpected skips {odd} {rerun}"
    assert out.runs >= 39, (out.runs, rerun)
