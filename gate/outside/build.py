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

Every listed source and the shim are checked against their digests before
anything is built (a mismatch is ``CannotRun`` naming the file: exit 2);
the ``.c`` files among them and the shim are compiled into one cffi
extension (out-of-line API mode) in a scratch folder.
"""

from __future__ import annotations

import hashlib
import importlib.util
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tomllib

from xcache.gate import CannotRun
from xcache.gate.outside import HERE, MANIFEST_NAME

HEADER = HERE / "xcs_shim.h"


@dataclass(frozen=True)
class Manifest:
    """One adapter folder's manifest, read and checked for shape."""

    folder: Path
    name: str
    shim: Path
    sources: dict[Path, str]
    cflags: tuple[str, ...]
    capabilities: dict[str, Any] = field(default_factory=dict)


def _need(cond: bool, path: Path, what: str) -> None:
    if not cond:
        raise CannotRun(f"{path}: {what}")


def load_manifest(folder: Path) -> Manifest:
    """The manifest of the adapter ``folder`` (``CannotRun`` naming what is wrong)."""
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
    try:
        doc = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as e:
        raise CannotRun(f"{path}: not a TOML manifest ({e})") from e
    for key in ("name", "shim", "sources", "capabilities"):
        _need(key in doc, path, f"the manifest lacks {key!r}")
    sources: dict[Path, str] = {}
    for i, s in enumerate(doc["sources"]):
        _need(isinstance(s, dict) and isinstance(s.get("path"), str) and
              re.fullmatch(r"[0-9a-f]{64}", str(s.get("sha256", ""))) is not None,
              path, f"sources[{i}] needs a path and a 64-hex sha256")
        sources[(folder / s["path"]).resolve()] = s["sha256"]
    cflags = doc.get("cflags", [])
    _need(isinstance(cflags, list) and all(isinstance(f, str) for f in cflags),
          path, "cflags must be a list of strings")
    return Manifest(folder, str(doc["name"]), (folder / doc["shim"]).resolve(),
                    sources, tuple(cflags), dict(doc["capabilities"]))


def digest(path: Path) -> str:
    """The SHA-256 of ``path``'s bytes, in hex."""
    return hashlib.sha256(path.read_bytes()).hexdigest()


def verify_sources(m: Manifest) -> int:
    """Check every pinned digest; how many (``CannotRun`` naming a mismatch)."""
    for p, want in m.sources.items():
        if not p.is_file():
            raise CannotRun(f"{m.folder / MANIFEST_NAME}: pinned source {p} "
                            "does not exist")
        got = digest(p)
        if got != want:
            raise CannotRun(f"{p}: SHA-256 {got} does not match the pinned "
                            f"{want} of {m.folder / MANIFEST_NAME}")
    return len(m.sources)


def cdef_text(faults: bool = False) -> str:
    """The declarations of ``xcs_shim.h`` that cffi is given (and the injectors')."""
    text = HEADER.read_text()
    start = text.index("XCS-CDEF-BEGIN")
    start = text.index("*/", start) + 2
    end = text.rindex("/* XCS-CDEF-END")
    out = text[start:end]
    if faults:
        lo = text.index("XCS-FAULTS-BEGIN */") + len("XCS-FAULTS-BEGIN */")
        out += text[lo:text.index("/* XCS-FAULTS-END")]
    return out


#: the C library calls the injectors stand in front of (``-Wl,--wrap``):
#: the reads the read injectors break, the opens the open injector breaks,
#: and the closes that tell which descriptors the cache still holds
WRAPPED = ("pread", "pread64", "read", "open", "open64", "openat",
           "openat64", "fopen", "fopen64", "close", "fclose")


def build(m: Manifest, out: Path, extra_cflags: tuple[str, ...] = ()
          ) -> tuple[Any, Any]:
    """Compile the pinned sources and the shim in ``out``; the module's (ffi, lib).

    ``extra_cflags`` come after the manifest's (``-DNAME=...`` overrides).
    """
    import cffi  # noqa: PLC0415

    flags = [*m.cflags, *extra_cflags]
    faults = bool({"io", "open"} & set(m.capabilities.get("faults", [])))
    tag = hashlib.sha256("\0".join([m.name, str(faults), *flags]).encode()
                         ).hexdigest()[:10]
    modname = f"_xcs_{re.sub(r'[^0-9A-Za-z_]', '_', m.name)}_{tag}"
    ffi = cffi.FFI()
    ffi.cdef(cdef_text(faults))
    c_files = [str(p) for p in m.sources if p.suffix == ".c"] + [str(m.shim)]
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
    spec = importlib.util.spec_from_file_location(modname, so)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[modname] = mod
    spec.loader.exec_module(mod)
    return mod.ffi, mod.lib
