"""An adapter's manifest, its pinned digests, and the cffi build of its cache.

The manifest (``xcs.toml`` in the adapter folder)::

    name = "tinycache"
    shim = "shim.c"                      # the adapter's C shim
    cflags = ["-O2", "-std=c11"]
    [[sources]]                          # the cache's files, unchanged
    path = "tinycache.c"                 # relative to the adapter folder
    sha256 = "..."
    [capabilities]                       # gate/backend_api.py names
    ops = ["get", "getmany", ...]
    ...

The manifest is read by the one reader (``oracle.bounded.load_document``:
a regular file of at most :data:`MAX_MANIFEST_BYTES`, its nesting
bounded).  Every listed source is checked against its digest, and it and
the shim are regular files of at most :data:`MAX_SOURCE_BYTES`, before
anything is built (a mismatch is ``CannotRun`` naming the file: exit 2);
the ``.c`` files among them and the shim are compiled into one cffi
extension (out-of-line API mode) in a scratch folder.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from xcache.gate import CannotRun
from xcache.gate.outside import HERE, MANIFEST_NAME
from xcache.oracle.bounded import UserFileError, load_document
from xcache.oracle.regular import (
    NotRegularFileError,
    TooLargeError,
    open_regular,
    read_capped,
)

HEADER = HERE / "xcs_shim.h"
#: The largest manifest read (the examples' are about 2 KB).
MAX_MANIFEST_BYTES = 1 << 20
#: The largest source or shim of an adapter hashed or compiled.
MAX_SOURCE_BYTES = 64 << 20


@dataclass(frozen=True)
class Manifest:
    """One adapter folder's manifest, read and checked for shape."""

    folder: Path
    name: str
    shim: Path
    sources: dict[Path, str]
    cflags: tuple[str, ...]
    capabilities: dict[str, Any] = field(default_factory=dict)
    #: ``[deviations]``: capability name -> why the cache differs there
    deviations: dict[str, str] = field(default_factory=dict)
    #: ``[[containers]]``: the containers the cache serves
    #: (:mod:`gate.outside.served`); empty: every container
    containers: list[dict[str, Any]] = field(default_factory=list)
    #: ``[design]``: how the cache differs by design
    #: (:class:`gate.outside.designs.Design`)
    design: Any = None


def _need(cond: bool, path: Path, what: str) -> None:
    if not cond:
        raise CannotRun(f"{path}: {what}")


#: the manifest's capability fields: a string or a list of strings
CAP_LISTS = ("ops", "options", "policies", "counters", "facts", "faults")
CAP_WORDS = ("pins", "errors")


def _inside(folder: Path, path: Path, rel: str, field_: str) -> Path:
    """``folder / rel`` resolved, refused (naming ``field_``) if it leaves
    the adapter folder."""
    p = (folder / rel).resolve()
    _need(p.is_relative_to(folder), folder / MANIFEST_NAME,
          f"{field_} = {rel!r} leaves the adapter folder")
    return p


def _strings(v: Any) -> bool:
    return isinstance(v, list) and all(isinstance(x, str) for x in v)


def load_manifest(folder: Path) -> Manifest:
    """The manifest of the adapter ``folder`` (``CannotRun`` naming what is wrong).

    Every field is checked for its type (one line naming the file and the
    field), every path for staying inside the adapter folder.
    """
    from xcache import data  # noqa: PLC0415 - a shipped adapter by its name

    named = Path(folder)
    folder = data.resolve("cache", named).resolve()
    path = folder / MANIFEST_NAME
    if not folder.exists():
        raise CannotRun(f"--cache {named}: no such folder; "
                        f"{data.hint('cache')}")
    if not path.is_file():
        raise CannotRun(f"--cache {folder}: no {MANIFEST_NAME} there (an "
                        "adapter folder holds its manifest)")
    try:  # the one reader: a regular file, bounded in size and nesting
        doc = load_document(path, max_bytes=MAX_MANIFEST_BYTES, toml=True)
    except OSError as e:
        raise CannotRun(f"{path}: cannot be read ({e.strerror or e})") from e
    except UserFileError as e:  # names the file: too large, nested, not TOML
        raise CannotRun(str(e)) from e
    for key in ("name", "shim", "sources", "capabilities"):
        _need(key in doc, path, f"the manifest lacks {key!r}")
    for key in ("name", "shim"):
        _need(isinstance(doc[key], str) and doc[key] != "", path,
              f"{key} must be a non-empty string, not {doc[key]!r}")
    _need(isinstance(doc["sources"], list), path,
          "sources must be an array of tables ([[sources]])")
    sources: dict[Path, str] = {}
    for i, s in enumerate(doc["sources"]):
        _need(isinstance(s, dict) and isinstance(s.get("path"), str) and
              re.fullmatch(r"[0-9a-f]{64}", str(s.get("sha256", ""))) is not None,
              path, f"sources[{i}] needs a path and a 64-hex sha256")
        sources[_inside(folder, path, s["path"], f"sources[{i}].path")] = \
            s["sha256"]
    cflags = doc.get("cflags", [])
    _need(_strings(cflags), path, "cflags must be a list of strings")
    caps = doc["capabilities"]
    _need(isinstance(caps, dict), path,
          "capabilities must be a table ([capabilities])")
    for key, v in caps.items():
        if key in CAP_LISTS:
            _need(_strings(v), path,
                  f"capabilities.{key} must be a list of strings, not {v!r}")
        elif key in CAP_WORDS:
            _need(isinstance(v, str), path,
                  f"capabilities.{key} must be a string, not {v!r}")
        else:
            raise CannotRun(f"{path}: capabilities.{key} is no capability "
                            f"field (fields: {', '.join(CAP_LISTS + CAP_WORDS)})")
    notes = doc.get("deviations", {})
    _need(isinstance(notes, dict) and all(isinstance(v, str)
                                          for v in notes.values()), path,
          "deviations must be a table of strings (capability = \"why\")")
    from xcache.gate.outside.served import check_tables  # noqa: PLC0415

    served = check_tables(doc.get("containers", []), path)
    from xcache.gate.outside.designs import check_design  # noqa: PLC0415

    design = check_design(doc.get("design", {}), path)
    return Manifest(folder, doc["name"],
                    _inside(folder, path, doc["shim"], "shim"), sources,
                    tuple(cflags), dict(caps), dict(notes), served, design)


def _source(path: Path) -> bytes:
    """The bytes of one of an adapter's files compiled or hashed.

    A regular file of at most :data:`MAX_SOURCE_BYTES` (a FIFO would
    block the hash or the compiler, a sparse terabyte exhaust them), else
    ``CannotRun`` naming the file.
    """
    try:
        with open_regular(path) as f:
            return read_capped(f, path, MAX_SOURCE_BYTES, "an adapter's file")
    except (NotRegularFileError, TooLargeError) as e:
        raise CannotRun(str(e)) from e
    except OSError as e:
        raise CannotRun(f"{path}: cannot be read ({e.strerror or e})") from e


def digest(path: Path) -> str:
    """The SHA-256 of ``path``'s bytes, in hex (``CannotRun`` past the limit)."""
    return hashlib.sha256(_source(path)).hexdigest()


def verify_sources(m: Manifest) -> int:
    """Check every pinned digest; how many (``CannotRun`` naming a mismatch).

    The shim, which has no digest, is checked to be a regular file within
    the same limit before anything is built.
    """
    for p, want in m.sources.items():
        if not p.is_file():
            raise CannotRun(f"{m.folder / MANIFEST_NAME}: pinned source {p} "
                            "does not exist")
        got = digest(p)
        if got != want:
            raise CannotRun(f"{p}: SHA-256 {got} does not match the pinned "
                            f"{want} of {m.folder / MANIFEST_NAME}")
    _source(m.shim)
    return len(m.sources)


def cdef_text(faults: bool = False) -> str:
    """The declarations of ``xcs_shim.h`` that cffi is given (and the injectors')."""
    text = HEADER.read_text()
    start = text.index("XCS-CDEF-BEGIN")
    start = text.index("*/", start) + 2
    end = text.rindex("/* XCS-CDEF-END")
    out = text[start:end]
    lo = text.index("XCS-FETCH-BEGIN */") + len("XCS-FETCH-BEGIN */")
    out += text[lo:text.index("/* XCS-FETCH-END")]
    if faults:
        lo = text.index("XCS-FAULTS-BEGIN */") + len("XCS-FAULTS-BEGIN */")
        out += text[lo:text.index("/* XCS-FAULTS-END")]
    return out


#: the C library calls the injectors stand in front of (``-Wl,--wrap``):
#: the reads the read injectors break, the opens the open injector breaks,
#: and the closes that tell which descriptors the cache still holds
WRAPPED = ("pread", "pread64", "read", "open", "open64", "openat",
           "openat64", "fopen", "fopen64", "close", "fclose")


def compile_module(m: Manifest, out: Path, extra_cflags: tuple[str, ...] = ()
                   ) -> tuple[Path, str]:
    """Compile the pinned sources and the shim in ``out``: (the module, its name).

    The module is not loaded here: the cache's process loads it
    (:mod:`gate.outside.worker`).  ``extra_cflags`` come after the
    manifest's (``-DNAME=...`` overrides).  The compiler runs in ``out``:
    relative ``-I`` paths of cflags resolve there, not in the adapter
    folder (which is on the include path already).
    """
    import cffi  # noqa: PLC0415

    flags = [*m.cflags, *extra_cflags]
    faults = bool({"io", "open"} & set(m.capabilities.get("faults", [])))
    tag = hashlib.sha256("\0".join([m.name, str(faults), *flags]).encode()
                         ).hexdigest()[:10]
    modname = f"_xcs_{re.sub(r'[^0-9A-Za-z_]', '_', m.name)}_{tag}"
    ffi = cffi.FFI()
    ffi.cdef(cdef_text(faults))
    c_files = [str(p) for p in m.sources if p.suffix == ".c"] + [
        str(m.shim), str(HERE / "xcs_fetch.c")]
    link: list[str] = []
    if faults:  # the injectors in front of the cache's own reads
        c_files.append(str(HERE / "xcs_faults.c"))
        link.append("-Wl," + ",".join(f"--wrap={f}" for f in WRAPPED))
    ffi.set_source(modname, '#include "xcs_shim.h"\n', sources=c_files,
                   include_dirs=[str(m.folder), str(HERE)],
                   extra_compile_args=flags, extra_link_args=link)
    out.mkdir(parents=True, exist_ok=True)
    try:
        so = ffi.compile(tmpdir=str(out), verbose=False)
    except Exception as e:  # noqa: BLE001 - a compiler failure of the adapter
        raise CannotRun(f"{m.folder}: the build of the cache and its shim "
                        f"failed: {e}") from e
    return Path(so), modname
