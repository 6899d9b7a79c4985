"""Loads the compiled engine and turns C status codes into exceptions.

Every C call made by the Python face goes through :func:`check`, so there is
one place where a negative status becomes an exception carrying the thread's
error record.  ``XC_ENGINE_LIB`` (or :func:`use`) points the package at
another build of the same sources -- the sanitizer build in CI, or the build
``replay.py`` makes of a candidate engine tree.

A stale build is refused: the package's own extensions, and a build named by
``XC_ENGINE_LIB`` (CI builds those from this tree), must carry the digest of
the C sources beside this file (``engine/_build.py``, ``source_digest``);
otherwise loading raises ImportError naming the command that rebuilds.
:func:`use` loads what it is given unchecked: ``replay.py`` loads builds of
other trees with it and checks their sources itself (pins).

Two builds (docs/DESIGN.md, "Two builds"): the package's ``_xc`` is the
release build, with no test seam compiled in, and is what loads by default;
``_xc_test`` is the instrumented build (allocation and thread-start
countdowns, fault injector, test hooks: ``csrc/xc_test.h``).  The first load
takes the instrumented one when ``XC_TEST_SEAMS=1`` is set or
:func:`want_seams` was called (the test suite's conftest sets the variable,
so its subprocesses inherit it); ``XC_ENGINE_LIB`` wins over both, and CI's
sanitizer and coverage builds it names are instrumented.  A Python API that
needs a seam asks for it through :func:`seams_lib`, which raises
:class:`SeamsError` naming what to do when the release build is loaded.
"""

from __future__ import annotations

import functools
import importlib.util
import os
from pathlib import Path
from types import ModuleType
from typing import Any

from xcache.engine import errors

ENV_LIB = "XC_ENGINE_LIB"
#: Set to 1 to load the instrumented build (test seams in) on first use.
ENV_SEAMS = "XC_TEST_SEAMS"
#: A function every instrumented build has and no release build has.
SEAM_PROBE = "xc_alloc_fail_at"

#: The one command that (re)builds the package's extension in place: the
#: README's install, which also puts the console scripts on the path.
REBUILD_COMMAND = "pip install -e ."

_ENGINE_DIR = Path(__file__).resolve().parent

_module: ModuleType | None = None
_seams_wanted = False


class BuildError(ImportError):
    """The engine extension is missing or stale; the message says how to build it."""


class SeamsError(RuntimeError):
    """A test seam was asked of the release build; the message says what to do."""


def stale_reason(built: str | None, engine_dir: Path,
                 so_path: str | os.PathLike[str]) -> str | None:
    """Why a build is stale against the sources in ``engine_dir``, or None.

    ``built`` is the digest the build carries (None: it carries none).  The
    build is fresh when that digest is the sources' digest, or when the
    sources are not there to compare with (an installed package without
    ``csrc/``).
    """
    from xcache.engine._build import CDEFS, source_digest

    engine_dir = Path(engine_dir)
    if not (engine_dir / "csrc" / "xc.h").is_file() or not all(
            (engine_dir / name).is_file() for name in CDEFS):
        return None
    now = source_digest(engine_dir)
    if built == now:
        return None
    root = engine_dir.parent
    what = ("was built before builds carried a source digest" if built is None
            else f"was built from other sources (digest {built[:12]}) than "
                 f"{engine_dir} holds now (digest {now[:12]}): a C source, "
                 "header or cdef changed since")
    return (f"the engine extension {os.fspath(so_path)} {what}; rebuild it "
            f"with `{REBUILD_COMMAND}` in {root}")


def not_built_reason(engine_dir: Path, error: ImportError,
                     stem: str = "_xc") -> str:
    """Why ``engine.<stem>`` cannot be imported, with the command that builds it.

    No extension file beside the sources means the package was never built
    (a fresh clone used before ``pip install``); one that is there but does
    not load is named with the loader's own words.  ``stem`` is ``_xc``
    (the release build) or ``_xc_test`` (the instrumented one).
    """
    engine_dir = Path(engine_dir)

    def found(name: str) -> list[Path]:
        return (sorted(engine_dir.glob(f"{name}.*.so"))
                + sorted(engine_dir.glob(f"{name}.so")))

    built = found(stem)
    if not built and not found("_xc") + found("_xc_test"):
        stem = "_xc"  # neither build: the package was never built
    root = engine_dir.parent
    if not built:
        return (f"the engine is not built: {engine_dir} has no compiled "
                f"extension ({stem}); run `{REBUILD_COMMAND}` in {root} first "
                "(README, 'Two commands')")
    return (f"the engine extension {built[0]} does not load ({error}); "
            f"rebuild it with `{REBUILD_COMMAND}` in {root}")


def check_fresh(mod: ModuleType, engine_dir: Path = _ENGINE_DIR) -> None:
    """Raise ImportError if extension ``mod`` is stale against ``engine_dir``."""
    fn = getattr(mod.lib, "xc_build_digest", None)
    built = None if fn is None else mod.ffi.string(fn()).decode("ascii")
    reason = stale_reason(built, engine_dir, getattr(mod, "__file__", "?"))
    if reason is not None:
        raise BuildError(reason)


def _load(path: str | os.PathLike[str]) -> ModuleType:
    """Load the extension file at ``path`` as ``engine._xc`` (or ``engine._xc_test``).

    The name is the file's up to its first dot, which names the module's
    init function: ``build_into`` makes ``_xc`` files of either build, and
    the package's instrumented build is ``_xc_test``.
    """
    stem = Path(path).name.split(".", 1)[0]
    name = "xcache.engine._xc_test" if stem == "_xc_test" else "xcache.engine._xc"
    spec = importlib.util.spec_from_file_location(name, os.fspath(path))
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load the engine extension at {path}")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def use(path: str | os.PathLike[str]) -> ModuleType:
    """Load the engine extension at ``path`` and make it the one in use."""
    mod = _load(path)
    rebind(mod)
    return mod


def bound() -> ModuleType | None:
    """The extension in use, or None before its first use (nothing is loaded)."""
    return _module


def rebind(mod: ModuleType | None) -> None:
    """Make ``mod`` the extension in use again, as :func:`bound` returned it.

    None undoes every :func:`use`: the next call loads the default build
    (``XC_ENGINE_LIB`` or the package's own), as on first use.  For an
    in-process caller of the gate, which binds the package to the build it
    made (``gate.build.load_engine``) and must give the caller's back.
    """
    global _module
    _module = mod
    for table in (slot_state_names, invariant_names, read_kind_names,
                  trace_outcome_names, stats_fields, policy_table):
        table.cache_clear()  # read again from the build now in use


def seams_wanted() -> bool:
    """Whether the first load takes the instrumented build (XC_TEST_SEAMS)."""
    return _seams_wanted or os.environ.get(ENV_SEAMS, "").strip() not in ("", "0")


def want_seams() -> None:
    """Make the engine's first load take the instrumented build (test seams in).

    Call it before anything uses the engine (a test run's conftest sets
    ``XC_TEST_SEAMS=1`` instead, so its subprocesses inherit the choice).
    Raises :class:`SeamsError` when the release build is already loaded:
    objects opened with one build cannot be used with the other.
    """
    global _seams_wanted
    if _module is not None and not has_seams(_module):
        raise SeamsError(_release_loaded("the instrumented build"))
    _seams_wanted = True


def has_seams(mod: ModuleType | None = None) -> bool:
    """Whether extension ``mod`` (default: the one in use) is the instrumented build."""
    mod = module() if mod is None else mod
    return hasattr(mod.lib, SEAM_PROBE)


def _release_loaded(what: str) -> str:
    """The message of a seam asked of the release build already loaded."""
    where = getattr(_module, "__file__", "?")
    return (f"{what}: a test seam, and the engine loaded is the release "
            f"build ({where}), which leaves every seam out; set "
            f"{ENV_SEAMS}=1 before the engine is first used, or call "
            "xcache.engine._lib.want_seams() first, or point "
            f"{ENV_LIB} at an instrumented build "
            "(`python -m xcache.engine._build --out DIR`)")


def seams_lib(what: str) -> Any:
    """The cffi lib of the engine in use, which must be the instrumented build.

    ``what`` names the caller's feature in the :class:`SeamsError` raised
    when the release build is in use.
    """
    mod = module()
    if not has_seams(mod):
        raise SeamsError(_release_loaded(what))
    return mod.lib


def module() -> ModuleType:
    """Return the loaded extension module, loading it on first use.

    ``XC_ENGINE_LIB`` when set, else the instrumented build when
    :func:`seams_wanted`, else the release build.
    """
    global _module
    if _module is None:
        override = os.environ.get(ENV_LIB)
        if override:
            mod = _load(override)
        elif seams_wanted():
            try:
                from xcache.engine import _xc_test as mod  # type: ignore[attr-defined]
            except ImportError as e:
                raise BuildError(not_built_reason(_ENGINE_DIR, e, "_xc_test")) from e
        else:
            try:
                from xcache.engine import _xc as mod  # type: ignore[attr-defined]
            except ImportError as e:
                raise BuildError(not_built_reason(_ENGINE_DIR, e)) from e
        check_fresh(mod)
        _module = mod
    return _module


def ffi() -> Any:
    """The cffi FFI object of the loaded engine."""
    return module().ffi


def lib() -> Any:
    """The cffi lib object of the loaded engine."""
    return module().lib


def last_error() -> tuple[int, int, int, int, str]:
    """This thread's last C error record: (code, offset, layer, expert, msg)."""
    f, lb = ffi(), lib()
    e = lb.xc_last_error()
    msg = f.string(e.message).decode("utf-8", "replace")
    return int(e.code), int(e.offset), int(e.layer), int(e.expert), msg


def misuse(message: str) -> errors.MisuseError:
    """A MisuseError with the C misuse status, as the C side would record it."""
    return errors.MisuseError(message, status=int(lib().XC_E_MISUSE),
                              kind="misuse")


def _format_statuses() -> frozenset[int]:
    """Every ``XC_E_FORMAT_*`` status of the loaded engine."""
    lb = lib()
    return frozenset(int(getattr(lb, n)) for n in dir(lb)
                     if n.startswith("XC_E_FORMAT_"))


def from_status(status: int, kind: str, message: str, *, offset: int = -1,
                layer: int = -1, expert: int = -1) -> errors.EngineError:
    """Build the exception for a negative C status code named ``kind``."""
    cls = errors.BY_KIND.get(kind)
    if cls is None:
        cls = errors.FormatError if status in _format_statuses() else errors.EngineError
    return cls(message, status=status, kind=kind, offset=offset, layer=layer,
               expert=expert)


def check(rc: int) -> int:
    """Return ``rc`` if it is not negative, else raise the mapped exception."""
    if rc >= 0:
        return rc
    code, offset, layer, expert, msg = last_error()
    if code != rc:  # the C side failed without recording why: a bug there
        msg = f"{msg} (status {rc} without matching error record {code})"
    kind = lib().xc_status_name(rc)
    raise from_status(rc, ffi().string(kind).decode(), msg,
                             offset=offset, layer=layer, expert=expert)


# -- tables the C boundary owns: read from it, never retyped ----------------

def _c_names(fn_name: str, first: int) -> dict[int, str]:
    """Names a C name function gives for first, first + 1, ... until NULL."""
    f, fn = ffi(), getattr(lib(), fn_name)
    out: dict[int, str] = {}
    i = first
    while (p := fn(i)) != f.NULL:
        out[i] = f.string(p).decode()
        i += 1
    return out


@functools.cache
def slot_state_names() -> dict[int, str]:
    """Slot state number -> name ("empty", "inflight", "ready"), from C."""
    return _c_names("xc_slot_state_name", 0)


@functools.cache
def invariant_names() -> dict[int, str]:
    """check() result number -> its INV-* name, from C."""
    return _c_names("xc_invariant_name", 1)


@functools.cache
def read_kind_names() -> tuple[str, ...]:
    """Read kind number -> name ("get", "prefetch", ...) as traces hold it, from C."""
    return tuple(_c_names("xc_read_kind_name", 0).values())


@functools.cache
def trace_outcome_names() -> tuple[str, ...]:
    """Trace outcome number -> name ("hit", "miss", ...), from C."""
    return tuple(_c_names("xc_trace_outcome_name", 0).values())


@functools.cache
def stats_fields() -> tuple[str, ...]:
    """The counters of ``xc_stats``, in the struct's order."""
    return tuple(name for name, _ in ffi().typeof("xc_stats").fields)


@functools.cache
def policy_table() -> dict[str, dict[str, int]]:
    """Every cache policy of the C table (in its order): parameter -> default."""
    f, lb = ffi(), lib()
    table: dict[str, dict[str, int]] = {}
    for i in range(lb.xc_policy_count()):
        params: dict[str, int] = {}
        j = 0
        while (p := lb.xc_policy_param_name(i, j)) != f.NULL:
            params[f.string(p).decode()] = int(lb.xc_policy_param_default(i, j))
            j += 1
        table[f.string(lb.xc_policy_name(i)).decode()] = params
    return table
