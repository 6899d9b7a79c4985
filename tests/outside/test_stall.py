"""A ``stall`` fault needs ``op:concurrent``: on a cache without concurrent
calls its checks are N/A naming it, never a ValueError at the inject."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import bad_adapter
from xcache.gate import CannotRun
from xcache.gate.containers import make_target
from xcache.gate.outside.backend import capabilities_of
from xcache.gate.outside.build import load_manifest
from xcache.gate.scenarios import scenario_files
from xcache.gate.steps import compile_steps

ROOT = Path(__file__).resolve().parents[2]


def test_every_stall_step_needs_concurrent_calls(tmp_path: Path) -> None:
    """Each inject stall of the shipped scenarios needs op:concurrent, which
    tinycache lacks; its other injects do not."""
    caps = capabilities_of(load_manifest(ROOT / "examples" / "tinycache"))
    target = make_target("k3-mini", tmp_path)
    stalls = others = 0
    for _, sc in scenario_files(["stalled-reads", "reads-under-way",
                                 "faults-io"]):
        for step in compile_steps(sc, target):
            if step.get("op") != "inject":
                continue
            if step["fault"] == "stall":
                stalls += 1
                assert "op:concurrent" in step["needs"]
                assert caps.missing(step["needs"]) == ["op:concurrent"]
            else:
                others += 1
                assert "op:concurrent" not in step.get("needs", [])
    assert stalls >= 2 and others == 6


def test_a_manifest_declaring_concurrent_calls_is_refused(tmp_path: Path
                                                          ) -> None:
    """op:concurrent in a manifest: CannotRun saying the shim has none."""
    a = bad_adapter(tmp_path, "#include <string.h>\n", "#include <string.h>\n",
                    ('"reset_stats", "check"]', '"reset_stats", "check", '
                                                '"concurrent"]'))
    with pytest.raises(CannotRun, match="op:concurrent cannot be judged on "
                                        "an outside cache"):
        capabilities_of(load_manifest(a))
