"""Header parse at real scale: ours (engine.Container) vs the official package.

Builds one file with 211,968 tensors (92 layers x 384 experts x 6 tensors,
U8 [1] each; ~29 MB of JSON) in a temporary folder, then times, alternating
the two readers for several repetitions:

* ours:     Container(path) -> list(c) (every name) -> c.read(one name)
* official: safe_open(path, "np") -> .keys() (every name) -> get_tensor(one name)

Both arms open, validate, materialise every name as a Python str and read one
tensor.  A third figure, ``ours (no name list)``, times open + one read only
(the C hash index of all names is built at open either way).  The page cache
is warm for both (the file was just written).  The last line is the ratio of
the medians, ours / official (goal <= 0.1).

Then the hash-flooding case: N names (default 50,000) of one shape, 32
bytes each, crafted so that the name hash the reader used before it was
keyed puts them all in 1/64 of the name table (one run of linear probing:
every insert and lookup walks it, quadratic in N), against N names of the
same shape taken in order.  Each header is timed as open + one read; the
last line is the ratio crafted / plain (goal <= 3: the keyed hash gives
no file a way to pick its slots).

    python bench/header_parse.py [--reps N] [--flood-names N]
                                 [--clock wall|process]
"""

from __future__ import annotations

import argparse
import os
import statistics
import struct
import tempfile
import time
from pathlib import Path

import numpy as np

from xcache import engine

LAYERS, EXPERTS = 92, 384
PARTS = [(w, p) for w in ("w1", "w2", "w3")
         for p in ("weight_packed", "weight_scale")]


def build(path: Path) -> tuple[int, int]:
    """Write the real-scale file; return (tensors, header bytes)."""
    entries = []
    off = 0
    for layer in range(LAYERS):
        for ex in range(EXPERTS):
            for w, p in PARTS:
                entries.append(
                    f'"language_model.model.layers.{layer}.block_sparse_moe.'
                    f'experts.{ex}.{w}.{p}":{{"dtype":"U8","shape":[1],'
                    f'"data_offsets":[{off},{off + 1}]}}')
                off += 1
    header = ("{" + ",".join(entries) + "}").encode()
    header += b" " * (-len(header) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(header)))
        f.write(header)
        f.write(bytes(i % 251 for i in range(off)))
    return off, len(header)


def ours(path: str, last: str) -> bytes:
    with engine.Container(path) as c:
        names = list(c)
        assert len(names) == LAYERS * EXPERTS * len(PARTS)
        return c.read_bytes(last)


def ours_no_list(path: str, last: str) -> bytes:
    with engine.Container(path) as c:
        return c.read_bytes(last)


def official(path: str, last: str) -> bytes:
    from safetensors import safe_open

    with safe_open(path, "np") as f:
        keys = f.keys()
        assert len(keys) == LAYERS * EXPERTS * len(PARTS)
        return f.get_tensor(last).tobytes()


#: The clock of every timing: wall time by default; ``--clock process``
#: takes the process's CPU time instead (time.process_time), which a
#: machine shared with other jobs disturbs far less (time spent waiting for
#: a core is not counted).  Both readers open on one thread.
CLOCK = time.perf_counter


def timed(fn, *args) -> tuple[float, bytes]:
    t0 = CLOCK()
    out = fn(*args)
    return CLOCK() - t0, out


# -- hash flooding ------------------------------------------------------------

M32 = np.uint64(0xFFFFFFFF)
_S0, _S1 = np.uint64(0xA0761D6478BD642F), np.uint64(0xE7037ED1A0B428DB)
_STEP = np.uint64(0x8EBC6AF09C88C6E3)
FLOOD_LEN = 32


def _mix128(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """64x64 -> 128-bit product folded to 64 bits (low ^ high), elementwise."""
    al, ah, bl, bh = a & M32, a >> np.uint64(32), b & M32, b >> np.uint64(32)
    ll, lh, hl, hh = al * bl, al * bh, ah * bl, ah * bh
    mid = (ll >> np.uint64(32)) + (lh & M32) + (hl & M32)
    lo = (mid << np.uint64(32)) | (ll & M32)
    hi = hh + (lh >> np.uint64(32)) + (hl >> np.uint64(32)) + (mid >> np.uint64(32))
    return lo ^ hi


def unkeyed_hash32(names: np.ndarray) -> np.ndarray:
    """The reader's former (fixed, unkeyed) name hash of 32-byte names (rows)."""
    assert names.shape[1] == FLOOD_LEN and names.dtype == np.uint8
    w = np.ascontiguousarray(names).view("<u8")
    with np.errstate(over="ignore"):
        h = np.full(len(names), np.uint64(0x9E3779B97F4A7C15 ^ FLOOD_LEN))
        h = h + _mix128(w[:, 0] ^ _S0, w[:, 1] ^ _S1)
        h = h + _mix128(w[:, 2] ^ (_S0 + _STEP), w[:, 3] ^ _S1)
        h = _mix128(h ^ _S1, np.uint64(0x589965CC75374CC3) ^ (h >> np.uint64(32)))
    return ((h ^ (h >> np.uint64(32))) & M32).astype(np.uint32)


def _candidates(start: int, count: int) -> np.ndarray:
    """Rows 'model.experts.' + an 18-digit counter from start: 32 bytes each."""
    i = np.arange(start, start + count, dtype=np.uint64)
    rows = np.empty((count, FLOOD_LEN), dtype=np.uint8)
    rows[:, :14] = np.frombuffer(b"model.experts.", dtype=np.uint8)
    for k in range(18):
        rows[:, FLOOD_LEN - 1 - k] = (i // np.uint64(10**k) % np.uint64(10)) + 48
    return rows


def table_slots(n: int) -> int:
    """The name table's size for n names: a power of two >= 2n, at least 16."""
    cap = 16
    while cap < 2 * n:
        cap *= 2
    return cap


def crafted_names(n: int, spread: int = 64) -> list[str]:
    """n names whose unkeyed hash lands in the first 1/spread of the table."""
    cap = table_slots(n)
    out: list[np.ndarray] = []
    found, start, batch = 0, 0, min(1 << 20, max(1 << 16, 2 * n * spread))
    while found < n:
        rows = _candidates(start, batch)
        keep = rows[(unkeyed_hash32(rows) & np.uint32(cap - 1)) < cap // spread]
        out.append(keep)
        found += len(keep)
        start += batch
    rows = np.concatenate(out)[:n]
    return [bytes(r).decode() for r in rows]


def plain_names(n: int) -> list[str]:
    """n names of the same shape, in counter order (no choosing)."""
    return [bytes(r).decode() for r in _candidates(10**17, n)]


def build_names(path: Path, names: list[str]) -> None:
    """A file of one U8 [1] tensor per name, in the order given."""
    parts = [f'"{nm}":{{"dtype":"U8","shape":[1],"data_offsets":[{i},{i + 1}]}}'
             for i, nm in enumerate(names)]
    header = ("{" + ",".join(parts) + "}").encode()
    header += b" " * (-len(header) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(header)))
        f.write(header)
        f.write(bytes(i % 251 for i in range(len(names))))


def flood(reps: int, n: int) -> tuple[float, float]:
    """Median open + read of the crafted and the plain header, in ms."""
    crafted, plain = crafted_names(n), plain_names(n)
    with tempfile.TemporaryDirectory() as d:
        paths = []
        for tag, names in (("crafted", crafted), ("plain", plain)):
            p = os.path.join(d, f"{tag}.safetensors")
            build_names(Path(p), names)
            paths.append((p, names[-1]))
        times: list[list[float]] = [[], []]
        for _ in range(reps):
            for k, (p, last) in enumerate(paths):
                t, got = timed(ours_no_list, p, last)
                assert got == bytes([(n - 1) % 251])
                times[k].append(t)
    return (statistics.median(times[0]) * 1e3, statistics.median(times[1]) * 1e3)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=9)
    ap.add_argument("--flood-names", type=int, default=50_000)
    ap.add_argument("--flood-only", action="store_true",
                    help="only the hash-flooding case")
    ap.add_argument("--clock", choices=("wall", "process"), default="wall",
                    help="wall time (default) or the process's CPU time")
    ns = ap.parse_args()
    global CLOCK
    CLOCK = time.process_time if ns.clock == "process" else time.perf_counter
    print(f"clock: {ns.clock}")
    if not ns.flood_only:
        real_scale(ns)
    crafted, plain = flood(ns.reps, ns.flood_names)
    report_flood(ns, crafted, plain)


def real_scale(ns: argparse.Namespace) -> None:
    """The real-scale header, ours against the official reader."""
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "real_scale.safetensors"
        n, hbytes = build(path)
        p = str(path)
        last = (f"language_model.model.layers.{LAYERS - 1}.block_sparse_moe."
                f"experts.{EXPERTS - 1}.w3.weight_scale")
        print(f"file: {n} tensors, header {hbytes} bytes, "
              f"{path.stat().st_size} bytes total")
        a, b, c = [], [], []
        want = official(p, last)  # warm-up, and the bytes both must return
        assert ours(p, last) == want
        for _ in range(ns.reps):
            t, got = timed(official, p, last)
            assert got == want
            b.append(t)
            t, got = timed(ours, p, last)
            assert got == want
            a.append(t)
            t, got = timed(ours_no_list, p, last)
            assert got == want
            c.append(t)
        ma, mb, mc = (statistics.median(x) * 1e3 for x in (a, b, c))
        print(f"official (safe_open + keys + get_tensor): median {mb:.1f} ms "
              f"over {ns.reps}")
        print(f"ours (Container + list(names) + read):    median {ma:.1f} ms "
              f"over {ns.reps}")
        print(f"ours (no name list: open + read):         median {mc:.1f} ms "
              f"over {ns.reps}")
        print(f"ratio ours/official: {ma / mb:.3f}")


def report_flood(ns: argparse.Namespace, crafted: float, plain: float) -> None:
    """Prints the hash-flooding figures and their ratio."""
    print(f"hash flooding, {ns.flood_names} names of {FLOOD_LEN} bytes, open + read:")
    print(f"plain names (counter order):               median {plain:.1f} ms "
          f"over {ns.reps}")
    print(f"crafted names (one probe run, old hash):   median {crafted:.1f} ms "
          f"over {ns.reps}")
    print(f"ratio crafted/plain: {crafted / plain:.2f}")


if __name__ == "__main__":
    main()
