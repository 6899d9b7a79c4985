"""Build recipe of the engine's cffi extension (out-of-line API mode).

One function, ``make_builder``, describes the build so that the package
(``pip install``), the sanitizer job in CI and ``replay.py`` (which builds a
candidate engine tree into a scratch folder) all compile the same sources with
the same recorded flags.

Two builds of the same sources (docs/DESIGN.md, "Two builds"):

release (``seams=False``)
    what ``pip install`` makes as ``xcache.engine._xc`` and an engine embeds:
    ``csrc/xc.h`` (the public API, cdef ``_cdef.h``) and ``csrc/xc_ext.h``
    (io helpers, the name block; cdef ``_cdef_ext.h``).  No test seam is
    compiled in: the :data:`SEAM_SOURCES` are left out, ``XC_TEST_SEAMS`` is
    not defined (the policies' test views and the allocation countdowns
    preprocess away), and ``_cdef_test.h`` is not declared.
instrumented (``seams=True``, the default of :func:`build_into` and of
``python -m xcache.engine._build --out DIR``)
    the same plus ``csrc/xc_test.h`` (countdowns, fault injector, test hooks;
    cdef ``_cdef_test.h``), compiled with :data:`SEAM_CFLAGS`; ``pip install``
    makes it as ``xcache.engine._xc_test``, and the gate, the fault loops,
    the mutation run, the fuzzers, the tests and CI's sanitizer and coverage
    builds use it (``engine._lib`` says how it is chosen).

In each, Python calls every ``lib.xc_*`` on the one ``lib``.

Run it as a module, ``python -m xcache.engine._build --out DIR [--src
ENGINE] [--release]``: it prints the path of the ``.so`` it built.  Never as
a script by path (``python engine/_build.py``): that puts ``engine/`` first
on ``sys.path``, where a module named like a standard one would shadow it.
A tool that must run another tree's own
recipe (the gate) runs the file as ``__main__`` without adding its folder
(``gate.build``).

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
    (independent of the release build above, which keeps its asserts)
    adds ``-DNDEBUG``: the C core's ``assert()`` checks of internal
    preconditions are compiled out.  Without it (the default, the build the
    tests and the sanitizer job use) they are compiled in: the flags end with
    ``-UNDEBUG``, because the compiler command Python's build tools start
    from already carries ``-DNDEBUG``.
``XC_OBJ_CACHE=DIR``
    (``build_into`` only, as ``replay.py`` and the mutation run build) keeps
    each compiled object in DIR under a digest of everything that went into
    it -- compiler command, flags, the source and every engine header -- and
    compiles the missing ones two at a time.  A mutant differs from the last
    build in one file, so it recompiles one object and links.  The source
    digest then lives in an object of its own (``xc_build_digest`` is the
    same function either way), so the cffi wrapper's object is reused too.
"""

from __future__ import annotations

import hashlib
import os
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
#: Set XC_OBJ_CACHE=DIR to reuse compiled objects across builds_into calls.
OBJ_CACHE_ENV = "XC_OBJ_CACHE"

#: The cffi declaration files, in the order they are declared (the last,
#: the test seams', in the instrumented build only).
CDEFS: tuple[str, ...] = ("_cdef.h", "_cdef_ext.h", "_cdef_test.h")
#: The C headers the extension includes, in the order of CDEFS.
HEADERS: tuple[str, ...] = ("xc.h", "xc_ext.h", "xc_test.h")
#: The declaration file and header of the test seams (instrumented only).
SEAM_CDEF = "_cdef_test.h"
SEAM_HEADER = "xc_test.h"
#: The C files that are test seams and nothing else, compiled into the
#: instrumented build only (each refuses to compile without XC_TEST_SEAMS).
SEAM_SOURCES: frozenset[str] = frozenset(
    {"xc_fault.c", "xc_testhooks.c", "xc_testhooks_check.c"})
#: What the instrumented build adds to the compiler flags.
SEAM_CFLAGS: list[str] = ["-DXC_TEST_SEAMS=1"]
#: Module names of the two builds in the package (setup.py's cffi_modules).
RELEASE_MODULE = "xcache.engine._xc"
SEAMS_MODULE = "xcache.engine._xc_test"
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


def flags_from_env(seams: bool = True) -> tuple[list[str], list[str]]:
    """Return (cflags, ldflags) for this build, honouring the env switches.

    ``seams`` adds :data:`SEAM_CFLAGS` (the instrumented build).
    """
    cflags, ldflags = list(CFLAGS), list(LDFLAGS)
    if seams:
        cflags += SEAM_CFLAGS
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
    else:
        cflags += ["-UNDEBUG"]
    return cflags, ldflags


def _digest_definition(root: Path, storage: str) -> str:
    """C text defining ``xc_build_digest`` with ``storage`` ("static" or "")."""
    return (f"{storage + ' ' if storage else ''}const char *"
            "xc_build_digest(void)\n"
            f'{{ return "{source_digest(root)}"; }}\n')


def c_sources(root: Path, seams: bool) -> list[Path]:
    """The C files a build of ``root`` compiles: without the seams' in a release."""
    found = sorted((Path(root) / "csrc").glob("*.c"))
    return [p for p in found if seams or p.name not in SEAM_SOURCES]


def make_builder(src_dir: Path | None = None,
                 module_name: str = RELEASE_MODULE,
                 digest_inline: bool = True, seams: bool = True) -> FFI:
    """Return an FFI builder for the engine sources under ``src_dir``.

    ``src_dir`` is an ``engine`` folder holding the :data:`CDEFS` and
    ``csrc/``; it defaults to this package.  ``seams`` false makes the
    release build (no test seam compiled in or declared).  With
    ``digest_inline`` false the wrapper only declares ``xc_build_digest``;
    the caller compiles its definition (:func:`_digest_definition`) as a
    separate object.
    """
    from cffi import FFI

    root = Path(src_dir) if src_dir is not None else HERE
    csrc = root / "csrc"
    sources = [str(p) for p in c_sources(root, seams)]
    depends = [str(p) for p in source_files(root) if p.suffix == ".h"]
    cflags, ldflags = flags_from_env(seams)
    ffi = FFI()
    for name in CDEFS:
        if seams or name != SEAM_CDEF:
            ffi.cdef((root / name).read_text())
    ffi.cdef(DIGEST_CDEF)
    preamble = "".join(f'#include "{h}"\n' for h in HEADERS
                       if seams or h != SEAM_HEADER)
    preamble += (_digest_definition(root, "static") if digest_inline
                 else "const char *xc_build_digest(void);\n")
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


def _package_engine() -> Path | None:
    """The engine folder setup.py builds from (None: this one)."""
    return Path("engine") if Path("engine/_cdef.h").exists() else None


def ffibuilder() -> FFI:
    """The release build, ``xcache.engine._xc``, for setup.py's ``cffi_modules``."""
    return make_builder(_package_engine(), RELEASE_MODULE, seams=False)


def ffibuilder_test() -> FFI:
    """The instrumented build, ``xcache.engine._xc_test``, for ``cffi_modules``."""
    return make_builder(_package_engine(), SEAMS_MODULE, seams=True)


def build_into(out_dir: Path, src_dir: Path | None = None,
               seams: bool = True) -> Path:
    """Compile the engine under ``src_dir`` into ``out_dir``; return the .so path.

    The instrumented build unless ``seams`` is false (the release build);
    either way its module is ``_xc`` (``engine._lib.use`` loads both).
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    cache = os.environ.get(OBJ_CACHE_ENV, "").strip()
    if cache:
        return _build_cached(out_dir, src_dir, Path(cache), seams)
    ffi = make_builder(src_dir, module_name="_xc", seams=seams)
    return Path(ffi.compile(tmpdir=str(out_dir), verbose=False))


def _build_cached(out_dir: Path, src_dir: Path | None, cache: Path,
                  seams: bool = True) -> Path:
    """``build_into`` through the object cache ``cache`` (see XC_OBJ_CACHE).

    The compiler and its base command come from the same place cffi's build
    takes them (the standard build tools' ``customize_compiler``), with the
    same include folders and flags; only the compiling is done per object.
    """
    import contextlib
    import io
    import sysconfig
    from concurrent.futures import ThreadPoolExecutor

    import setuptools  # noqa: F401 - provides distutils on Python >= 3.12

    # isort: split
    from distutils.ccompiler import new_compiler
    from distutils.sysconfig import customize_compiler

    root = Path(src_dir) if src_dir is not None else HERE
    cflags, ldflags = flags_from_env(seams)
    ffi = make_builder(root, module_name="_xc", digest_inline=False,
                       seams=seams)
    gen = out_dir / "_xc.c"
    with contextlib.redirect_stdout(io.StringIO()):  # stdout is the .so path
        ffi.emit_c_code(str(gen))
    digest_c = out_dir / "_xc_digest.c"
    digest_c.write_text(_digest_definition(root, ""))
    sources = [gen, digest_c, *c_sources(root, seams)]
    includes = [str(root / "csrc"), sysconfig.get_paths()["include"]]
    cc = new_compiler()
    customize_compiler(cc)
    common = hashlib.sha256()
    for part in (cc.compiler_so, includes[1:], cflags):
        common.update(repr(part).encode())
    for h in source_files(root):
        if h.suffix == ".h":
            common.update(h.name.encode() + b"\0" + h.read_bytes())
    cache.mkdir(parents=True, exist_ok=True)
    (out_dir / "obj").mkdir(exist_ok=True)

    def obj(i_src: tuple[int, Path]) -> str:
        i, src = i_src
        h = common.copy()
        h.update(src.read_bytes())
        cached = cache / f"{h.hexdigest()}.o"
        if not cached.is_file():
            made = cc.compile([str(src)], output_dir=str(out_dir / "obj" / str(i)),
                              include_dirs=includes, extra_postargs=cflags)[0]
            tmp = cache / f".{h.hexdigest()}.{os.getpid()}.{i}.tmp"
            os.replace(made, tmp)
            os.replace(tmp, cached)  # whole objects only, even when shared
        return str(cached)

    with ThreadPoolExecutor(max_workers=2) as ex:
        objects = list(ex.map(obj, enumerate(sources)))
    so = out_dir / ("_xc" + sysconfig.get_config_var("EXT_SUFFIX"))
    cc.link_shared_object(objects, str(so), extra_postargs=ldflags)
    return so


if __name__ == "__main__":
    import argparse

    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", required=True, help="folder to build into")
    ap.add_argument("--src", default=None, help="engine folder (default: this)")
    ap.add_argument("--release", action="store_true",
                    help="the release build: no test seam compiled in "
                         "(default: the instrumented build)")
    ns = ap.parse_args()
    print(build_into(Path(ns.out), Path(ns.src) if ns.src else None,
                     seams=not ns.release))
