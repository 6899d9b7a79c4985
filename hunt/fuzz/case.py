"""One case of the tool fuzzer: what it is, how it runs bounded, how it is judged.

A :class:`Case` is one command of a tool (a :class:`Target`) run in a fresh
folder holding the seed inputs (``hunt/fuzz/corpus-tools/seed``) with
some of them replaced.  :func:`run_case` runs it in a subprocess limited
to 2 GiB of address space (``RLIMIT_AS``), :data:`CPU_SECONDS` of CPU,
:data:`FILE_BYTES` per written file and a wall-clock timeout;
:func:`judge` accepts only success (exit 0; exit 1 where the tool
documents 1 as "a check found problems" and printed no traceback) or exit
2 with exactly one line on stderr that names the changed file or option.

A replaced file's bytes may be one of the markers :data:`DELETE` (the seed
file is removed), :data:`FIFO` (a named pipe stands there) or :data:`DIR`
(a folder does): only regular files are read as the tools' inputs; or
:func:`sparse` (a file of that many bytes, a hole with no block written:
every reader has a limit of its size and asks it first).
"""

from __future__ import annotations

import base64
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
CORPUS = Path(__file__).resolve().parent / "corpus-tools"
SEED = CORPUS / "seed"
CASES = CORPUS / "cases"
#: The checkout's own code: a traceback frame elsewhere under ROOT (a venv
#: made inside the checkout, as CI makes .venv-ci) is not the project's.
PROJECT_TOPS = frozenset({"engine", "oracle", "fixtures", "gate", "lab",
                          "faults", "hunt", "replay.py"})

#: Address space of one case (the issue's bound).
ADDRESS_BYTES = 2 << 30
#: CPU seconds of one case (a loop over a size taken on trust ends here).
CPU_SECONDS = 10
#: Largest file one case may write (a twin of a trusted size ends here).
FILE_BYTES = 64 << 20
#: The write limit the tools are given (``XC_MAX_WRITE_BYTES``): below
#: :data:`FILE_BYTES`, so a size check that works refuses first.
WRITE_LIMIT_BYTES = 32 << 20
#: Wall-clock seconds of one case (a blocked open ends here).
WALL_SECONDS = 30.0

PY = sys.executable

#: Markers a case's file may hold instead of bytes: remove the seed file,
#: put a FIFO there, put a folder there.
DELETE, FIFO, DIR = b"\0DELETE", b"\0FIFO", b"\0DIR"
#: The marker of a sparse file, its size after it in decimal.
SPARSE = b"\0SPARSE "


def sparse(size: int) -> bytes:
    """The marker of a sparse file of ``size`` bytes (all a hole)."""
    return SPARSE + str(size).encode()


@dataclass
class Case:
    """One command over the seed inputs with some of them replaced."""

    target: str
    note: str  # what was changed, for the report
    files: dict[str, bytes] = field(default_factory=dict)  # path -> new bytes
    args: list[str] = field(default_factory=list)  # arguments after the target's own
    names: tuple[str, ...] = ()  # words an exit-2 line must hold one of

    def to_json(self) -> dict[str, Any]:
        """The case as a corpus file's JSON (bytes as text when UTF-8, else base64)."""
        files = {}
        for k, v in self.files.items():
            try:
                files[k] = {"text": v.decode("utf-8")}
            except UnicodeDecodeError:
                files[k] = {"base64": base64.b64encode(v).decode()}
        return {"target": self.target, "note": self.note, "files": files,
                "args": self.args, "names": list(self.names)}

    @staticmethod
    def from_json(d: dict[str, Any]) -> Case:
        """The inverse of :meth:`to_json`."""
        files = {k: (v["text"].encode("utf-8") if "text" in v
                     else base64.b64decode(v["base64"]))
                 for k, v in d["files"].items()}
        return Case(d["target"], d["note"], files, list(d["args"]),
                    tuple(d.get("names", ())))


@dataclass(frozen=True)
class Target:
    """A tool command: the seed files it needs and its argument list."""

    name: str
    argv: Callable[[Path], list[str]]  # case folder -> command
    seeds: tuple[str, ...]  # seed paths copied into the case folder
    exit1_ok: bool = False  # 1 documented as "a check found problems"


def _fixture(work: Path) -> Path:
    """The tiny fixture container made from the seed spec (once per ``work``)."""
    out = work / "_fixture"
    if not (out / "model.safetensors.index.json").exists():
        subprocess.run([PY, "-m", "xcache.fixtures", "new", str(SEED / "spec.toml"),
                        str(out)], check=True, capture_output=True, cwd=ROOT,
                       env=_env())
    return out


@dataclass
class Outcome:
    """What one case did."""

    rc: int | None  # None: timed out
    stdout: str
    stderr: str
    seconds: float

    def signature(self) -> tuple[str, str]:
        """(kind, innermost project file) of a bad outcome."""
        text = self.stderr + self.stdout
        frames = re.findall(r'File "([^"]+)", line \d+', text)
        where = ""
        for f in reversed(frames):
            p = Path(f)
            if not p.is_absolute():  # "<string>", "<frozen ...>"
                continue
            try:
                rel = p.resolve().relative_to(ROOT)
            except ValueError:
                continue
            if rel.parts and rel.parts[0] not in PROJECT_TOPS:
                continue  # a virtual environment inside the checkout (.venv-ci)
            where = str(rel)
            break
        if self.rc is None:
            return "timeout", where
        if self.rc < 0:
            import signal
            try:
                return f"signal {signal.Signals(-self.rc).name}", where
            except ValueError:
                return f"signal {-self.rc}", where
        if "Traceback" in text:
            m = re.findall(r"^(\w+(?:\.\w+)*(?:Error|Exception|Exit|Interrupt))\b",
                           text, re.M)
            return (m[-1] if m else "traceback"), where
        # no traceback: the message's shape tells one refusal from another
        line = (self.stderr.strip() or self.stdout.strip()).splitlines()
        # cut first: the pattern is quadratic on a long word (a 1 MB key)
        shape = re.sub(r"'[^']*'|\"[^\"]*\"|\S*/\S*|-?\d[\d.e+-]*", "_",
                       line[-1][:200] if line else "")[:60]
        return f"exit {self.rc}: {shape}", where


def judge(case: Case, target: Target, out: Outcome) -> str | None:
    """None if the outcome is acceptable, else why it is a finding."""
    text = out.stdout + out.stderr
    if out.rc is None:
        return f"still running after {WALL_SECONDS:g} s"
    if out.rc < 0:
        return f"killed by signal {-out.rc}"
    if "Traceback (most recent call last)" in text:
        return f"exit {out.rc} with a traceback"
    if out.rc == 0:
        return None
    if out.rc == 1 and target.exit1_ok:
        last = out.stdout.strip().splitlines()[-1:] or [""]
        if out.stderr.strip() or not last[0].startswith("FAIL"):
            return "exit 1 without the FAIL line that reports problems"
        return None
    if out.rc != 2:
        return f"exit {out.rc}"
    lines = out.stderr.strip("\n").split("\n")
    if lines[0].startswith("usage:") and re.search(
            r": error: (argument |unrecognized arguments)", lines[-1]):
        lines = lines[-1:]  # argparse's usage error: its last line names the option
    if len(lines) != 1 or not lines[0].strip():
        return f"exit 2 with {len(lines)} lines on stderr, not one"
    if case.names and not any(n.lower() in lines[0].lower() for n in case.names):
        return f"exit 2, but the line names none of {', '.join(case.names)}"
    return None


def _env() -> dict[str, str]:
    # a case runs the plain build with no sanitizer preloaded: AddressSanitizer
    # cannot reserve its shadow memory under the case's 2 GiB address space
    env = {k: v for k, v in os.environ.items() if not k.startswith("XC_")
           and k not in ("LD_PRELOAD", "ASAN_OPTIONS", "UBSAN_OPTIONS")}
    env.update(PYTHONPATH=str(ROOT), OPENBLAS_NUM_THREADS="1",
               OMP_NUM_THREADS="1", MPLBACKEND="Agg", PYTHONHASHSEED="0",
               # the tools' own write limit, under the case's file limit: a
               # container past it is refused before a byte is written
               XC_MAX_WRITE_BYTES=str(WRITE_LIMIT_BYTES))
    return env


def _limits() -> None:  # preexec_fn: runs in the child before exec
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_BYTES, ADDRESS_BYTES))
    resource.setrlimit(resource.RLIMIT_CPU, (CPU_SECONDS, CPU_SECONDS + 2))
    resource.setrlimit(resource.RLIMIT_FSIZE, (FILE_BYTES, FILE_BYTES))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    os.setsid()


def run_case(case: Case, target: Target, work: Path) -> tuple[Outcome, Path]:
    """Lay out ``case`` for ``target`` in a fresh folder under ``work`` and run it."""
    d = Path(tempfile.mkdtemp(prefix=f"{case.target}-", dir=work))
    for s in target.seeds:
        src = _fixture(work) if s == "@fixture" else SEED / s
        dst = d / ("fx" if s == "@fixture" else s)
        if src.is_dir():
            shutil.copytree(src, dst)
        else:
            shutil.copy(src, dst)
    for rel, data in case.files.items():
        p = d / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        if data in (DELETE, FIFO, DIR):
            if p.is_dir() and not p.is_symlink():
                shutil.rmtree(p)
            else:
                p.unlink(missing_ok=True)
            if data == FIFO:
                os.mkfifo(p)
            elif data == DIR:
                p.mkdir()
        elif data.startswith(SPARSE):
            with open(p, "wb") as f:
                f.truncate(int(data[len(SPARSE):]))
        else:
            p.write_bytes(data)
    cmd = target.argv(d) + case.args
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, cwd=d, env=_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                            preexec_fn=_limits)
    try:
        so, se = proc.communicate(timeout=WALL_SECONDS)
        rc: int | None = proc.returncode
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, 9)
        so, se = proc.communicate()
        rc = None
    out = Outcome(rc, so.decode("utf-8", "replace"), se.decode("utf-8", "replace"),
                  time.monotonic() - t0)
    return out, d
