"""The layout rules the engine's detection asks are pinned with the engine:
a change to them is a change to what the engine serves (gate/pins.py)."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest

from xcache.gate import CannotRun, pins

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("name", ["layout_rules.py", "layout_config.py"])
def test_the_layout_rules_are_pinned_by_their_name(name: str):
    """pins.json holds the digest of each half of the rules, the file's own."""
    got = json.loads((ROOT / "engine" / "pins.json").read_text())["sha256"]
    rules = ROOT / "xcache" / name
    assert got[f"xcache/{name}"] == hashlib.sha256(rules.read_bytes()).hexdigest()
    assert pins.current_digests(ROOT / "engine")[f"xcache/{name}"] \
        == got[f"xcache/{name}"]


def test_a_changed_rule_set_stops_the_replay_until_repinned(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A rule set edited after the pins is 'changed' and the replay refuses;
    --repin takes it in, naming it."""
    engine = tmp_path / "engine"
    shutil.copytree(ROOT / "engine", engine,
                    ignore=shutil.ignore_patterns("*.so", "__pycache__"))
    rules = tmp_path / "layout_rules.py"
    shutil.copyfile(ROOT / "xcache" / "layout_rules.py", rules)
    shared = {**pins.shared_files(), "xcache/layout_rules.py": rules}
    monkeypatch.setattr(pins, "shared_files", lambda: shared)
    assert pins.verify_pins(engine) == len(pins.current_digests(engine))
    rules.write_text(rules.read_text() + "\n# a new rule\n")
    with pytest.raises(CannotRun) as e:
        pins.verify_pins(engine)
    assert "  changed   xcache/layout_rules.py" in str(e.value)
    assert pins.repin(engine) == ["changed xcache/layout_rules.py"]
    assert pins.verify_pins(engine) > 0
