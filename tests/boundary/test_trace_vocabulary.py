"""The read kinds and trace outcomes have one definition, and the oracle's copy agrees.

The engine's names and numbers come from the two lists of
``csrc/xc_kinds.h`` (read through ``xc_read_kind_name`` and
``xc_trace_outcome_name``); the oracle keeps its own copy in
``oracle.traces`` on purpose, since it decodes trace files without the
engine.  The numbers are stored in trace files, so they are pinned here.
"""

from __future__ import annotations

import re
from pathlib import Path

from xcache.engine import _lib
from xcache.oracle.traces import ENGINE_TRACE_KINDS, ENGINE_TRACE_OUTCOMES

CSRC = Path(__file__).resolve().parents[2] / "engine" / "csrc"

#: docs/TRACE_FORMAT.md, "kind" and "outcomes": the numbers in trace files.
KINDS = ("get", "prefetch", "speculative", "stream")
OUTCOMES = ("hit", "miss", "wait_hit", "resident", "inflight", "issued",
            "no_slot", "duplicate")


def test_engine_names_are_the_format_numbers():
    """The engine names kind 0..3 and outcome 0..7 as the trace format does."""
    assert _lib.read_kind_names() == KINDS
    assert _lib.trace_outcome_names() == OUTCOMES


def test_name_functions_end_with_null():
    """Past the last number, and below 0, the name functions give NULL."""
    f, lb = _lib.ffi(), _lib.lib()
    assert lb.xc_read_kind_name(len(KINDS)) == f.NULL
    assert lb.xc_read_kind_name(-1) == f.NULL
    assert lb.xc_trace_outcome_name(len(OUTCOMES)) == f.NULL
    assert lb.xc_trace_outcome_name(-1) == f.NULL


def test_oracle_copy_equals_engine():
    """The oracle's independent copy of the names equals the engine's."""
    assert ENGINE_TRACE_KINDS == _lib.read_kind_names()
    assert ENGINE_TRACE_OUTCOMES == _lib.trace_outcome_names()


def test_no_second_c_enum_of_kinds():
    """No C file but xc_kinds.h defines read kinds or outcomes (old or new names)."""
    old = re.compile(r"\b(?:TRACE_KIND|TRACE_OUT|KIND_DEMAND)\w*|(?<![A-Z_])KIND_\w+")
    defined = re.compile(r"\bX\((?:GET|HIT), \"")
    found = {}
    for p in sorted(CSRC.glob("*.[ch]")):
        text = p.read_text()
        hits = old.findall(text)
        if p.name != "xc_kinds.h" and defined.search(text):
            hits.append("an X-macro list")
        if hits:
            found[p.name] = sorted(set(hits))
    assert found == {}
