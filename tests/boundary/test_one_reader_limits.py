"""Every file a user hands a tool is read within a stated size: the one reader.

For every input option the tools' parsers declare (found as
tests/boundary/test_one_writer_one_reader.py walks them), a valid input is
made -- a file, or a folder and every file in it the tool reads -- and each
file in turn becomes a sparse file of a tebibyte.  The tool, run as a user
runs it (a subprocess, 2 GiB of address space, as the tool fuzzer runs its
cases), must refuse in one line naming the file and exit 2 (xcache-inspect
and ``fixtures verify``: their FAIL line, exit 1) within seconds.  When the
line states the reader's limit ("larger than the limit of N bytes"), a
sparse file of N + 1 bytes is refused by that limit too.  A reader that
reads a file whole without asking its size -- ``read_text``, ``json.load``,
``tomllib.load`` on a user's path -- fails here: a MemoryError, or a line
that grows to the address limit, or the deadline.  A new input option fails
:func:`test_every_input_option_has_a_valid_input` until it is given one.
"""

from __future__ import annotations

import re
import resource
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.boundary.cli_walk import _argv, _inputs

ROOT = Path(__file__).resolve().parents[2]
SEED = ROOT / "hunt" / "fuzz" / "corpus-tools" / "seed"
PY = sys.executable
TIB = 1 << 40
#: The address space of one run, as the tool fuzzer's (hunt/fuzz/case.py).
ADDRESS_BYTES = 2 << 30
#: Wall-clock seconds of one run.
DEADLINE_S = 30.0

#: How each command is run by a user (its argv from :func:`_argv` after it).
FRONT = {"gate": [PY, str(ROOT / "replay.py"), "gate"],
         "lab": [PY, str(ROOT / "replay.py"), "lab"],
         "predict": [PY, str(ROOT / "replay.py"), "predict"],
         "time": [PY, str(ROOT / "replay.py"), "time"],
         "inspect": [PY, "-m", "xcache.engine.inspector"]}
#: Commands whose exit 1 says a check failed (the gate: a scenario's;
#: xcache-inspect and ``fixtures verify``: the file's), nothing on stderr.
CHECKERS = {"gate", "inspect", "fixtures verify"}
#: The shard of the fixture ``fixtures identify`` is pointed at.
SHARD = "model-00001-of-00002.safetensors"
INDEX = "model.safetensors.index.json"


def _fixture(tmp: Path) -> Path:
    """The seed spec's fixture container (index, two shards)."""
    from xcache import fixtures

    fixtures.generate(str(SEED / "spec.toml"), tmp / "fx")
    return tmp / "fx"


def _ckpt(tmp: Path) -> Path:
    """The seed checkpoint (config, index, shard) with its layout file."""
    shutil.copytree(SEED / "ckpt", tmp / "ckpt")
    shutil.copyfile(SEED / "xcache-layout.toml", tmp / "ckpt" / "xcache-layout.toml")
    return tmp / "ckpt"


def _bare(tmp: Path) -> Path:
    """The seed checkpoint alone: its layout detected from config.json."""
    return Path(shutil.copytree(SEED / "ckpt", tmp / "ckpt"))


def _shard(tmp: Path) -> Path:
    """A shard of the seed spec's fixture container."""
    return _fixture(tmp) / SHARD


def _engine(tmp: Path) -> Path:
    """A copy of this checkout's engine tree (its sources, no build)."""
    return Path(shutil.copytree(ROOT / "engine", tmp / "engine", ignore=
                                shutil.ignore_patterns("*.so", "__pycache__")))


def _seed(name: str) -> Callable[[Path], Path]:
    def copy(tmp: Path) -> Path:
        return Path(shutil.copyfile(SEED / name, tmp / name))
    return copy


def _adapter(tmp: Path) -> Path:
    return Path(shutil.copytree(ROOT / "examples" / "tinycache", tmp / "adapter"))


#: Each input option: its valid inputs, each with the files made sparse in
#: turn (None: the file itself, or every file of the folder).  An engine
#: tree's 70 sources are sampled; a checkpoint's config.json is read only
#: when no layout file is beside it.
VALID: dict[tuple[str, str], list[tuple[Callable[[Path], Path], list[str] | None]]] = {
    ("gate", "engine_src"): [(_engine, ["pins.json", "_build.py", "csrc/xc_io.c"])],
    ("gate", "container"): [(_ckpt, None), (_bare, ["config.json"]),
                            (_seed("spec.toml"), None)],
    ("gate", "cache"): [(_adapter, None)],
    ("gate", "programs_file"): [(_seed("programs.json"), None)],
    ("lab", "trace"): [(_seed("trace.jsonl"), None)],
    ("predict", "trace"): [(_seed("trace.jsonl"), None)],
    ("predict", "train"): [(_seed("trace.jsonl"), None)],
    ("time", "trace"): [(_seed("trace.jsonl"), None)],
    ("time", "model"): [(_seed("model.json"), None), (_seed("model.toml"), None)],
    ("inspect", "path"): [(_ckpt, None), (_bare, ["config.json"])],
    ("inspect", "layout"): [(_seed("xcache-layout.toml"), None)],
    ("fixtures new", "spec"): [(_seed("spec.json"), None), (_seed("spec.toml"), None)],
    ("fixtures verify", "dir"): [(_fixture, None)],
    ("fixtures from-header", "src"): [(_ckpt, None)],
    ("fixtures checkpoint", "description"): [(_seed("desc.json"), None)],
    ("fixtures identify", "container"): [(_fixture, None)],
    ("fixtures identify", "file"): [(_shard, None)],
}


def test_every_input_option_has_a_valid_input():
    """The walk's 17 input options are exactly the ones given valid inputs here."""
    assert sorted(_inputs()) == sorted(VALID)


def _files(make: Callable[[Path], Path]) -> list[str]:
    """Every file of the valid input ``make`` makes ("" for a file itself)."""
    with tempfile.TemporaryDirectory() as tmp:
        made = make(Path(tmp))
        return sorted(str(p.relative_to(made)) for p in made.rglob("*")
                      if p.is_file()) if made.is_dir() else [""]


def _cases() -> list[tuple[str, str, int, str]]:
    """(command, option, which of its valid inputs, the file made sparse)."""
    return [(label, dest, i, rel) for (label, dest), inputs in VALID.items()
            for i, (make, files) in enumerate(inputs)
            for rel in (files if files is not None else _files(make))]


def _others(label: str, dest: str, given: Path, work: Path) -> dict[str, str | None]:
    """The command's other arguments: valid, so that ``given`` is what it refuses."""
    if label == "inspect" and dest == "layout":
        return {"path": str(_ckpt(work))}
    if label == "fixtures identify":  # a container and a shard of it
        folder = given.parent if dest == "file" else given
        return {"container": str(folder), "file": str(folder / SHARD)}
    trace = shutil.copyfile(SEED / "trace.jsonl", work / "base.jsonl")
    return {"programs_file": None, "trace": str(trace), "outdir": str(work / "OUT"),
            "dir": str(work / "OUT"), "out": str(work / "OUT")}


def _limits() -> None:  # preexec_fn: the child's bounds, as the fuzzer's
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_BYTES, ADDRESS_BYTES))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def _run(label: str, argv: list[str], cwd: Path) -> subprocess.CompletedProcess:
    """The command as a user runs it, bounded as the fuzzer bounds a case."""
    front = FRONT.get(label, [PY, "-m", "xcache.fixtures"])
    return subprocess.run(front + argv, cwd=cwd, capture_output=True, text=True,
                          timeout=DEADLINE_S, preexec_fn=_limits,
                          stdin=subprocess.DEVNULL)


def _said(label: str, p: subprocess.CompletedProcess, name: str) -> str:
    """What the run said of the file ``name``: its one refusal line (exit
    2), a checker's lines naming it, or "" (read no further than a valid
    file is).  Fails on a traceback, an exit 2 that is not one line naming
    the file, or an exit the command does not document."""
    assert "Traceback" not in p.stdout + p.stderr, p.stderr[-3000:]
    if p.returncode == 2:
        assert p.stderr.count("\n") == 1 and name in p.stderr, (p.stdout, p.stderr)
        return p.stderr.strip()
    assert p.returncode == 0 or (p.returncode == 1 and label in CHECKERS
                                 and p.stderr == ""), (p.stdout, p.stderr)
    return "\n".join(x for x in p.stdout.splitlines() if name in x)


#: The limit each refusal of a tebibyte states (none: refused by what the
#: file is, or read no further than a valid file's bytes).
MIB = 1 << 20
LIMITS: dict[tuple[str, str, int, str], int] = {
    ("gate", "engine_src", 0, "pins.json"): MIB,
    ("gate", "engine_src", 0, "_build.py"): 16 * MIB,
    ("gate", "engine_src", 0, "csrc/xc_io.c"): 16 * MIB,
    ("gate", "container", 0, INDEX): 100_000_000,
    ("gate", "container", 0, "xcache-layout.toml"): MIB,
    ("gate", "container", 1, "config.json"): 256 * MIB,
    ("gate", "container", 2, ""): 16 * MIB,
    ("gate", "cache", 0, "shim.c"): 64 * MIB,
    ("gate", "cache", 0, "tinycache.c"): 64 * MIB,
    ("gate", "cache", 0, "tinycache.h"): 64 * MIB,
    ("gate", "cache", 0, "xcs.toml"): MIB,
    ("gate", "programs_file", 0, ""): 256 * MIB,
    ("lab", "trace", 0, ""): 4096 * MIB,
    ("predict", "trace", 0, ""): 4096 * MIB,
    ("predict", "train", 0, ""): 4096 * MIB,
    ("time", "trace", 0, ""): 4096 * MIB,
    ("time", "model", 0, ""): MIB,
    ("time", "model", 1, ""): MIB,
    ("inspect", "path", 0, INDEX): 100_000_000,
    ("inspect", "path", 0, "xcache-layout.toml"): MIB,
    ("inspect", "path", 1, "config.json"): 256 * MIB,
    ("inspect", "layout", 0, ""): MIB,
    ("fixtures new", "spec", 0, ""): 16 * MIB,
    ("fixtures new", "spec", 1, ""): 16 * MIB,
    ("fixtures verify", "dir", 0, INDEX): 256 * MIB,
    ("fixtures from-header", "src", 0, "config.json"): 256 * MIB,
    ("fixtures from-header", "src", 0, INDEX): 256 * MIB,
    ("fixtures from-header", "src", 0, "xcache-layout.toml"): MIB,
    ("fixtures checkpoint", "description", 0, ""): 256 * MIB,
    ("fixtures identify", "container", 0, INDEX): 256 * MIB,
}


# Under CI's sanitizer run the tool's subprocess inherits the ASan preload:
# ASan reserves terabytes of shadow memory, past the 2 GiB address-space cap.
@pytest.mark.nosan
@pytest.mark.parametrize("label,dest,which,rel", _cases())
def test_a_sparse_file_where_a_tool_reads_is_refused_by_its_limit(
        tmp_path, label, dest, which, rel):
    """A tebibyte (a hole) as the file an input option names, or as a file
    of its folder: one line naming it, exit 2 (a checker's FAIL line, exit
    1), nothing written; a limit the line states refuses one byte more."""
    size = TIB
    while size:
        work = tmp_path / str(size)
        work.mkdir()
        given = VALID[(label, dest)][which][0](work)
        target = given / rel if rel else given
        with open(target, "wb") as f:
            f.truncate(size)
        argv = _argv(label, {**_others(label, dest, given, work), dest: str(given)},
                     {})
        ran = _run(label, argv, work)
        said = _said(label, ran, target.name)
        assert ran.returncode != 2 or not (work / "OUT").exists()
        limit = re.search(r"limit of ([\d,]+)", said)
        if size != TIB:  # one byte past the limit the tebibyte's refusal stated
            assert limit is not None and int(limit.group(1).replace(",", "")) \
                == size - 1, said
            break
        stated = int(limit.group(1).replace(",", "")) if limit else None
        assert stated == LIMITS.get((label, dest, which, rel)), said
        size = stated + 1 if stated else 0


@pytest.mark.parametrize("module", ["xcache.oracle.regular", "xcache.engine.regular"])
def test_read_regular_reads_its_limit_and_refuses_one_byte_more(tmp_path, module):
    """Both twins: a file of the limit is read; one byte more is one OSError line
    naming the file, the limit and what it is, before a byte is read."""
    import importlib

    regular = importlib.import_module(module)
    p = tmp_path / "f.json"
    p.write_bytes(b"x" * 10)
    assert regular.read_regular(p, 10) == b"x" * 10
    p.write_bytes(b"x" * 11)
    with pytest.raises(regular.TooLargeError) as ei:
        regular.read_regular(p, 10, "a layout file")
    assert str(ei.value) == f"{p}: larger than the limit of 10 bytes for a layout file"
    assert (ei.value.strerror, ei.value.limit) == (
        "larger than the limit of 10 bytes for a layout file", 10)
    with open(p, "wb") as f:
        f.truncate(TIB)
    with pytest.raises(regular.TooLargeError):  # asked its size: nothing read
        regular.read_regular(p)


def test_a_trace_line_past_its_limit_is_refused_naming_the_line(tmp_path, monkeypatch):
    """A text trace's line longer than the limit: TraceFormatError at that line
    (a terabyte of NUL bytes is one line)."""
    from xcache.oracle.traces import TraceFormatError, model, read_trace

    monkeypatch.setattr(model, "MAX_LINE_CHARS", 100)
    p = tmp_path / "t.jsonl"
    p.write_text('{"tok": 0, "layers": [[1, 2]]}\n' + "x" * 101 + "\n")
    with pytest.raises(TraceFormatError) as ei:
        read_trace(p)
    assert str(ei.value) == f"{p}:2: longer than the limit of 100 characters for a line"
