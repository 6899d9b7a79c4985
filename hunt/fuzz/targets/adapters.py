"""The target over an outside cache's adapter folder: ``replay.py --cache``.

``gate-cache`` runs the gate's adapter step (``hunt.fuzz.gate_cache``: the
manifest read and checked, the capabilities, the pinned digests) on the
seed adapter (``corpus-tools/seed/adapter/``) with its manifest
``xcs.toml`` changed (a field, raw bytes, a sparse file past its limit,
keys and tables nested past the reader's limit), or its pinned source or
its shim replaced (other bytes, a sparse file, a FIFO, a folder, nothing).
"""

from __future__ import annotations

import tomllib
from hypothesis import strategies as st

from xcache.hunt.fuzz.case import DELETE, DIR, FIFO, PY, SEED, Case, Target
from xcache.hunt.fuzz.mutate import byte_edit, toml_file_case

MANIFEST = tomllib.loads((SEED / "adapter" / "xcs.toml").read_text())

TARGETS = (
    Target("gate-cache", lambda d: [PY, "-m", "xcache.hunt.fuzz.gate_cache",
                                    "adapter"], ("adapter",)),
)


@st.composite
def gate_cache_case(draw: st.DrawFn) -> Case:
    """replay --cache's adapter step: the manifest, the source or the shim changed."""
    which = draw(st.sampled_from(["manifest", "manifest", "manifest", "cache.c",
                                  "shim.c"]))
    if which == "manifest":
        return draw(toml_file_case("gate-cache", "adapter/xcs.toml", MANIFEST,
                                   ("xcs.toml",)))
    rel = f"adapter/{which}"
    if draw(st.integers(0, 3)) == 0:
        marker = draw(st.sampled_from([FIFO, DIR, DELETE]))
        what = {FIFO: "a FIFO", DIR: "a folder", DELETE: "removed"}[marker]
        return Case("gate-cache", f"{rel}: {what}", {rel: marker}, [], (which,))
    data, note = draw(byte_edit((SEED / rel).read_bytes()))
    return Case("gate-cache", f"{rel}: {note}", {rel: data}, [], (which,))


STRATEGIES = {"gate-cache": gate_cache_case}
