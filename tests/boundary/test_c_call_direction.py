"""Calls between the engine's C files run one way: no file is reached back.

Every external function or table a ``csrc/*.c`` file defines, and every
file that names it (a call, or its address taken, as a thread body or a
policy table entry is), make a graph of files; it must have no cycle
(docs/DESIGN.md §9, "Where a change goes").  The graph is read from the
sources with comments and strings removed, so it needs no build; a name
made by token pasting (the policy table's ``xc_policy_##n##_ops``) is not
seen (those references run from the table down to the policy files), nor
is a call made inside a header's inline function.
"""

from __future__ import annotations

import re
from pathlib import Path

CSRC = Path(__file__).resolve().parents[2] / "engine" / "csrc"

_COMMENT_OR_STRING = re.compile(
    r"/\*.*?\*/|//[^\n]*|\"(?:\\.|[^\"\\\n])*\"|'(?:\\.|[^'\\\n])'", re.S)
_FUNC_DEF = re.compile(
    r"^(?!static\b)[A-Za-z_][\w \t\*]*?\b(x[cj]_\w+)\s*\([^;{]*\)\s*\{",
    re.M | re.S)
_DATA_DEF = re.compile(
    r"^(?!static\b|extern\b)(?:const\s+)?\w+\s+(?:\*\s*)?(?:const\s+)?"
    r"(x[cj]_\w+)\s*(?:\[[^\]]*\])?\s*=", re.M)
_NAME = re.compile(r"\bx[cj]_\w+\b")


def _clean(path: Path) -> str:
    """The file's text without comments and string literals."""
    return _COMMENT_OR_STRING.sub(" ", path.read_text())


def call_graph(csrc: Path = CSRC) -> dict[str, dict[str, set[str]]]:
    """File stem -> {file stem it names something of -> the names}."""
    texts = {p.stem: _clean(p) for p in sorted(csrc.glob("*.c"))}
    owner: dict[str, str] = {}
    for stem, text in texts.items():
        for rx in (_FUNC_DEF, _DATA_DEF):
            for name in rx.findall(text):
                assert name not in owner, f"{name} defined in {owner[name]} and {stem}"
                owner[name] = stem
    graph: dict[str, dict[str, set[str]]] = {stem: {} for stem in texts}
    for stem, text in texts.items():
        for name in set(_NAME.findall(text)):
            to = owner.get(name)
            if to is not None and to != stem:
                graph[stem].setdefault(to, set()).add(name)
    return graph


def cycles(graph: dict[str, dict[str, set[str]]]) -> list[list[str]]:
    """The strongly connected groups of more than one file (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                out.append(sorted(group))

    for v in graph:
        if v not in index:
            visit(v)
    return sorted(out)


def test_no_c_file_is_reached_back():
    """The C files' call graph has no cycle."""
    graph = call_graph()
    assert cycles(graph) == [], {a: sorted(b) for a, b in graph.items()}


def test_the_cache_files_run_down_to_the_slot_primitives():
    """cache and stream -> batch -> slot, and slot names none of the three."""
    graph = call_graph()
    assert set(graph["xc_cache"]) >= {"xc_batch", "xc_slot"}
    assert graph["xc_cache"]["xc_batch"] == {"xc_pool_main", "xc_readahead_main",
                                             "xc_pool_stop", "xc_readahead_stop"}
    assert set(graph["xc_stream"]) >= {"xc_batch", "xc_slot"}
    assert "xc_slot" in graph["xc_batch"]
    assert not {"xc_cache", "xc_batch", "xc_stream"} & set(graph["xc_slot"])
    assert not {"xc_cache", "xc_stream"} & set(graph["xc_batch"])


def test_the_reader_files_run_down_to_its_memory_helpers():
    """st -> index -> header -> names -> st_mem, never back up."""
    graph = call_graph()
    order = ["xc_st", "xc_index", "xc_header", "xc_names", "xc_st_mem"]
    for i, f in enumerate(order):
        assert not set(order[:i + 1]) & set(graph[f]) - {f}, (f, graph[f])
    assert graph["xc_names"] == {"xc_st_mem": {"xc_st_advise_huge"},
                                 "xc_alloc": {"xc_calloc", "xc_free"}}


def test_the_graph_sees_a_planted_cycle(tmp_path: Path):
    """A call from the slot primitives back up to the cache is a cycle here."""
    for p in CSRC.glob("*.c"):
        (tmp_path / p.name).write_text(p.read_text())
    slot = tmp_path / "xc_slot.c"
    slot.write_text(slot.read_text() + "\nvoid xc_slot_probe(xc_cache *c)\n"
                    "{ xc_cache_close(c); }\n")
    assert ["xc_cache", "xc_slot"] in [[f for f in g if f in ("xc_cache", "xc_slot")]
                                       for g in cycles(call_graph(tmp_path))]
