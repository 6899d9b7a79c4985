"""The time lab's printed table: one unit (ms per token) in the table, its
legend and its notes; every abbreviated column explained; and why a
lookahead can be slower than none -- its prefetch calls' compute against
the wait left to remove -- said with the run's own numbers."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.helpers import TRACES_DIR
from xcache import replay
from xcache.lab.timing.cli import LEGEND, lookahead_notes, print_table

OLMOE = str(TRACES_DIR / "olmoe_299.jsonl")
INFO = {"name": "t.jsonl", "tokens": 299, "steps": 4784, "layers": 16,
        "experts": 64, "top_k": 8}


def row(config: str, predictor: str, split: int, ms: tuple[float, float, float],
        misses: int, spec: int) -> dict[str, Any]:
    """A result row at lru 244, one reader: ``ms`` = compute, wait, hidden per token."""
    compute, wait, hidden = (v / 1e3 for v in ms)
    return {"config": config, "policy": "lru", "slots": 244, "threads": 1,
            "depth": 64, "split": split, "predictor": predictor,
            "expert_s": 5e-5, "expert_bytes": 131072, "page_cache_share": 0.0,
            "misses": misses, "miss_ratio": misses / 38272, "spec_issued": spec,
            "s_per_token": compute + wait, "tok_per_s": 1 / (compute + wait),
            "compute_s": compute, "wait_s": wait, "hidden_s": hidden,
            "wasted_s": 0.0}


def olmoe_rows() -> list[dict[str, Any]]:
    """The shipped olmoe run's rows at 244 slots, one reader, T 1 and 3."""
    return [row("lru 244 ra1 T=1", "none", 1, (8.256, 0.017, 2.726), 17184, 0),
            row("lru 244 ra1 T=3", "none", 3, (8.256, 0.331, 2.411), 17184, 0),
            row("lru 244 ra1 T=1 +previous", "previous", 1, (8.256, 0.017, 2.726),
                17184, 0),
            row("lru 244 ra1 T=1 +oracle", "oracle", 1, (8.370, 0.0, 2.750), 122,
                17107),
            row("lru 244 ra1 T=3 +oracle", "oracle", 3, (8.370, 0.017, 2.733), 122,
                17107)]


def test_footer_and_table_speak_one_unit(capsys):
    """The header's times are ms/tok and the legend calls every time ms per token."""
    print_table(INFO, olmoe_rows())
    lines = capsys.readouterr().out.splitlines()
    assert lines[1].split() == ["configuration", "misses", "ratio", "spec", "ms/tok",
                                "tok/s", "compute", "wait", "hidden", "wasted"]
    assert lines[2].split() == ["lru", "244", "ra1", "T=1", "17184", "0.449", "0",
                                "8.273", "120.9", "8.256", "0.017", "2.726", "0.000"]
    footer = lines[len(olmoe_rows()) + 2:]
    assert footer[0] == "columns (every time is ms per token; ms/tok = compute + wait):"
    assert not any("seconds" in line for line in footer)
    assert not any(" s " in f" {line} " for line in footer)


def test_every_column_is_in_the_legend():
    """Each column of the header, abbreviated or not, has its legend line."""
    said = " ".join(LEGEND)
    for column in ("misses", "ratio", "spec", "ms/tok", "tok/s", "compute", "wait",
                   "hidden", "wasted"):
        assert f"  {column}  " in said or f"  {column} " in said, column
    for part in ("sync", "raN", "T=n", "D=n", "+P", "pc=F"):
        assert part in said, part


def test_lookahead_notes_give_the_oracle_rows_numbers():
    """+oracle slower at T=1: 17,107 prefetches cost 0.114 ms/tok, wait was 0.017."""
    notes = lookahead_notes(olmoe_rows(), 299)
    assert notes == [
        "+previous issued no speculative read (it guessed only experts already "
        "resident), so its rows equal those without a lookahead.",
        "+oracle is slower than no lookahead in 1 of 2 configurations, most in "
        "lru 244 ra1 T=1: 8.370 against 8.273 ms/tok (+0.097). Its 17,107 "
        "prefetches cost 0.114 ms/tok more compute (2.0 us each), while the wait "
        "they removed was 0.017 ms/tok: the read-ahead had already hidden those "
        "misses under compute (2.726 ms/tok hidden). A lookahead pays where wait "
        "is left to remove (a higher T, a slower disk), not where read-ahead "
        "leaves none."]
    faster = [r for r in olmoe_rows() if r["split"] == 3]
    assert lookahead_notes(faster, 299) == []


def test_oracle_extra_compute_is_its_prefetch_calls(tmp_path):
    """On olmoe, +oracle's extra compute is access_s per prefetched key, exactly."""
    out = tmp_path / "o"
    assert replay.main(["time", OLMOE, str(out), "--tokens", "60", "--slots", "244",
                        "--threads", "1", "--split", "1", "--predictors",
                        "none,oracle", "--executor", "thread", "--quiet"]) == 0
    data = json.loads((out / "time.json").read_text())
    base, oracle = data["results"]
    assert (base["predictor"], oracle["predictor"]) == ("none", "oracle")
    access_s = data["model"]["compute"]["access_s"]
    assert access_s == 2e-6
    assert oracle["compute_s"] - base["compute_s"] == pytest.approx(
        oracle["spec_issued"] * access_s / 60, rel=1e-9)
    # the wait it removes is less than the calls cost: slower, and the note says so
    assert oracle["wait_s"] < base["wait_s"]
    assert oracle["s_per_token"] > base["s_per_token"]
    assert data["notes"] == lookahead_notes(data["results"], 60)
    assert len(data["notes"]) == 1 and data["notes"][0].startswith(
        "+oracle is slower than no lookahead in 1 of 1 configurations")
