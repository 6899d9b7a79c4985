"""Work stated before it starts: each command that writes a container or scratch
files says how many bytes first and refuses past its limit or the free space
(``fixtures.ownership.check_room``), one line, exit 2, nothing written."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import pytest

from xcache.fixtures.__main__ import main as fixtures
from xcache.lab.timing import cli as timing

ROOT = Path(__file__).resolve().parents[2]
MODELS = ROOT / "fixtures" / "models"
#: What the free space is said to be in these tests.
FREE = 4096


class _Tiny:
    """An os.statvfs result with FREE bytes free."""

    f_bavail, f_frsize = 1, FREE


@pytest.fixture
def full_disk(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every folder reports FREE bytes free."""
    monkeypatch.setattr(os, "statvfs", lambda path: _Tiny())


def _nothing_but(tmp: Path, *names: str) -> None:
    assert sorted(os.listdir(tmp)) == sorted(names)


def _free_line(err: str, where: Path) -> None:
    assert err.count("\n") == 1, err
    assert re.search(rf"bytes \([0-9.]+ [KMG]iB\) but {re.escape(str(where))} "
                     rf"has {FREE:,} bytes \(4.0 KiB\) free\n$", err), err


def test_new_refuses_a_twin_past_the_free_space(tmp_path, capsys, full_disk):
    """`new k3-mini OUT` on a disk with 4 KiB free: one line, exit 2, no OUT
    (it wrote until the disk was full)."""
    assert fixtures(["new", "k3-mini", str(tmp_path / "OUT")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: k3-mini: its container: "), err
    _free_line(err, tmp_path)
    _nothing_but(tmp_path)


def test_from_header_refuses_a_twin_past_the_free_space(tmp_path, capsys,
                                                       monkeypatch):
    """`from-header SRC OUT` on a disk with 4 KiB free: one line, exit 2, no OUT."""
    src = tmp_path / "src"
    assert fixtures(["checkpoint", str(MODELS / "olmoe-1b-7b.json"), str(src),
                     "--form", "headers"]) == 0
    capsys.readouterr()
    monkeypatch.setattr(os, "statvfs", lambda path: _Tiny())
    assert fixtures(["from-header", str(src), str(tmp_path / "OUT")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {src} at --scale 0.0117 (dimensions from "
                          f"{src / 'config.json'}): its container: "), err
    _free_line(err, tmp_path)
    _nothing_but(tmp_path, "src")


@pytest.mark.parametrize("form", ["index", "headers", "lfs"])
def test_checkpoint_states_its_bytes_and_refuses_past_the_limit(
        tmp_path, capsys, form):
    """`checkpoint` says at most how many bytes first and refuses past
    --max-bytes (it had neither: deepseek-v3's index alone is 8.9 MB)."""
    out = tmp_path / "OUT"
    assert fixtures(["checkpoint", str(MODELS / "deepseek-v3.json"), str(out),
                     "--form", form, "--max-bytes", "1M"]) == 2
    got = capsys.readouterr()
    what = f"{MODELS / 'deepseek-v3.json'}: checkpoint {out} ({form} form, at most)"
    said = re.fullmatch(rf"{re.escape(what)}: ([0-9,]+ bytes \([0-9.]+ MiB\)) "
                        f"in {re.escape(str(tmp_path))}\n", got.out)
    assert said, got.out
    assert got.err == (f"error: {what}: {said.group(1)} is past the limit of "
                       "1,048,576 bytes (1.0 MiB; --max-bytes SIZE, or "
                       "$XC_MAX_WRITE_BYTES)\n")
    _nothing_but(tmp_path)


def test_checkpoint_refuses_past_the_free_space(tmp_path, capsys, full_disk):
    """`checkpoint` on a disk with 4 KiB free: one line, exit 2, no OUT."""
    assert fixtures(["checkpoint", str(MODELS / "gpt-oss-20b.json"),
                     str(tmp_path / "OUT")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {MODELS / 'gpt-oss-20b.json'}: checkpoint "
                          f"{tmp_path / 'OUT'} (index form, at most): "), err
    _free_line(err, tmp_path)
    _nothing_but(tmp_path)


def test_calibrate_refuses_scratch_files_past_the_free_space(
        tmp_path, capsys, monkeypatch: Any, full_disk):
    """`time --calibrate MODEL` whose scratch files TMPDIR cannot hold: one
    line naming --expert-bytes, exit 2, no MODEL."""
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    assert timing.run(["--calibrate", str(tmp_path / "m.json"),
                       "--expert-bytes", "65536", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("replay.py time: --expert-bytes 65536: calibration "
                          "scratch files: "), err
    _free_line(err, tmp_path)
    _nothing_but(tmp_path)


@pytest.mark.parametrize("option", ["--export-csv", "--export-jsonl",
                                    "--export-oracle-general"])
def test_a_lab_export_is_stated_and_refused_past_the_limit(
        tmp_path, capsys, monkeypatch, option):
    """A lab export past XC_MAX_WRITE_BYTES: said first, one line, exit 2,
    before the sweep, nothing written (it was written whatever its size)."""
    from xcache.lab import cli as lab

    monkeypatch.setenv("XC_MAX_WRITE_BYTES", "1000")
    monkeypatch.setattr(lab, "STATE_FROM", 0)
    export = tmp_path / "export"
    rc = lab.run([str(ROOT / "fixtures" / "traces" / "mixtral8x7b_humaneval.jsonl"),
                  str(tmp_path / "OUT"), option, str(export), "--quiet"])
    got = capsys.readouterr()
    what = f"{option} {export} (at most)"
    said = re.fullmatch(rf"{re.escape(what)}: ([0-9,]+ bytes \([0-9.]+ [KM]iB\)) "
                        f"in {re.escape(str(tmp_path))}\n", got.out)
    assert (rc, bool(said)) == (2, True), got
    assert got.err == (f"replay.py lab: {what}: {said.group(1)} is past the "
                       "limit of 1,000 bytes (1000 bytes; raise "
                       "$XC_MAX_WRITE_BYTES)\n")
    _nothing_but(tmp_path)


def test_a_lab_export_is_refused_past_the_free_space(tmp_path, capsys,
                                                     full_disk):
    """--export-csv on a disk with 4 KiB free: one line, exit 2, nothing written."""
    from xcache.lab import cli as lab

    export = tmp_path / "export.csv"
    assert lab.run([str(ROOT / "fixtures" / "traces" / "mixtral8x7b_humaneval.jsonl"),
                    str(tmp_path / "OUT"), "--export-csv", str(export),
                    "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"replay.py lab: --export-csv {export} (at most): "), err
    _free_line(err, tmp_path)
    _nothing_but(tmp_path)
