"""Ctrl-C while a lab moves its result set in: the set is held whole
(``fixtures.ownership.install_set``) and the tool then says the folder holds
this run's files -- not "left as it was" -- exit 130, nothing removed."""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path

import pytest

from tests.helpers import TRACES_DIR
from xcache.fixtures import ownership
from xcache.replay import main

MIXTRAL = str(TRACES_DIR / "mixtral8x7b_humaneval.jsonl")
OLMOE = str(TRACES_DIR / "olmoe_299.jsonl")


def ctrl_c_at_first_move(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Send SIGINT to this process as install_set moves the first file of a
    set in; the names it moves are listed as they go."""
    real = os.replace
    moved: list[str] = []

    def replace(src: str, dst: str) -> None:
        if sys._getframe(1).f_code.co_name == "install_set":
            if not moved:
                os.kill(os.getpid(), signal.SIGINT)
            moved.append(os.path.basename(dst))
        real(src, dst)

    monkeypatch.setattr(ownership.os, "replace", replace)
    return moved


def test_install_set_raises_set_installed_once_whole(tmp_path: Path, monkeypatch):
    """The Ctrl-C waits until every file is in place, then is SetInstalled."""
    for name in ("a", "b"):
        (tmp_path / f".{name}.new").write_text("new")
    moved = ctrl_c_at_first_move(monkeypatch)
    with pytest.raises(ownership.SetInstalled) as info:
        ownership.install_set(tmp_path, {n: str(tmp_path / f".{n}.new")
                                         for n in ("a", "b")}, ("a", "b", "c"),
                              option="OUTDIR", is_ours=None)
    assert moved == ["a", "b"] and info.value.folder == str(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "b"]
    assert isinstance(info.value, KeyboardInterrupt)


@pytest.mark.parametrize("tool, args, record", [
    ("lab", [MIXTRAL, "--slots", "8", "--policies", "lru", "--quiet",
             "--executor", "thread"], "results.json"),
    ("predict", [MIXTRAL, "--split", "0.9", "--slots", "40", "--predictors",
                 "previous", "--budget", "1"], "predict.json"),
    ("time", [OLMOE, "--tokens", "4", "--quiet", "--slots", "40",
              "--executor", "thread", "--predictors", "none"], "time.json"),
])
def test_ctrl_c_while_the_set_moves_in_says_it_is_there(tool, args, record,
                                                        tmp_path, monkeypatch,
                                                        capsys):
    """Each lab: exit 130, one line saying OUTDIR holds this run's files,
    and the set is there whole (its record readable)."""
    out = tmp_path / "out"
    moved = ctrl_c_at_first_move(monkeypatch)
    argv = [tool, args[0], str(out), *args[1:]]
    assert main(argv) == 130
    err = capsys.readouterr().err
    assert err.splitlines()[-1].endswith(
        f": interrupted; {out} holds this run's files"), err
    assert moved and (out / record).is_file()
    json.loads((out / record).read_text())
