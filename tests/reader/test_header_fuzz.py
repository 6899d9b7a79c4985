"""Header fuzz suite: generated and mutated headers and index files, three readers.

Every example is written to disk (``hunt.fuzz.inputs``) and read by the
engine's C reader, the oracle reader and, for single files, the official
``safetensors`` reader.  The rules they must agree by, and the documented
exceptions (each with its line of docs/DESIGN.md §3 or faults/README.md),
are in one place: ``hunt/fuzz/verdicts.py``.  Runs in CI's normal pytest
run and in its sanitizer run.
"""

from __future__ import annotations

import json
import struct
import tempfile

import pytest
from hypothesis import given
from hypothesis import strategies as st

from xcache.hunt.fuzz import inputs
from xcache.hunt.fuzz.verdicts import (
    OFFICIAL_DIFFERENCES,
    OPEN_FINDINGS,
    compare_official,
    compare_oracle,
    engine_verdict,
    official_verdict,
    open_finding,
    oracle_verdict,
)
from xcache.oracle.safetensors import DTYPE_BITS

pytest.importorskip("safetensors", reason="the official reader is a reference here")

DTYPES = sorted(DTYPE_BITS)


def check(data: bytes, official: bool = True) -> str:
    """Materialise one input, compare the readers; the engine's kind or 'ok'."""
    with tempfile.TemporaryDirectory() as d:
        path = inputs.materialise(data, d)
        mine = compare_oracle(path)
        if official and data[:1] != bytes([inputs.MODE_INDEX]):
            compare_official(path, mine)
        return mine.kind or "ok"


# -- JSON pieces, written by hand so that duplicates and odd numbers survive --


def jstr(s: str) -> str:
    """A JSON string literal for s (non-ASCII kept as is)."""
    return json.dumps(s, ensure_ascii=False)


def jobj(members: list[tuple[str, str]], sep: tuple[str, str]) -> str:
    """A JSON object from (key text, value text) pairs, in order."""
    item, colon = sep
    return "{" + item.join(f"{k}{colon}{v}" for k, v in members) + "}"


names = st.text(
    st.characters(codec="utf-8", exclude_characters="\0"), min_size=1, max_size=10
)
seps = st.sampled_from([(",", ":"), (", ", ": "), (" ,\n", " :\t")])
odd_numbers = st.sampled_from(
    [
        "0",
        "-0",
        "1.7976931348623157e308",
        "-1e308",
        "1e-400",
        "1.5",
        "1e2",
        "18446744073709551615",
        "18446744073709551616",
        "281474976710656",
        "281474976710655",
        "-1",
        "0.0",
        "1E+2",
        "99999999999999999999999999",
    ]
)
odd_values = st.one_of(
    odd_numbers,
    st.sampled_from(
        [
            "null",
            "true",
            "[]",
            "{}",
            '"x"',
            "[1,[2]]",
            '{"a":{"b":[null]}}',
            '"\\u0000"',
            '"\\ud83d\\ude00"',
        ]
    ),
)
#: Values no reader may accept in an unknown field: a lone surrogate escape.
bad_values = st.sampled_from(['"\\ud800"', '"\\udc00x"'])


@st.composite
def headers(draw) -> tuple[list[tuple[str, str]], int]:
    """A valid header's (key text, value text) members in order, and its data length."""
    tensors = draw(
        st.lists(
            st.tuples(
                names, st.sampled_from(DTYPES), st.lists(st.integers(0, 5), max_size=3)
            ),
            max_size=6,
            unique_by=lambda t: t[0],
        )
    )
    # lay the data out in an order of its own, not the document's
    order = draw(st.permutations(range(len(tensors))))
    offsets, at = {}, 0
    for i in order:
        _, dtype, shape = tensors[i]
        bits = DTYPE_BITS[dtype]
        for d in shape:
            bits *= d
        if bits % 8:  # F4 / F6 need whole bytes: pad the first dimension
            shape.insert(0, 8)
            bits *= 8
        offsets[i] = (at, at + bits // 8)
        at += bits // 8
    sep = draw(seps)
    members = []
    for i, (name, dtype, shape) in enumerate(tensors):
        fields = [
            ('"dtype"', jstr(dtype)),
            ('"shape"', json.dumps(shape)),
            ('"data_offsets"', json.dumps(list(offsets[i]))),
        ]
        if draw(st.booleans()):
            fields.append((jstr(draw(names)), draw(odd_values)))
        fields = draw(st.permutations(fields))
        members.append((jstr(name), jobj(fields, sep)))
    if draw(st.booleans()):
        meta = draw(st.dictionaries(names, names, max_size=3))
        where = draw(st.integers(0, len(members)))
        members.insert(
            where,
            (
                '"__metadata__"',
                jobj([(jstr(k), jstr(v)) for k, v in meta.items()], sep),
            ),
        )
    return members, at


def file_bytes(
    members: list[tuple[str, str]], data_len: int, sep=(",", ":"), pad: str = ""
) -> bytes:
    """A whole safetensors file: N, the header and data_len bytes of data."""
    text = (jobj(members, sep) + pad).encode("utf-8")
    return (
        struct.pack("<Q", len(text))
        + text
        + bytes(range(256)) * (data_len // 256)
        + bytes(range(data_len % 256))
    )


@given(h=headers(), pad=st.sampled_from(["", " ", "   \n\t", "\r\n"]))
def test_generated_valid_headers_are_accepted_by_all_three(h, pad):
    """A generated valid header: all three readers accept, with equal tables."""
    members, data_len = h
    assert (
        check(bytes([inputs.MODE_RAW]) + file_bytes(members, data_len, pad=pad)) == "ok"
    )


# -- field mutations --------------------------------------------------------

FIELD_EDITS = [
    "offsets+1",
    "offsets-1",
    "offsets_swap",
    "offsets3",
    "dtype_num",
    "dtype_bad",
    "dtype_lower",
    "shape_neg",
    "shape_float",
    "shape_9",
    "shape_2^48",
    "shape_big",
    "dup_name",
    "dup_field",
    "meta_num",
    "meta_null",
    "meta_dup",
    "drop_field",
    "value",
    "name_nul",
    "name_surrogate",
    "top_array",
    "trailing",
    "cut_json",
]


def edit(
    members: list[tuple[str, str]], what: str, i: int, v: str
) -> list[tuple[str, str]]:
    """One field mutation of entry i (taken modulo the entries) with value text v."""
    tens = [k for k, (key, _) in enumerate(members) if key != '"__metadata__"']
    m = list(members)
    if what in ("meta_num", "meta_null", "meta_dup"):
        val = {
            "meta_num": '{"a":' + v + "}",
            "meta_null": "null",
            "meta_dup": '{"a":"1","a":"2"}',
        }[what]
        return [('"__metadata__"', val)] + [x for x in m if x[0] != '"__metadata__"']
    if what == "top_array":
        return [("", "[" + ",".join(val for _, val in m) + "]")]
    if not tens:
        return m + [('"x"', v)]
    k = tens[i % len(tens)]
    key, val = m[k]
    doc = json.loads(val)
    if what == "offsets+1":
        doc["data_offsets"][1] += 1
    elif what == "offsets-1":
        doc["data_offsets"][0] -= 1
    elif what == "offsets_swap":
        doc["data_offsets"].reverse()
    elif what == "offsets3":
        doc["data_offsets"].append(0)
    elif what == "dtype_num":
        doc["dtype"] = 4
    elif what == "dtype_bad":
        doc["dtype"] = "U9"
    elif what == "dtype_lower":
        doc["dtype"] = doc["dtype"].lower()
    elif what == "shape_neg":
        doc["shape"] = [-1] + doc["shape"]
    elif what == "shape_float":
        doc["shape"] = [1.0] + doc["shape"]
    elif what == "shape_9":
        doc["shape"] = [1] * 9
    elif what == "shape_2^48":
        doc["shape"] = [2**48, 0]
    elif what == "shape_big":
        doc["shape"] = [2**40, 2**40]
    elif what == "drop_field":
        doc.pop(sorted(doc)[i % len(doc)])
    elif what == "dup_name":
        m.append((key, val))
        return m
    elif what == "dup_field":
        m[k] = (key, val[:-1] + ',"dtype":"U8"}')
        return m
    elif what == "value":
        m[k] = (key, val[:-1] + ',"extra":' + v + "}")
        return m
    elif what == "name_nul":
        m[k] = ('"a\\u0000b"', val)
        return m
    elif what == "name_surrogate":
        m[k] = ('"a\\udc00"', val)
        return m
    elif what == "trailing":
        m[k] = (key, val + "}")
        return m
    elif what == "cut_json":
        m[k] = (key, val[: max(1, len(val) // 2)])
        return m
    m[k] = (key, json.dumps(doc))
    return m


@given(
    h=headers(),
    what=st.sampled_from(FIELD_EDITS),
    i=st.integers(0, 10),
    v=st.one_of(odd_values, bad_values),
    mode=st.sampled_from([inputs.MODE_RAW, inputs.MODE_HEADER]),
)
def test_field_mutations_get_the_same_verdict(h, what, i, v, mode):
    """Offsets, dtypes, shapes, names, metadata, numbers, JSON: the readers agree."""
    members, data_len = h
    mutated = edit(members, what, i, v)
    if mutated and mutated[0][0] == "":  # the top level is not an object
        text = mutated[0][1].encode()
        raw = struct.pack("<Q", len(text)) + text
    else:
        raw = file_bytes(mutated, 0 if mode == inputs.MODE_HEADER else data_len)
    check(bytes([mode]) + raw)


# -- byte mutations ---------------------------------------------------------

byte_edits = st.lists(
    st.tuples(
        st.sampled_from(["flip", "set", "insert", "delete"]),
        st.floats(0, 1, exclude_max=True),
        st.sampled_from(b' "{}[],:0123456789-.eE\\u\x00\xff\xc3'),
    ),
    min_size=1,
    max_size=4,
)


@given(
    h=headers(),
    edits=byte_edits,
    n_delta=st.sampled_from([0, 0, 0, -1, 1, 2**27]),
    tail=st.sampled_from([0, 0, -1, 1]),
)
def test_byte_mutations_get_the_same_verdict(h, edits, n_delta, tail):
    """Bytes flipped, set, inserted or deleted in the JSON, N moved, data resized."""
    members, data_len = h
    raw = bytearray(file_bytes(members, 0))
    text = raw[8:]
    for op, where, b in edits:
        j = int(where * len(text)) if text else 0
        if op == "flip" and text:
            text[j] ^= b or 0x80
        elif op == "set" and text:
            text[j] = b
        elif op == "insert":
            text[j:j] = bytes([b])
        elif op == "delete" and text:
            del text[j]
    n = max(0, len(text) + n_delta)
    body = struct.pack("<Q", n) + bytes(text) + bytes(max(0, data_len + tail))
    check(bytes([inputs.MODE_RAW]) + body)


# -- index files ------------------------------------------------------------

SHARD_A, SHARD_B = sorted(inputs.SHARDS)
INDEX_EDITS = {
    "valid": lambda d: d,
    "drop": lambda d: d["weight_map"].pop("b.bias") and d,
    "stray": lambda d: d["weight_map"].update({"z": SHARD_A}) or d,
    "remap": lambda d: d["weight_map"].update({"c.weight": SHARD_A}) or d,
    "missing_shard": lambda d: (
        d["weight_map"].update({"c.weight": "gone.safetensors"}) or d
    ),
    "dotdot": lambda d: d["weight_map"].update({"c.weight": "../" + SHARD_B}) or d,
    "empty_name": lambda d: d["weight_map"].update({"c.weight": ""}) or d,
    "self": lambda d: d["weight_map"].update({"c.weight": inputs.INDEX_NAME}) or d,
    "value_num": lambda d: d["weight_map"].update({"c.weight": 3}) or d,
    "total+1": lambda d: (
        d["metadata"].update(total_size=d["metadata"]["total_size"] + 1) or d
    ),
    "total_neg": lambda d: d["metadata"].update(total_size=-1) or d,
    "total_float": lambda d: d["metadata"].update(total_size=34.0) or d,
    "total_str": lambda d: d["metadata"].update(total_size="34") or d,
    "no_total": lambda d: d["metadata"].pop("total_size") and d,
    "meta_null": lambda d: d.update(metadata=None) or d,
    "no_meta": lambda d: d.pop("metadata") and d,
    "no_map": lambda d: d.pop("weight_map") and d,
    "map_list": lambda d: d.update(weight_map=[]) or d,
    "extra": lambda d: d.update(extra={"a": [1e300]}) or d,
    "top_list": lambda d: [d],
}


@pytest.mark.parametrize("what", sorted(INDEX_EDITS))
def test_index_edits_get_the_same_verdict(what):
    """Each weight_map / metadata edit of a valid index: engine and oracle agree."""
    doc = json.loads(inputs.valid_index())
    raw = json.dumps(INDEX_EDITS[what](doc)).encode()
    kind = check(bytes([inputs.MODE_INDEX]) + raw)
    assert (kind == "ok") == (
        what in ("valid", "extra", "meta_null", "no_meta", "no_total")
    )


@given(edits=byte_edits)
def test_index_byte_mutations_get_the_same_verdict(edits):
    """Bytes flipped, set, inserted or deleted in a valid index: the readers agree."""
    text = bytearray(inputs.valid_index())
    for op, where, b in edits:
        j = int(where * len(text))
        if op == "flip":
            text[j] ^= b or 0x80
        elif op == "set":
            text[j] = b
        elif op == "insert":
            text[j:j] = bytes([b])
        else:
            del text[j]
    check(bytes([inputs.MODE_INDEX]) + bytes(text))


def test_each_documented_official_difference_is_reached(tmp_path):
    """Each OFFICIAL_DIFFERENCES entry explains a refusal the official reader takes."""
    t = '{"dtype":"U8","shape":[1],"data_offsets":[0,1]}'
    cases = {
        ("duplicate", ""): [('"a"', t), ('"a"', t)],
        ("schema", "U+0000"): [('"a\\u0000"', t)],
        ("schema", "more than 8"): [
            ('"a"', '{"dtype":"U8","shape":[1,1,1,1,1,1,1,1,1],"data_offsets":[0,1]}')
        ],
        ("overflow", "48-bit"): [
            ('"a"', '{"dtype":"U8","shape":[281474976710656,0],"data_offsets":[0,0]}'),
            ('"b"', t),
        ],
    }
    seen = set()
    for (kind, phrase), members in cases.items():
        path = tmp_path / f"{kind}-{len(seen)}.safetensors"
        path.write_bytes(file_bytes(members, 1))
        mine = engine_verdict(path)
        assert mine.kind == kind and phrase in mine.message, mine
        assert compare_official(path, mine) == OFFICIAL_DIFFERENCES[(kind, phrase)]
        seen.add((kind, phrase))


# -- findings of the fuzz suite: the open ones fail until resolved (then drop ---
# -- them from OPEN_FINDINGS); the resolved ones stay as regression cases -------

_T = '{"dtype":"U8","shape":[1],"data_offsets":[0,1]}'
FINDING_CASES = {
    "oracle-48-bit-limit": (
        inputs.MODE_RAW,
        [
            ('"a"', '{"dtype":"U8","shape":[281474976710656,0],"data_offsets":[0,0]}'),
            ('"b"', _T),
        ],
        1,
    ),
    "oracle-8-dims": (
        inputs.MODE_RAW,
        [('"a"', '{"dtype":"U8","shape":[1,1,1,1,1,1,1,1,1],"data_offsets":[0,1]}')],
        1,
    ),
    "oracle-nul-name": (inputs.MODE_RAW, [('"a\\u0000"', _T)], 1),
    "oracle-field-twice": (inputs.MODE_RAW, [('"a"', _T[:-1] + ',"dtype":"U8"}')], 1),
    "oracle-metadata-duplicate": (
        inputs.MODE_RAW,
        [('"__metadata__"', '{"k":"1","k":"2"}'), ('"a"', _T)],
        1,
    ),
    "oracle-index-total-size": (inputs.MODE_INDEX, None, 0),
    "index-json-kind": (inputs.MODE_INDEX, None, 1),
    "index-shard-name-too-long": (inputs.MODE_INDEX, None, 2),
    "item-9-number-range": (inputs.MODE_RAW, [('"a"', _T[:-1] + ',"x":1e999}')], 1),
}


def finding_input(name: str) -> bytes:
    """The smallest input showing open finding ``name``."""
    mode, members, n = FINDING_CASES[name]
    if mode == inputs.MODE_INDEX:
        doc = json.loads(inputs.valid_index())
        if n == 0:
            del doc["metadata"]["total_size"]
            return bytes([mode]) + json.dumps(doc).encode()
        if n == 2:
            doc["weight_map"]["c.weight"] = "x" * 300 + ".safetensors"
            return bytes([mode]) + json.dumps(doc).encode()
        return bytes([mode]) + json.dumps(doc).encode()[:-1]
    return bytes([mode]) + file_bytes(members, n)


def test_every_open_finding_has_a_case():
    """Every open finding has its smallest input among the cases."""
    assert set(OPEN_FINDINGS) <= set(FINDING_CASES)


@pytest.mark.parametrize("name", sorted(set(FINDING_CASES) - set(OPEN_FINDINGS)))
def test_resolved_finding_agrees(name, tmp_path):
    """A resolved finding's input: every reader's verdict agrees, no exception."""
    check(finding_input(name))


def test_open_findings_are_real_and_still_open(tmp_path):
    """Each open finding's case is a disagreement only that finding explains.

    With ``OPEN_FINDINGS`` ignored its case must still fail the comparison; a
    finding that no longer does was resolved and leaves the table (its case
    then runs in ``test_resolved_finding_agrees``).
    """
    from xcache.hunt.fuzz import verdicts

    for name in sorted(OPEN_FINDINGS):
        path = inputs.materialise(finding_input(name), tmp_path / name)
        mine = engine_verdict(path)
        assert open_finding(mine, oracle_verdict(path)) == name or (
            open_finding(mine, official_verdict(path)) == name), name
        saved = dict(verdicts.OPEN_FINDINGS)
        verdicts.OPEN_FINDINGS.clear()
        try:
            with pytest.raises(AssertionError):
                check(finding_input(name))
        finally:
            verdicts.OPEN_FINDINGS.update(saved)
