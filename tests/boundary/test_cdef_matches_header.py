"""The cffi cdef is a faithful copy of the public header's declarations."""

from __future__ import annotations

import re
from pathlib import Path

ENGINE = Path(__file__).resolve().parents[2] / "engine"

_COMMENT = re.compile(r"/\*.*?\*/|//[^\n]*", re.S)
_PROTO = re.compile(r"^[A-Za-z_][\w\s\*]*?\b(xc_\w+)\s*\(([^;{]*?)\)\s*;", re.M | re.S)
_ENUM_ITEM = re.compile(r"\b(XC_\w+)\s*=\s*(-?\d+)")


def _clean(path: Path) -> str:
    """File text without comments or preprocessor lines."""
    text = _COMMENT.sub(" ", path.read_text())
    return "\n".join(ln for ln in text.splitlines()
                     if not ln.lstrip().startswith("#"))


def _prototypes(text: str) -> dict[str, str]:
    """Map each xc_* function to its normalised declaration."""
    out = {}
    for m in _PROTO.finditer(text):
        decl = " ".join(m.group(0).split())
        out[m.group(1)] = decl.replace("( ", "(").replace(" )", ")")
    return out


def test_every_public_function_is_declared_identically():
    """Each xc.h prototype appears in _cdef.h with the same signature, and no other."""
    header = _prototypes(_clean(ENGINE / "csrc" / "xc.h"))
    cdef = _prototypes(_clean(ENGINE / "_cdef.h"))
    assert len(header) > 40
    assert sorted(set(header) - set(cdef)) == []
    assert sorted(set(cdef) - set(header)) == []
    assert {k: v for k, v in cdef.items() if header[k] != v} == {}


def test_every_explicit_enum_value_matches():
    """Status codes and other numbered constants agree between the two files."""
    header = dict(_ENUM_ITEM.findall(_clean(ENGINE / "csrc" / "xc.h")))
    cdef = dict(_ENUM_ITEM.findall(_clean(ENGINE / "_cdef.h")))
    assert header["XC_E_FORMAT_INDEX"] == "-113"
    assert {k: (v, cdef.get(k)) for k, v in header.items()
            if cdef.get(k) != v} == {}
