"""The release build against the instrumented one: hit path, miss path, open.

The release build (``xcache.engine._xc``, no test seam compiled in) and the
instrumented build (``xcache.engine._xc_test``: allocation and thread-start
countdowns, fault injector, test hooks -- every build before the split) are
timed in the same run, on a k3-mini made by fixtures:

- from C: bench/hit_path.c linked with each build's sources and flags
  (release: the seam files left out, no XC_TEST_SEAMS; instrumented: all of
  them, -DXC_TEST_SEAMS=1), ns per get+release hit;
- from Python, through each build's extension (a child process per build
  and round, XC_ENGINE_LIB naming it, the children alternating): the raw
  hit (xc_cache_hold/unhold), ExpertCache.get().release() on a hit, a miss
  (a get that loads: five slots cycling over 24 experts) and a container
  open+close (the allocation-heaviest call: the header's index).

Best of ``--rounds`` (default 5) rounds each.  Every figure is printed beside
its baseline, the instrumented build's, with the ratio release / baseline
(below 1: the release build is faster).  ``--release-so`` and
``--instrumented-so`` take other builds (default: the package's own, built
fresh into a scratch folder when missing).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import timeit
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from xcache import fixtures  # noqa: E402
from xcache.engine import _build  # noqa: E402

#: The Python figures a child prints, in print order, with their labels.
PY_FIGURES = (("hold", "Python raw hold+unhold hit"),
              ("api", "Python ExpertCache.get().release hit"),
              ("miss", "Python ExpertCache.get miss (a load)"),
              ("open", "Python Container open+close"))


def best_ns(stmt: str, n: int, **names: object) -> float:
    """Best of 5 timeit repeats of ``stmt``, in ns per run."""
    return min(timeit.repeat(stmt, number=n, repeat=5, globals=names)) / n * 1e9


def child(shard: str) -> None:
    """Time the Python figures on the build XC_ENGINE_LIB names; print JSON."""
    from xcache.engine import Container, ExpertCache, _lib

    k3 = fixtures.preset("k3-mini")
    cache = ExpertCache(Container(shard), n_slots=8, top_k=k3.top_k,
                        **k3.cache_layout())
    cache.get(0, 3).release()
    lib = _lib.lib()
    ptr = cache._ptr
    n = 200_000
    out = {"seams": _lib.has_seams(),
           "hold": best_ns("u(p, h(p, 0, 3))", n, h=lib.xc_cache_hold,
                           u=lib.xc_cache_unhold, p=ptr),
           "api": best_ns("c.get(0, 3).release()", n, c=cache)}
    cache.close()
    small = ExpertCache(Container(shard), n_slots=5, top_k=k3.top_k,
                        **k3.cache_layout())
    state = {"e": 0}

    def miss() -> None:
        state["e"] = (state["e"] + 1) % 24
        small.get(0, state["e"]).release()

    for _ in range(24):
        miss()
    out["miss"] = best_ns("m()", 5_000, m=miss)
    assert small.stats()["hits"] == 0, "the miss loop hit"
    small.close()
    out["open"] = best_ns("Container(s).close()", 2_000, Container=Container,
                          s=shard)
    print(json.dumps(out))


def _package_so(stem: str) -> Path | None:
    """The package's extension file ``stem`` (``_xc``, ``_xc_test``), or None.

    A stale one is refused by the child that loads it (engine._lib).
    """
    import importlib.machinery

    folder = ROOT / "engine"
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        if (folder / (stem + suffix)).is_file():
            return folder / (stem + suffix)
    return None


def c_hit(tmp: Path, seams: bool) -> Path:
    """bench/hit_path.c linked with one build's sources and flags; the executable."""
    csrc = ROOT / "engine" / "csrc"
    exe = tmp / ("hit_path_instrumented" if seams else "hit_path_release")
    sources = [str(p) for p in _build.c_sources(ROOT / "engine", seams)]
    subprocess.run(["gcc", "-std=c11", "-D_GNU_SOURCE", "-O2", "-pthread",
                    *(_build.SEAM_CFLAGS if seams else []), "-I", str(csrc),
                    str(ROOT / "bench" / "hit_path.c"), *sources, "-o", str(exe)],
                   check=True)
    return exe


def main() -> None:
    """Build or find both builds, time them alternately, print the comparison."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--release-so", type=Path, default=None)
    ap.add_argument("--instrumented-so", type=Path, default=None)
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        child(a.child)
        return
    tmp = Path(tempfile.mkdtemp())
    try:
        fixtures.generate("k3-mini", tmp / "k3")
        shard = tmp / "k3" / "model-00001-of-00001.safetensors"
        rel = (a.release_so or _package_so("_xc")
               or _build.build_into(tmp / "rel", seams=False))
        inst = (a.instrumented_so or _package_so("_xc_test")
                or _build.build_into(tmp / "inst", seams=True))
        exes = {False: c_hit(tmp, False), True: c_hit(tmp, True)}
        c_best = {False: float("inf"), True: float("inf")}
        keys = [k for k, _ in PY_FIGURES]
        py_best = {seams: dict.fromkeys(keys, float("inf"))
                   for seams in (False, True)}
        for _ in range(a.rounds):
            for seams in (False, True):  # alternate: drift hits both alike
                out = subprocess.run([str(exes[seams]), str(shard), "2000000"],
                                     check=True, capture_output=True, text=True)
                c_best[seams] = min(c_best[seams], float(out.stdout))
                env = {k: v for k, v in os.environ.items() if k != "XC_TEST_SEAMS"}
                env["XC_ENGINE_LIB"] = str(inst if seams else rel)
                out = subprocess.run([sys.executable, __file__, "--child", str(shard)],
                                     check=True, capture_output=True, text=True,
                                     env=env)
                got = json.loads(out.stdout)
                if got["seams"] != seams:
                    raise SystemExit(f"{env['XC_ENGINE_LIB']} is not the "
                                     f"{'instrumented' if seams else 'release'} build")
                for k, _ in PY_FIGURES:
                    py_best[seams][k] = min(py_best[seams][k], got[k])
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"release build:      {rel}")
    print(f"instrumented build: {inst} (baseline)")
    print(f"{'':38s} {'release':>10s} {'baseline':>10s}  ratio")
    rows = [("C get+release hit", c_best[False], c_best[True])]
    rows += [(label, py_best[False][k], py_best[True][k]) for k, label in PY_FIGURES]
    for label, r, b in rows:
        print(f"{label + ':':38s} {r:8.1f}ns {b:8.1f}ns  {r / b:5.3f}x")
    print("ratio (release / instrumented): "
          + ", ".join(f"{label} {r / b:.3f}x" for label, r, b in rows))


if __name__ == "__main__":
    main()
