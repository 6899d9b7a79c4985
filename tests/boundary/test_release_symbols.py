"""The release build holds no test seam; the instrumented build holds them all.

The release build (``xcache.engine._xc``, what ``pip install`` makes and an
engine embeds) must export no test hook, fault injector or countdown: any
code in the embedding process could corrupt a live cache through one.  The
test-seam surface is derived by rule from the sources, never listed by hand:
every function declared in ``csrc/xc_test.h`` or ``_cdef_test.h``, every
function declared or defined under ``#ifdef XC_TEST_SEAMS`` in ``csrc``,
every external function of a seam source (``_build.SEAM_SOURCES``), plus
name patterns (``test``, ``xc_fault_``, ``_fail_at``).  The instrumented
build must export every one of those functions, so the check can fail.
Exported symbols come from ``nm -D --defined-only``, or from the ELF
dynamic symbol table read here when ``nm`` is absent.
"""

from __future__ import annotations

import importlib.machinery
import os
import re
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from xcache.engine import _build, _lib

ENGINE = Path(__file__).resolve().parents[2] / "engine"
CSRC = ENGINE / "csrc"

#: Names that belong to the test/fault surface whatever declares them.
SEAM_PATTERNS = (re.compile(r"test", re.I), re.compile(r"^xc_fault_"),
                 re.compile(r"_fail_at$"))

_COMMENT = re.compile(r"/\*.*?\*/|//[^\n]*", re.S)
#: A function declared or defined at file scope: its name before "(".
_FUNC = re.compile(r"^(?!static\b)(?!typedef\b)[A-Za-z_][\w\s\*]*?\b(xc_\w+)\s*\(",
                   re.M)


def _clean(text: str) -> str:
    """C text without comments."""
    return _COMMENT.sub(" ", text)


def _functions(text: str) -> set[str]:
    """The non-static xc_* functions a C text declares or defines."""
    return set(_FUNC.findall(_clean(text)))


def _seam_blocks(text: str) -> str:
    """The lines of a C text inside ``#ifdef XC_TEST_SEAMS`` ... ``#endif``."""
    out, depth, inside = [], 0, 0
    for line in _clean(text).splitlines():
        s = line.strip()
        if s.startswith("#if"):
            depth += 1
            if inside == 0 and re.match(r"#\s*ifdef\s+XC_TEST_SEAMS\b", s):
                inside = depth
            continue
        if s.startswith("#endif"):
            if depth == inside:
                inside = 0
            depth -= 1
            continue
        if inside:
            out.append(line)
    return "\n".join(out)


def seam_functions() -> set[str]:
    """Every function of the test seams, by the rules of the module docstring."""
    names = _functions((CSRC / _build.SEAM_HEADER).read_text())
    names |= _functions((ENGINE / _build.SEAM_CDEF).read_text())
    for name in _build.SEAM_SOURCES:
        names |= _functions((CSRC / name).read_text())
    for path in sorted(CSRC.glob("*.[ch]")):
        names |= _functions(_seam_blocks(path.read_text()))
    return names


def public_functions() -> set[str]:
    """Every function of the boundary every build keeps (xc.h, xc_ext.h)."""
    return (_functions((CSRC / "xc.h").read_text())
            | _functions((CSRC / "xc_ext.h").read_text()))


def _elf_dynamic_symbols(path: Path) -> set[str]:
    """Defined global and weak symbols of an ELF64 little-endian file's .dynsym."""
    data = path.read_bytes()
    assert data[:4] == b"\x7fELF" and data[4] == 2 and data[5] == 1, path
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", data, 0x3A)
    sections = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize)
                for i in range(shnum)]
    out: set[str] = set()
    for _name, kind, _flags, _addr, off, size, link, _info, _al, entsize in sections:
        if kind != 11:  # SHT_DYNSYM
            continue
        str_off = sections[link][4]
        for i in range(size // entsize):
            st_name, st_info, _other, st_shndx = struct.unpack_from(
                "<IBBH", data, off + i * entsize)
            if st_shndx == 0 or (st_info >> 4) not in (1, 2):  # undefined, local
                continue
            end = data.index(b"\0", str_off + st_name)
            out.add(data[str_off + st_name:end].decode())
    return out


def exported(path: Path) -> set[str]:
    """The dynamic symbols the shared object at ``path`` defines."""
    nm = shutil.which("nm")
    if nm is None:
        return _elf_dynamic_symbols(path)
    done = subprocess.run([nm, "-D", "--defined-only", str(path)],
                          capture_output=True, text=True, check=True)
    return {ln.split()[-1] for ln in done.stdout.splitlines() if ln.strip()}


def _package_build(stem: str) -> Path | None:
    """The package's extension file ``stem`` (``_xc``, ``_xc_test``), or None.

    Found beside the package's modules, not through the import system, which
    may already hold another build under the same name (XC_ENGINE_LIB).
    """
    import xcache.engine

    folder = Path(xcache.engine.__file__).resolve().parent
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        if (folder / (stem + suffix)).is_file():
            return folder / (stem + suffix)
    return None


@pytest.fixture(scope="module")
def release_so(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The release build: the package's own, else one built here."""
    found = _package_build(_build.RELEASE_MODULE.rsplit(".", 1)[1])
    if found is not None:
        return found
    return _build.build_into(tmp_path_factory.mktemp("release"), seams=False)


@pytest.fixture(scope="module")
def instrumented_so(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The instrumented build: XC_ENGINE_LIB's, the package's, or one built here."""
    named = os.environ.get(_lib.ENV_LIB)
    if named:
        return Path(named)
    found = _package_build(_build.SEAMS_MODULE.rsplit(".", 1)[1])
    if found is not None:
        return found
    return _build.build_into(tmp_path_factory.mktemp("instrumented"))


def test_the_rules_find_the_whole_seam_surface():
    """The derived surface holds the countdowns, injector, hooks and policy views."""
    seams = seam_functions()
    for name in ("xc_alloc_fail_at", "xc_thread_fail_at", "xc_alloc_live",
                 "xc_fault_arm", "xc_fault_open", "xc_testhook_break_check",
                 "xc_testhook_break_cross", "xc_plist_test_view",
                 "xc_policy_hotness_set"):
        assert name in seams, name
    assert not seams & public_functions()


def test_the_release_build_exports_no_test_or_fault_symbol(release_so: Path):
    """No symbol of the release .so is a seam function or matches a seam pattern."""
    syms = exported(release_so)
    assert "PyInit__xc" in syms
    leaked = sorted(syms & seam_functions())
    leaked += sorted(s for s in syms if any(p.search(s) for p in SEAM_PATTERNS))
    assert leaked == [], f"{release_so} exports test seams: {leaked}"


def test_the_release_build_keeps_the_whole_public_boundary(release_so: Path):
    """Every function of xc.h and xc_ext.h is exported by the release .so."""
    assert sorted(public_functions() - exported(release_so)) == []


def test_the_instrumented_build_exports_every_seam(instrumented_so: Path):
    """The instrumented .so exports every seam function, so the check above can fail."""
    syms = exported(instrumented_so)
    assert sorted(seam_functions() - syms) == []
    assert sorted(public_functions() - syms) == []


@pytest.mark.skipif(shutil.which("nm") is None, reason="no nm to compare with")
def test_the_elf_reader_agrees_with_nm(release_so: Path):
    """The fallback ELF reader lists the same defined dynamic symbols as nm."""
    assert _elf_dynamic_symbols(release_so) == exported(release_so)


_SERVE = r"""
import hashlib, json, sys
from xcache import fixtures
from xcache.engine import Container, ExpertCache, _lib, alloc
from xcache.faults.io import IOFaults

shard, layer, expert = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
k3 = fixtures.preset("k3-mini")
cache = ExpertCache(Container(shard), n_slots=8, top_k=k3.top_k,
                    **k3.cache_layout())
with cache.get(layer, expert) as e:
    first = bytes(e.data)
with cache.get(layer, expert) as e:  # the hit path
    again = bytes(e.data)
stats = cache.stats()
cache.close()
refused = []
for what, call in (("alloc", alloc.stats), ("faults", IOFaults)):
    try:
        call()
    except _lib.SeamsError as err:
        refused.append([what, str(err)])
print(json.dumps({"file": _lib.module().__file__, "seams": _lib.has_seams(),
                  "sha": hashlib.sha256(first).hexdigest(), "same": first == again,
                  "hits": stats["hits"], "misses": stats["misses"],
                  "refused": refused}))
"""


def test_the_release_build_serves_experts(k3_shard: Path):
    """A fresh process loads the release build by default and serves k3-mini's bytes."""
    import hashlib
    import json

    from xcache import fixtures

    env = {k: v for k, v in os.environ.items()
           if k not in (_lib.ENV_LIB, _lib.ENV_SEAMS)}
    done = subprocess.run([sys.executable, "-c", _SERVE, str(k3_shard), "0", "5"],
                          capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert Path(got["file"]).name.startswith("_xc."), got["file"]
    assert got["seams"] is False
    want = fixtures.expected_expert_bytes(fixtures.preset("k3-mini"), 0, 5)
    assert got["sha"] == hashlib.sha256(want).hexdigest()
    assert got["same"] and (got["hits"], got["misses"]) == (1, 1)
    assert [w for w, _ in got["refused"]] == ["alloc", "faults"]
    for _, message in got["refused"]:
        assert f"{_lib.ENV_SEAMS}=1" in message and "release build" in message


@pytest.mark.parametrize("seams", ["0", "1"])
def test_each_package_build_loads_fresh_and_is_the_build_asked_for(seams: str):
    """XC_TEST_SEAMS picks the build, and each carries these sources' digest."""
    env = {k: v for k, v in os.environ.items() if k != _lib.ENV_LIB}
    env[_lib.ENV_SEAMS] = seams
    code = ("from xcache.engine import _lib; m = _lib.module(); "
            "print(m.__file__); print(_lib.has_seams()); "
            "print(m.ffi.string(m.lib.xc_build_digest()).decode())")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True,
                          text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    path, has, digest = done.stdout.split()
    stem = "_xc_test" if seams == "1" else "_xc"
    assert Path(path).name.split(".", 1)[0] == stem
    assert has == str(seams == "1")
    assert digest == _build.source_digest(ENGINE)


def test_want_seams_after_a_release_load_is_refused():
    """Asking for the instrumented build once the release build is loaded is refused."""
    env = {k: v for k, v in os.environ.items()
           if k not in (_lib.ENV_LIB, _lib.ENV_SEAMS)}
    code = ("from xcache.engine import _lib; _lib.module()\n"
            "try:\n    _lib.want_seams()\nexcept _lib.SeamsError as e:\n"
            "    print('refused:', e)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True,
                          text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("refused: the instrumented build: a test seam")
