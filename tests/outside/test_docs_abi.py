"""docs/OUTSIDE_CACHES.md's copy of the shim table is the header's."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _vtable(text: str) -> str:
    """The ``xcs_vtable`` declaration in ``text``, from typedef to its name."""
    start = text.index("typedef struct xcs_vtable {")
    return text[start:text.index("} xcs_vtable;", start)]


def test_the_documented_table_is_the_headers():
    """The vtable the docs show, comments included, is xcs_shim.h's."""
    header = (ROOT / "gate" / "outside" / "xcs_shim.h").read_text()
    doc = (ROOT / "docs" / "OUTSIDE_CACHES.md").read_text()
    assert _vtable(doc) == _vtable(header)
    assert "release_all" in _vtable(doc)


def test_the_documented_abi_and_codes_are_the_headers():
    """The ABI the docs name and every typed code are the header's."""
    import re  # noqa: PLC0415

    header = (ROOT / "gate" / "outside" / "xcs_shim.h").read_text()
    doc = (ROOT / "docs" / "OUTSIDE_CACHES.md").read_text()
    abi = re.search(r"XCS_ABI = (\d+),", header)
    assert abi is not None
    assert f"({abi.group(1)} now" in doc
    for name, code in re.findall(r"(XCS_E[A-Z]+) = (-\d+)", header):
        assert f"`{name}` ({code}" in doc, name
