"""Build recipe of the engine's cffi extension (out-of-line API mode).

One function, ``make_builder``, describes the build so that the package
(``pip install``), the sanitizer job in CI and ``replay.py`` (which builds a
candidate engine tree into a scratch folder) all compile the same sources with
the same recorded flags.

What goes in: every ``csrc/*.c``, compiled into one extension that includes
both C headers -- ``csrc/xc.h`` (the public API, cdef ``_cdef.h``) and
``csrc/xc_test.h`` (test, fault and tool entry points, cdef
``_cdef_test.h``) -- so Python calls every ``lib.xc_*`` on the one ``lib``.

A build that cannot go stale: :func:`source_digest` is a SHA-256 over every
source the build reads (``csrc/*.c``, ``csrc/*.h``, ``_cdef.h``,
``_cdef_test.h``, names included, in a stable order).  The build embeds it
(``lib.xc_build_digest()``), and ``engine._lib`` refuses to load a build whose
digest differs from the sources beside it.

Environment switches (flags of the build, not part of the digest):

``XC_SANITIZE=address,undefined``
    an instrumented engine (``-fsanitize=...``), as CI runs the tests under.
``XC_COVERAGE=1``
    gcov instrumentation (``--coverage -O0``), for ``.ci/coverage.sh``.
``XC_RELEASE=1``
    adds ``-DNDEBUG``: the C core's ``assert()`` checks of internal
    preconditions are compiled out.  Without it (the default, the build the
    tests and the sanitizer job use) they are compiled in.
"""

from __future__ import annotations

import hashlib
import os
import sys

# Run as a script (`python engine/_build.py`, as CI does), this folder is
# sys.path[0], where engine/inspect.py would shadow the standard library's
# inspect module that cffi imports.  The package does not need it there.
if sys.path and os.path.abspath(sys.path[0] or ".") == os.path.dirname(
        os.path.abspath(__file__)):
    del sys.path[0]
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # cffi is imported only when a build is made
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
#: Set XC_RELEASE=1 to compile the C asserts out (-DNDEBUG).
RELEASE_ENV = "XC_RELEASE"

#: The two cffi declaration files, in the order they are declared.
CDEFS: tuple[str, ...] = ("_cdef.h", "_cdef_test.h")
#: The C headers the extension includes, in the order of CDEFS.
HEADERS: tuple[str, ...] = ("xc.h", "xc_test.h")
#: Declared by the build itself (defined in the set_source preamble).
DIGEST_CDEF = "const char *xc_build_digest(void);\n"


def source_files(root: Path) -> list[Path]:
    """Every file a build of the engine folder ``root`` reads, in digest order.

    That is ``csrc/*.c``, ``csrc/*.h``, ``_cdef.h`` and ``_cdef_test.h``
    (those present), sorted by their path relative to ``root``.
    """
    root = Path(root)
    csrc = root / "csrc"
    files = list(csrc.glob("*.c")) + list(csrc.glob("*.h"))
    files += [root / name for name in CDEFS if (root / name).is_file()]
    return sorted(files, key=lambda p: p.relative_to(root).as_posix())


def source_digest(root: Path) -> str:
    """SHA-256 (hex) over the sources a build of ``root`` compiles.

    Each file contributes its relative path, its length and its bytes, so an
    added, removed or renamed source changes the digest as an edit does.
    """
    root = Path(root)
    h = hashlib.sha256()
    for p in source_files(root):
        data = p.read_bytes()
        h.update(p.relative_to(root).as_posix().encode())
        h.update(b"\0%d\0" % len(data))
        h.update(data)
    return h.hexdigest()


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
    if os.environ.get(RELEASE_ENV, "").strip() not in ("", "0"):
        cflags += ["-DNDEBUG"]
    return cflags, ldflags


def make_builder(src_dir: Path | None = None,
                 module_name: str = "engine._xc") -> FFI:
    """Return an FFI builder for the engine sources under ``src_dir``.

    ``src_dir`` is an ``engine`` folder holding ``_cdef.h``, ``_cdef_test.h``
    and ``csrc/``; it defaults to this package.
    """
    from cffi import FFI

    root = Path(src_dir) if src_dir is not None else HERE
    csrc = root / "csrc"
    sources = sorted(str(p) for p in csrc.glob("*.c"))
    depends = [str(p) for p in source_files(root) if p.suffix == ".h"]
    cflags, ldflags = flags_from_env()
    ffi = FFI()
    for name in CDEFS:
        ffi.cdef((root / name).read_text())
    ffi.cdef(DIGEST_CDEF)
    preamble = "".join(f'#include "{h}"\n' for h in HEADERS)
    preamble += ("static const char *xc_build_digest(void)\n"
                 f'{{ return "{source_digest(root)}"; }}\n')
    ffi.set_source(
        module_name,
        preamble,
        sources=sources,
        depends=depends,  # a changed header rebuilds too
        include_dirs=[str(csrc)],
        extra_compile_args=cflags,
        extra_link_args=ldflags,
    )
    return ffi


def ffibuilder() -> FFI:
    """The package's builder, for setup.py's ``cffi_modules`` (cffi calls it)."""
    return make_builder(Path("engine") if Path("engine/_cdef.h").exists()
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
