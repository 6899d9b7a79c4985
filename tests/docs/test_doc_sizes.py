"""The reference pages stay references: current tables, not journals.

BENCHMARKS.md and QUALITY.md hold each measure's latest figure (earlier runs
are in git), DESIGN.md the structure (the labs have their own page,
docs/LABS.md, which DESIGN and the README link to).
"""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"

#: Page -> the most lines it may have.
LIMITS = {"BENCHMARKS.md": 300, "QUALITY.md": 300, "DESIGN.md": 600}


@pytest.mark.parametrize("page", sorted(LIMITS))
def test_page_stays_within_its_lines(page: str) -> None:
    """BENCHMARKS.md and QUALITY.md at most 300 lines, DESIGN.md at most 600."""
    lines = len((DOCS / page).read_text(encoding="utf-8").splitlines())
    assert lines <= LIMITS[page], f"docs/{page} has {lines} lines, over {LIMITS[page]}"


def test_labs_page_exists() -> None:
    """docs/LABS.md is there and describes the three labs."""
    text = (DOCS / "LABS.md").read_text(encoding="utf-8")
    for command in ("replay.py lab", "replay.py predict", "replay.py time"):
        assert command in text


@pytest.mark.parametrize("page", ["docs/DESIGN.md", "README.md"])
def test_labs_page_is_linked(page: str) -> None:
    """DESIGN.md and the README name docs/LABS.md."""
    text = (ROOT / page).read_text(encoding="utf-8")
    assert "LABS.md" in text


def test_history_is_pointed_to() -> None:
    """BENCHMARKS.md and QUALITY.md say where the superseded figures are."""
    for page in ("BENCHMARKS.md", "QUALITY.md"):
        text = (DOCS / page).read_text(encoding="utf-8")
        assert f"git log -p docs/{page}" in text.split("\n## ", 1)[0], page
