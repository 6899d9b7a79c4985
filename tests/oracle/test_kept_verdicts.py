"""The oracle reader's kept verdicts: keyed by the bytes judged, never stale,
bounded, and the bracket scan's escaped quotes against a step-by-step count."""

from __future__ import annotations

import json
import os
import random
import shutil

import numpy as np
import pytest

from tests.helpers import official_save_file
from xcache.oracle.errors import OracleFormatError
from xcache.oracle.kept import Kept
from xcache.oracle.safetensors import Container
from xcache.oracle.strict_json import _escaped, _too_deep

_S1, _S2 = "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"


def _folder(folder, z_dtype=np.uint16) -> None:
    """Two shards and an index over them (x, y in the first, z in the second)."""
    folder.mkdir(parents=True, exist_ok=True)
    official_save_file({"x": np.arange(4, dtype=np.int32),
                        "y": np.ones(3, np.float64)}, str(folder / _S1))
    official_save_file({"z": np.arange(6, dtype=z_dtype)}, str(folder / _S2))
    wmap = {"x": _S1, "y": _S1, "z": _S2}
    (folder / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {}, "weight_map": wmap}))


def test_kept_drops_the_least_recent_past_its_bounds() -> None:
    """Entries past the count or weight bound go oldest first; a get refreshes."""
    kept = Kept(3, max_weight=10)
    for k in "abc":
        kept.put(k, k.upper(), 2)
    assert kept.get("a") == "A"  # now the most recent: b is the oldest
    kept.put("d", "D", 2)
    assert (kept.get("b"), len(kept)) == (None, 3)
    kept.put("e", "E", 7)  # 2 + 2 + 7 > 10 and 3 entries: c, a go
    assert [kept.get(k) for k in "acde"] == [None, None, "D", "E"]
    kept.put("f", "F", 11)  # heavier than the bound: not kept, nothing dropped
    assert (kept.get("f"), len(kept)) == (None, 2)


def test_a_second_folder_shares_the_tables_of_the_same_bytes(tmp_path) -> None:
    """Two opens of one folder share the tensor table; a copy elsewhere names
    its own shards."""
    _folder(tmp_path / "a")
    first, again = Container(tmp_path / "a"), Container(tmp_path / "a")
    assert first._tensors is again._tensors
    shutil.copytree(tmp_path / "a", tmp_path / "b")
    other = Container(tmp_path / "b")
    assert [t.shard for t in other.tensors()] == [
        str(tmp_path / "b" / s) for s in (_S1, _S1, _S2)]
    assert other.tensor("z").offset == first.tensor("z").offset == 64


def test_a_header_rewritten_in_place_is_judged_again(tmp_path) -> None:
    """A shard changed at the same path, size and mtime is read anew, not kept."""
    _folder(tmp_path)
    shard = tmp_path / _S2
    before = os.stat(shard)
    assert Container(tmp_path).tensor("z").dtype == "U16"
    _folder(tmp_path, z_dtype=np.int16)  # I16: the same length of header
    os.utime(shard, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert os.stat(shard).st_size == before.st_size
    assert Container(tmp_path).tensor("z").dtype == "I16"


def test_a_refusal_is_not_kept(tmp_path) -> None:
    """An index opened, then broken, then mended: refused once, opened again."""
    _folder(tmp_path)
    index = tmp_path / "model.safetensors.index.json"
    good = index.read_text()
    Container(tmp_path)
    index.write_text(good.replace('"z": "', '"w": "'))
    with pytest.raises(OracleFormatError) as info:
        Container(tmp_path)
    assert info.value.detail == f"'w' is mapped to {_S2!r} but found in None"
    index.write_text(good)
    # the writer put y (F64) first
    assert Container(tmp_path).names() == ["y", "x", "z"]


def _escaped_by_steps(raw: bytes, q: int) -> bool:
    """Whether an odd run of backslashes ends just before raw[q], counted back."""
    k = q - 1
    while k >= 0 and raw[k] == ord("\\"):
        k -= 1
    return (q - 1 - k) % 2 == 1


def test_escaped_quotes_agree_with_a_step_by_step_count() -> None:
    """Runs of 0 to 5 backslashes before quotes, at the start and the end."""
    rng = random.Random(7)
    for _ in range(500):
        raw = "".join(rng.choice(['"', "\\", "\\\\", "a", "[", "\\\\\\"])
                      for _ in range(rng.randint(1, 60))).encode()
        arr = np.frombuffer(raw, np.uint8)
        quotes = np.flatnonzero(arr == ord('"'))
        assert _escaped(arr, quotes).tolist() == [
            _escaped_by_steps(raw, int(q)) for q in quotes]


def test_an_escaped_quote_run_does_not_end_the_string() -> None:
    """Brackets after \\\\\\" stay inside the string; after \\\\" they count."""
    deep = "[" * 128
    inside = '["\\\\\\"' + deep + '"]'  # \\\" : an escaped quote, still a string
    assert _too_deep(inside) == -1
    outside = '["\\\\"' + deep  # \\" : the string ends, the brackets count
    assert _too_deep(outside) == len('["\\\\"') + 126
