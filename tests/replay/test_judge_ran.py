"""A step the judge ran that a candidate engine cannot run is that engine's
failed check, never CANNOT RUN (gate/scenario_run.py)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.nosan  # runs the replay tool, not the C core

ROOT = Path(__file__).resolve().parents[2]


def test_a_step_the_engines_state_stops_is_a_failed_check(tmp_path: Path) -> None:
    """S3-FIFO starting its M pass one key early leaves key (0, 1) evicted
    where check-cross-s3fifo's break_check names it: FAIL on the engine,
    naming the step, where the gate said CANNOT RUN before."""
    eng = tmp_path / "engine"
    shutil.copytree(ROOT / "engine", eng,
                    ignore=shutil.ignore_patterns("*.so", "__pycache__"))
    src = eng / "csrc" / "xc_policy_s3fifo.c"
    text = src.read_text()
    old = "return q->q[W_M].n > q->m_target || q->q[W_S].n == 0;"
    assert text.count(old) == 1
    src.write_text(text.replace(old, old.replace(" > ", " >= ")))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    py = sys.executable
    subprocess.run([py, "replay.py", "--engine-src", str(eng), "--repin"],
                   cwd=ROOT, env=env, check=True, capture_output=True)
    proc = subprocess.run(
        [py, "replay.py", "--engine-src", str(eng), "--no-programs",
         "--scenario", "check-cross-s3fifo", str(tmp_path / "out")],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "CANNOT RUN" not in proc.stdout + proc.stderr
    assert ("step 3 (break_check) cannot run on this backend, though the "
            "judge ran it") in proc.stdout
    assert "which holds no slot" in proc.stdout
