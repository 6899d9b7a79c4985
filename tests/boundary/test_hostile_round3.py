"""Hostile use, round 3: each reproduction, refused by the one writer or reader."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from xcache.fixtures.__main__ import main as fixtures
from xcache.lab.timing import cli as timing

ROOT = Path(__file__).resolve().parents[2]
MODELS = ROOT / "fixtures" / "models"


def _description(tmp: Path, **changes) -> Path:
    """gpt-oss-20b's description with ``changes`` (config keys under config)."""
    desc = json.loads((MODELS / "gpt-oss-20b.json").read_text())
    for k, v in changes.items():
        (desc["config"] if k.startswith("num_") else desc)[k] = v
    path = tmp / "desc.json"
    path.write_text(json.dumps(desc))
    return path


@pytest.mark.parametrize("form", ["headers", "lfs"])
@pytest.mark.parametrize("name", ["ABS", "../x.safetensors", "a/b.safetensors"])
def test_a_shard_name_never_leaves_out(tmp_path, capsys, form, name):
    """A shard_files name with a folder or '..' is one line, exit 2, nothing written."""
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    name = str(victim) if name == "ABS" else name
    desc = _description(tmp_path, shard_files=[name, "b.safetensors", "c.safetensors"])
    rc = fixtures(["checkpoint", str(desc), str(tmp_path / "OUT"), "--form", form])
    err = capsys.readouterr().err
    assert (rc, err) == (2, f"error: {desc}: shard 1: {name!r} is not a plain file "
                         "name (no folder, no '..'); it is written inside the "
                         "output folder only\n")
    assert sorted(os.listdir(tmp_path)) == ["desc.json", "victim.txt"]
    assert victim.read_text() == "precious\n"


@pytest.mark.parametrize("files,says", [
    (["a.safetensors", "b.safetensors", "a.safetensors"],
     "shard 3: 'a.safetensors' is also shard 1's name"),
    (["a.safetensors", "config.json", "c.safetensors"],
     "shard 2: 'config.json' is the name of the checkpoint's config"),
    (["model.safetensors.index.json", "b.safetensors", "c.safetensors"],
     "shard 1: 'model.safetensors.index.json' is the name of the checkpoint's "
     "index"),
])
def test_shard_names_are_distinct_from_each_other_and_the_other_files(
        tmp_path, capsys, files, says):
    """Two shards of one name, or a shard named as the config or the index: one
    line, exit 2, nothing written (a broken checkpoint was written, exit 0)."""
    desc = _description(tmp_path, shard_files=files)
    rc = fixtures(["checkpoint", str(desc), str(tmp_path / "OUT"), "--form",
                   "headers"])
    assert (rc, capsys.readouterr().err) == (2, f"error: {desc}: {says}\n")
    assert sorted(os.listdir(tmp_path)) == ["desc.json"]


@pytest.mark.parametrize("key,value,says", [
    ("num_hidden_layers", 1e9, "config: num_hidden_layers: expected an integer "
     "in 1..4096, got 1000000000.0"),
    ("num_local_experts", 10_000_000, "config: num_local_experts: expected an "
     "integer in 1..524288, got 10000000"),
    ("shards", 10**9, "shards: expected an integer in 1..100000, got 1000000000"),
])
def test_description_counts_are_bounded(tmp_path, capsys, key, value, says):
    """A description's layer, expert or shard count past its limit: one line at once."""
    desc = _description(tmp_path, **{key: value})
    rc = fixtures(["checkpoint", str(desc), str(tmp_path / "OUT")])
    assert (rc, capsys.readouterr().err) == (2, f"error: {desc}: {says}\n")


def test_checkpoint_into_a_symlinked_out_names_the_link(tmp_path, capsys):
    """OUT a symlink to a folder: refused naming it (was '[Errno 20] .link.tmp-')."""
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    rc = fixtures(["checkpoint", "mixtral-8x7b", str(tmp_path / "link")])
    assert (rc, capsys.readouterr().err) == (
        2, f"error: OUT {tmp_path / 'link'}: is a symbolic link; an output is "
        "written only at a real path (name the target itself)\n")
    assert os.listdir(tmp_path / "real") == []


def test_calibrate_never_replaces_a_users_file(tmp_path, capsys):
    """--calibrate at a trace: refused, the trace as it was."""
    trace = tmp_path / "my-trace.jsonl"
    trace.write_text('{"layer": 0}\n')
    assert timing.run(["--calibrate", str(trace)]) == 2
    assert capsys.readouterr().err == (
        f"replay.py time: --calibrate {trace}: exists and is not a model file "
        "written by --calibrate; refusing to replace it (remove it, or name "
        "another)\n")
    assert trace.read_text() == '{"layer": 0}\n'


def test_a_failed_calibration_leaves_no_model_file(tmp_path, capsys, monkeypatch):
    """A calibration interrupted leaves no MODEL, not even one of 0 bytes."""
    from xcache.lab.timing import calibrate

    def fail(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(calibrate, "calibrate", fail)
    with pytest.raises(KeyboardInterrupt):
        timing.run(["--calibrate", str(tmp_path / "m.json"), "--quiet"])
    assert os.listdir(tmp_path) == []


def test_calibrate_states_its_scratch_bytes_and_refuses_past_the_limit(
        tmp_path, capsys, monkeypatch):
    """A Mixtral-sized expert: the bytes said first, then refused past 4 GiB."""
    monkeypatch.delenv("XC_MAX_WRITE_BYTES", raising=False)
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    rc = timing.run(["--calibrate", str(tmp_path / "m.json"),
                     "--expert-bytes", str(352 << 20)])
    out, err = capsys.readouterr()
    assert rc == 2
    assert out == (f"calibration scratch files: 47,246,809,600 bytes (44.0 GiB) "
                   f"in {tmp_path}\n")
    assert err == ("replay.py time: --expert-bytes 369098752: calibration "
                   "scratch files: 47,246,809,600 bytes (44.0 GiB) is past the "
                   "limit of 4,294,967,296 bytes (4.0 GiB; --expert-bytes "
                   "smaller, or raise $XC_MAX_WRITE_BYTES)\n")
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("extra,named", [
    (["TRACE", "OUT"], "TRACE, OUTDIR"),
    (["--model", "m.toml", "--slots", "4"], "--model, --slots"),
    (["--policies", "lfu", "--tokens", "3"], "--tokens, --policies"),
])
def test_calibrate_refuses_what_it_would_ignore(tmp_path, capsys, monkeypatch,
                                               extra, named):
    """--calibrate given a trace or timing options: one line naming each, no
    model file, nothing measured."""
    (tmp_path / "m.toml").write_text("")
    (tmp_path / "TRACE").write_text("")
    monkeypatch.chdir(tmp_path)
    model = tmp_path / "cal.json"
    assert timing.run(["--calibrate", str(model), *extra]) == 2
    out, err = capsys.readouterr()
    assert (out, err) == ("", f"replay.py time: --calibrate measures this "
                          f"machine and times no trace: {named} would be "
                          "ignored (calibrate first, then time the trace with "
                          "--model MODEL)\n")
    assert not model.exists()


@pytest.mark.parametrize("tmpdir", ["a-file", "missing"])
def test_calibrate_names_a_tmpdir_it_cannot_write_in(tmp_path, capsys,
                                                     monkeypatch, tmpdir):
    """TMPDIR a file or missing: one line naming TMPDIR, not an errno."""
    (tmp_path / "a-file").write_text("x")
    monkeypatch.setenv("TMPDIR", str(tmp_path / tmpdir))
    model = tmp_path / "cal.json"
    assert timing.run(["--calibrate", str(model), "--quiet"]) == 2
    assert capsys.readouterr() == ("", "replay.py time: --calibrate writes its "
                                   "scratch experts in TMPDIR, and "
                                   f"{tmp_path / tmpdir} is not a folder it "
                                   "can write in\n")
    assert not model.exists()
    assert (tmp_path / "a-file").read_text() == "x"


@pytest.mark.parametrize("name,content,says", [
    ("deep.json", "[" * 100_000 + "]" * 100_000, "not valid JSON: a value "
     "nested too deeply"),
    ("deep.toml", "a = " + "[" * 100_000 + "]" * 100_000, "line 1: nested "
     "deeper than the limit of 64 levels (dotted keys, tables, arrays and "
     "inline tables)"),
    ("fifo", None, "cannot read it (is a FIFO, not a regular file; only "
     "regular files are read)"),
])
def test_a_hostile_model_file_is_one_line(tmp_path, capsys, name, content, says):
    """--model deep JSON/TOML or a FIFO: one line naming it, exit 2."""
    path = tmp_path / name
    if content is None:
        os.mkfifo(path)
    else:
        path.write_text(content)
    rc = timing.run(["mixtral8x7b_humaneval", str(tmp_path / "OUT"), "--model",
                     str(path)])
    assert (rc, capsys.readouterr().err) == (2, f"replay.py time: model {path}: "
                                             f"{says}\n")


@pytest.mark.parametrize("option,value,says", [
    ("--budget", "-3", "-3 is below 1"),
    ("--train-fraction", "nan", "nan is not a finite number in [0, 1)"),
])
def test_time_options_are_bounded_naming_the_option(tmp_path, capsys, option,
                                                   value, says):
    """--budget -3 and --train-fraction nan: argparse's line naming the option."""
    rc = timing.run(["mixtral8x7b_humaneval", str(tmp_path / "OUT"), option, value])
    err = capsys.readouterr().err
    assert rc == 2
    assert err.splitlines()[-1] == f"replay.py time: error: argument {option}: {says}"


def test_the_gates_own_junit_report_may_be_replaced(tmp_path):
    """--junit FILE replaces the gate's own report: its mark is the <testsuite>
    root the gate writes (the mark looked for <testsuites>, so a rerun over
    the same file was refused)."""
    from xcache.gate import cli
    from xcache.gate.outside import reporting

    report = tmp_path / "j.xml"
    report.write_text(reporting.junit("tinycache", []))
    assert cli.is_junit_report(report) is True
    (tmp_path / "other.xml").write_text("<?xml version='1.0'?>\n<html/>\n")
    assert cli.is_junit_report(tmp_path / "other.xml") is False


@pytest.mark.parametrize("target", ["user", "fifo"])
def test_repin_writes_only_over_a_pins_file(tmp_path, capsys, target):
    """--repin of a tree whose pins.json is a user's file or a FIFO: one line,
    exit 2, untouched (os.replace put the pins there, exit 0); a pins file is
    rewritten."""
    import shutil

    from xcache.gate import cli

    tree = tmp_path / "engine"
    shutil.copytree(ROOT / "engine", tree, ignore=shutil.ignore_patterns(
        "*.so", "__pycache__", "build"))
    pins = tree / "pins.json"
    pins.unlink()
    if target == "user":
        pins.write_text("mine\n")
    else:
        os.mkfifo(pins)
    assert cli.run(["--engine-src", str(tree), "--repin"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"--repin {pins}: exists" in err, err
    assert (pins.read_text() == "mine\n") if target == "user" else pins.is_fifo()
    pins.unlink()
    pins.write_text('{"sha256": {}}\n')
    assert cli.run(["--engine-src", str(tree), "--repin"]) == 0
    assert len(json.loads(pins.read_text())["sha256"]) > 10
