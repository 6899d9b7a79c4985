"""bench/handoff.py: both tables are printed, every arm beside its baseline."""

from __future__ import annotations

import re

from bench.handoff import main


def test_handoff_bench_prints_every_arm_beside_its_baseline(capsys):
    """One short round: the plain path, three split arms with their ratios,
    the own read and six idle times with theirs, and the load lines."""
    assert main(["--steps", "12", "--rounds", "1"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 1 + 1 + 3 + 1 + 6 + 1
    assert lines[1].startswith("round 1: plain path (T=3, the consumer's reads): step ")
    arms = [re.match(r"  split stream, (\d) reader\(s\), T=(\d): step [\d.]+ us "
                     r"\([\d.]+x\), begin [\d.]+, first expert [\d.]+ "
                     r"\([\d.]+x the own read\)$", ln) for ln in lines[2:5]]
    assert [m.groups() for m in arms] == [("1", "1"), ("2", "1"), ("2", "2")]
    assert lines[5].startswith("  own read of a missing key (no readers): ")
    idles = [re.match(r"  prefetch then get after +(\d+) us idle: +[\d.]+ us "
                      r"\([\d.]+x the own read\)$", ln) for ln in lines[6:12]]
    assert [int(m.group(1)) for m in idles] == [0, 10, 20, 40, 100, 1000]
    assert lines[-1].startswith("load ")
