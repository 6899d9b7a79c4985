"""The differential check tensor-reads: Container.read in every mode vs the oracle."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from xcache.gate import tensor_reads
from xcache.gate.report import Report

pytestmark = pytest.mark.nosan  # runs the gate's own check, not the C core


def test_every_tensor_of_every_preset_reads_as_the_oracles(tmp_path: Path) -> None:
    """The engine passes: one check line counting every read of every mode."""
    from xcache import engine
    from xcache.gate.containers import make_target
    from xcache.oracle.reads import probe_direct
    from xcache.oracle.safetensors import Container

    report = Report()
    assert tensor_reads.run_checks(engine, tmp_path, report) == ["tensor-reads"]
    reads, direct = 0, True
    for ref in tensor_reads.PRESETS:
        folder = make_target(ref, tmp_path).pristine
        shard = min(p for p in folder.iterdir() if p.name.endswith(".safetensors"))
        ok = bool(probe_direct(str(shard)))
        direct = direct and ok
        reads += (3 if ok else 2) * len(Container(folder).names())
    tiny = tmp_path / "tensor-reads-tiny" / "model.safetensors"
    assert tiny.stat().st_size < 4096  # smaller than one O_DIRECT block
    reads += (3 if probe_direct(str(tiny)) else 2) * 3
    modes = "plain, verify, direct" if direct else "plain, verify"
    assert report.checks == [{
        "scenario": "tensor-reads", "backend": "engine", "check": "tensor-reads",
        "passed": True, "expected": 0, "actual": 0,
        "detail": f"{reads} tensor reads of 6 containers ({modes}), every byte "
                  "the oracle's"}]


class _Flipped:
    """An engine Container whose reads of one tensor come back with byte 5 flipped."""

    def __init__(self, path: str, **kwargs: Any) -> None:
        from xcache import engine

        self._inner = engine.Container(path, **kwargs)
        self._direct = kwargs.get("direct", False)

    def read(self, name: str) -> Any:
        """The tensor, one byte wrong when read with O_DIRECT."""
        import numpy as np

        data = self._inner.read(name).tobytes()
        if self._direct:
            data = data[:5] + bytes([data[5] ^ 1]) + data[6:]
        return np.frombuffer(data, dtype=np.uint8)

    def close(self) -> None:
        """Close the real container."""
        self._inner.close()


def test_a_wrong_byte_in_one_mode_is_named(tmp_path: Path) -> None:
    """A reader wrong only through O_DIRECT fails the check, naming the container,
    the mode, the tensor and the byte."""
    from xcache.gate.containers import make_target
    from xcache.oracle.safetensors import Container

    folder = make_target("k3-mini", tmp_path).pristine
    first = Container(folder).names()[0]
    fake = SimpleNamespace(Container=_Flipped)
    read, wrong = tensor_reads.compare(fake, folder, direct_ok=True)
    n = len(Container(folder).names())
    assert read == 3 * n and len(wrong) == n
    assert wrong[0].startswith(f"{folder.name} direct {first}: byte 5 is ")
