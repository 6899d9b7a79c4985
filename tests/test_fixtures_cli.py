"""`python -m fixtures`: new, verify and identify from the command line."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from fixtures.__main__ import main

ROOT = Path(__file__).resolve().parents[1]


def test_new_prints_a_summary_and_refuses_to_overwrite(tmp_path, capsys):
    """`new` prints one summary line; a second run needs --force."""
    out = tmp_path / "k3"
    assert main(["new", "k3-mini", str(out)]) == 0
    line = capsys.readouterr().out.strip()
    assert line.count("\n") == 0
    assert "144 tensors" in line and "1,632 bytes per expert" in line
    assert "59,776 B" in line
    assert main(["new", "k3-mini", str(out)]) == 2
    assert "force" in capsys.readouterr().err
    assert main(["new", "k3-mini", str(out), "--force"]) == 0


def test_new_from_a_spec_file_and_bad_spec(tmp_path, capsys):
    """`new` takes a TOML spec; an invalid one exits 2 naming the field."""
    assert main(["new", str(ROOT / "fixtures/specs/example.toml"),
                 str(tmp_path / "ex")]) == 0
    bad = tmp_path / "bad.toml"
    bad.write_text('layers = 2\nexperts = 4\nlayout = "zigzag"\n')
    assert main(["new", str(bad), str(tmp_path / "b")]) == 2
    assert "'layout'" in capsys.readouterr().err
    assert main(["new", "no-such-preset", str(tmp_path / "c")]) == 2


def test_verify_exit_codes_and_identify(tmp_path, capsys):
    """verify exits 0 on a clean container and 1 naming a corrupted tensor."""
    out = tmp_path / "m"
    main(["new", "mixtral-mini", str(out)])
    assert main(["verify", str(out)]) == 0
    assert "OK" in capsys.readouterr().out
    shard = out / "model-00002-of-00003.safetensors"
    raw = bytearray(shard.read_bytes())
    raw[-3] ^= 0xFF
    shard.write_bytes(bytes(raw))
    assert main(["verify", str(out)]) == 1
    text = capsys.readouterr().out
    assert "FAIL: 1 problem" in text and "byte" in text
    assert main(["identify", str(out), str(shard), "--offset", "30000",
                 "--length", "40"]) == 0
    assert "expert" in capsys.readouterr().out


def test_module_entry_point_runs(tmp_path):
    """`python -m fixtures new` works as a subprocess."""
    r = subprocess.run([sys.executable, "-m", "fixtures", "new", "deepseek-mini",
                        str(tmp_path / "d")], capture_output=True, text=True,
                       cwd=ROOT, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("deepseek-mini: 303 tensors")
