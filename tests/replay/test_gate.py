"""replay.py gates engine changes: digests, build, scenarios, exit codes."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.nosan  # runs the replay tool, not the C core

# The one-line bug of the gate's proof: publish a slot even when its read
# came back short (the silent bug a truncated shard must expose).
_PUBLISH = "    if (rc == XC_OK) {\n        s->state = XC_SLOT_READY;"
_PUBLISH_SHORT = ("    if (rc == XC_OK || rc == XC_E_SHORT_READ) {\n"
                  "        s->state = XC_SLOT_READY;")


def _replay(*args: str) -> subprocess.CompletedProcess[str]:
    """Run replay.py in a fresh interpreter and capture its output."""
    return subprocess.run([sys.executable, str(ROOT / "replay.py"), *args],
                          capture_output=True, text=True, timeout=600)


def _candidate(tmp_path: Path) -> Path:
    """A copy of this checkout's engine tree, as another checkout would hold it."""
    cand = tmp_path / "candidate"
    shutil.copytree(ROOT / "engine", cand / "engine",
                    ignore=shutil.ignore_patterns("*.so", "_xc.c",
                                                  "__pycache__", "*.o"))
    return cand


def _plant(cand: Path, old: str, new: str) -> None:
    """Replace exactly one occurrence of old by new in the candidate's slot life."""
    src = cand / "engine" / "csrc" / "xc_slot.c"
    text = src.read_text()
    assert text.count(old) == 1, "the planted bug's anchor moved"
    src.write_text(text.replace(old, new))


def test_pinned_tree_passes_every_scenario(tmp_path):
    """This checkout verifies, builds and passes, with a JSON of every check."""
    report = tmp_path / "report.json"
    p = _replay(str(tmp_path / "out"), "--json", str(report))
    assert p.returncode == 0, p.stdout + p.stderr
    n_pins = len(json.loads((ROOT / "engine" / "pins.json").read_text())["sha256"])
    assert f"Verified {n_pins} pinned source digests" in p.stdout
    data = json.loads(report.read_text())
    assert data["passed"] is True
    assert all(c["passed"] for c in data["checks"])
    assert {c["backend"] for c in data["checks"]} == {"engine", "oracle"}
    names = {c["check"] for c in data["checks"]}
    assert {"serial reads are byte-exact", "batch_before_get",
            "truncated_shard publishes nothing",
            "unconsumed_schedule (4 KiB chunks)"} <= names
    # one line per scenario file and one for the programs, each naming its
    # home container, then the verdict naming them and the engine build
    from xcache.gate.pins import build_id
    from xcache.gate.programs import load_programs

    folder = ROOT / "gate" / "scenarios"
    scenarios = [json.loads(f.read_text()) for f in sorted(folder.glob("*.json"))
                 if f.name != "programs.json"]
    plan = load_programs(folder / "programs.json")
    on = list(dict.fromkeys(r["container"] for r in plan))
    homes = ", ".join(dict.fromkeys([sc["container"] for sc in scenarios] + on))

    def passed(name: str) -> int:
        return sum(c["scenario"].split(" (")[0] == name for c in data["checks"])

    def na(name: str) -> int:
        return sum(c["scenario"].split(" (")[0] == name
                   for c in data["not_applicable"])

    differential = ("reader-diff-headers", "reader-diff-indexes",
                    "reader-diff-sweeps", "sim-counts", "sim-curves",
                    "open-nomem",
                    "open-leaks", "open-params", "open-c-face", "open-messages",
                    "tensor-reads")
    lines = p.stdout.splitlines()
    assert lines[2:-1] == [
        f"{sc['name']:<22} on {sc['container']:<14}  PASS "
        f"{passed(sc['name']):>3}  FAIL 0  N/A {na(sc['name'])}"
        for sc in scenarios
    ] + [f"{'programs':<22} on {f'{len(on)} containers':<14}  PASS "
         f"{len(plan):>3}  FAIL 0  N/A 0",
         f"{'differential':<22} on {'own inputs':<14}  PASS "
         f"{sum(passed(d) for d in differential):>3}  FAIL 0  N/A 0"]
    pins = json.loads((ROOT / "engine" / "pins.json").read_text())["sha256"]
    n_variants = len(data["scenarios"]) - len(plan)
    assert lines[-1].startswith(
        f"PASS: {len(scenarios)} scenarios ({n_variants} variants), "
        f"{len(plan)} programs, {len(differential)} differential runs, "
        f"{len(data['checks'])} checks, {len(data['not_applicable'])} N/A on "
        f"their home containers ({homes}), engine build {build_id(pins)}; "
        "scenarios ")
    assert lines[0] == (f"Verified {n_pins} pinned source digests (engine "
                        f"build {build_id(pins)})")
    assert not (tmp_path / "out" / "replay-work").exists()  # cleaned up


def test_planted_short_read_bug_is_caught(tmp_path):
    """A publish-on-short-read bug fails the digests (2), then the scenarios (1)."""
    cand = _candidate(tmp_path)
    _plant(cand, _PUBLISH, _PUBLISH_SHORT)
    out = str(tmp_path / "out")

    p = _replay("--engine-src", str(cand), out)
    assert p.returncode == 2
    assert p.stderr.startswith("CANNOT RUN: pinned source digests do not match ")
    assert "changed csrc/xc_slot.c; re-pin deliberately" in p.stderr
    assert p.stderr.count("\n") == 1  # one line; the list is on stdout
    assert "  changed   csrc/xc_slot.c" in p.stdout
    assert "Built" not in p.stdout  # never built

    p = _replay("--engine-src", str(cand), "--repin")
    assert p.returncode == 0 and "changed csrc/xc_slot.c" in p.stdout

    p = _replay("--engine-src", str(cand), out, "--keep")
    assert p.returncode == 1, p.stdout + p.stderr
    lines = p.stdout.splitlines()
    failing = [ln for ln in lines if ln.startswith("  FAIL")]
    assert any("truncated_shard publishes nothing [engine]" in ln
               for ln in failing)
    assert not any("[oracle]" in ln for ln in failing)
    # without -v a failed check is printed in full: every differing value,
    # unabridged, under its line; its scenario's line counts it
    at = next(i for i, ln in enumerate(lines)
              if ln.startswith("  FAIL  truncated_shard publishes nothing [engine]"))
    assert lines[at + 1:at + 7] == [
        "        ready_slots: expected 1, actual 5",
        "        resident: expected [[0, 0]], actual [[0, 0], [0, 20], [0, 21], "
        "[0, 22], [0, 23]]",
        "        load_failures: expected 4, actual 0",
        "        short_reads: expected 4, actual 0",
        "        prefetch_loads: expected 0, actual 4",
        "        payload_bytes: expected 1632, actual 8160"]
    assert (f"{'counter-window':<22} on k3-mini         PASS  39  FAIL 9  N/A 0"
            in lines)
    assert not any(ln.startswith("  PASS") for ln in lines)
    assert lines[-1].startswith("FAIL: ")
    assert (tmp_path / "out" / "replay-work" / "build").is_dir()  # --keep


def test_build_failure_exits_2_with_the_compiler_message(tmp_path):
    """A candidate that does not compile cannot run, and says why."""
    cand = _candidate(tmp_path)
    _plant(cand, _PUBLISH, "    if (rc == XC_OK) {{\n        s->state = XC_SLOT_READY;")
    assert _replay("--engine-src", str(cand), "--repin").returncode == 0
    p = _replay("--engine-src", str(cand), str(tmp_path / "out"))
    assert p.returncode == 2
    assert "engine build failed" in p.stderr and "error:" in p.stderr


def test_bad_arguments_exit_2(tmp_path):
    """No folder, an unknown option or a missing engine tree cannot run."""
    assert _replay().returncode == 2
    assert _replay("--no-such-option", str(tmp_path)).returncode == 2
    p = _replay("--engine-src", str(tmp_path / "nowhere"), str(tmp_path))
    assert p.returncode == 2 and "no engine tree there" in p.stderr
    p = _replay(str(tmp_path / "out"), "--scenario", "no-such-scenario")
    assert p.returncode == 2 and "no scenarios found" in p.stderr
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    p = _replay(str(blocker / "out"))  # a folder that cannot be made
    assert p.returncode == 2 and "CANNOT RUN" in p.stderr
    assert "Traceback" not in p.stderr
    p = _replay(str(tmp_path / "out"), "--scenario", "faults-alloc",
                "--json", str(blocker / "r.json"))
    # refused before the run, by the one writer (fixtures.ownership)
    assert (p.returncode, p.stderr) == (2, f"CANNOT RUN: --json {blocker / 'r.json'}: "
                                        f"{blocker} is not a folder\n")


# -- the every-policy scenario ----------------------------------------------

_EVERY = ROOT / "gate" / "scenarios" / "policies-mixtral-mini.json"


def _variant_policies(scenario: dict) -> list[str]:
    """The policy names (without parameters) the scenario's variants run."""
    return [v["cache"]["policy"].split(":")[0] for v in scenario["variants"]]


def _c_table_policies() -> list[str]:
    """The policies of the C library's table, through its public functions."""
    from xcache.engine import _lib

    return list(_lib.policy_table())


def test_every_policy_scenario_runs_every_policy():
    """The every-policy scenario runs each oracle and C policy: pinned or derived."""
    from xcache.engine.sim import POLICIES as SIM_POLICIES
    from xcache.gate import scenarios as gate_scenarios
    from xcache.oracle.cache import POLICIES as ORACLE_POLICIES

    scenario = json.loads(_EVERY.read_text())
    assert scenario["title"].startswith("every policy")
    assert scenario["every_policy"] is True
    pinned = _variant_policies(scenario)
    assert len(pinned) == len(set(pinned))
    assert {"lru", "fifo", "lfu", "lfru", "hotness", "s3fifo", "arc"} <= set(pinned)
    offered = gate_scenarios.offered_policies()
    missing = gate_scenarios.missing_policies(scenario, offered)
    assert sorted([*pinned, *missing]) == sorted(ORACLE_POLICIES)
    assert set(offered) == set(_c_table_policies()) == set(SIM_POLICIES) - {"belady"}
    assert [v["suffix"] for v in gate_scenarios.derived_variants(scenario, missing)
            ] == [f" ({p}, from the oracle)" for p in missing]


def _without_arc(tmp_path, monkeypatch) -> dict:
    """The every-policy scenario without its pinned arc variant, as the only one."""
    from xcache.gate import scenarios as gate_scenarios

    scenario = json.loads(_EVERY.read_text())
    pinned = next(v for v in scenario["variants"]
                  if v["cache"]["policy"].startswith("arc"))
    scenario["variants"] = [v for v in scenario["variants"] if v is not pinned]
    (tmp_path / "policies.json").write_text(json.dumps(scenario))
    monkeypatch.setattr(gate_scenarios, "SCENARIO_DIR", tmp_path)
    return pinned


def test_a_policy_without_a_pinned_variant_is_judged_by_the_oracle(
        tmp_path, monkeypatch, capsys):
    """Without its arc variant the gate derives one: the oracle's values, pinned."""
    from xcache import engine
    from xcache.gate import scenarios as gate_scenarios
    from xcache.gate.report import Report

    pinned = _without_arc(tmp_path, monkeypatch)
    report = Report(verbose=True)
    names = gate_scenarios.run_scenarios(engine, tmp_path / "work", report, [])
    assert "policies (arc, from the oracle)" in names
    derived = [c for c in report.checks if "(arc, from the oracle)" in c["check"]]
    assert {(c["backend"], c["check"]) for c in derived} == {
        (b, f"{n} (arc, from the oracle)") for b in ("engine", "oracle")
        for n in ("routed reads are byte-exact", "policy counters")}
    assert not report.failed
    counters = next(c for c in derived if c["backend"] == "engine"
                    and c["check"].startswith("policy counters"))
    # arc has no parameters: the derived run is the pinned one, value for value
    assert {k: counters["expected"][k] for k in pinned["expect"]["policy counters"]
            } == pinned["expect"]["policy counters"]
    assert "policy counters (arc, from the oracle) [engine]" in capsys.readouterr().out


def test_gate_refuses_a_policy_the_oracle_cannot_judge(tmp_path, monkeypatch):
    """An engine policy the oracle does not know cannot be gated (CannotRun)."""
    from xcache.gate import CannotRun
    from xcache.gate import scenarios as gate_scenarios
    from xcache.gate.report import Report

    _without_arc(tmp_path, monkeypatch)
    monkeypatch.setattr(gate_scenarios, "offered_policies",
                        lambda: [*_c_table_policies(), "mystery"])
    with pytest.raises(CannotRun, match="the oracle cannot judge mystery"):
        gate_scenarios.run_scenarios(None, tmp_path / "work", Report(), [])
    assert not (tmp_path / "work").exists()  # refused before any fixture


def test_gate_command_runs_the_scenarios(tmp_path):
    """`replay.py gate DIR` is the main job: every policy passes on both backends."""
    report = tmp_path / "report.json"
    p = _replay("gate", str(tmp_path / "out"), "--scenario", "policies",
                "--json", str(report))
    assert p.returncode == 0, p.stdout + p.stderr
    data = json.loads(report.read_text())
    from xcache.gate import scenarios as gate_scenarios

    scenario = json.loads(_EVERY.read_text())
    missing = gate_scenarios.missing_policies(scenario,
                                              gate_scenarios.offered_policies())
    suffixes = [v["suffix"] for v in scenario["variants"]] + [
        f" ({m}, from the oracle)" for m in missing]
    assert data["scenarios"] == ["policies" + s for s in suffixes]
    counters = {(c["check"], c["backend"]) for c in data["checks"]}
    assert {(f"policy counters{s}", b) for s in suffixes
            for b in ("engine", "oracle")} <= counters
    assert all(c["passed"] for c in data["checks"])
