"""Pinned replays that gate engine changes: ``python replay.py <dir>``.

1. Verify the SHA-256 of every pinned engine source against ``engine/pins.json``
   of the tree being replayed (exit 2 on a mismatch, naming the files).
2. Build the engine from exactly those sources into ``<dir>`` with the flags
   ``engine/_build.py`` records (exit 2 with the compiler's message if it fails).
3. Generate the fixtures the scenarios name into ``<dir>``.
4. Run every scenario of ``fixtures/scenarios/`` against the fresh engine and
   against the oracle; both must give the pinned values.
5. Print one aligned line per check and a summary; ``--json`` writes every
   check with expected and actual values; generated files are removed unless
   ``--keep``.  Exit 0 all passed, 1 a check failed, 2 could not run.

``--engine-src PATH`` replays a candidate engine tree (the root of another
checkout, or its ``engine`` folder) against its own pins and these scenarios.
``--repin`` rewrites the pins of the tree deliberately and says what changed.
"""

from __future__ import annotations

import argparse
import csv
import functools
import hashlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from concurrent.futures import Executor, ProcessPoolExecutor, ThreadPoolExecutor
from contextlib import ExitStack
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from oracle.traces import Trace

ROOT = Path(__file__).resolve().parent
PINS_NAME = "pins.json"
SCENARIO_DIR = ROOT / "fixtures" / "scenarios"

EXIT_PASS, EXIT_FAIL, EXIT_CANNOT_RUN = 0, 1, 2


class CannotRun(Exception):
    """Replay could not run (bad arguments, digest mismatch, build failure)."""


# --------------------------------------------------------------------------
# Pins
# --------------------------------------------------------------------------


def pinned_files(engine_dir: Path) -> list[Path]:
    """Return the engine sources whose digests are pinned, in a stable order."""
    files = [p for p in engine_dir.glob("*.py")]
    files += [engine_dir / "_cdef.h"]
    files += list((engine_dir / "csrc").glob("*.c"))
    files += list((engine_dir / "csrc").glob("*.h"))
    # _xc.c is what cffi generates from the cdef; never a source.
    files = [p for p in files if p.is_file() and p.name != "_xc.c"]
    return sorted(files, key=lambda p: p.relative_to(engine_dir).as_posix())


def digest(path: Path) -> str:
    """SHA-256 of a file's bytes, in hex."""
    return hashlib.sha256(path.read_bytes()).hexdigest()


def current_digests(engine_dir: Path) -> dict[str, str]:
    """Map each pinned file (relative to the engine folder) to its digest."""
    return {p.relative_to(engine_dir).as_posix(): digest(p)
            for p in pinned_files(engine_dir)}


def verify_pins(engine_dir: Path) -> int:
    """Check every pinned digest; return how many; raise CannotRun naming mismatches."""
    pins_path = engine_dir / PINS_NAME
    if not pins_path.is_file():
        raise CannotRun(f"no pins file at {pins_path}; run `python replay.py "
                        "--repin` to create it deliberately")
    try:
        pins = json.loads(pins_path.read_text())["sha256"]
    except (ValueError, KeyError, TypeError) as e:
        raise CannotRun(f"{pins_path}: not a pins file ({e})") from e
    now = current_digests(engine_dir)
    problems = []
    for name in sorted(set(pins) | set(now)):
        if name not in now:
            problems.append(f"  missing   {name}")
        elif name not in pins:
            problems.append(f"  unpinned  {name}")
        elif pins[name] != now[name]:
            problems.append(f"  changed   {name}")
    if problems:
        raise CannotRun("pinned source digests do not match "
                        f"{pins_path}:\n" + "\n".join(problems) +
                        "\nre-pin deliberately with `python replay.py --repin`"
                        " if the change is intended")
    return len(now)


def repin(engine_dir: Path) -> list[str]:
    """Rewrite the pins file from the current sources; return what changed."""
    pins_path = engine_dir / PINS_NAME
    old: dict[str, str] = {}
    if pins_path.is_file():
        try:
            old = json.loads(pins_path.read_text())["sha256"]
        except (ValueError, KeyError, TypeError):
            old = {}
    now = current_digests(engine_dir)
    changes = [f"{'added' if n not in old else 'changed'} {n}"
               for n in sorted(now) if old.get(n) != now[n]]
    changes += [f"removed {n}" for n in sorted(set(old) - set(now))]
    tmp = pins_path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps({"sha256": now}, indent=1, sort_keys=True) + "\n")
    os.replace(tmp, pins_path)
    return changes


# --------------------------------------------------------------------------
# Build
# --------------------------------------------------------------------------


def build_engine(engine_dir: Path, out_dir: Path) -> tuple[Path, list[str]]:
    """Compile the engine sources into out_dir; return (.so path, cflags)."""
    env = dict(os.environ)
    env.pop("XC_SANITIZE", None)
    env.pop("XC_COVERAGE", None)
    proc = subprocess.run(
        [sys.executable, str(engine_dir / "_build.py"), "--out", str(out_dir),
         "--src", str(engine_dir)],
        capture_output=True, text=True, env=env, cwd=str(out_dir),
    )
    if proc.returncode != 0:
        raise CannotRun("engine build failed:\n" + _compiler_message(
            proc.stderr or proc.stdout))
    so = Path(proc.stdout.strip().splitlines()[-1])
    flags = _recorded_flags(engine_dir)
    return so, flags


def _compiler_message(text: str, max_lines: int = 60) -> str:
    """The compiler's diagnostics from a failed build, without the traceback."""
    lines = text.splitlines()
    if "Traceback (most recent call last):" in lines:
        cut = lines.index("Traceback (most recent call last):")
        last = lines[-1] if lines else ""
        lines = lines[:cut] + [last]
    errors = [i for i, ln in enumerate(lines) if "error:" in ln]
    if errors:
        lines = lines[max(errors[0] - 2, 0):]
    return "\n".join(lines[:max_lines])


def _recorded_flags(engine_dir: Path) -> list[str]:
    spec = importlib.util.spec_from_file_location("_xc_build_flags",
                                                  engine_dir / "_build.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    cwd = os.getcwd()
    try:
        os.chdir(engine_dir.parent)
        spec.loader.exec_module(mod)
    finally:
        os.chdir(cwd)
    return list(mod.CFLAGS)


def load_engine(engine_dir: Path, so_path: Path) -> Any:
    """Import the engine package of engine_dir, bound to the extension so_path."""
    if "engine" in sys.modules:
        mod = sys.modules["engine"]
        if Path(mod.__file__ or "").resolve().parent != engine_dir.resolve():
            raise CannotRun("another engine package is already imported")
    else:
        spec = importlib.util.spec_from_file_location(
            "engine", engine_dir / "__init__.py",
            submodule_search_locations=[str(engine_dir)])
        if spec is None or spec.loader is None:
            raise CannotRun(f"cannot import the engine package at {engine_dir}")
        mod = importlib.util.module_from_spec(spec)
        sys.modules["engine"] = mod
        spec.loader.exec_module(mod)
    from engine import _lib  # noqa: PLC0415 - bound after the path is chosen

    _lib.use(so_path)
    return mod


# --------------------------------------------------------------------------
# Scenarios
# --------------------------------------------------------------------------
#
# A scenario is a JSON file of fixtures/scenarios/: a fixture preset, cache
# options, optional variants (option overrides that re-run the same steps,
# e.g. chunked reads) and a list of steps.  Each step is an operation or a
# check; a check names the values it pins.  Every scenario runs on a fresh
# copy of its fixture, once against the engine and once against the oracle.

class _OracleOnly(Exception):
    """A failure the oracle backend models that its cache model has no class for."""

    kind = ""


class _Changed(_OracleOnly):
    """The oracle's view of a load refused because the file changed."""

    kind = "changed"


class _NoMemory(_OracleOnly):
    """The oracle's view of an operation refused for want of memory."""

    kind = "nomem"


def _kind_of(exc: BaseException) -> str:
    """The failure kind of either backend's exception (faults.kinds)."""
    if isinstance(exc, _OracleOnly):
        return exc.kind
    from faults.kinds import kind_of  # noqa: PLC0415 - after load_engine

    kind = kind_of(exc)
    if kind.startswith("other:"):
        raise exc
    return kind


#: What one faulted pread does to a whole-expert load (k3-mini: one pread
#: per load): the failure the cache must report, or None when the read loop
#: absorbs it (faults/README.md F1-F5).
_FAULT_EFFECT = {"eof": "short", "eio": "io", "eintr": None, "partial": None}


class EngineBackend:
    """The freshly built engine behind the scenario operations."""

    name = "engine"

    def __init__(self, engine: Any, folder: Path, spec: Any,
                 opts: dict[str, Any]) -> None:
        from engine import alloc  # noqa: PLC0415 - the tree load_engine chose
        from faults.io import IOFaults  # noqa: PLC0415

        self.alloc = alloc
        self.faults = IOFaults() if opts.get("faults") else None
        self.container = engine.Container(
            str(folder), io=self.faults, verify=bool(opts.get("verify")))
        self.cache = engine.ExpertCache(
            self.container, n_slots=opts["n_slots"], top_k=spec.top_k,
            policy=opts.get("policy", "lru"),
            expert_template=spec.expert_template,
            tensors=[t[0] for t in spec.expert_tensors], layers=spec.layers,
            n_experts=spec.n_experts, chunk_bytes=opts.get("chunk_bytes", 0),
            batch_threads=opts.get("batch_threads", 2),
            io_threads=opts.get("io_threads", 0))
        self.read_ahead = opts.get("io_threads", 0) > 0

    def get(self, layer: int, expert: int) -> bytes:
        """Demand access; return the served payload and release it."""
        with self.cache.get(layer, expert) as ex:
            return bytes(ex.data)

    def getmany(self, keys: list[tuple[int, int]]) -> int:
        """Batch prefetch; with reader threads, read-ahead then drain."""
        if not self.read_ahead:
            return self.cache.getmany(keys)
        before = self.cache.stats()["prefetch_loads"]
        self.cache.prefetch(keys)
        self.cache.drain()
        return int(self.cache.stats()["prefetch_loads"] - before)

    def reset(self) -> None:
        """Start a new counter window."""
        self.cache.reset_stats()

    def inject(self, step: dict[str, Any]) -> None:
        """Arm an I/O fault under the C read loop."""
        from faults.io import Fault  # noqa: PLC0415

        if self.faults is None:
            raise CannotRun("an inject step needs \"faults\": true in the cache")
        self.faults.arm(Fault(step["fault"], nth=step.get("nth", 1),
                              persistent=step.get("persistent", False),
                              arg=step.get("arg", 0)))

    def inject_alloc(self, step: dict[str, Any]) -> None:
        """Make the nth engine allocation from now fail."""
        self.alloc.fail_alloc(step.get("nth", 1),
                                     step.get("persistent", False))

    def clear(self) -> None:
        """Disarm every fault."""
        self.alloc.disarm()
        if self.faults is not None:
            self.faults.disarm()

    def values(self) -> dict[str, Any]:
        """Counters and slot facts a check may pin."""
        v: dict[str, Any] = dict(self.cache.stats())
        slots = self.cache.slots()
        v["n_slots"] = len(slots)
        v["ready_slots"] = sum(s["state"] == "ready" for s in slots)
        v["inflight_slots"] = sum(s["state"] == "inflight" for s in slots)
        v["resident"] = sorted([list(k) for k in self.cache.resident()])
        try:
            self.cache.check()
            v["invariants"] = "clean"
        except Exception as e:  # noqa: BLE001 - reported as a value
            v["invariants"] = str(e)
        return v

    def close(self) -> None:
        """Free the cache, the container and the injector."""
        self.alloc.disarm()
        self.cache.close()
        self.container.close()
        if self.faults is not None:
            self.faults.close()


class OracleBackend:
    """The numpy oracle: its own reader feeding its own cache model."""

    name = "oracle"

    def __init__(self, folder: Path, spec: Any, opts: dict[str, Any]) -> None:
        from oracle.cache import CacheModel  # noqa: PLC0415
        from oracle.safetensors import Container  # noqa: PLC0415

        self.spec = spec
        self.reader = Container(folder)
        self.verify = bool(opts.get("verify"))
        # Reads go through descriptors opened now, as the engine's do, so a
        # file replaced later keeps serving the bytes validated at open.
        self.fds: dict[str, tuple[int, tuple[int, int, int]]] = {}
        for shard in self.reader.shards():
            fd = os.open(shard, os.O_RDONLY)
            self.fds[shard] = (fd, _identity(os.fstat(fd)))
        self.fault: dict[str, Any] | None = None
        self.reads_seen = 0
        self.alloc_fault = False
        self.model = CacheModel(spec.layers, spec.n_experts, spec.top_k,
                                expert_bytes=spec.expert_nbytes,
                                n_slots=opts["n_slots"],
                                policy=opts.get("policy", "lru"))
        self.payload: dict[tuple[int, int], bytes] = {}

    def _load(self, layer: int, expert: int) -> tuple[bytes | None, str | None]:
        """Read an expert as the engine would: (bytes, None) or (None, failure)."""
        self.reads_seen += 1
        f = self.fault
        if f is not None and (self.reads_seen == f["nth"] or
                              (f["persistent"] and self.reads_seen > f["nth"])):
            effect = _FAULT_EFFECT[f["fault"]]
            if f["fault"] == "eintr" and f["persistent"]:
                effect = "io"  # a storm outlasts the loop's retries
            if effect is not None:
                return None, effect
        parts = []
        for name in self.spec.expert_names(layer, expert):
            info = self.reader.tensor(name)
            fd, ident = self.fds[info.shard]
            if self.verify and _path_identity(info.shard) != ident:
                return None, "changed"
            data = os.pread(fd, info.nbytes, info.offset)
            if len(data) != info.nbytes:
                return None, "short"
            parts.append(data)
        return b"".join(parts), None

    def get(self, layer: int, expert: int) -> bytes:
        """Demand access through the model, reading what a miss would read."""
        key = (layer, expert)
        if self.model.slot_of(layer, expert) is not None:
            ref = self.model.get(layer, expert)
        else:
            data, failure = self._load(layer, expert)
            try:
                ref = self.model.get(layer, expert, fail=_model_failure(failure))
            except Exception as e:
                if failure == "changed":
                    raise _Changed(str(e)) from e
                raise
            assert data is not None
            self.payload[key] = data
        self.model.release(ref)
        return self.payload[key]

    def getmany(self, keys: list[tuple[int, int]]) -> int:
        """Batch prefetch through the model with the reads it would make."""
        if self.alloc_fault:  # getmany allocates its key arrays first (F13)
            raise _NoMemory("getmany: no memory for its key arrays")
        loaded: dict[tuple[int, int], bytes] = {}
        failures: dict[tuple[int, int], str] = {}
        for k in keys:
            if (k not in loaded and k not in failures and
                    self.model.slot_of(*k) is None):
                data, failure = self._load(*k)
                if failure is not None:
                    failures[k] = _model_failure(failure)
                else:
                    loaded[k] = data
        n = self.model.getmany(keys, failures=failures)
        for k in self.model.resident():
            if k in loaded:
                self.payload[k] = loaded[k]
        return n

    def reset(self) -> None:
        """Start a new counter window."""
        self.model.reset_stats()

    def inject(self, step: dict[str, Any]) -> None:
        """Arm the modelled I/O fault: the nth load from now meets it."""
        self.fault = {"fault": step["fault"], "nth": step.get("nth", 1),
                      "persistent": step.get("persistent", False)}
        self.reads_seen = 0

    def inject_alloc(self, step: dict[str, Any]) -> None:
        """Model an allocation failure: only getmany allocates (F12, F13)."""
        self.alloc_fault = True

    def clear(self) -> None:
        """Disarm every fault."""
        self.fault = None
        self.alloc_fault = False

    def values(self) -> dict[str, Any]:
        """Counters and slot facts a check may pin."""
        from oracle.cache import INFLIGHT, READY  # noqa: PLC0415

        v: dict[str, Any] = dict(self.model.stats())
        slots = self.model.slots()
        v["n_slots"] = len(slots)
        v["ready_slots"] = sum(s.state == READY for s in slots)
        v["inflight_slots"] = sum(s.state == INFLIGHT for s in slots)
        v["resident"] = sorted([list(k) for k in self.model.resident()])
        bad = self.model.check()
        v["invariants"] = "clean" if bad is None else bad
        return v

    def close(self) -> None:
        """Close the held descriptors."""
        for fd, _ in self.fds.values():
            os.close(fd)
        self.fds.clear()


def _identity(st: os.stat_result) -> tuple[int, int, int]:
    return (st.st_ino, st.st_size, st.st_mtime_ns)


def _path_identity(path: str) -> tuple[int, int, int] | None:
    try:
        return _identity(os.stat(path))
    except OSError:
        return None


def _model_failure(failure: str | None) -> str | None:
    """The oracle model's failure kinds: a changed file is an I/O failure."""
    return None if failure is None else ("short" if failure == "short" else "io")


def _make_backend(kind: str, engine: Any, spec: Any, opts: dict[str, Any],
                  folder: Path) -> Any:
    if kind == "engine":
        return EngineBackend(engine, folder, spec, opts)
    return OracleBackend(folder, spec, opts)


def _keys(step: dict[str, Any]) -> list[tuple[int, int]]:
    if "keys" in step:
        return [(int(k[0]), int(k[1])) for k in step["keys"]]
    layer = step.get("layer", 0)
    if "range" in step:
        experts = list(range(*step["range"]))
    else:
        experts = list(step["experts"])
    return [(layer, e) for e in experts]


class ScenarioRun:
    """Runs one scenario variant's steps against one backend."""

    def __init__(self, scenario: dict[str, Any], variant: dict[str, Any],
                 spec: Any, pristine: Path, scratch: Path, make: Any,
                 report: Report) -> None:
        self.sc, self.spec = scenario, spec
        self.variant = variant.get("suffix", "")
        self.variant_expect = variant.get("expect", {})
        self.pristine, self.scratch, self.make = pristine, scratch, make
        self.report = report
        self._backend_name = make.args[0]
        self.backend: Any = None
        self.reads = self.wrong = 0
        self.published: int | None = None
        self.last_error: str | None = None
        self.error_offset: int | None = None

    def _open(self, fresh: bool = True) -> None:
        if self.backend is not None:
            self.backend.close()
            self.backend = None
        if fresh:
            if self.scratch.exists():
                shutil.rmtree(self.scratch)
            shutil.copytree(self.pristine, self.scratch)
        self.backend = self.make(self.scratch)

    def _corrupt(self, step: dict[str, Any]) -> None:
        """Open a corrupted copy; the error (kind and offset) is what is checked."""
        from faults import corrupt  # noqa: PLC0415

        if self.backend is not None:
            self.backend.close()
            self.backend = None
        shard = next(p for p in sorted(self.pristine.iterdir())
                     if p.suffix == ".safetensors")
        getattr(corrupt, f"make_{step['kind']}")(shard, self.scratch / shard.name)
        try:
            self.backend = self.make(self.scratch)
        except Exception as e:  # noqa: BLE001 - the kind is what is checked
            self.last_error = _kind_of(e)
            self.error_offset = getattr(e, "offset", None)
        else:
            self.last_error = self.error_offset = None

    def _expected(self, layer: int, expert: int) -> bytes:
        from fixtures import expected_bytes  # noqa: PLC0415

        return b"".join(expected_bytes(self.spec, n)
                        for n in self.spec.expert_names(layer, expert))

    def _get(self, layer: int, expert: int) -> None:
        try:
            data = self.backend.get(layer, expert)
        except Exception as e:  # noqa: BLE001 - kinds are compared by checks
            self.last_error = _kind_of(e)
            return
        self.last_error = None
        self.reads += 1
        if data != self._expected(layer, expert):
            self.wrong += 1

    def run(self) -> None:
        """Execute every step, reporting each check; a crash is a failed check."""
        try:
            self._open()
            for step in self.sc["steps"]:
                self._step(step)
        except CannotRun:
            raise
        except Exception as e:  # noqa: BLE001 - the backend broke mid-scenario
            self.report.add(self.sc["name"] + self.variant, self._backend_name,
                            "scenario ran to completion" + self.variant, False,
                            f"{type(e).__name__}: {e}", "completion",
                            f"{type(e).__name__}: {e}")
        finally:
            if self.backend is not None:
                self.backend.close()

    def _step(self, step: dict[str, Any]) -> None:
        op = step.get("op", "check")
        if op == "open":
            self._open()
        elif op == "get":
            for _ in range(step.get("repeat", 1)):
                for k in _keys(step):
                    self._get(*k)
        elif op == "getmany":
            batches = step.get("batches") or [[e for _, e in _keys(step)]]
            layer = step.get("layer", 0)
            for b in batches:
                try:
                    self.published = self.backend.getmany([(layer, e) for e in b])
                    self.last_error = None
                except Exception as e:  # noqa: BLE001
                    self.last_error = _kind_of(e)
                if step.get("then_get"):
                    for e in b:
                        self._get(layer, e)
        elif op == "reset":
            self.backend.reset()
        elif op == "inject":
            self.backend.inject(step)
        elif op == "inject_alloc":
            self.backend.inject_alloc(step)
        elif op == "clear":
            self.backend.clear()
        elif op == "corrupt":
            self._corrupt(step)
        elif op == "replace":
            from faults.corrupt import replace_same_size  # noqa: PLC0415

            for p in sorted(self.scratch.glob("*.safetensors")):
                replace_same_size(p)
        elif op == "truncate":
            self._truncate(step)
        elif op == "check":
            self._check(step)
        else:
            raise CannotRun(f"scenario {self.sc['name']}: unknown op {op!r}")

    def _truncate(self, step: dict[str, Any]) -> None:
        from fixtures import plan  # noqa: PLC0415

        run = plan(self.spec).expert_runs(step.get("layer", 0), step["expert"])[0]
        with open(self.scratch / run.file, "r+b") as f:
            f.truncate(run.offset)

    def _check(self, step: dict[str, Any]) -> None:
        values = self.backend.values() if self.backend is not None else {}
        values.update(reads=self.reads, wrong_reads=self.wrong,
                      published=self.published, last_error=self.last_error,
                      error_offset=self.error_offset)
        expect = {**step["expect"], **self.variant_expect.get(step["name"], {}),
                  **step.get(f"expect_{self._backend_name}", {})}
        bad = {k: values.get(k) for k, want in expect.items()
               if values.get(k) != want}
        if "wrong_reads" in expect:
            detail = f"{values['wrong_reads']} of {values['reads']} reads wrong"
            others = [k for k in expect if k not in ("wrong_reads", "reads")]
        else:
            detail, others = "", list(expect)
        parts = [detail] if detail else []
        parts += [f"{k} {_fmt(values.get(k))}" for k in others]
        text = ", ".join(parts)
        if bad:
            text += "; expected " + ", ".join(f"{k} {_fmt(expect[k])}"
                                              for k in bad)
        self.report.add(self.sc["name"] + self.variant, self._backend_name,
                        step["name"] + self.variant, not bad, text,
                        expect, {k: values.get(k) for k in expect})
        self.reads = self.wrong = 0


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    if isinstance(v, list) and len(v) > 6:
        return f"[{len(v)} items]"
    return json.dumps(v) if isinstance(v, (list, type(None))) else str(v)


def load_scenarios(only: list[str]) -> list[dict[str, Any]]:
    """Every scenario file, in name order, filtered by substrings in ``only``."""
    out = []
    for p in sorted(SCENARIO_DIR.glob("*.json")):
        try:
            sc = json.loads(p.read_text())
        except ValueError as e:
            raise CannotRun(f"{p}: not JSON ({e})") from e
        for field in ("name", "fixture", "cache", "steps"):
            if field not in sc:
                raise CannotRun(f"{p}: scenario lacks the field {field!r}")
        if not only or any(o in sc["name"] for o in only):
            out.append(sc)
    if not out:
        raise CannotRun(f"no scenarios found in {SCENARIO_DIR}"
                        + (f" matching {only}" if only else ""))
    return out


def run_scenarios(engine: Any, work: Path, report: Report,
                  only: list[str]) -> list[str]:
    """Run every scenario (and variant) against engine and oracle."""
    import fixtures  # noqa: PLC0415

    names = []
    made: dict[str, Path] = {}
    for sc in load_scenarios(only):
        preset = sc["fixture"]
        if preset not in made:
            made[preset] = work / "pristine" / preset
            made[preset].parent.mkdir(parents=True, exist_ok=True)
            try:
                fixtures.generate(preset, made[preset])
            except (OSError, ValueError) as e:
                raise CannotRun(f"cannot generate fixture {preset!r}: {e}") from e
        spec = fixtures.preset(preset)
        variants = sc.get("variants") or [{"suffix": "", "cache": {}}]
        print(f"{sc['name']}: {sc.get('title', '')}", flush=True)
        for var in variants:
            opts = {**sc["cache"], **var.get("cache", {})}
            for backend in ("engine", "oracle"):
                make = functools.partial(_make_backend, backend, engine, spec,
                                         opts)
                ScenarioRun(sc, var, spec, made[preset],
                            work / "scratch" / backend, make, report).run()
            names.append(sc["name"] + var.get("suffix", ""))
    return names


# --------------------------------------------------------------------------
# Reporting
# --------------------------------------------------------------------------


class Report:
    """Collects checks, prints one aligned line each, and writes JSON."""

    def __init__(self, width: int = 60) -> None:
        self.width = width
        self.checks: list[dict[str, Any]] = []

    def add(self, scenario: str, backend: str, name: str, ok: bool,
            detail: str, expected: Any, actual: Any) -> None:
        """Record and print one check."""
        self.checks.append({"scenario": scenario, "backend": backend,
                            "check": name, "passed": ok, "detail": detail,
                            "expected": expected, "actual": actual})
        label = f"{name} [{backend}]"
        print(f"  {'PASS' if ok else 'FAIL'}  {label:<{self.width}} {detail}",
              flush=True)

    @property
    def failed(self) -> list[dict[str, Any]]:
        """Checks that did not pass."""
        return [c for c in self.checks if not c["passed"]]


def _resolve_engine_dir(arg: str | None) -> Path:
    if arg is None:
        return ROOT / "engine"
    p = Path(arg).resolve()
    if (p / "engine" / "_build.py").is_file():
        return p / "engine"
    if (p / "_build.py").is_file():
        return p
    raise CannotRun(f"--engine-src {arg}: no engine tree there (expected "
                    "engine/_build.py or _build.py)")


# --------------------------------------------------------------------------
# The policy lab: python replay.py --trace FILE [...] OUTDIR
# --------------------------------------------------------------------------
#
# Replays a routing trace through every policy and cache size with the C
# simulator (the live cache's own policy code), prints a table of misses and
# hit rates, and writes results.csv, results.json (with the trace's reuse
# distances and adjacent-token overlap) and mrc.png.  Each (policy, size)
# cell is one engine.sim.simulate call on a concurrent.futures.Executor;
# Belady runs at every size so each row carries its belady_gap.

#: Columns of results.csv, in order.
COLUMNS = ("policy", "slots", "mode", "per_layer", "requests", "hits", "misses",
           "hit_rate", "miss_ratio", "compulsory", "reloads", "evictions",
           "belady_gap")
EXECUTORS = ("process", "thread", "dask")


def _cell(keys: np.ndarray, starts: np.ndarray, n_experts: int, policy: str,
          slots: int, mode: str, per_layer: bool) -> dict[str, Any]:
    """One (policy, size) replay (top-level, so process pools can pickle it)."""
    from engine.sim import simulate  # noqa: PLC0415

    return simulate(keys, policy, slots, mode, per_layer, n_experts=n_experts,
                    step_starts=starts)


class _Bar:
    """A plain stderr progress bar (tqdm when installed)."""

    def __init__(self, total: int, quiet: bool) -> None:
        self.total, self.done, self.quiet = total, 0, quiet
        self._tqdm = None
        if not quiet:
            try:
                from tqdm import tqdm

                self._tqdm = tqdm(total=total, file=sys.stderr, unit="cell",
                                  leave=False)
            except ImportError:
                pass

    def step(self) -> None:
        """One more cell done."""
        self.done += 1
        if self._tqdm is not None:
            self._tqdm.update(1)
        elif not self.quiet:
            filled = 30 * self.done // self.total
            sys.stderr.write(f"\r[{'#' * filled}{'.' * (30 - filled)}] "
                             f"{self.done}/{self.total} cells")
            if self.done == self.total:
                sys.stderr.write("\n")
            sys.stderr.flush()

    def close(self) -> None:
        """Finish the bar."""
        if self._tqdm is not None:
            self._tqdm.close()


def run_sweep(trace: Trace, policies: Sequence[str], sizes: Sequence[int],
              mode: str = "step", per_layer: bool = False,
              executor: Executor | None = None, quiet: bool = True
              ) -> list[dict[str, Any]]:
    """Replay every (policy, size) cell on ``executor``; rows ordered by policy, size.

    Belady runs at every size (its rows are kept only when asked for) and
    each row gets ``belady_gap = misses - belady misses``. Without an
    executor the cells run here, one after another.
    """
    from engine.sim import trace_arrays  # noqa: PLC0415

    keys, starts, _, n_experts = trace_arrays(trace)
    run = list(dict.fromkeys([*policies, "belady"]))
    cells = [(p, n) for p in run for n in sizes]
    bar = _Bar(len(cells), quiet)
    results: dict[tuple[str, int], dict[str, Any]] = {}
    try:
        if executor is None:
            for p, n in cells:
                results[(p, n)] = _cell(keys, starts, n_experts, p, n, mode,
                                        per_layer)
                bar.step()
        else:
            futures = {executor.submit(_cell, keys, starts, n_experts, p, n, mode,
                                       per_layer): (p, n) for p, n in cells}
            for fut, cell in futures.items():
                results[cell] = fut.result()
                bar.step()
    finally:
        bar.close()
    rows = []
    for p in policies:
        for n in sizes:
            row = dict(results[(p, n)])
            row["belady_gap"] = row["misses"] - results[("belady", n)]["misses"]
            rows.append(row)
    return rows


def sizes_for(trace: Trace, slots: str | None, fractions: str | None,
              mode: str, per_layer: bool) -> list[int]:
    """Cache sizes from ``--slots`` or ``--fractions`` of the working set.

    The working set is the distinct keys of the trace (per layer: the most
    distinct experts any layer uses). Step mode raises sizes below top_k to
    top_k (a step must fit).
    """
    if slots:
        sizes = [int(x) for x in slots.split(",") if x.strip()]
    else:
        keys = trace.keys()
        if per_layer:
            ws = max(len(np.unique(keys[trace.layer == layer]))
                     for layer in np.unique(trace.layer))
        else:
            ws = len(np.unique(keys))
        fr = [float(x) for x in (fractions or "0.1,0.25,0.5").split(",")]
        sizes = [max(1, round(f * ws)) for f in fr]
    if any(n < 1 for n in sizes):
        raise ValueError("cache sizes must be at least 1 slot")
    if mode == "step":
        sizes = [max(n, trace.top_k) for n in sizes]
    return sorted(set(sizes))


def analyse(trace: Trace) -> dict[str, Any]:
    """Shape, reuse-distance histogram and median (tokens), adjacent overlap."""
    from oracle.traces import (  # noqa: PLC0415
        adjacent_overlap,
        median_reuse_distance,
        reuse_histogram,
    )

    dist, count = reuse_histogram(trace)
    med = median_reuse_distance(trace)
    ov = adjacent_overlap(trace)
    return {"name": trace.name, "accesses": len(trace), "tokens": trace.n_tokens,
            "layers": trace.n_layers, "experts": trace.n_experts,
            "top_k": trace.top_k, "distinct_keys": int(len(np.unique(trace.keys()))),
            "median_reuse_tokens": None if np.isnan(med) else med,
            "reuse_histogram": {int(d): int(c) for d, c in zip(dist, count,
                                                                strict=True)},
            "adjacent_overlap": None if np.isnan(ov) else ov}


def _plot(rows: list[dict[str, Any]], path: str, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for p in dict.fromkeys(r["policy"] for r in rows):
        pts = [(r["slots"], r["miss_ratio"]) for r in rows if r["policy"] == p]
        ax.plot(*zip(*pts, strict=True), marker="o", label=p)
    ax.set_xlabel("cache size (slots)")
    ax.set_ylabel("miss ratio")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _executor(kind: str, workers: int, stack: ExitStack) -> Executor:
    if kind == "process":
        return stack.enter_context(ProcessPoolExecutor(max_workers=workers))
    if kind == "thread":
        return stack.enter_context(ThreadPoolExecutor(max_workers=workers))
    from distributed import Client, LocalCluster  # the `lab` extra

    cluster = stack.enter_context(LocalCluster(n_workers=1, processes=False,
                                               threads_per_worker=workers,
                                               dashboard_address=None))
    client = stack.enter_context(Client(cluster))
    return client.get_executor()


def _trace_parser() -> argparse.ArgumentParser:
    from engine.sim import POLICIES  # noqa: PLC0415
    from oracle.traces import FORMATS  # noqa: PLC0415

    ap = argparse.ArgumentParser(
        prog="replay.py --trace",
        description="Replay a routing trace through cache policies and sizes.")
    ap.add_argument("--trace", required=True, help="trace file")
    ap.add_argument("--format", choices=FORMATS, default=None,
                    help="trace format (default: from the extension)")
    ap.add_argument("--top-k", type=int, default=None,
                    help="experts per routed call (int32 traces; text dumps "
                         "with integer weights)")
    ap.add_argument("--layers", type=int, default=None,
                    help="MoE layers (int32 traces: calls cycle through them)")
    ap.add_argument("--experts", type=int, default=None, help="experts per layer")
    ap.add_argument("--mode", choices=("plain", "step"), default="step")
    ap.add_argument("--policies", default=",".join(POLICIES))
    size = ap.add_mutually_exclusive_group()
    size.add_argument("--slots", default=None, help="sizes in slots, N,N,...")
    size.add_argument("--fractions", default=None,
                      help="sizes as fractions of the working set (default "
                           "0.1,0.25,0.5)")
    ap.add_argument("--per-layer", action="store_true",
                    help="the size is per layer, one cache per layer")
    ap.add_argument("--executor", choices=EXECUTORS, default="process")
    ap.add_argument("--workers", type=int, default=min(2, os.cpu_count() or 1))
    ap.add_argument("--export-csv", default=None, help="also write the trace as CSV")
    ap.add_argument("--export-oracle-general", default=None,
                    help="also write the trace as libCacheSim oracleGeneral")
    ap.add_argument("--quiet", action="store_true", help="no progress bar")
    ap.add_argument("outdir")
    return ap


def trace_main(argv: Sequence[str] | None = None) -> int:
    """Run the lab; 0 on success, 2 when the trace or the options are unusable."""
    from oracle.traces import (  # noqa: PLC0415
        read_trace,
        write_csv,
        write_oracle_general,
    )

    try:
        ns = _trace_parser().parse_args(argv)
    except SystemExit as e:
        return EXIT_CANNOT_RUN if e.code else EXIT_PASS
    policies = [p for p in ns.policies.split(",") if p]
    try:
        trace = read_trace(ns.trace, ns.format, ns.top_k, ns.layers, ns.experts)
        sizes = sizes_for(trace, ns.slots, ns.fractions, ns.mode, ns.per_layer)
    except (OSError, ValueError) as exc:
        print(f"replay.py --trace: {exc}", file=sys.stderr)
        return 2
    if ns.export_csv:
        write_csv(trace, ns.export_csv)
    if ns.export_oracle_general:
        write_oracle_general(trace, ns.export_oracle_general)
    os.makedirs(ns.outdir, exist_ok=True)
    with ExitStack() as stack:
        try:
            executor = _executor(ns.executor, max(1, ns.workers), stack)
        except ImportError as exc:
            print(f"replay.py --trace: executor {ns.executor}: {exc} (pip install "
                  "-e '.[lab]')", file=sys.stderr)
            return 2
        try:
            rows = run_sweep(trace, policies, sizes, ns.mode, ns.per_layer,
                             executor, quiet=ns.quiet)
        except Exception as exc:  # engine errors name the bad policy or size
            print(f"replay.py --trace: {exc}", file=sys.stderr)
            return 2
    info = analyse(trace)
    scope = "per layer" if ns.per_layer else "global"
    ov = info["adjacent_overlap"]
    print(f"{info['name']}: {info['accesses']} accesses, {info['tokens']} tokens, "
          f"{info['layers']} layers x {info['experts']} experts, top-{info['top_k']}; "
          f"mode {ns.mode}, {scope} capacity; median reuse "
          f"{info['median_reuse_tokens']} tokens, adjacent overlap "
          f"{ov if ov is None else round(ov, 3)}")
    print(f"{'policy':<10} {'slots':>6} {'misses':>8} {'hit rate':>9} "
          f"{'reloads':>8} {'belady gap':>10}")
    for r in rows:
        print(f"{r['policy']:<10} {r['slots']:>6} {r['misses']:>8} "
              f"{r['hit_rate']:>9.4f} {r['reloads']:>8} {r['belady_gap']:>10}")
    with open(os.path.join(ns.outdir, "results.csv"), "w", newline="",
              encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS, extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)
    with open(os.path.join(ns.outdir, "results.json"), "w", encoding="utf-8") as f:
        json.dump({"trace": info, "mode": ns.mode, "per_layer": ns.per_layer,
                   "sizes": sizes, "policies": policies, "results": rows}, f,
                  indent=1)
    _plot(rows, os.path.join(ns.outdir, "mrc.png"),
          f"{info['name']} ({ns.mode}, {scope})")
    return 0



def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """Parse the command line."""
    ap = argparse.ArgumentParser(
        prog="replay.py", description="Pinned replays that gate engine changes.")
    ap.add_argument("dir", nargs="?", help="scratch folder for the build and fixtures")
    ap.add_argument("--engine-src", help="replay a candidate engine tree")
    ap.add_argument("--repin", action="store_true",
                    help="rewrite the pins of the engine tree and exit")
    ap.add_argument("--json", dest="json_path", help="write every check here")
    ap.add_argument("--keep", action="store_true", help="keep generated files")
    ap.add_argument("--scenario", action="append", default=[],
                    help="run only scenarios whose name contains this")
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Run the replay (or, with --trace, the policy lab); return the exit status."""
    args = sys.argv[1:] if argv is None else list(argv)
    if any(a == "--trace" or a.startswith("--trace=") for a in args):
        return trace_main(args)
    try:
        ns = parse_args(argv)
    except SystemExit as e:
        return EXIT_CANNOT_RUN if e.code else EXIT_PASS
    t0 = time.perf_counter()
    try:
        engine_dir = _resolve_engine_dir(ns.engine_src)
        if ns.repin:
            changes = repin(engine_dir)
            print(f"Re-pinned {len(current_digests(engine_dir))} engine sources "
                  f"in {engine_dir / PINS_NAME}")
            for c in changes:
                print(f"  {c}")
            if not changes:
                print("  (no change)")
            return EXIT_PASS
        if not ns.dir:
            raise CannotRun("missing <dir>: the scratch folder to build into")
        n_pins = verify_pins(engine_dir)
        print(f"Verified {n_pins} pinned source digests")
        out = Path(ns.dir).resolve()
        out.mkdir(parents=True, exist_ok=True)
        work = out / "replay-work"
        if work.exists():
            shutil.rmtree(work)
        (work / "build").mkdir(parents=True)
        t_build = time.perf_counter()
        so, cflags = build_engine(engine_dir, work / "build")
        build_s = time.perf_counter() - t_build
        print(f"Built the engine in {build_s:.1f} s ({' '.join(cflags)})")
        engine = load_engine(engine_dir, so)
        report = Report()
        t_sc = time.perf_counter()
        names = run_scenarios(engine, work, report, ns.scenario)
        sc_s = time.perf_counter() - t_sc
    except CannotRun as e:
        print(f"CANNOT RUN: {e}", file=sys.stderr)
        return EXIT_CANNOT_RUN
    except (OSError, ImportError, KeyError, ValueError) as e:
        # setup that failed outside the checks (a folder that cannot be
        # made, an unreadable pins file, an engine that will not import):
        # the replay could not run, which is not a failed check
        print(f"CANNOT RUN: {type(e).__name__}: {e}", file=sys.stderr)
        return EXIT_CANNOT_RUN
    total_s = time.perf_counter() - t0
    failed = report.failed
    word = "FAIL" if failed else "PASS"
    extra = f"{len(failed)} failed; " if failed else ""
    print(f"{word}: {len(names)} scenarios, {len(report.checks)} checks; "
          f"{extra}scenarios {sc_s:.2f} s, total {total_s:.1f} s "
          f"(build {build_s:.1f} s)")
    if ns.json_path:
        try:
            Path(ns.json_path).write_text(json.dumps({
                "passed": not failed, "scenarios": names, "cflags": cflags,
                "timing_s": {"build": build_s, "scenarios": sc_s,
                             "total": total_s},
                "checks": report.checks}, indent=1, default=str) + "\n")
        except OSError as e:
            print(f"CANNOT RUN: cannot write the report: {e}", file=sys.stderr)
            return EXIT_CANNOT_RUN
    if not ns.keep:
        shutil.rmtree(work, ignore_errors=True)
    return EXIT_FAIL if failed else EXIT_PASS


if __name__ == "__main__":
    sys.exit(main())
