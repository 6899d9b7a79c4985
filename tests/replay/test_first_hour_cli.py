"""What a new user's first commands meet: a mistyped command, options the lab
and predict refuse before any work starts, the "wrote" lines, predict's
progress counted in the unit of its summary."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

import xcache.lab.sweep as sweep_mod
from xcache import replay

ROUTES = [[[0, 1], [2, 3]], [[0, 2], [2, 3]], [[1, 0], [3, 1]],
          [[0, 3], [2, 0]], [[3, 1], [1, 2]], [[0, 1], [2, 3]]] * 4


def tiny(folder: Path) -> str:
    """A 24-token, 2-layer x 4-expert top-2 trace as per-token JSONL."""
    path = folder / "tiny.jsonl"
    path.write_text("".join(json.dumps({"tok": t + 1, "layers": layers}) + "\n"
                            for t, layers in enumerate(ROUTES)))
    return str(path)


@pytest.mark.parametrize(("typo", "near"), [("gaet", "gate"), ("lba", "lab"),
                                            ("predcit", "predict"),
                                            ("tmie", "time")])
def test_a_mistyped_command_is_named_with_the_known_ones(typo, near, tmp_path,
                                                         capsys):
    """`replay.py gaet DIR`: the unknown word, the commands, the nearest; exit 2."""
    assert replay.main([typo, str(tmp_path)]) == 2
    assert capsys.readouterr().err == (
        f"replay.py: unknown command {typo!r} (the commands are gate, lab, "
        f"predict, time; gate, the default, takes one folder); did you mean "
        f"{near!r}?\n")


def test_two_folders_or_an_option_stay_the_gates_own_errors(tmp_path, capsys):
    """A path first (or a bad option) is not a command: the gate's usage error."""
    assert replay.main([str(tmp_path / "a"), str(tmp_path / "b")]) == 2
    assert capsys.readouterr().err.splitlines()[-1] == (
        f"replay.py: error: unrecognized arguments: {tmp_path / 'b'}")


@pytest.mark.parametrize(("options", "message"), [
    (["--policies", "lru,foo"], "--policies: unknown policy 'foo'; valid: "),
    (["--policies", "lru,hotness:period=x"],
     "--policies: policy hotness: bad parameter 'period=x'"),
    (["--fractions", "0.5,1.5"], "--fractions: 1.5 is above 1 (a fraction of "
                                 "the working set is in (0, 1])"),
])
def test_lab_refuses_before_any_progress_bar(options, message, tmp_path, capsys):
    """A bad policy or a fraction above 1: one stderr line, no bar, no files."""
    out = tmp_path / "out"
    assert replay.main(["lab", tiny(tmp_path), str(out), *options]) == 2
    captured = capsys.readouterr()
    assert captured.err.startswith(f"replay.py lab: {message}")
    assert captured.err.count("\n") == 1 and captured.out == ""
    assert not out.exists()


def test_lab_takes_a_whole_working_set_and_says_what_it_wrote(tmp_path, capsys):
    """--fractions 1 is the whole working set; the last line names the files."""
    out = tmp_path / "out"
    assert replay.main(["lab", tiny(tmp_path), str(out), "--fractions", "1",
                        "--policies", "lru", "--quiet"]) == 0
    last = capsys.readouterr().out.splitlines()[-1]
    assert last == f"wrote {out / 'results.csv'}, results.json and mrc.png"
    assert sorted(p.name for p in out.iterdir()) == [
        "mrc.png", "results.csv", "results.json"]


def test_predict_counts_its_bar_in_test_steps(tmp_path, capsys, monkeypatch):
    """The bar's total and its end are the summary's test steps (12, not 12 x 5 x 5)."""
    bars = []

    class Seen(sweep_mod._Bar):
        def __init__(self, total: int, quiet: bool, unit: str = "cell") -> None:
            super().__init__(total, True, unit)
            bars.append(self)

    monkeypatch.setattr(sweep_mod, "_Bar", Seen)
    out = tmp_path / "out"
    assert replay.main(["predict", tiny(tmp_path), str(out), "--split", "0.5"]) == 0
    text = capsys.readouterr().out
    steps = int(re.search(r": (\d+) test steps;", text).group(1))
    assert steps == 12 * 2  # the last 12 tokens x 2 layers
    assert [(b.total, b.unit, b.done) for b in bars] == [(steps, "test step", steps)]
    assert text.splitlines()[-1] == (
        f"wrote {out / 'predict.csv'}, predict.json and predict.png")


def test_step_progress_scales_every_cells_work():
    """Two cells of 30 units over 10 test steps: halfway is 5, the end is 10."""
    from xcache.lab.predict.cli import StepProgress

    p = StepProgress([30, 30], 10)
    assert p.total == 10
    p.report(0, 30)
    assert p.done() == 5
    p.report(1, 29)
    assert p.done() == 9
    p.finish(1)
    assert p.done() == 10
