"""Each cffi cdef is a faithful copy of its C header's declarations.

Three pairs: ``csrc/xc.h`` (the public API) with ``_cdef.h``,
``csrc/xc_ext.h`` (io helpers and the name block, every build) with
``_cdef_ext.h``, and ``csrc/xc_test.h`` (the test seams, instrumented build
only) with ``_cdef_test.h``.  No declaration is in two headers.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ENGINE = Path(__file__).resolve().parents[2] / "engine"

#: (C header, its cdef) pairs; each pair must agree exactly.
PAIRS = [("csrc/xc.h", "_cdef.h"), ("csrc/xc_ext.h", "_cdef_ext.h"),
         ("csrc/xc_test.h", "_cdef_test.h")]

_COMMENT = re.compile(r"/\*.*?\*/|//[^\n]*", re.S)
_PROTO = re.compile(r"^[A-Za-z_][\w\s\*]*?\b(xc_\w+)\s*\(([^;{]*?)\)\s*;", re.M | re.S)
_ENUM_ITEM = re.compile(r"\b(XC_\w+)\s*=\s*(-?\d+)")
_DEFINE = re.compile(r"^\s*#\s*define\s+(XC_\w+)\b", re.M)
_TYPEDEF = re.compile(r"\btypedef\s+(?:struct\s+\w+\s*(?:\{[^}]*\})?\s*)?(\w+)\s*;")


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


def _names(path: Path) -> set[str]:
    """Every function, enum constant, macro and typedef a file declares."""
    text = path.read_text()
    clean = _clean(path)
    return (set(_prototypes(clean)) | {k for k, _ in _ENUM_ITEM.findall(clean)}
            | set(_DEFINE.findall(_COMMENT.sub(" ", text)))
            | set(_TYPEDEF.findall(clean)))


@pytest.mark.parametrize(("header", "cdef"), PAIRS)
def test_every_function_is_declared_identically(header, cdef):
    """Each header prototype is in its cdef with the same signature, and no other."""
    hdr = _prototypes(_clean(ENGINE / header))
    cd = _prototypes(_clean(ENGINE / cdef))
    assert len(hdr) >= 5
    assert sorted(set(hdr) - set(cd)) == []
    assert sorted(set(cd) - set(hdr)) == []
    assert {k: v for k, v in cd.items() if hdr[k] != v} == {}


@pytest.mark.parametrize(("header", "cdef"), PAIRS)
def test_every_explicit_enum_value_matches(header, cdef):
    """Numbered constants agree between each header and its cdef; none missing."""
    hdr = dict(_ENUM_ITEM.findall(_clean(ENGINE / header)))
    cd = dict(_ENUM_ITEM.findall(_clean(ENGINE / cdef)))
    assert {k: (v, cd.get(k)) for k, v in hdr.items() if cd.get(k) != v} == {}
    assert sorted(set(cd) - set(hdr)) == []


def test_known_values_sit_in_the_right_header():
    """Spot checks: a status code is public, the fault kinds and test hooks are not."""
    public = dict(_ENUM_ITEM.findall(_clean(ENGINE / "csrc" / "xc.h")))
    test = dict(_ENUM_ITEM.findall(_clean(ENGINE / "csrc" / "xc_test.h")))
    assert public["XC_E_FORMAT_INDEX"] == "-113"
    assert test["XC_FAULT_DELAY"] == "5" and test["XC_TH_ORDER"] == "22"
    assert "xc_cache_hold" in _prototypes(_clean(ENGINE / "csrc" / "xc.h"))
    assert "xc_fault_arm" in _prototypes(_clean(ENGINE / "csrc" / "xc_test.h"))


def test_no_declaration_is_in_two_headers():
    """The three headers declare disjoint sets of names, and so do their cdefs."""
    for files in (("csrc/xc.h", "csrc/xc_ext.h", "csrc/xc_test.h"),
                  ("_cdef.h", "_cdef_ext.h", "_cdef_test.h")):
        for i, a in enumerate(files):
            for b in files[i + 1:]:
                both = _names(ENGINE / a) & _names(ENGINE / b)
                assert sorted(both) == [], (a, b)
