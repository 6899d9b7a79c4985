"""The shipped example data, named instead of a path (``xcache.data``)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from xcache import data

ROOT = Path(__file__).resolve().parents[2]


def test_shipped_lists_every_file_of_each_kind() -> None:
    """Each kind lists exactly the files of its folder, by stem or folder name."""
    models = ROOT / "fixtures" / "models"
    assert data.shipped("model") == {
        p.stem: p for p in sorted([*models.glob("*.json"), *models.glob("*/*.json")])}
    # a nested config's description, in its folder, by its name too
    assert data.shipped("model")["dbrx-base"] == models / "nested" / "dbrx-base.json"
    assert sorted(data.shipped("trace")) == ["mixtral8x7b_humaneval", "olmoe_299"]
    assert data.shipped("cache") == {
        name: ROOT / "examples" / name
        for name in ("directcache", "fetchcache", "skeleton", "tinycache")}
    assert {"deepseek-v2-lite", "deepseek-v3", "gpt-oss-20b", "granite-3.0-1b-a400m",
            "mixtral-8x7b", "olmoe-1b-7b", "qwen2-moe-lm",
            "qwen3-next-80b-a3b"} <= set(data.shipped("model"))


@pytest.mark.parametrize(("kind", "arg", "want"), [
    ("model", "mixtral-8x7b", "fixtures/models/mixtral-8x7b.json"),
    ("model", "mixtral-8x7b.json", "fixtures/models/mixtral-8x7b.json"),
    ("trace", "olmoe_299", "fixtures/traces/olmoe_299.jsonl"),
    ("trace", "olmoe_299.jsonl", "fixtures/traces/olmoe_299.jsonl"),
    ("cache", "tinycache", "examples/tinycache"),
])
def test_a_name_that_is_no_path_resolves_to_the_shipped_item(
        kind: str, arg: str, want: str, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """From a folder where the name is nothing, it is the shipped item."""
    monkeypatch.chdir(tmp_path)
    assert data.resolve(kind, arg) == ROOT / want


def test_a_path_that_exists_wins_over_a_shipped_name(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A user's own file of the same name is what the argument names."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "mixtral-8x7b").write_text("{}")
    assert data.resolve("model", "mixtral-8x7b") == Path("mixtral-8x7b")


@pytest.mark.parametrize("arg", ["nope", "mixtral-8x7b.jsonl", "olmoe_299.json",
                                 "sub/olmoe_299.txt", "sub/olmoe_299",
                                 "sub/mixtral-8x7b"])
def test_anything_else_is_returned_as_given(arg: str, tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """An unknown name, a shipped stem with another suffix, or a name under a
    folder (a mistyped path) is left to the caller."""
    monkeypatch.chdir(tmp_path)
    kind = "model" if "mixtral" in arg or arg == "nope" else "trace"
    assert data.resolve(kind, arg) == Path(arg)


def test_the_hint_names_every_shipped_item_and_the_command() -> None:
    """The error hint lists the names and says how to find their paths."""
    assert data.hint("cache") == ("a shipped cache can be named instead of a path "
                                  "(directcache, fetchcache, skeleton, "
                                  "tinycache); `xcache-data` prints where "
                                  "they are")


def test_xcache_data_prints_every_kind_as_json(tmp_path: Path) -> None:
    """`xcache-data --json` maps each kind's names to existing paths."""
    p = subprocess.run([sys.executable, "-m", "xcache.data", "--json"],
                       cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    got = json.loads(p.stdout)
    assert sorted(got) == ["cache", "model", "trace"]
    assert got["trace"]["olmoe_299"] == str(ROOT / "fixtures/traces/olmoe_299.jsonl")
    assert all(Path(v).exists() for k in got.values() for v in k.values())


def test_a_missing_description_names_the_shipped_ones(tmp_path: Path) -> None:
    """xcache-fixtures checkpoint on a missing name: one line with the hint, exit 2."""
    p = subprocess.run([sys.executable, "-m", "xcache.fixtures", "checkpoint",
                        "mixtral", "out"], cwd=tmp_path, capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 2
    assert p.stderr == f"error: mixtral: no such file; {data.hint('model')}\n"
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("lab", ["lab", "predict", "time"])
def test_a_lab_takes_a_shipped_trace_by_name_and_names_them_when_missing(
        lab: str, tmp_path: Path) -> None:
    """Each lab resolves a shipped trace's name; a missing TRACE is one line, exit 2."""
    from xcache.replay import main

    p = subprocess.run([sys.executable, "-m", "xcache.replay", lab, "nope",
                        str(tmp_path / "out")], cwd=tmp_path, capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 2
    assert p.stderr == (f"replay.py {lab}: TRACE nope: no such file; "
                        f"{data.hint('trace')}\n")
    assert not (tmp_path / "out").exists()
    opts = {"lab": ["--policies", "lru", "--slots", "8", "--quiet"],
            "predict": ["--quiet"], "time": ["--tokens", "20", "--quiet"]}[lab]
    assert main([lab, "olmoe_299", str(tmp_path / "ok"), *opts]) == 0
    assert sorted(p.name for p in (tmp_path / "ok").iterdir()) == {
        "lab": ["mrc.png", "results.csv", "results.json"],
        "predict": ["predict.csv", "predict.json", "predict.png"],
        "time": ["time.csv", "time.json", "time.png", "time_layers.csv"]}[lab]
