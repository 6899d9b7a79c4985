"""The tool fuzzer: every file and argument a user hands the tools, made hostile.

``python -m faults.fuzz tools --seconds N`` runs it (docs: faults/README.md,
"Tool fuzzer").  Each *case* is one command of a tool -- ``engine.inspect``,
the gate's container step (``faults.fuzz.gate_container``, what
``replay.py --container`` does before its scenarios), ``python -m fixtures``
new / verify / from-header / identify, ``replay.py`` lab / predict -- run in
a fresh folder holding the seed inputs (``faults/fuzz/corpus-tools/seed``)
with one of them changed.  hypothesis draws the change: a valid document
with one field set to a hostile value (wrong type, NaN, inf, negative,
zero, 1e9, 2**62, 1e12, a deeply nested value, a list for an object), the
whole document replaced, raw byte edits and truncation of a seed, or a
hostile command-line value.

Each case runs in a subprocess limited to 2 GiB of address space
(``RLIMIT_AS``), :data:`CPU_SECONDS` of CPU, :data:`FILE_BYTES` per written
file and a wall-clock timeout.  :func:`judge` accepts only success (exit 0;
exit 1 where the tool documents 1 as "a check found problems" and printed
no traceback) or exit 2 with exactly one line on stderr that names the
changed file or option.  Anything else is a finding; a finding whose
signature (target, exception or outcome, innermost project file) is in
:data:`KNOWN` is counted as known and does not fail the run.

Every case in ``faults/fuzz/corpus-tools/cases/`` is replayed first: the
fixed findings, kept as regressions.
"""

from __future__ import annotations

import base64
import json
import math
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

import tomllib
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import seed as hypothesis_seed
from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parents[2]
CORPUS = Path(__file__).resolve().parent / "corpus-tools"
SEED = CORPUS / "seed"
CASES = CORPUS / "cases"
#: The checkout's own code: a traceback frame elsewhere under ROOT (a venv
#: made inside the checkout, as CI makes .venv-ci) is not the project's.
PROJECT_TOPS = frozenset({"engine", "oracle", "fixtures", "gate", "lab",
                          "faults", "replay.py"})

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


# -- cases ----------------------------------------------------------------------------


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
    """The tiny fixture container made from the seed spec (once per session)."""
    out = work / "_fixture"
    if not (out / "model.safetensors.index.json").exists():
        subprocess.run([PY, "-m", "fixtures", "new", str(SEED / "spec.toml"),
                        str(out)], check=True, capture_output=True, cwd=ROOT,
                       env=_env())
    return out


LAB_OPTS = ["--policies", "lru", "--slots", "4", "--executor", "thread",
            "--workers", "1", "--quiet"]
PREDICT_OPTS = ["--predictors", "previous,pair", "--slots", "4", "--quiet"]

TARGETS = {t.name: t for t in (
    Target("inspect", lambda d: [PY, "-m", "engine.inspect", "ckpt"],
           ("ckpt",), exit1_ok=True),
    Target("inspect-layout", lambda d: [PY, "-m", "engine.inspect", "ckpt",
                                        "--layout", "layout.toml"],
           ("ckpt",), exit1_ok=True),
    Target("gate-container", lambda d: [PY, "-m", "faults.fuzz.gate_container",
                                        "ckpt"], ("ckpt",)),
    Target("gate-spec", lambda d: [PY, "-m", "faults.fuzz.gate_container",
                                   "spec.toml"], ("spec.toml",)),
    Target("new", lambda d: [PY, "-m", "fixtures", "new", "spec.json", "out"],
           ("spec.json",)),
    Target("new-toml", lambda d: [PY, "-m", "fixtures", "new", "spec.toml", "out"],
           ("spec.toml",)),
    Target("verify", lambda d: [PY, "-m", "fixtures", "verify", "fx"],
           ("@fixture",), exit1_ok=True),
    Target("from-header", lambda d: [PY, "-m", "fixtures", "from-header", "ckpt",
                                     "out"], ("ckpt",)),
    Target("identify", lambda d: [PY, "-m", "fixtures", "identify", "fx",
                                  "fx/model-00001-of-00002.safetensors"],
           ("@fixture",)),
    Target("lab", lambda d: [PY, str(ROOT / "replay.py"), "lab",
                             *_trace_args(d, "lab"), "out", *LAB_OPTS], ()),
    Target("predict", lambda d: [PY, str(ROOT / "replay.py"), "predict",
                                 *_trace_args(d, "predict"), "out", *PREDICT_OPTS],
           ()),
)}

#: Trace seeds and the options each needs.
TRACES = {
    "trace.jsonl": [],
    "trace-megatron.jsonl": ["--format", "megatron"],
    "trace.txt": [],
    "trace.i32": ["--top-k", "2", "--layers", "2"],
    "trace.pairs": ["--format", "pairs"],
    "trace.csv": [],
    "trace.xctrace": [],
    "trace.oracleGeneral": [],
}
#: Options one target needs for one trace seed.
TRACE_TARGET_OPTS = {("lab", "trace.oracleGeneral"): ["--mode", "plain"]}


def _trace_args(d: Path, target: str) -> list[str]:
    """The trace file present in case folder ``d`` and its format options."""
    for name, opts in TRACES.items():
        if (d / name).exists():
            return [name, *opts, *TRACE_TARGET_OPTS.get((target, name), [])]
    raise AssertionError(f"no trace in {d}")


# -- outcomes ------------------------------------------------------------------------


@dataclass(frozen=True)
class Known:
    """A finding not fixed yet: its signature, the issue it belongs to."""

    target: str
    kind: str  # exception type or outcome ("timeout", "exit 2", ...): a prefix
    where: str  # innermost project file of the traceback ("" for none)
    issue: str
    what: str
    match: str = ""  # a regex the output must hold too ("" for any)


#: Findings not fixed yet, each naming its issue; the list is emptied as
#: they are fixed (their cases kept in ``corpus-tools/cases/``).  Matched on
#: (target, kind, where) and :attr:`Known.match`.
KNOWN: list[Known] = []


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
        shape = re.sub(r"'[^']*'|\"[^\"]*\"|\S*/\S*|-?\d[\d.e+-]*", "_",
                       line[-1] if line else "")[:60]
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


def run_case(case: Case, work: Path) -> tuple[Outcome, Path]:
    """Lay out ``case`` in a fresh folder under ``work`` and run it."""
    target = TARGETS[case.target]
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
        if data == b"\0DELETE":
            p.unlink(missing_ok=True)
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


# -- hostile values --------------------------------------------------------------------

NESTED = 100_000  # depth of a deeply nested JSON value

HOSTILE: list[Any] = [
    None, True, False, "", "x", "\u00e9\u0000", -1, 0, 1, 1.5, -0.5,
    10**9, 1e9, 1e12, 2**62, 2**64, -(2**63), float("nan"), float("inf"),
    float("-inf"), [], {}, [0], [-1, 2**40], {"a": 1}, "1e9", [[[[[]]]]],
]


class _Nested:
    """Marker: serialise as ``[[[...]]]`` this deep (json.dumps would recurse)."""

    def __init__(self, depth: int, open_: str = "[") -> None:
        self.depth, self.open = depth, open_


def dump_json(doc: Any) -> bytes:
    """JSON text of ``doc``; NaN/inf as Python writes them; :class:`_Nested` inline."""
    marks: dict[str, _Nested] = {}

    def swap(v: Any) -> Any:
        if isinstance(v, _Nested):
            k = f"__nested_{len(marks)}__"
            marks[k] = v
            return k
        if isinstance(v, dict):
            return {k: swap(x) for k, x in v.items()}
        if isinstance(v, list):
            return [swap(x) for x in v]
        return v

    text = json.dumps(swap(doc))
    for k, n in marks.items():
        close = "]" if n.open == "[" else "}"
        inner = ("[" * n.depth + "]" * n.depth if n.open == "[" else
                 '{"a":' * n.depth + "1" + close * n.depth)
        text = text.replace(json.dumps(k), inner)
    return text.encode()


def _toml_key(k: str) -> str:
    return k if re.fullmatch(r"[A-Za-z0-9_-]+", k) else json.dumps(k)


def _toml_val(v: Any) -> str:
    if isinstance(v, bool):
        return str(v).lower()
    if isinstance(v, float):
        return "nan" if math.isnan(v) else ("inf" if v == math.inf else
                                            "-inf" if v == -math.inf else repr(v))
    if isinstance(v, int):
        return str(v) if -(2**63) <= v < 2**63 else json.dumps(str(v))
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, _Nested):
        return "[" * min(v.depth, 2000) + "]" * min(v.depth, 2000)
    if isinstance(v, list):  # TOML has no null: None items are left out
        return "[" + ", ".join(_toml_val(x) for x in v if x is not None) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{_toml_key(k)} = {_toml_val(x)}"
                               for k, x in v.items() if x is not None) + "}"
    raise TypeError(v)


def dump_toml(doc: dict[str, Any]) -> bytes:
    """TOML text of ``doc`` (None values left out: TOML has no null)."""
    lines = []
    tables = []
    for k, v in doc.items():
        if v is None:
            continue
        if isinstance(v, list) and v and all(isinstance(x, dict) for x in v):
            tables.append((k, v))
        else:
            lines.append(f"{_toml_key(k)} = {_toml_val(v)}")
    for k, rows in tables:
        for row in rows:
            lines += ["", f"[[{_toml_key(k)}]]"]
            lines += [f"{_toml_key(a)} = {_toml_val(b)}" for a, b in row.items()
                      if b is not None]
    return ("\n".join(lines) + "\n").encode()


def _paths(doc: Any, here: tuple = ()) -> list[tuple]:
    """Every path to a value inside ``doc`` (keys and list indices)."""
    out = [here]
    if isinstance(doc, dict):
        for k, v in doc.items():
            out += _paths(v, here + (k,))
    elif isinstance(doc, list):
        for i, v in enumerate(doc[:4]):
            out += _paths(v, here + (i,))
    return out


def _set(doc: Any, path: tuple, value: Any, delete: bool = False) -> Any:
    if not path:
        return value
    doc = json.loads(json.dumps(doc))
    cur = doc
    for p in path[:-1]:
        cur = cur[p]
    if delete:
        del cur[path[-1]]
    else:
        cur[path[-1]] = value
    return doc


@st.composite
def hostile_value(draw: st.DrawFn) -> Any:
    """One hostile value: from :data:`HOSTILE`, an integer, a nested value, text."""
    kind = draw(st.integers(0, 9))
    if kind <= 5:
        return draw(st.sampled_from(HOSTILE))
    if kind == 6:
        return draw(st.integers(-(2**64), 2**64))
    if kind == 7:
        return _Nested(draw(st.sampled_from([50, 1000, NESTED])),
                       draw(st.sampled_from(["[", "{"])))
    if kind == 8:
        return draw(st.text(max_size=20))
    return draw(st.floats(allow_nan=True, allow_infinity=True))


@st.composite
def mutated_doc(draw: st.DrawFn, doc: Any) -> tuple[Any, str]:
    """``doc`` with one field changed, deleted or added, or replaced whole."""
    paths = _paths(doc)
    path = draw(st.sampled_from(paths))
    op = draw(st.sampled_from(["set", "set", "set", "delete", "add"]))
    label = ".".join(map(str, path)) or "(whole document)"
    if op == "delete" and path:
        return _set(doc, path, None, delete=True), f"{label} deleted"
    value = draw(hostile_value())
    if op == "add" and isinstance(doc, dict):
        key = draw(st.sampled_from(["extra", "text_config", "num_experts",
                                    "first_k_dense_replace", "moe_layer_freq",
                                    "decoder_sparse_step", "mlp_only_layers",
                                    "num_nextn_predict_layers", "family"]))
        return _set(doc, (key,), value), f"{key} added = {_show(value)}"
    return _set(doc, path, value), f"{label} = {_show(value)}"


def _show(v: Any) -> str:
    if isinstance(v, _Nested):
        return f"{v.open * 3}... nested {v.depth} deep"
    s = repr(v)
    return s if len(s) < 60 else s[:57] + "..."


@st.composite
def byte_edit(draw: st.DrawFn, data: bytes) -> tuple[bytes, str]:
    """``data`` with a few raw byte edits, truncated, or replaced by junk."""
    kind = draw(st.sampled_from(["edit", "edit", "edit", "truncate", "junk",
                                 "int"]))
    if kind == "truncate":
        n = draw(st.integers(0, max(len(data) - 1, 0)))
        return data[:n], f"truncated to {n} bytes"
    if kind == "junk":
        junk = draw(st.binary(min_size=1, max_size=64))
        return junk, f"replaced by {len(junk)} binary bytes"
    if kind == "int" and len(data) >= 8:
        pos = draw(st.integers(0, len(data) - 4)) & ~3
        v = draw(st.sampled_from([-1, 0, 2**31 - 1, -(2**31), 200_000, 1 << 20]))
        buf = bytearray(data)
        buf[pos:pos + 4] = (v & 0xFFFFFFFF).to_bytes(4, "little")
        return bytes(buf), f"int32 at byte {pos} = {v}"
    buf = bytearray(data)
    notes = []
    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.sampled_from(["flip", "insert", "delete", "token"]))
        pos = draw(st.integers(0, len(buf)))
        if op == "flip" and pos < len(buf):
            buf[pos] ^= draw(st.integers(1, 255))
        elif op == "insert":
            buf[pos:pos] = draw(st.binary(min_size=1, max_size=8))
        elif op == "delete":
            del buf[pos:pos + draw(st.integers(1, 16))]
        else:
            buf[pos:pos] = draw(st.sampled_from(
                [b"1e999", b"-1", b"99999999999", b"NaN", b"\xff\xfe", b"\x00",
                 b"[[[[", b"\n", b",", b"4611686018427387904"]))
        notes.append(f"{op}@{pos}")
    return bytes(buf), "bytes " + " ".join(notes)


# -- strategies per target ----------------------------------------------------

CONFIG = json.loads((SEED / "ckpt" / "config.json").read_text())
INDEX = json.loads((SEED / "ckpt" / "model.safetensors.index.json").read_text())
LAYOUT = tomllib.loads((SEED / "xcache-layout.toml").read_text())
SPEC = json.loads((SEED / "spec.json").read_text())

BAD_ARGS = ["0", "-1", "1", "2", "1e9", "1e12", "nan", "inf", "-inf", "1.5",
            "4611686018427387904", "99999999999999999999", "", "x", "0x10",
            "0-999999999", "5-3", "1,,2", "-3-5", "0,1", "3"]


def _opt(options: list[str]) -> st.SearchStrategy[tuple[list[str], tuple[str, ...]]]:
    """``--opt=VALUE`` with a hostile value, and the words naming it.

    A refusal names the option, or quotes the value ("unknown policy '1.5'").
    """
    return st.tuples(st.sampled_from(options), st.sampled_from(BAD_ARGS)).map(
        lambda t: ([f"{t[0]}={t[1]}"], (t[0], f"'{t[1]}'", f'"{t[1]}"')))


@st.composite
def json_file_case(draw: st.DrawFn, target: str, rel: str, doc: Any,
                   names: tuple[str, ...]) -> Case:
    """``target`` with the JSON file ``rel`` changed (a field, or raw bytes)."""
    if draw(st.integers(0, 3)) == 0:
        data, note = draw(byte_edit(json.dumps(doc, indent=1).encode()))
    else:
        new, note = draw(mutated_doc(doc))
        data = dump_json(new)
    return Case(target, f"{rel}: {note}", {rel: data}, [], names)


@st.composite
def toml_file_case(draw: st.DrawFn, target: str, rel: str, doc: dict,
                   names: tuple[str, ...]) -> Case:
    """``target`` with the TOML file ``rel`` changed."""
    if draw(st.integers(0, 3)) == 0:
        data, note = draw(byte_edit(dump_toml(doc)))
    else:
        new, note = draw(mutated_doc(doc))
        data = dump_toml(new) if isinstance(new, dict) else dump_json(new)
    return Case(target, f"{rel}: {note}", {rel: data}, [], names)


@st.composite
def inspect_case(draw: st.DrawFn) -> Case:
    """engine.inspect on the checkpoint: config.json, the index, or a layout file."""
    which = draw(st.sampled_from(["config", "config", "layout", "index"]))
    if which == "config":
        return draw(json_file_case("inspect", "ckpt/config.json", CONFIG,
                                   ("config.json",)))
    if which == "index":
        return draw(json_file_case("inspect", "ckpt/model.safetensors.index.json",
                                   INDEX, ("index.json", "ckpt")))
    return draw(toml_file_case("inspect", "ckpt/xcache-layout.toml", LAYOUT,
                               ("xcache-layout.toml",)))


@st.composite
def inspect_layout_case(draw: st.DrawFn) -> Case:
    """engine.inspect --layout FILE with the file changed."""
    return draw(toml_file_case("inspect-layout", "layout.toml", LAYOUT,
                               ("layout.toml",)))


@st.composite
def gate_container_case(draw: st.DrawFn) -> Case:
    """replay --container's container step on the checkpoint folder."""
    c = draw(inspect_case())
    c.target = "gate-container"
    return c


@st.composite
def gate_spec_case(draw: st.DrawFn) -> Case:
    """replay --container SPEC.toml: a spec file."""
    return draw(toml_file_case("gate-spec", "spec.toml", SPEC, ("spec.toml",)))


@st.composite
def new_case(draw: st.DrawFn) -> Case:
    """fixtures new SPEC OUT, the spec as JSON or TOML."""
    if draw(st.booleans()):
        return draw(json_file_case("new", "spec.json", SPEC, ("spec.json",)))
    return draw(toml_file_case("new-toml", "spec.toml", SPEC, ("spec.toml",)))


@st.composite
def verify_case(draw: st.DrawFn) -> Case:
    """fixtures verify on the fixture with its index, spec or a shard changed."""
    assert _FIXTURE is not None, "prepare() makes the fixture first"
    idx = json.loads((_FIXTURE / "model.safetensors.index.json").read_text())
    which = draw(st.sampled_from(["index", "spec", "shard"]))
    rel = "fx/model.safetensors.index.json"
    if which == "index":
        return draw(json_file_case("verify", rel, idx, ("index.json", "fx")))
    if which == "spec":
        spec = json.loads(idx["metadata"]["xcache.spec"])
        new, note = draw(mutated_doc(spec))
        idx = json.loads(json.dumps(idx))
        idx["metadata"]["xcache.spec"] = dump_json(new).decode()
        return Case("verify", f"xcache.spec in the index: {note}",
                    {rel: json.dumps(idx).encode()}, [], ("index.json", "fx"))
    shard = "fx/model-00002-of-00002.safetensors"
    data = (_FIXTURE / "model-00002-of-00002.safetensors").read_bytes()
    new_b, note = draw(byte_edit(data))
    return Case("verify", f"{shard}: {note}", {shard: new_b}, [],
                ("model-00002-of-00002", "fx"))


@st.composite
def from_header_case(draw: st.DrawFn) -> Case:
    """fixtures from-header on the checkpoint: config, index or an option."""
    which = draw(st.sampled_from(["config", "config", "index", "args", "args"]))
    if which == "config":
        c = draw(json_file_case("from-header", "ckpt/config.json", CONFIG,
                                ("config.json",)))
    elif which == "index":
        c = draw(json_file_case("from-header", "ckpt/model.safetensors.index.json",
                                INDEX, ("index.json", "ckpt")))
    else:
        args, names = draw(_opt(["--scale", "--layers", "--experts", "--top-k",
                                 "--seed"]))
        c = Case("from-header", " ".join(args), {}, args, names)
    return c


@st.composite
def identify_case(draw: st.DrawFn) -> Case:
    """fixtures identify with hostile --offset / --length."""
    args, names = draw(_opt(["--offset", "--length"]))
    if draw(st.booleans()):
        more, more_names = draw(_opt(["--offset", "--length"]))
        args, names = args + more, names + more_names
    return Case("identify", " ".join(args), {}, args, names)


@st.composite
def trace_case(draw: st.DrawFn, target: str) -> Case:
    """lab / predict over one seed trace, changed, or with a hostile option."""
    # predict refuses an oracleGeneral trace whatever else is given (no steps)
    name = draw(st.sampled_from([t for t in TRACES if target == "lab"
                                 or t != "trace.oracleGeneral"]))
    data = (SEED / name).read_bytes()
    if draw(st.integers(0, 3)) == 0:
        opts = (["--top-k", "--layers", "--experts", "--slots", "--policies",
                 "--workers"] if target == "lab" else
                ["--top-k", "--layers", "--experts", "--slots", "--split",
                 "--budget", "--k", "--expert-bytes", "--predictors",
                 "--policy"])
        args, names = draw(_opt(opts))  # or the trace the option contradicts
        return Case(target, f"{name} with {' '.join(args)}", {name: data}, args,
                    names + (name,))
    if name.endswith(".jsonl") and draw(st.booleans()):
        lines = [json.loads(x) for x in data.decode().splitlines()]
        i = draw(st.integers(0, len(lines) - 1))
        new, note = draw(mutated_doc(lines[i]))
        lines_b = [json.dumps(x).encode() for x in lines]
        lines_b[i] = dump_json(new)
        return Case(target, f"{name} line {i + 1}: {note}",
                    {name: b"\n".join(lines_b) + b"\n"}, [], (name,))
    new_b, note = draw(byte_edit(data))
    return Case(target, f"{name}: {note}", {name: new_b}, [], (name,))


STRATEGIES: dict[str, Callable[[], st.SearchStrategy[Case]]] = {
    "inspect": inspect_case,
    "inspect-layout": inspect_layout_case,
    "gate-container": gate_container_case,
    "gate-spec": gate_spec_case,
    "new": new_case,
    "verify": verify_case,
    "from-header": from_header_case,
    "identify": identify_case,
    "lab": lambda: trace_case("lab"),
    "predict": lambda: trace_case("predict"),
}


# -- running --------------------------------------------------------------------------


@dataclass
class Finding:
    """A case whose outcome :func:`judge` refused."""

    case: Case
    why: str
    kind: str
    where: str
    known: Known | None
    excerpt: str

    def line(self) -> str:
        """One report line."""
        tag = f"known ({self.known.issue})" if self.known else "FINDING"
        return (f"{tag}: {self.case.target}: {self.case.note}: {self.why} "
                f"[{self.kind}{' in ' + self.where if self.where else ''}]")


@dataclass
class Report:
    """Every case run and every finding, by signature."""

    runs: int = 0
    rounds: int = 0  #: rounds of new cases drawn after the corpus
    by_target: dict[str, int] = field(default_factory=dict)
    findings: dict[tuple[str, str, str], list[Finding]] = field(default_factory=dict)

    @property
    def new(self) -> list[Finding]:
        """One finding per signature not in :data:`KNOWN`."""
        return [v[0] for v in self.findings.values() if v[0].known is None]

    @property
    def known(self) -> list[Finding]:
        """One finding per signature in :data:`KNOWN`."""
        return [v[0] for v in self.findings.values() if v[0].known is not None]


def known_for(target: str, kind: str, where: str, text: str = "") -> Known | None:
    """The :data:`KNOWN` entry with this signature, if any."""
    for k in KNOWN:
        if (k.target == target and kind.startswith(k.kind) and k.where == where
                and re.search(k.match, text, re.M)):
            return k
    return None


def check(case: Case, work: Path, report: Report, keep: Path | None = None,
          log: Callable[[str], None] | None = None) -> Finding | None:
    """Run ``case``, judge it, add it to ``report``; return its finding or None."""
    target = TARGETS[case.target]
    out, d = run_case(case, work)
    report.runs += 1
    report.by_target[case.target] = report.by_target.get(case.target, 0) + 1
    why = judge(case, target, out)
    shutil.rmtree(d, ignore_errors=True)
    if why is None:
        return None
    kind, where = out.signature()
    text = (out.stderr or out.stdout).strip().splitlines()
    excerpt = " | ".join(text[-3:])[:300]
    f = Finding(case, why, kind, where,
                known_for(case.target, kind, where, out.stdout + out.stderr),
                excerpt)
    sig = (case.target, kind, where)
    first = sig not in report.findings
    report.findings.setdefault(sig, []).append(f)
    if first:
        if log is not None:
            log(f.line() + "\n    " + excerpt)
        if keep is not None:
            keep.mkdir(parents=True, exist_ok=True)
            name = re.sub(r"[^A-Za-z0-9]+", "-", f"{case.target}-{kind}-{where}")
            (keep / f"finding-{name}.json").write_text(
                json.dumps(case.to_json(), indent=1) + "\n")
    return f


def corpus_cases(known: bool = True) -> list[Case]:
    """The cases kept in ``corpus-tools/cases/``.

    ``known-*.json`` reproduce :data:`KNOWN` findings (the issue's examples
    in files not fixed yet); ``known=False`` leaves them out, so only the
    fixed findings, the regressions, are run.
    """
    return [Case.from_json(json.loads(p.read_text()))
            for p in sorted(CASES.glob("*.json"))
            if known or not p.name.startswith("known-")]


def explore(targets: list[str], work: Path, report: Report, *, examples: int,
            derandomize: bool, keep: Path | None = None,
            log: Callable[[str], None] | None = None,
            seed: int | None = None) -> None:
    """Draw ``examples`` cases over ``targets`` with hypothesis and check each.

    With ``seed`` the draw is that seed's, the same on every machine.
    """

    @settings(max_examples=examples, deadline=None, database=None,
              derandomize=derandomize, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(st.data())
    def one(data: st.DataObject) -> None:
        name = data.draw(st.sampled_from(targets))
        case = data.draw(STRATEGIES[name]())
        check(case, work, report, keep, log)

    if seed is not None:
        one = hypothesis_seed(seed)(one)
    one()


_FIXTURE: Path | None = None


def prepare(work: Path) -> None:
    """Make the session's fixture (the verify/identify targets need it)."""
    global _FIXTURE
    _FIXTURE = _fixture(work)


def run(seconds: float, targets: list[str] | None = None, *,
        keep: Path | None = None, log: Callable[[str], None] = print,
        replay_corpus: bool = True, seed: int | None = None,
        rounds: int | None = None) -> Report:
    """Replay the corpus, then fuzz for ``seconds``; return the report.

    With ``seed``, round i draws with seed ``seed + i`` (the same cases on
    every machine, in the same order); ``rounds`` caps the rounds (5 cases
    each), so a run is a fixed set of cases whatever the machine's speed.
    """
    targets = targets or list(STRATEGIES)
    report = Report()
    with tempfile.TemporaryDirectory(prefix="xc-toolfuzz-") as w:
        work = Path(w)
        prepare(work)
        if replay_corpus:
            for case in corpus_cases():
                check(case, work, report, keep, log)
        end = time.monotonic() + seconds
        done = 0
        while time.monotonic() < end and (rounds is None or done < rounds):
            explore(targets, work, report, examples=5, derandomize=False,
                    keep=keep, log=log,
                    seed=None if seed is None else seed + done)
            done += 1
        report.rounds = done
    return report
