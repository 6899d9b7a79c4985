"""Build recipe of the engine's cffi extension (out-of-line API mode).

One function, ``make_builder``, describes the build so that the package
(``pip install``), the sanitizer job in CI and ``replay.py`` (which builds a
candidate engine tree into a scratch folder) all compile the same sources with
the same recorded flags.
"""

from __future__ import annotations

import os
import sys

# Run as a script (`python engine/_build.py`, as CI does), this folder is
# sys.path[0], where engine/inspect.py would shadow the standard library's
# inspect module that cffi imports.  The package does not need it there.
if sys.path and os.path.abspath(sys.path[0] or ".") == os.path.dirname(
        os.path.abspath(__file__)):
    del sys.path[0]
from pathlib import Path

from cffi import FFI

HERE = Path(__file__).resolve().parent

#: Flags of every build; replay.py records them in its report.
CFLAGS: list[str] = [
    "-std=c11",
    "-D_GNU_SOURCE",
    "-O2",
    "-g",
    "-Wall",
    "-Wextra",
    "-Wno-unused-parameter",  # cffi's generated wrappers trip it
    "-pthread",
]
LDFLAGS: list[str] = ["-pthread"]

#: Set XC_SANITIZE=address,undefined to build an instrumented engine.
SANITIZE_ENV = "XC_SANITIZE"
#: Set XC_COVERAGE=1 to build with gcov instrumentation.
COVERAGE_ENV = "XC_COVERAGE"


def flags_from_env() -> tuple[list[str], list[str]]:
    """Return (cflags, ldflags) for this build, honouring the env switches."""
    cflags, ldflags = list(CFLAGS), list(LDFLAGS)
    san = os.environ.get(SANITIZE_ENV, "").strip()
    if san:
        cflags += [f"-fsanitize={san}", "-fno-omit-frame-pointer",
                   "-fno-sanitize-recover=all"]
        ldflags += [f"-fsanitize={san}"]
    if os.environ.get(COVERAGE_ENV, "").strip() not in ("", "0"):
        cflags += ["--coverage", "-O0"]
        ldflags += ["--coverage"]
    return cflags, ldflags


def make_builder(src_dir: Path | None = None,
                 module_name: str = "engine._xc") -> FFI:
    """Return an FFI builder for the engine sources under ``src_dir``.

    ``src_dir`` is an ``engine`` folder holding ``_cdef.h`` and ``csrc/``;
    it defaults to this package.
    """
    root = Path(src_dir) if src_dir is not None else HERE
    csrc = root / "csrc"
    sources = sorted(str(p) for p in csrc.glob("*.c"))
    cflags, ldflags = flags_from_env()
    ffi = FFI()
    ffi.cdef((root / "_cdef.h").read_text())
    ffi.set_source(
        module_name,
        '#include "xc.h"\n',
        sources=sources,
        include_dirs=[str(csrc)],
        extra_compile_args=cflags,
        extra_link_args=ldflags,
    )
    return ffi


ffibuilder = make_builder(Path("engine") if Path("engine/_cdef.h").exists()
                          else None)


def build_into(out_dir: Path, src_dir: Path | None = None) -> Path:
    """Compile the engine under ``src_dir`` into ``out_dir``; return the .so path."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    ffi = make_builder(src_dir, module_name="_xc")
    return Path(ffi.compile(tmpdir=str(out_dir), verbose=False))


if __name__ == "__main__":
    import argparse

    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", required=True, help="folder to build into")
    ap.add_argument("--src", default=None, help="engine folder (default: this)")
    ns = ap.parse_args()
    print(build_into(Path(ns.out), Path(ns.src) if ns.src else None))
