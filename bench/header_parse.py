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

    python bench/header_parse.py [--reps N]
"""

from __future__ import annotations

import argparse
import statistics
import struct
import tempfile
import time
from pathlib import Path

from safetensors import safe_open

import engine

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
    with safe_open(path, "np") as f:
        keys = f.keys()
        assert len(keys) == LAYERS * EXPERTS * len(PARTS)
        return f.get_tensor(last).tobytes()


def timed(fn, *args) -> tuple[float, bytes]:
    t0 = time.perf_counter()
    out = fn(*args)
    return time.perf_counter() - t0, out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=9)
    ns = ap.parse_args()
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


if __name__ == "__main__":
    main()
