"""Only regular files are read as shards, traces, configs and layouts (docs/DESIGN.md).

A FIFO where a file belongs used to block ``open()`` forever (and the retry
on EINTR made Ctrl-C useless); a directory was reported as "missing or a
Git-LFS pointer", ``/dev/zero`` as "0 bytes". Every reader now opens with
O_NONBLOCK, asks fstat what it opened and refuses anything but a regular
file with one line naming the file and what it is. The FIFO cases run in a
subprocess with a timeout, so that a regression fails instead of hanging.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import ROOT as REPO
from xcache import engine
from xcache.oracle import safetensors as oracle_safetensors
from xcache.oracle.regular import NotRegularFileError, open_regular
from xcache.oracle.traces import read_trace

SHARD = "model-00001-of-00003.safetensors"
#: A guard, not a measurement: a run that blocks is killed and fails.
GUARD_S = 120


def why(path: Path | str, kind: str) -> str:
    """The one line every reader gives for a file that is not regular."""
    return f"{path}: is {kind}, not a regular file; only regular files are read"


def run(code: str) -> subprocess.CompletedProcess:
    """Run python code in a fresh interpreter of this tree; killed if it blocks."""
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=GUARD_S)


def with_shard_as(mixtral_dir: Path, tmp_path: Path, kind: str) -> Path:
    """A mixtral-mini copy whose first shard is a FIFO, a folder or /dev/zero."""
    folder = Path(shutil.copytree(mixtral_dir, tmp_path / f"mm-{kind}"))
    shard = folder / SHARD
    shard.unlink()
    if kind == "fifo":
        os.mkfifo(shard)
    elif kind == "dir":
        shard.mkdir()
    else:
        shard.symlink_to("/dev/zero")
    return folder


KINDS = [("fifo", "a FIFO"), ("dir", "a directory"), ("zero", "a character device")]


@pytest.mark.parametrize(("kind", "word"), KINDS)
def test_a_shard_that_is_not_a_regular_file_is_refused_by_the_engine(
        mixtral_dir, tmp_path, kind, word):
    """engine.Container: EngineIOError naming the shard and what it is, at once."""
    folder = with_shard_as(mixtral_dir, tmp_path, kind)
    p = run(f"from xcache import engine\ntry:\n    engine.Container({str(folder)!r})\n"
            f"except engine.EngineIOError as e:\n    print(e)\n")
    assert p.returncode == 0, p.stderr
    assert p.stdout == why(folder / SHARD, word) + "\n"


@pytest.mark.parametrize(("kind", "word"), KINDS)
def test_engine_inspect_names_the_shard_and_what_it_is(mixtral_dir, tmp_path,
                                                      kind, word):
    """engine.inspector ends (exit 1, one FAIL line) instead of blocking on a FIFO."""
    folder = with_shard_as(mixtral_dir, tmp_path, kind)
    p = run(f"import sys\nfrom xcache.engine.inspector import main\n"
            f"sys.exit(main([{str(folder)!r}]))\n")
    assert p.returncode == 1, p.stderr
    assert p.stdout + p.stderr == f"FAIL io: {why(folder / SHARD, word)}\n"


@pytest.mark.parametrize(("kind", "word"), KINDS)
def test_the_oracle_refuses_the_same_shards(mixtral_dir, tmp_path, kind, word):
    """oracle.safetensors.Container: NotRegularFileError, not "does not exist"."""
    folder = with_shard_as(mixtral_dir, tmp_path, kind)
    p = run(f"import xcache.oracle.safetensors as o\nfrom xcache.oracle.regular import "
            f"NotRegularFileError\ntry:\n    o.Container({str(folder)!r})\n"
            f"except NotRegularFileError as e:\n    print(e)\n")
    assert p.returncode == 0, p.stderr
    assert p.stdout == why(folder / SHARD, word) + "\n"


@pytest.mark.parametrize(("kind", "word"), KINDS)
def test_fixtures_from_header_names_the_shard(mixtral_dir, tmp_path, kind, word):
    """from-header: exit 2 and the one line, not "missing or a Git-LFS pointer"."""
    folder = with_shard_as(mixtral_dir, tmp_path, kind)
    p = run(f"import sys\nfrom xcache.fixtures.__main__ import main\n"
            f"sys.exit(main(['from-header', {str(folder)!r}, "
            f"{str(tmp_path / 'twin')!r}]))\n")
    assert p.returncode == 2, p.stderr
    assert p.stderr == f"error: {why(folder / SHARD, word)}\n"
    assert not (tmp_path / "twin").exists()


def test_the_open_of_a_fifo_returns_at_once_so_nothing_blocks_ctrl_c(tmp_path):
    """No writer ever opens the FIFO, yet every reader returns: no wait to interrupt."""
    fifo = tmp_path / "x.safetensors"
    os.mkfifo(fifo)
    with pytest.raises(engine.EngineIOError) as info:
        engine.Container(fifo)
    assert str(info.value) == why(fifo, "a FIFO")
    with pytest.raises(NotRegularFileError) as info2:
        oracle_safetensors.Container(fifo)
    assert str(info2.value) == why(fifo, "a FIFO")
    with pytest.raises(NotRegularFileError):
        open_regular(fifo)
    assert fifo.is_fifo()


def test_a_fifo_config_json_is_refused_by_detection(mixtral_dir, tmp_path):
    """engine.detect over a folder with a FIFO config.json: LayoutError naming it."""
    folder = Path(shutil.copytree(mixtral_dir, tmp_path / "mm"))
    os.mkfifo(folder / "config.json")
    from xcache.engine.detect import detect  # noqa: PLC0415

    with engine.Container(folder) as c, pytest.raises(engine.LayoutError) as info:
        detect(folder, container=c)
    assert str(info.value) == why(folder / "config.json", "a FIFO")


def test_a_fifo_config_json_is_refused_by_from_header(mixtral_dir, tmp_path):
    """from-header reads config.json first: a FIFO there is exit 2 naming it."""
    folder = Path(shutil.copytree(mixtral_dir, tmp_path / "mm"))
    os.mkfifo(folder / "config.json")
    p = run(f"import sys\nfrom xcache.fixtures.__main__ import main\n"
            f"sys.exit(main(['from-header', {str(folder)!r}, "
            f"{str(tmp_path / 'twin')!r}]))\n")
    assert p.returncode == 2, p.stderr
    assert p.stderr == f"error: {why(folder / 'config.json', 'a FIFO')}\n"


def test_a_fifo_layout_file_is_refused(k3_copy):
    """xcache-layout.toml as a FIFO: LayoutError naming the layout file, no wait."""
    toml = k3_copy.parent / "xcache-layout.toml"
    os.mkfifo(toml)
    with pytest.raises(engine.LayoutError) as info:
        engine.ExpertCache.open(k3_copy.parent, n_slots=8)
    assert str(info.value) == (
        f"layout file {toml}: cannot read it: is a FIFO, not a regular file; "
        f"only regular files are read")


@pytest.mark.parametrize("fmt", [None, "auto", "engine", "jsonl", "megatron", "csv",
                                 "int32", "pairs", "oracle-general", "text"])
def test_a_fifo_trace_is_refused_by_every_trace_reader(tmp_path, fmt):
    """read_trace of a FIFO, in each format: NotRegularFileError naming it."""
    fifo = tmp_path / "t.jsonl"
    os.mkfifo(fifo)
    with pytest.raises(NotRegularFileError) as info:
        read_trace(str(fifo), fmt=fmt, top_k=2, n_layers=2, n_experts=8)
    assert str(info.value) == why(fifo, "a FIFO")


def test_the_lab_given_a_fifo_trace_exits_2_naming_it(tmp_path):
    """replay.py lab on a FIFO trace: exit 2 and one line, instead of blocking."""
    fifo = tmp_path / "t.jsonl"
    os.mkfifo(fifo)
    env = dict(os.environ, PYTHONPATH=str(REPO))
    p = subprocess.run([sys.executable, "replay.py", "lab", "--quiet", str(fifo),
                        str(tmp_path / "out")], cwd=REPO, env=env,
                       capture_output=True, text=True, timeout=GUARD_S)
    assert p.returncode == 2, p.stderr
    assert p.stderr.strip().splitlines() == [f"replay.py lab: {why(fifo, 'a FIFO')}"]
