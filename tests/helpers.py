"""What the tests share besides fixtures: containers, expected bytes, traces, rules.

Pytest fixtures live in ``tests/conftest.py``; everything else more than one
test file needs lives here, so that no test file imports another.  Sections:

- the repository's layout (``ROOT``, ``TRACES_DIR``) and its pinned number of
  gate scenarios (``PINNED_SCENARIOS``);
- k3-mini, the one-layer container most cache tests use: its geometry, the
  bytes the generator writes for each tensor, and a variant with each
  expert's tensors stored in reverse order (so no expert is contiguous);
- the fixture presets as the model-based tests see them (``Preset``), with
  the oracle reader's bytes for every expert;
- hand-built safetensors bytes and a two-shard container with its index;
- the C boundary's error record (``raised``);
- routing traces (``real_trace``, ``synthetic``) and libcachesim's counts;
- what the engine-vs-oracle state machines share (``both``, ``AgreementRules``)
  and the read-ahead tests (``DELAY_US``, ``semantic``).
"""

from __future__ import annotations

import atexit
import json
import os
import re
import shutil
import signal
import struct
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import strategies as st
from hypothesis.stateful import rule

from xcache import engine, fixtures
from xcache.engine import _lib
from xcache.engine.cache import TIMING_COUNTERS
from xcache.faults.kinds import kind_of
from xcache.oracle import safetensors as ost
from xcache.oracle.traces import Trace, load_trace

#: k3-mini's spec (docs/DESIGN.md §3), its naming, and its expert layout as
#: ExpertCache takes it: the one place tests take them from.
K3_SPEC = fixtures.preset("k3-mini")
K3_TEMPLATE: str = K3_SPEC.expert_template
K3_TENSORS: tuple[str, ...] = tuple(p for p, _, _ in K3_SPEC.expert_tensors)
K3_LAYOUT: dict = K3_SPEC.cache_layout()

# -- the repository ---------------------------------------------------------------

#: The repository's root folder (the one holding engine/, fixtures/, tests/).
ROOT = Path(__file__).resolve().parents[1]

#: The real routing traces shipped in fixtures/traces (see its README.md);
#: XC_TRACES_DIR points the tests at another folder of the same files.
TRACES_DIR = Path(os.environ.get("XC_TRACES_DIR") or ROOT / "fixtures" / "traces")

#: The gate's shipped scenario files (gate/scenarios/*.json but programs.json),
#: one line each in a run's output: pinned, so that a lost scenario fails a
#: test.  It must change with the shipped scenario files in gate/scenarios/.
PINNED_SCENARIOS = 68

# -- k3-mini ----------------------------------------------------------------------

N_EXPERTS = 24
EXPERT_BYTES = 1632
DATA_START = 20608
FILE_BYTES = 59776
SHAPES = {"weight_packed": [8, 64], "weight_scale": [8, 4]}
SHARD = "model-00001-of-00001.safetensors"


def tensor_bytes(expert: int, suffix: str) -> bytes:
    """What the generator writes for k3-mini's (layer 0, expert, suffix)."""
    name = K3_TEMPLATE.format(layer=0, expert=expert, tensor=suffix)
    return fixtures.expected_bytes("k3-mini", name)


def write_k3_mini(out_dir: Path) -> Path:
    """Generate k3-mini into out_dir/k3-mini and return its shard's path.

    Tests take k3-mini from the ``k3_shard`` (shared, read-only) and
    ``k3_copy`` (private, writable) fixtures of conftest, made by this function.
    """
    folder = Path(out_dir) / "k3-mini"
    fixtures.generate("k3-mini", folder)
    path = folder / SHARD
    assert path.stat().st_size == FILE_BYTES
    return path


def write_reversed_k3_mini(out_dir: Path) -> Path:
    """Write k3-mini's tensors with each expert's stored in reverse order; the shard.

    A different container from k3-mini (its header and sizes are its own):
    the tensor contents are k3-mini's, but no expert is contiguous, so the
    cache must read it tensor by tensor.  Written into out_dir/k3-mini.
    """
    header: dict[str, Any] = {}
    payload = bytearray()
    for e in range(N_EXPERTS):
        for suffix in reversed(K3_TENSORS):
            data = tensor_bytes(e, suffix)
            name = K3_TEMPLATE.format(layer=0, expert=e, tensor=suffix)
            header[name] = {"dtype": "U8", "shape": SHAPES[suffix.split(".")[1]],
                            "data_offsets": [len(payload), len(payload) + len(data)]}
            payload += data
    text = json.dumps(header, separators=(", ", ": ")).encode()
    text += b" " * (-len(text) % 8)
    folder = Path(out_dir) / "k3-mini"
    folder.mkdir(parents=True)
    path = folder / SHARD
    path.write_bytes(len(text).to_bytes(8, "little") + text + payload)
    return path


def expert_bytes(path: Path, expert: int) -> bytes:
    """k3-mini expert's payload read straight from the file (it is contiguous)."""
    with open(path, "rb") as f:
        f.seek(DATA_START + EXPERT_BYTES * expert)
        return f.read(EXPERT_BYTES)


def open_container(path: Path) -> engine.Container:
    """The engine's container over path."""
    return engine.Container(str(path))


# -- the presets, as the model-based tests see them ----------------------------------

_PRESET_ROOT: Path | None = None
_PRESETS: dict[str, Preset] = {}


@dataclass(frozen=True)
class Preset:
    """A generated fixture container and what the tests need to know of it."""

    name: str
    path: Path
    spec: fixtures.Spec
    layers: tuple[int, ...]
    n_experts: int
    top_k: int
    parts: tuple[str, ...]
    expert_bytes: int
    payload: dict[tuple[int, int], bytes]  # the oracle reader's bytes per key
    file_offset: dict[tuple[int, int], int]  # where each expert's run begins

    @property
    def keys(self) -> list[tuple[int, int]]:
        """Every valid (layer, expert) key, in key-id order."""
        return [(la, e) for la in self.layers for e in range(self.n_experts)]

    def cache_kwargs(self) -> dict[str, object]:
        """The ExpertCache arguments that describe this container's experts."""
        return {"top_k": self.top_k, "expert_template": self.spec.expert_template,
                "tensors": self.parts, "layers": self.layers,
                "n_experts": self.n_experts}

    def who(self, data: bytes) -> str:
        """Name whose bytes ``data`` starts with (fixtures.identify)."""
        return str(fixtures.identify(data, self.spec))


def load_preset(name: str) -> Preset:
    """The preset's container, generated on first use in this session.

    Each preset is generated once into a temporary folder removed at exit;
    its expected expert payloads come from the oracle's own reader
    (``oracle.safetensors``): the tensors of the expert in the spec's order,
    concatenated -- the slot layout docs/CACHE.md "Reads" defines.
    """
    global _PRESET_ROOT
    if name in _PRESETS:
        return _PRESETS[name]
    if _PRESET_ROOT is None:
        _PRESET_ROOT = Path(tempfile.mkdtemp(prefix="xc-presets-"))
        atexit.register(shutil.rmtree, _PRESET_ROOT, True)
    spec = fixtures.preset(name)
    folder = _PRESET_ROOT / name
    fixtures.generate(name, folder)
    oc = ost.open_container(folder)
    payload, file_offset = {}, {}
    for layer in spec.layers:
        for e in range(spec.n_experts):
            names = spec.expert_names(layer, e)
            payload[layer, e] = b"".join(oc.read_bytes(n) for n in names)
            file_offset[layer, e] = oc.tensor(names[0]).offset
    p = Preset(name, folder, spec, tuple(spec.layers), spec.n_experts, spec.top_k,
               tuple(part for part, _, _ in spec.expert_tensors),
               spec.expert_nbytes, payload, file_offset)
    _PRESETS[name] = p
    return p


def open_preset(p: Preset, *, direct: bool = False) -> engine.Container:
    """The engine's container over a preset's folder."""
    return engine.Container(p.path, direct=direct)


# -- hand-built safetensors files ---------------------------------------------------

INDEX = "model.safetensors.index.json"
SHARD1 = "model-00001-of-00002.safetensors"
SHARD2 = "model-00002-of-00002.safetensors"


def st_bytes(header: str | bytes, data: bytes = b"", n: int | None = None) -> bytes:
    """A safetensors file: 8-byte little-endian N, the header, the data."""
    hb = header.encode() if isinstance(header, str) else header
    return struct.pack("<Q", len(hb) if n is None else n) + hb + data


_DTYPES = {"float32": "F32", "float64": "F64", "int64": "I64", "uint8": "U8"}


def st_file(tensors: dict[str, np.ndarray]) -> bytes:
    """A safetensors file of these arrays, stored in the order given.

    The header is compact JSON padded with spaces to a multiple of 8 bytes,
    the layout the official writer produces.
    """
    header, data = {}, b""
    for name, arr in tensors.items():
        raw = np.ascontiguousarray(arr).tobytes()
        header[name] = {"dtype": _DTYPES[arr.dtype.name], "shape": list(arr.shape),
                        "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    text = json.dumps(header, separators=(",", ":")).encode()
    return st_bytes(text + b" " * (-len(text) % 8), data)


def make_sharded(folder: Path, *, weight_map: dict[str, str] | None = None,
                 total_size: int | None = -1) -> dict[str, np.ndarray]:
    """Two shards (a, b | c) and their index in folder; returns the tensors written.

    The shards are byte for byte what ``safetensors.numpy.save_file`` writes
    for them (it stores b before a).  ``weight_map`` replaces the index's map;
    ``total_size`` None leaves metadata.total_size out, -1 writes the true 45.
    """
    t1 = {"b": np.array([1, 2], dtype=np.int64),
          "a": np.arange(6, dtype=np.float32).reshape(2, 3)}
    t2 = {"c": np.arange(5, dtype=np.uint8)}
    (folder / SHARD1).write_bytes(st_file(t1))
    (folder / SHARD2).write_bytes(st_file(t2))
    wm = {"a": SHARD1, "b": SHARD1, "c": SHARD2} if weight_map is None else weight_map
    meta = {} if total_size is None else {
        "total_size": 24 + 16 + 5 if total_size == -1 else total_size}
    (folder / INDEX).write_text(json.dumps({"metadata": meta, "weight_map": wm}))
    return {**t1, **t2}


def official_save_file(tensors: dict[str, np.ndarray], path: str | Path,
                       metadata: dict[str, str] | None = None) -> None:
    """safetensors' own writer; the calling test skips when safetensors is absent."""
    numpy_api = pytest.importorskip("safetensors.numpy")
    numpy_api.save_file(tensors, str(path), metadata=metadata)


def official_safe_open(path: str | Path, framework: str = "np") -> Any:
    """safetensors' own reader; the calling test skips when safetensors is absent."""
    return pytest.importorskip("safetensors").safe_open(str(path), framework=framework)


# -- the C boundary ------------------------------------------------------------------

def raised(exc_type: type[engine.EngineError], fn: Callable[..., int],
           *args: Any) -> engine.EngineError:
    """Call the C function fn(*args) through _lib.check; the exception it must raise."""
    with pytest.raises(exc_type) as ei:
        _lib.check(fn(*args))
    return ei.value


# -- routing traces ----------------------------------------------------------------

#: int64 max: "never used again" in next-use arrays.
NEVER = np.iinfo(np.int64).max


def real_trace(name: str) -> Trace:
    """One of the real routing traces in TRACES_DIR (shipped with the repository)."""
    path = TRACES_DIR / name
    assert path.is_file(), f"routing trace {path} is missing (fixtures/traces)"
    return load_trace(path)


def synthetic(seed: int = 1, n_tokens: int = 150) -> Trace:
    """A random routing trace: 4 layers, top-2 of 8 experts, skewed choices."""
    rng = np.random.default_rng(seed)
    weights = rng.dirichlet(np.ones(8) * 0.5, size=4)
    steps = [(t, layer, rng.choice(8, 2, replace=False, p=weights[layer]).tolist())
             for t in range(n_tokens) for layer in range(4)]
    return Trace.from_steps(steps, 4, 8)


def lcs_misses(keys: list[int], policy: str, capacity: int) -> int:
    """Misses of libcachesim with unit sizes, one Request per access.

    Belady reads each request's next_access_vtime (the CSV reader leaves it
    unset, which silently degrades Belady; -1 aborts the process), so every
    request carries it, computed here by a plain dict pass from the end.
    libcachesim is an optional peer: the calling test skips without it.
    """
    lcs = pytest.importorskip("libcachesim")
    nxt, last = [NEVER] * len(keys), {}
    for i in range(len(keys) - 1, -1, -1):
        nxt[i] = last.get(keys[i], NEVER)
        last[keys[i]] = i
    cache = {"lru": lcs.LRU, "fifo": lcs.FIFO, "belady": lcs.Belady}[policy](
        cache_size=capacity)
    misses = 0
    for i, key in enumerate(keys):
        req = lcs.Request(obj_size=1, obj_id=key, clock_time=i,
                          next_access_vtime=nxt[i])
        misses += not cache.get(req)
    return misses


#: Golden miss counts of the real traces: our simulator, equal to
#: libcachesim's counts in the same run (trace -> capacity -> policy -> misses).
REAL = {
    "mixtral8x7b_humaneval.jsonl": {
        2: {"belady": 21222}, 32: {"belady": 12833},
        64: {"lru": 14149, "fifo": 15580, "belady": 8283},
        200: {"lru": 3728, "fifo": 4359, "belady": 1218},
        500: {"lru": 256, "fifo": 256, "belady": 256},
    },
    "olmoe_299.jsonl": {
        8: {"belady": 36197}, 64: {"lru": 38272, "belady": 22615},
        200: {"lru": 20239, "fifo": 22313, "belady": 11089},
        500: {"lru": 8690, "fifo": 9799, "belady": 3494},
    },
}

# -- engine vs oracle state machines ---------------------------------------------------

#: Counters compared after every step, named explicitly so that a renamed
#: key fails loudly (load_ns is timing and is left out on purpose).
COMPARED_STATS = (
    "requests", "hits", "misses", "prefetch_loads", "prefetch_first_uses",
    "prefetch_evicted_unused", "evictions", "payload_bytes", "io_bytes",
    "load_failures", "short_reads", "io_errors", "prefetch_unused_resident",
    "adjusted_hits_aggregate", "adjusted_hits_exact", "hit_rate",
    "adjusted_hit_rate_aggregate", "adjusted_hit_rate_exact",
)

#: The queue policies (docs/CACHE.md "S3-FIFO", "ARC") with parameter
#: variants: small=0 always gives s = 1, 30 and 60 a larger S than the default.
S3FIFO_VARIANTS = ("s3fifo", "s3fifo:small=0", "s3fifo:small=30",
                   "s3fifo:small=60")
QUEUE_POLICIES = (*S3FIFO_VARIANTS, "arc")

#: True under the sanitizer build (XC_ENGINE_LIB): state machines run fewer examples.
SANITIZED = bool(os.environ.get("XC_ENGINE_LIB"))

#: The read-ahead tests' slow read (microseconds, the C delay fault): long
#: enough for every other read of the test to end first.
DELAY_US = 300_000


def semantic(stats: dict[str, float]) -> dict[str, float]:
    """The counters that must not depend on threads or timing."""
    return {k: v for k, v in stats.items() if k not in TIMING_COUNTERS}


def family(exc: BaseException) -> str:
    """The failure kind of an engine or oracle exception, in the engine's names."""
    return kind_of(exc)


def both(eng: Callable[[], Any], orc: Callable[[], Any]) -> tuple[Any, Any] | None:
    """Run one call on each side: both results, or None if both raised alike.

    Raising on one side only, or raising different failure kinds, fails the test.
    """
    e_res = o_res = e_exc = o_exc = None
    try:
        e_res = eng()
    except engine.EngineError as exc:
        e_exc = exc
    try:
        o_res = orc()
    except Exception as exc:  # noqa: BLE001 - the family is compared below
        o_exc = exc
    if e_exc is None and o_exc is None:
        return e_res, o_res
    e_fam = "ok" if e_exc is None else family(e_exc)
    o_fam = "ok" if o_exc is None else family(o_exc)
    assert e_fam == o_fam, (
        f"engine {e_fam} ({e_exc!r}) but oracle {o_fam} ({o_exc!r})")
    return None


def both_raise(eng: Callable[[], Any], orc: Callable[[], Any]) -> str:
    """Run one call on each side; both must raise the same kind, which is returned."""
    kinds = []
    for call in (eng, orc):
        try:
            call()
        except Exception as exc:  # noqa: BLE001 - the kind is what is compared
            kinds.append(family(exc))
        else:
            kinds.append("ok")
    assert kinds[0] == kinds[1] != "ok", f"engine {kinds[0]} but oracle {kinds[1]}"
    return kinds[0]


class AgreementRules:
    """Rules and checks shared by the engine-vs-oracle state machines.

    A machine mixing this in sets ``cache``, ``model`` and ``pool`` (the
    valid keys its rules draw from).
    """

    cache: Any
    model: Any
    pool: list[tuple[int, int]]

    def _key(self, data: st.DataObject, label: str) -> tuple[int, int]:
        """A pool key, or (half the time when there are any) a resident one."""
        resident = sorted(self.model.resident())
        if resident and data.draw(st.booleans(), f"{label} resident?"):
            return data.draw(st.sampled_from(resident), label)
        return data.draw(st.sampled_from(self.pool), label)

    def _assert_slots_agree(self) -> None:
        """Resident sets and every slot's state, key, holds, pins and mark agree."""
        assert self.cache.resident() == self.model.resident()
        e_slots = [(s["state"].upper(), s["key"], s["holds"], s["pins"],
                    s["unused_mark"]) for s in self.cache.slots()]
        o_slots = [(s.state, s.key, s.holds, s.pins, s.mark)
                   for s in self.model.slots()]
        bad = [(i, a, b) for i, (a, b) in enumerate(zip(e_slots, o_slots, strict=True))
               if a != b]
        assert not bad, f"slots differ (slot, engine, oracle): {bad}"

    @rule(data=st.data())
    def pin(self, data: st.DataObject) -> None:
        """Pin a key (resident or not): same outcome on both sides."""
        key = self._key(data, "pin")
        both(lambda: self.cache.pin(*key), lambda: self.model.pin(*key))

    @rule(data=st.data())
    def unpin(self, data: st.DataObject) -> None:
        """Unpin a pinned, resident or absent key: same outcome on both sides."""
        pinned = sorted(s.key for s in self.model.slots() if s.pins)
        if pinned and data.draw(st.booleans(), "pinned?"):
            key = data.draw(st.sampled_from(pinned), "unpin")
        else:
            key = self._key(data, "unpin")
        both(lambda: self.cache.unpin(*key), lambda: self.model.unpin(*key))

    @rule()
    def reset_stats(self) -> None:
        """Start a new counter window on both sides."""
        self.cache.reset_stats()
        self.model.reset_stats()


def group_members(pgid: int) -> list[int]:
    """Processes still alive (not zombies) in process group ``pgid``, from /proc."""
    found = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            stat = Path(f"/proc/{d}/stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if fields[0] != "Z" and int(fields[2]) == pgid:
            found.append(int(d))
    return found


def sigint_mid_run(argv: list[str], started: bytes | re.Pattern[bytes]
                   ) -> tuple[int, str, int]:
    """Start argv in its own group, Ctrl-C it once ``started`` is on stderr.

    Returns (exit status, stderr, the group id); the waits are bounded so a
    hang fails the test instead of stalling it.
    """
    p = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                         cwd=ROOT, start_new_session=True)
    os.set_blocking(p.stderr.fileno(), False)
    seen = b""
    deadline = time.monotonic() + 120
    pattern = started if isinstance(started, re.Pattern) else re.compile(
        re.escape(started))
    while (not pattern.search(seen) and p.poll() is None
           and time.monotonic() < deadline):
        time.sleep(0.05)
        seen += p.stderr.read() or b""
    assert pattern.search(seen), seen.decode(errors="replace")
    os.killpg(p.pid, signal.SIGINT)
    try:
        rc = p.wait(timeout=60)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
    os.set_blocking(p.stderr.fileno(), True)
    seen += p.stderr.read()
    return rc, seen.decode(errors="replace"), p.pid


def bad_adapter(tmp: Path, old: str, new: str, toml: tuple[str, str] = ("", "")
                ) -> Path:
    """tinycache's adapter copied into ``tmp`` with ``old`` replaced by ``new``
    in shim.c (and ``toml[0]`` by ``toml[1]`` in xcs.toml)."""
    dest = tmp / "adapter"
    shutil.copytree(ROOT / "examples" / "tinycache", dest)
    shim = (dest / "shim.c").read_text()
    assert shim.count(old) == 1, old
    (dest / "shim.c").write_text(shim.replace(old, new).replace(
        "#include <string.h>\n", "#include <string.h>\n#include <unistd.h>\n"))
    if toml[0]:
        text = (dest / "xcs.toml").read_text()
        assert text.count(toml[0]) == 1, toml[0]
        (dest / "xcs.toml").write_text(text.replace(*toml))
    return dest


def read_through(faults: Any, path: str, length: int,
                 offset: int = 0) -> tuple[int, bytes]:
    """Open path through the injector and read a range; return (rc, bytes)."""
    from xcache.engine import _lib  # noqa: PLC0415

    ffi, lib = _lib.ffi(), _lib.lib()
    io = faults.io
    h = ffi.new("int64_t *")
    assert io.open(io.ctx, path.encode(), 0, h) == 0
    try:
        buf = ffi.new("unsigned char[]", length)
        got = ffi.new("size_t *")
        rc = lib.xc_io_read_full(io, h[0], path.encode(), buf, length, offset,
                                 got)
        return rc, bytes(ffi.buffer(buf, got[0]))
    finally:
        io.close(io.ctx, h[0])

