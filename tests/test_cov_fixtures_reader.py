"""The fixtures reader's own header checks and spec lookup, each with its sentence."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

import fixtures
from fixtures.layout import INDEX_NAME
from fixtures.reader import ContainerError, container_spec, read_header, resolve_spec


def _write(p: Path, raw: bytes) -> Path:
    p.write_bytes(raw)
    return p


@pytest.mark.parametrize("raw,message", [
    (b"\x01\x02", "shorter than 8 bytes"),
    (struct.pack("<Q", 100_000_001), "header length 100000001 above the limit"),
    (struct.pack("<Q", 50) + b"{}", "header of 50 bytes runs past the end (10 bytes)"),
    (struct.pack("<Q", 2) + b"\xff\xfe", "header is not UTF-8 JSON: 'utf-8' codec "
     "can't decode byte 0xff in position 0: invalid start byte"),
    (struct.pack("<Q", 3) + b"[1]", "header is not a JSON object"),
])
def test_read_header_refusals(tmp_path, raw, message):
    """Each malformed prefix or header is ContainerError naming the file."""
    p = _write(tmp_path / "t.safetensors", raw)
    with pytest.raises(ContainerError) as ei:
        read_header(p)
    assert str(ei.value) == f"{p}: {message}"


def test_container_spec_lookup_failures(tmp_path):
    """No stored spec, a broken index, or a folder of two shards: ContainerError."""
    plain = _write(tmp_path / "plain.safetensors", struct.pack("<Q", 2) + b"{}")
    with pytest.raises(ContainerError) as ei:
        container_spec(plain)
    assert str(ei.value) == f"{plain}: no xcache.spec stored (not a fixture?)"
    folder = tmp_path / "two"
    folder.mkdir()
    for n in ("a", "b"):
        _write(folder / f"{n}.safetensors", struct.pack("<Q", 2) + b"{}")
    with pytest.raises(ContainerError) as ei:
        container_spec(folder)
    assert str(ei.value) == f"{folder}: no {INDEX_NAME} and 2 shard files"
    (folder / INDEX_NAME).write_text("[1, 2]")
    with pytest.raises(ContainerError) as ei:
        container_spec(folder)
    assert str(ei.value) == (f"{folder / INDEX_NAME}: not an index: 'list' "
                             "object has no attribute 'get'")


def test_resolve_spec_from_path_preset_or_nothing(tmp_path):
    """A container path or preset name gives its spec; anything else is ValueError."""
    out = tmp_path / "k3"
    fixtures.generate("k3-mini", out)
    assert resolve_spec(out) == resolve_spec("k3-mini") == fixtures.preset("k3-mini")
    with pytest.raises(ValueError) as ei:
        resolve_spec("no-such-preset")
    assert str(ei.value) == ("'no-such-preset' is neither a container path nor "
                             "a preset")
    spec = json.loads(json.dumps(fixtures.preset("k3-mini").to_dict()))
    assert fixtures.load_spec(spec) == fixtures.preset("k3-mini")
