"""The container matrix: the gate's whole scenario set on every preset and twin.

A *cell* is one container the gate's scenarios run on with ``--container``:
either a preset (``fixtures/presets.py``), or a twin that ``from-header``
makes of a real-model description in ``fixtures/models/`` at one scale and
one selection.  A checkpoint folder (index + config, as a user without the
weights holds it) is first expanded from the description
(:func:`fixtures.realistic.expand`), optionally with a subset of layers and
experts, then ``from-header`` writes the twin, optionally with its own
``--layers`` / ``--experts``.  The selections of every model:

* ``first``: the checkpoint's first two MoE layers and 8 experts (DeepSeek-V3:
  layers 2-4, so the dense layer 2 leads the two MoE layers);
* ``pick``: the whole checkpoint's index, and ``from-header --layers`` two
  MoE layers apart in the middle and at the end, ``--experts 16`` (or all);
* ``wide``: the last two MoE layers with up to 64 experts;
* ``mtp`` (models with multi-token-prediction layers): the last decoder
  layer and the MTP layer, 8 experts (Qwen3-Next: 64, its MTP group being
  one layer).  DeepSeek-V3 numbers its MTP layer
  after the decoder's (layer 61, in the decoder's expert group); Qwen3-Next
  keeps it outside the decoder (``mtp.layers.0.mlp.experts.*``), so its twin
  is made with ``from-header --group mtp`` and its experts are the MTP
  block's.

The huge-sparse preset (about 162 GB of holes, 44 MB experts) is a cell only
with ``huge=True`` (``--huge``), for time alone: its whole scenario set
passes, but it moves gigabytes (each load and each served payload is 44 MB,
each scratch copy 8 sparse shards), 434 s of CPU and 5.7 GB peak RSS
(52 min wall on a loaded 2-core machine), far more than
CI's budget for a sample; tests/containers/test_huge_sparse.py runs a
seeded sample of its scenarios in the normal suite instead.  What made it
fail (tests/containers/test_huge_sparse.py): the oracle backend and the
target kept the bytes of every key ever loaded or compared, every
corruption read a whole 20 GB shard and wrote it back dense, chunk-faults
made 6.3 M preads a load, the home container's short ``timeout_s`` bounded
runs on it, and every served payload was compared with a 44 MB expected
payload made in Python for it while a load in 4 KiB chunks was 10,755
modelled preads (``counter-window`` and ``policies`` outlived 120 s).

Each twin is also inspected (``python -m xcache.engine.inspector TWIN`` must exit 0).
``python -m tests.containers.matrix [--all | CELL ...]`` runs cells and
prints one line each; tests/containers/test_container_matrix.py samples them.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "fixtures" / "models"
SCALES = (0.01, 0.05, 0.1)
#: the scenario a scattered expert cannot run (O_DIRECT cannot pack it)
DIRECT_ONLY = "state-direct"


@dataclass(frozen=True)
class Cell:
    """One container of the matrix: a preset, or a twin of a model description."""

    name: str
    preset: str | None = None
    model: str | None = None
    scale: float = 0.0
    expand_layers: tuple[int, ...] | None = None  # realistic.expand's selection
    expand_experts: int | None = None
    layers: tuple[int, ...] | None = None  # from-header --layers / --experts
    experts: int | None = None
    group: str | None = None  # from-header --group

    def make(self, work: Path) -> str:
        """The ``--container`` argument of this cell, writing its twin under work."""
        if self.preset is not None:
            return self.preset
        from xcache.fixtures import realistic  # noqa: PLC0415
        from xcache.fixtures.from_header import from_header  # noqa: PLC0415

        assert self.model is not None
        desc = realistic.load(DATA / f"{self.model}.json")
        ckpt = realistic.expand(desc, work / "checkpoint",
                                form="index",
                                layers=None if self.expand_layers is None
                                else list(self.expand_layers),
                                experts=self.expand_experts)
        twin = work / "twin"
        with contextlib.redirect_stdout(io.StringIO()):
            from_header(ckpt, twin, scale=self.scale,
                        layers=None if self.layers is None else list(self.layers),
                        experts=self.experts, group=self.group,
                        top_k=realistic.given_top_k(desc))  # a config without
        return str(twin)


def mtp_block(model: str) -> bool:
    """Whether a description has a multi-token-prediction block outside the
    decoder's layers with experts of its own (``mtp.layers.0...{E}...``)."""
    desc = json.loads((DATA / f"{model}.json").read_text("utf-8"))
    return any(p["name"].startswith("mtp.") and "{E}" in p["name"]
               for p in desc["tensors"])


def _model_facts(model: str) -> tuple[list[int], int, int]:
    """(MoE layers, expert count, decoder layers) of a model description."""
    from xcache import layout_rules as rules  # noqa: PLC0415
    from xcache.fixtures.detect import config_moe_layers  # noqa: PLC0415

    desc = json.loads((DATA / f"{model}.json").read_text("utf-8"))
    c = desc["config"]  # read as detection reads it (text_config, ffn_config)
    n_layers = rules.config_count(c, rules.LAYER_KEYS)[0]
    nextn = rules.config_count(c, ("num_nextn_predict_layers",), lo=0)
    n_total = n_layers + (nextn[0] if nextn else 0)
    moe = sorted(set(config_moe_layers(c) or range(n_total)) & set(range(n_total)))
    n_exp = rules.config_count(c, rules.EXPERT_KEYS)[0]
    return moe, n_exp, n_layers


def model_cells(model: str) -> list[Cell]:
    """Every twin cell of one model description: each selection at each scale."""
    moe, n_exp, n_layers = _model_facts(model)
    decoder_moe = [la for la in moe if la < n_layers]
    first = decoder_moe[:2]
    lead = list(range(first[0] - 1, first[-1] + 1)) if first[0] > 0 else first
    mid = decoder_moe[len(decoder_moe) // 2]
    sels: list[tuple[str, dict[str, Any]]] = [
        ("first", {"expand_layers": tuple(lead), "expand_experts": 8}),
        ("pick", {"layers": (mid, decoder_moe[-1]), "experts": min(n_exp, 16)}),
        ("wide", {"expand_layers": tuple(decoder_moe[-2:]),
                  "expand_experts": min(n_exp, 64)}),
    ]
    if n_layers < max(moe) + 1:  # multi-token-prediction layers follow
        sels.append(("mtp", {"expand_layers": (n_layers - 1, n_layers),
                             "expand_experts": 8}))
    elif mtp_block(model):  # the block's own group: one layer, so more
        # experts (8 would be fewer keys than the scenarios' 2 * top-k)
        sels.append(("mtp", {"expand_layers": (n_layers - 1,),
                             "expand_experts": min(n_exp, 64), "group": "mtp"}))
    return [Cell(f"{model}@{scale}:{sel}", model=model, scale=scale, **kw)
            for scale in SCALES for sel, kw in sels]


#: the preset the matrix leaves out unless asked (see the module docstring)
HUGE = "huge-sparse"


def all_cells(huge: bool = False) -> list[Cell]:
    """The whole matrix: the presets, then every model's twins, in a fixed order."""
    from xcache import fixtures  # noqa: PLC0415

    cells = [Cell(f"preset:{name}", preset=name) for name in fixtures.PRESETS
             if huge or name != HUGE]
    for path in sorted(DATA.glob("*.json")):
        cells += model_cells(path.stem)
    return cells


@dataclass
class Outcome:
    """What the gate's scenario set did on one cell."""

    cell: str
    runs: int
    checks: int
    failed: list[str]
    skipped: list[tuple[str, str]]
    seconds: float
    inspect: str = "OK"  # what engine.inspector said of a twin, when not OK

    @property
    def ok(self) -> bool:
        """Whether inspect passed, no check failed and every skip names its reason."""
        return (self.inspect == "OK" and not self.failed
                and all(reason for _, reason in self.skipped))

    def line(self) -> str:
        """One line for a person: PASS/FAIL, the cell, its counts."""
        skips = ", ".join(sorted({s for s, _ in self.skipped})) or "none"
        head = "PASS" if self.ok else "FAIL"
        said = "" if self.inspect == "OK" else f"; inspect: {self.inspect}"
        return (f"{head}  {self.cell}: {self.runs} scenario runs, {self.checks} "
                f"checks, {len(self.failed)} failed, skipped: {skips}{said} "
                f"({self.seconds:.1f} s)")


def run_cell(cell: Cell, work: Path) -> Outcome:
    """Run the gate's whole scenario set on the cell's container, quietly."""
    from xcache import engine  # noqa: PLC0415
    from xcache.gate.report import Report  # noqa: PLC0415
    from xcache.gate.scenarios import run_scenarios  # noqa: PLC0415

    t0 = time.monotonic()
    work.mkdir(parents=True, exist_ok=True)
    container = cell.make(work)
    inspected = "OK" if cell.preset is not None else inspect(container)
    report = Report()
    with contextlib.redirect_stdout(io.StringIO()):
        names = run_scenarios(engine, work / "gate", report, [], container=container)
    failed = [f"{c['scenario']} [{c['backend']}] {c['check']}: {c['detail']}"
              for c in report.failed]
    skipped = [(s["scenario"], s["reason"]) for s in report.skipped]
    return Outcome(cell.name, len(names), len(report.checks), failed, skipped,
                   time.monotonic() - t0, inspected)


def inspect(container: str) -> str:
    """``python -m xcache.engine.inspector CONTAINER``: "OK", else its exit status and
    first FAIL line."""
    from xcache.engine.inspector import main as inspect_main  # noqa: PLC0415

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = inspect_main([container])
    if rc == 0:
        return "OK"
    lines = [ln for ln in (out.getvalue() + err.getvalue()).splitlines()
             if ln.startswith("FAIL") or ln.startswith("error")] or ["(no line)"]
    return f"exit {rc}: {lines[0]}"


def main(argv: list[str] | None = None) -> int:
    """Run the named cells (or ``--all``); exit 1 if any fails."""
    ap = argparse.ArgumentParser(prog="python -m tests.containers.matrix")
    ap.add_argument("cells", nargs="*", help="cell names (see --list)")
    ap.add_argument("--all", action="store_true", help="run every cell")
    ap.add_argument("--list", action="store_true", help="list the cells and exit")
    ap.add_argument("--huge", action="store_true",
                    help="include the huge-sparse preset (see the docstring)")
    args = ap.parse_args(argv)
    cells = {c.name: c for c in all_cells(args.huge)}
    if args.list:
        print("\n".join(cells))
        return 0
    unknown = [n for n in args.cells if n not in cells]
    if unknown:
        print(f"unknown cell {unknown[0]!r}; --list names them", file=sys.stderr)
        return 2
    chosen = list(cells.values()) if args.all else [cells[n] for n in args.cells]
    t0 = time.monotonic()
    bad = 0
    for cell in chosen:
        work = Path(tempfile.mkdtemp(prefix="xc-matrix-"))
        try:
            out = run_cell(cell, work)
        finally:
            shutil.rmtree(work, ignore_errors=True)
        print(out.line(), flush=True)
        for f in out.failed[:5]:
            print(f"    {f}", flush=True)
        bad += not out.ok
    print(f"{len(chosen)} cells, {len(chosen) - bad} PASS, {bad} FAIL, "
          f"{time.monotonic() - t0:.0f} s", flush=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
