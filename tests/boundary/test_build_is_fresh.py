"""The build cannot go stale, and the C tables Python derives from are exposed.

``engine/_build.py`` embeds a digest of the C sources in the extension and
``engine/_lib.py`` refuses a build whose digest is not the one of the sources
beside it.  The checks here run on copies of the engine tree; the real
sources are never edited.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from xcache.engine import _build, _lib

ENGINE = Path(__file__).resolve().parents[2] / "engine"


def _copy_engine(tmp_path: Path) -> Path:
    """A copy of everything a build reads, as tmp_path/engine."""
    dst = tmp_path / "engine"
    shutil.copytree(ENGINE / "csrc", dst / "csrc")
    for name in _build.CDEFS:
        shutil.copy2(ENGINE / name, dst / name)
    return dst


def _append(path: Path, text: str) -> None:
    """Add text at the end of path."""
    path.write_text(path.read_text() + text)


def test_the_loaded_build_carries_the_digest_of_these_sources():
    """The extension in use was built from exactly the sources in the tree."""
    mod = _lib.module()
    built = mod.ffi.string(mod.lib.xc_build_digest()).decode()
    assert built == _build.source_digest(ENGINE)
    assert len(built) == 64 and int(built, 16) >= 0
    _lib.check_fresh(mod)  # does not raise


def test_the_digest_covers_every_c_source_header_and_cdef(tmp_path):
    """Editing a .h, a .c or a cdef, or adding a source, changes the digest."""
    tree = _copy_engine(tmp_path)
    seen = {_build.source_digest(tree)}
    assert seen == {_build.source_digest(ENGINE)}
    for rel in ["csrc/xc_core.h", "csrc/xc_cache.c", "_cdef_test.h"]:
        _append(tree / rel, "\n/* edited */\n")
        seen.add(_build.source_digest(tree))
    (tree / "csrc" / "xc_new.c").write_text("/* new */\n")
    seen.add(_build.source_digest(tree))
    assert len(seen) == 5


def test_the_digest_ignores_files_a_build_does_not_read(tmp_path):
    """Python files and generated leftovers beside the sources do not count."""
    tree = _copy_engine(tmp_path)
    before = _build.source_digest(tree)
    (tree / "cache.py").write_text("x = 1\n")
    (tree / "csrc" / "notes.txt").write_text("n\n")
    assert _build.source_digest(tree) == before
    names = [p.relative_to(tree).as_posix() for p in _build.source_files(tree)]
    assert names == sorted(names) and "csrc/xc.h" in names
    assert {"_cdef.h", "_cdef_test.h"} <= set(names)


def test_a_stale_build_is_refused_naming_the_rebuild_command(tmp_path):
    """A build whose sources changed since raises ImportError with the one command."""
    tree = _copy_engine(tmp_path)
    mod = _lib.module()
    _lib.check_fresh(mod, tree)  # identical copy: fresh
    _append(tree / "csrc" / "xc.h", "\n/* a changed header */\n")
    with pytest.raises(ImportError) as ei:
        _lib.check_fresh(mod, tree)
    msg = str(ei.value)
    assert "`pip install -e .`" in msg
    assert _lib.REBUILD_COMMAND in msg and str(tree.parent) in msg
    assert "changed since" in msg


def test_a_build_without_a_digest_is_stale(tmp_path):
    """A build made before digests existed is refused too."""
    tree = _copy_engine(tmp_path)
    reason = _lib.stale_reason(None, tree, "old.so")
    assert reason is not None and "before builds carried" in reason
    assert _lib.REBUILD_COMMAND in reason


def test_without_the_sources_there_is_nothing_to_compare(tmp_path):
    """An installed package without csrc/ loads whatever build it has."""
    assert _lib.stale_reason("0" * 64, tmp_path / "engine", "x.so") is None
    tree = _copy_engine(tmp_path)
    (tree / "_cdef_test.h").unlink()
    assert _lib.stale_reason("0" * 64, tree, "x.so") is None


def test_the_check_passes_on_the_build_in_use():
    """The build the suite runs was made from these sources: the check is silent."""
    assert _lib.check_fresh(_lib.module()) is None


def test_the_release_switch_adds_ndebug(monkeypatch):
    """XC_RELEASE=1 compiles the C asserts out; the default build undoes NDEBUG."""
    monkeypatch.delenv(_build.RELEASE_ENV, raising=False)
    flags = _build.flags_from_env()[0]
    assert "-DNDEBUG" not in flags and flags[-1] == "-UNDEBUG"
    monkeypatch.setenv(_build.RELEASE_ENV, "1")
    flags = _build.flags_from_env()[0]
    assert "-DNDEBUG" in flags and "-UNDEBUG" not in flags
    monkeypatch.setenv(_build.RELEASE_ENV, "0")
    assert _build.flags_from_env()[0][-1] == "-UNDEBUG"


def test_the_build_in_use_keeps_the_c_asserts():
    """The build in use calls assert(): the -DNDEBUG Python adds is undone."""
    so = Path(_lib.module().__file__ or "")
    assert b"__assert_fail" in so.read_bytes()


# -- the tables xc.h exposes ---------------------------------------------------


def _str(p) -> str | None:
    """A C string as str, None for NULL."""
    ffi = _lib.ffi()
    return None if p == ffi.NULL else ffi.string(p).decode()


def _policy_table() -> dict[str, dict[str, int]]:
    """The C policy table as {name: {param: default}}, in table order."""
    lib = _lib.lib()
    out = {}
    for i in range(lib.xc_policy_count()):
        params, j = {}, 0
        while (name := _str(lib.xc_policy_param_name(i, j))) is not None:
            params[name] = int(lib.xc_policy_param_default(i, j))
            j += 1
        out[_str(lib.xc_policy_name(i))] = params
    return out


def test_the_policy_table_names_and_defaults():
    """Policies in table order, each with its parameters and defaults as C has them."""
    assert _policy_table() == {
        "lru": {}, "fifo": {}, "lfu": {},
        "lfru": {"sample": 4, "seed": 0},
        "hotness": {"period": 256},
        "s3fifo": {"small": 10, "ghost": 90, "promote": 2},
        "arc": {}, "sieve": {},
    }
    assert list(_policy_table()) == ["lru", "fifo", "lfu", "lfru", "hotness",
                                     "s3fifo", "arc", "sieve"]


def test_the_policy_table_out_of_range():
    """Indices outside the table give NULL names and 0 defaults."""
    lib = _lib.lib()
    n = lib.xc_policy_count()
    assert _str(lib.xc_policy_name(-1)) is None
    assert _str(lib.xc_policy_name(n)) is None
    lfru = [_str(lib.xc_policy_name(i)) for i in range(n)].index("lfru")
    assert _str(lib.xc_policy_param_name(lfru, 2)) is None
    assert _str(lib.xc_policy_param_name(lfru, 4)) is None
    assert _str(lib.xc_policy_param_name(lfru, -1)) is None
    assert _str(lib.xc_policy_param_name(n, 0)) is None
    assert lib.xc_policy_param_default(lfru, 2) == 0
    assert lib.xc_policy_param_default(n, 0) == 0


def test_every_policy_in_the_table_is_a_spec_the_engine_takes():
    """Each name, with each parameter at its default, replays through xc_sim_run."""
    from xcache.engine import sim

    keys = [0, 1, 2, 0, 3, 1, 0]
    for name, params in _policy_table().items():
        spec = name + (":" + ",".join(f"{k}={v}" for k, v in params.items())
                       if params else "")
        assert sim.simulate(keys, spec, 2, mode="plain")["requests"] == 7


def test_slot_state_names():
    """Each XC_SLOT_* has its name; other numbers have none."""
    lib = _lib.lib()
    assert [_str(lib.xc_slot_state_name(s)) for s in
            (lib.XC_SLOT_EMPTY, lib.XC_SLOT_INFLIGHT, lib.XC_SLOT_READY)] == [
        "empty", "inflight", "ready"]
    assert _str(lib.xc_slot_state_name(-1)) is None
    assert _str(lib.xc_slot_state_name(3)) is None


def test_invariant_names():
    """Each XC_INV_* has the INV-* name check() reports; 0 and past the end none."""
    lib = _lib.lib()
    names = {getattr(lib, f"XC_INV_{n}"): f"INV-{n.replace('_', '-')}" for n in
             ["KEY_UNIQUE", "INDEX", "EMPTY", "INFLIGHT", "CLOCK", "COUNTERS",
              "PREFETCH", "POLICY", "QUEUE", "SPEC"]}
    assert {i: _str(lib.xc_invariant_name(i)) for i in names} == names
    assert sorted(names) == list(range(1, 11))
    assert _str(lib.xc_invariant_name(0)) is None
    assert _str(lib.xc_invariant_name(11)) is None
