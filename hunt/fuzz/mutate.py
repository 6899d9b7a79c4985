"""Hostile edits of the tool fuzzer's inputs, as hypothesis strategies.

:func:`mutated_doc` changes one field of a document (JSON or TOML: set to
a :func:`hostile_value`, deleted, or a field added) or replaces it whole;
:func:`byte_edit` makes raw byte edits, truncates, replaces the bytes
with junk or with a sparse file past every reader's size limit
(:data:`LARGE`); :func:`deep_toml` nests a TOML document past every
reader's limit (a dotted key or a table header of up to 200,000 parts,
inline tables or arrays as deep); :func:`dump_json` / :func:`dump_toml`
write the result (NaN, inf and a :class:`_Nested` value 100,000 deep
included).
:func:`json_file_case` / :func:`toml_file_case` make a case of one
changed file, :func:`_opt` a hostile command-line value.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from hypothesis import strategies as st

from xcache.hunt.fuzz.case import Case, sparse

NESTED = 100_000  # depth of a deeply nested JSON value
#: Sizes of a sparse file past every reader's limit (the largest, a trace's,
#: is 4 GiB): a terabyte, and one byte past 4 GiB.
LARGE = [1 << 40, (4 << 30) + 1]
#: Parts of a dotted key or table header, levels of inline tables or arrays:
#: past the limit of 64 levels, up to the 400 KB line that ran tomllib for
#: over a minute.
DEEP = [65, 1000, 30_000, 200_000]

HOSTILE: list[Any] = [
    None, True, False, "", "x", "\u00e9\u0000", -1, 0, 1, 1.5, -0.5,
    10**9, 1e9, 1e12, 2**62, 2**64, -(2**63), float("nan"), float("inf"),
    float("-inf"), [], {}, [0], [-1, 2**40], {"a": 1}, "1e9", [[[[[]]]]],
]


class _Nested:
    """Marker: serialise as ``[[[...]]]`` this deep (json.dumps would recurse)."""

    def __init__(self, depth: int, open_: str = "[") -> None:
        self.depth, self.open = depth, open_


def dump_json(doc: Any) -> bytes:
    """JSON text of ``doc``; NaN/inf as Python writes them; :class:`_Nested` inline."""
    marks: dict[str, _Nested] = {}

    def swap(v: Any) -> Any:
        if isinstance(v, _Nested):
            k = f"__nested_{len(marks)}__"
            marks[k] = v
            return k
        if isinstance(v, dict):
            return {k: swap(x) for k, x in v.items()}
        if isinstance(v, list):
            return [swap(x) for x in v]
        return v

    text = json.dumps(swap(doc))
    for k, n in marks.items():
        close = "]" if n.open == "[" else "}"
        inner = ("[" * n.depth + "]" * n.depth if n.open == "[" else
                 '{"a":' * n.depth + "1" + close * n.depth)
        text = text.replace(json.dumps(k), inner)
    return text.encode()


def _toml_key(k: str) -> str:
    return k if re.fullmatch(r"[A-Za-z0-9_-]+", k) else json.dumps(k)


def _toml_val(v: Any) -> str:
    if isinstance(v, bool):
        return str(v).lower()
    if isinstance(v, float):
        return "nan" if math.isnan(v) else ("inf" if v == math.inf else
                                            "-inf" if v == -math.inf else repr(v))
    if isinstance(v, int):
        return str(v) if -(2**63) <= v < 2**63 else json.dumps(str(v))
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, _Nested):
        return "[" * min(v.depth, 2000) + "]" * min(v.depth, 2000)
    if isinstance(v, list):  # TOML has no null: None items are left out
        return "[" + ", ".join(_toml_val(x) for x in v if x is not None) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{_toml_key(k)} = {_toml_val(x)}"
                               for k, x in v.items() if x is not None) + "}"
    raise TypeError(v)


def dump_toml(doc: dict[str, Any]) -> bytes:
    """TOML text of ``doc`` (None values left out: TOML has no null)."""
    lines = []
    tables = []
    for k, v in doc.items():
        if v is None:
            continue
        if isinstance(v, list) and v and all(isinstance(x, dict) for x in v):
            tables.append((k, v))
        else:
            lines.append(f"{_toml_key(k)} = {_toml_val(v)}")
    for k, rows in tables:
        for row in rows:
            lines += ["", f"[[{_toml_key(k)}]]"]
            lines += [f"{_toml_key(a)} = {_toml_val(b)}" for a, b in row.items()
                      if b is not None]
    return ("\n".join(lines) + "\n").encode()


def _paths(doc: Any, here: tuple = ()) -> list[tuple]:
    """Every path to a value inside ``doc`` (keys and list indices)."""
    out = [here]
    if isinstance(doc, dict):
        for k, v in doc.items():
            out += _paths(v, here + (k,))
    elif isinstance(doc, list):
        for i, v in enumerate(doc[:4]):
            out += _paths(v, here + (i,))
    return out


def _set(doc: Any, path: tuple, value: Any, delete: bool = False) -> Any:
    if not path:
        return value
    doc = json.loads(json.dumps(doc))
    cur = doc
    for p in path[:-1]:
        cur = cur[p]
    if delete:
        del cur[path[-1]]
    else:
        cur[path[-1]] = value
    return doc


@st.composite
def hostile_value(draw: st.DrawFn) -> Any:
    """One hostile value: from :data:`HOSTILE`, an integer, a nested value, text."""
    kind = draw(st.integers(0, 9))
    if kind <= 5:
        return draw(st.sampled_from(HOSTILE))
    if kind == 6:
        return draw(st.integers(-(2**64), 2**64))
    if kind == 7:
        return _Nested(draw(st.sampled_from([50, 1000, NESTED])),
                       draw(st.sampled_from(["[", "{"])))
    if kind == 8:
        return draw(st.text(max_size=20))
    return draw(st.floats(allow_nan=True, allow_infinity=True))


@st.composite
def mutated_doc(draw: st.DrawFn, doc: Any) -> tuple[Any, str]:
    """``doc`` with one field changed, deleted or added, or replaced whole."""
    paths = _paths(doc)
    path = draw(st.sampled_from(paths))
    op = draw(st.sampled_from(["set", "set", "set", "delete", "add"]))
    label = ".".join(map(str, path)) or "(whole document)"
    if op == "delete" and path:
        return _set(doc, path, None, delete=True), f"{label} deleted"
    value = draw(hostile_value())
    if op == "add" and isinstance(doc, dict):
        key = draw(st.sampled_from(["extra", "text_config", "num_experts",
                                    "first_k_dense_replace", "moe_layer_freq",
                                    "decoder_sparse_step", "mlp_only_layers",
                                    "num_nextn_predict_layers", "family"]))
        return _set(doc, (key,), value), f"{key} added = {_show(value)}"
    return _set(doc, path, value), f"{label} = {_show(value)}"


def _show(v: Any) -> str:
    if isinstance(v, _Nested):
        return f"{v.open * 3}... nested {v.depth} deep"
    s = repr(v)
    return s if len(s) < 60 else s[:57] + "..."


@st.composite
def byte_edit(draw: st.DrawFn, data: bytes) -> tuple[bytes, str]:
    """``data`` with a few raw byte edits, truncated, or replaced by junk."""
    kind = draw(st.sampled_from(["edit", "edit", "edit", "truncate", "junk",
                                 "int", "sparse"]))
    if kind == "sparse":
        size = draw(st.sampled_from(LARGE))
        return sparse(size), f"a sparse file of {size:,} bytes"
    if kind == "truncate":
        n = draw(st.integers(0, max(len(data) - 1, 0)))
        return data[:n], f"truncated to {n} bytes"
    if kind == "junk":
        junk = draw(st.binary(min_size=1, max_size=64))
        return junk, f"replaced by {len(junk)} binary bytes"
    if kind == "int" and len(data) >= 8:
        pos = draw(st.integers(0, len(data) - 4)) & ~3
        v = draw(st.sampled_from([-1, 0, 2**31 - 1, -(2**31), 200_000, 1 << 20]))
        buf = bytearray(data)
        buf[pos:pos + 4] = (v & 0xFFFFFFFF).to_bytes(4, "little")
        return bytes(buf), f"int32 at byte {pos} = {v}"
    buf = bytearray(data)
    notes = []
    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.sampled_from(["flip", "insert", "delete", "token"]))
        pos = draw(st.integers(0, len(buf)))
        if op == "flip" and pos < len(buf):
            buf[pos] ^= draw(st.integers(1, 255))
        elif op == "insert":
            buf[pos:pos] = draw(st.binary(min_size=1, max_size=8))
        elif op == "delete":
            del buf[pos:pos + draw(st.integers(1, 16))]
        else:
            buf[pos:pos] = draw(st.sampled_from(
                [b"1e999", b"-1", b"99999999999", b"NaN", b"\xff\xfe", b"\x00",
                 b"[[[[", b"\n", b",", b"4611686018427387904"]))
        notes.append(f"{op}@{pos}")
    return bytes(buf), "bytes " + " ".join(notes)


BAD_ARGS = ["0", "-1", "1", "2", "1e9", "1e12", "nan", "inf", "-inf", "1.5",
            "4611686018427387904", "99999999999999999999", "", "x", "0x10",
            "0-999999999", "5-3", "1,,2", "-3-5", "0,1", "3"]


def _opt(options: list[str]) -> st.SearchStrategy[tuple[list[str], tuple[str, ...]]]:
    """``--opt=VALUE`` with a hostile value, and the words naming it.

    A refusal names the option, or quotes the value ("unknown policy '1.5'").
    """
    return st.tuples(st.sampled_from(options), st.sampled_from(BAD_ARGS)).map(
        lambda t: ([f"{t[0]}={t[1]}"], (t[0], f"'{t[1]}'", f'"{t[1]}"')))


@st.composite
def json_file_case(draw: st.DrawFn, target: str, rel: str, doc: Any,
                   names: tuple[str, ...]) -> Case:
    """``target`` with the JSON file ``rel`` changed (a field, or raw bytes)."""
    if draw(st.integers(0, 3)) == 0:
        data, note = draw(byte_edit(json.dumps(doc, indent=1).encode()))
    else:
        new, note = draw(mutated_doc(doc))
        data = dump_json(new)
    return Case(target, f"{rel}: {note}", {rel: data}, [], names)


@st.composite
def deep_toml(draw: st.DrawFn, doc: dict) -> tuple[bytes, str]:
    """``doc`` as TOML with one value nested past the limit of every reader:
    under a dotted key or a table header of many parts, or in inline tables
    or arrays nested as deep."""
    n = draw(st.sampled_from(DEEP))
    kind = draw(st.sampled_from(["key", "header", "inline", "array"]))
    text = dump_toml(doc)
    if kind == "key":
        return ".".join(["a"] * n).encode() + b" = 1\n" + text, \
            f"a dotted key of {n:,} parts"
    if kind == "header":
        return text + b"\n[" + ".".join(["a"] * n).encode() + b"]\nb = 1\n", \
            f"a table header of {n:,} parts"
    if kind == "inline":
        return (b"x = " + b"{a = " * n + b"1" + b"}" * n + b"\n" + text,
                f"inline tables nested {n:,} deep")
    return (b"x = " + b"[" * n + b"]" * n + b"\n" + text,
            f"arrays nested {n:,} deep")


@st.composite
def toml_file_case(draw: st.DrawFn, target: str, rel: str, doc: dict,
                   names: tuple[str, ...]) -> Case:
    """``target`` with the TOML file ``rel`` changed (raw bytes, nesting, a field)."""
    kind = draw(st.integers(0, 4))
    if kind == 0:
        data, note = draw(byte_edit(dump_toml(doc)))
    elif kind == 1:
        data, note = draw(deep_toml(doc))
    else:
        new, note = draw(mutated_doc(doc))
        data = dump_toml(new) if isinstance(new, dict) else dump_json(new)
    return Case(target, f"{rel}: {note}", {rel: data}, [], names)
