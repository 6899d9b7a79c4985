"""Generic scenarios: the layout expressions, --container on any folder, SKIPs."""

from __future__ import annotations

import errno
import json
import os
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import PINNED_SCENARIOS
from xcache import fixtures
from xcache.gate import CannotRun
from xcache.gate.containers import make_target, precheck
from xcache.gate.expr import ExprError, condition, evaluate
from xcache.gate.report import Report

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.nosan  # runs the replay tool, not the C core

_NAMES = {"k": 4, "E": 24, "L": 1, "N": 24, "expert_bytes": 1632}


# -- the expression evaluator ------------------------------------------------

@pytest.mark.parametrize("text, value", [
    (7, 7), ("7", 7), ("2*k", 8), ("N-k", 20), ("min(N, 6*k)", 24),
    ("max(1, k - 10)", 1), ("-(k+1)//2", -3), ("N % 5", 4), ("(E - 1) * 2", 46),
    (" expert_bytes // 8 ", 204), ("min(3)", 3),
])
def test_evaluator_computes_integer_expressions(text, value):
    """Integers, names, + - * // %, unary minus, parentheses, min and max."""
    assert evaluate(text, _NAMES) == value


@pytest.mark.parametrize("text, message", [
    ("", "expression '': expected a number, a name or '(' at the end"),
    ("2*", "expression '2*': expected a number, a name or '(' at the end"),
    ("x", "expression 'x': unknown name 'x' (known: E, L, N, expert_bytes, k) "
          "at column 1"),
    ("k/2", "expression 'k/2': unexpected '/' at column 2"),
    ("3//0", "expression '3//0': division by zero at column 4"),
    ("N % (k-4)", "expression 'N % (k-4)': division by zero at column 5"),
    ("(1", "expression '(1': expected ')' at the end"),
    ("1 2", "expression '1 2': unexpected '2' at column 3"),
    ("__import__('os')", "expression \"__import__('os')\": unexpected \"'\" at "
                         "column 12"),
    ("k.real", "expression 'k.real': unexpected '.' at column 2"),
    (True, "expression True: a boolean is not an integer"),
    (1.5, "expression 1.5: neither an integer nor a string"),
])
def test_evaluator_errors_name_the_expression_and_column(text, message):
    """Every malformed expression is an ExprError with its text and column."""
    with pytest.raises(ExprError) as e:
        evaluate(text, _NAMES)
    assert str(e.value) == message


def test_conditions_compare_two_expressions():
    """A requires line is one comparison; anything else is an error."""
    assert condition("N >= 10", _NAMES) is True
    assert condition("N > 6*k", _NAMES) is False
    assert condition("k == 4", _NAMES) and condition("k != 5", _NAMES)
    assert condition("E <= N", _NAMES) and not condition("E < N", _NAMES)
    with pytest.raises(ExprError, match="expected a comparison"):
        condition("N", _NAMES)
    with pytest.raises(ExprError, match="unexpected '>'"):
        condition("N >= 1 > 0", _NAMES)


# -- in-process runs against the engine built in place -----------------------

def _run(work: Path, container: str | None = None, only: list[str] | None = None
         ) -> tuple[list[str], Report]:
    """Run the scenario set with the engine of this checkout; (names, report)."""
    from xcache import engine
    from xcache.gate.scenarios import run_scenarios

    report = Report()
    names = run_scenarios(engine, work, report, only or [], container=container)
    return names, report


@pytest.fixture(scope="module")
def folders(tmp_path_factory) -> dict[str, Path]:
    """Fixture containers written with fixtures.generate, by preset name."""
    root = tmp_path_factory.mktemp("containers")
    return {p: Path(fixtures.generate(p, root / p).dir or root / p)
            for p in ("k3-mini", "mixtral-mini", "deepseek-mini")}


def test_default_set_is_todays_pinned_set(tmp_path):
    """On their home containers: 87 scenario runs, 924 checks, all pinned, none
    skipped (the two open-fault scenarios are N/A on both: no open injector)."""
    names, report = _run(tmp_path / "work")
    assert len(names) == 87 and len(report.checks) == 924
    assert {n["scenario"] for n in report.not_applicable} == {
        "open-failures", "open-eintr"}
    assert not report.failed and not report.skipped
    assert "reference (4 KiB chunks)" in names
    assert "policies (arc)" in names


@pytest.mark.parametrize("preset,ran,skipped", [
    # O_DIRECT cannot pack an expert scattered over its file (the presets');
    # mixtral-mini's 8 experts lack those hold-layer-gives-back names
    ("mixtral-mini", 81, ["found-direct-partial", "found-stream-victim-hit",
                          "hold-layer-gives-back", "hold-layer-no-slot",
                          "state-direct"]),
    ("deepseek-mini", 83, ["found-direct-partial", "found-stream-victim-hit",
                           "state-direct"])])
def test_container_folder_runs_the_whole_set(tmp_path, folders, preset, ran,
                                             skipped):
    """Every scenario runs on another fixture folder and passes on both backends."""
    names, report = _run(tmp_path / "work", str(folders[preset]))
    assert not report.failed, [c["detail"] for c in report.failed]
    assert [s["scenario"] for s in report.skipped] == skipped
    assert len(names) == ran
    assert {c["backend"] for c in report.checks} == {"engine", "oracle"}
    reads = [c for c in report.checks if c["check"].startswith(
        "routed reads are byte-exact") and c["backend"] == "engine"]
    assert reads and all(c["actual"]["wrong_reads"] == 0 for c in reads)


def test_home_twin_derives_exactly_the_pinned_values(tmp_path, folders):
    """A k3-mini folder judged by the oracle expects what the files pin."""
    # the scenarios homed on k3-mini (faults-placed's home is mixtral-mini)
    only = ["reference", "counter", "faults-io", "faults-files",
            "faults-corrupt", "faults-alloc", "chunk-faults"]
    _, home = _run(tmp_path / "home", only=only)
    _, twin = _run(tmp_path / "twin", str(folders["k3-mini"]), only=only)
    assert not home.failed and not twin.failed
    def by_key(report: Report) -> dict:
        return {(c["scenario"], c["check"], c["backend"]): c["expected"]
                for c in report.checks}

    assert len(home.checks) == len(twin.checks) == 162
    assert by_key(twin) == by_key(home)


def test_layout_expectations_equal_the_pins_at_home(folders):
    """Each expect_layout* expression gives the pinned number on the home container."""
    target = make_target(str(folders["k3-mini"]), folders["k3-mini"].parent)
    seen = 0
    for path in sorted((ROOT / "gate" / "scenarios").glob("*.json")):
        if path.name == "programs.json":
            continue  # the seeded programs: a list of seeds, not a scenario
        sc = json.loads(path.read_text())
        for step in sc["steps"]:
            for suffix in ("", "_engine", "_oracle"):
                for key, expr in step.get(f"expect_layout{suffix}", {}).items():
                    pinned = {**step.get("expect", {}),
                              **step.get(f"expect{suffix}", {})}[key]
                    assert evaluate(expr, target.quantities) == pinned
                    seen += 1
    assert seen == 8


def test_a_perturbed_engine_value_fails_the_container_run(tmp_path, folders,
                                                         monkeypatch):
    """An engine counter off by one and a flipped byte fail; the oracle still passes."""
    from xcache.gate import engine_backend

    values = engine_backend.EngineBackend.values
    get = engine_backend.EngineBackend.get

    def off_by_one(self):
        v = values(self)
        v["hits"] += 1
        return v

    def flipped(self, layer, expert):
        data = bytearray(get(self, layer, expert))
        data[-1] ^= 1
        return bytes(data)

    monkeypatch.setattr(engine_backend.EngineBackend, "values", off_by_one)
    monkeypatch.setattr(engine_backend.EngineBackend, "get", flipped)
    _, report = _run(tmp_path / "work", str(folders["mixtral-mini"]),
                     only=["reference"])
    failed = {c["check"] for c in report.failed}
    assert {c["backend"] for c in report.failed} == {"engine"}
    assert "serial reads are byte-exact" in failed
    assert "serial passes miss every time" in failed
    bad = next(c for c in report.failed
               if c["check"] == "serial reads are byte-exact")
    assert bad["detail"].startswith("36 of 36 reads wrong")


def test_scenarios_that_cannot_apply_are_skipped_with_the_reason(tmp_path):
    """A 3-key container skips what needs more keys, with a SKIP line each."""
    d = fixtures.presets.preset_dict("k3-mini")
    d.update(name="tiny", experts=3, top_k=2)
    spec = tmp_path / "tiny.json"
    spec.write_text(json.dumps(d))
    names, report = _run(tmp_path / "work", str(spec))
    skipped = {s["scenario"]: s["reason"] for s in report.skipped}
    assert skipped["reference"] == ("key index k+1 = 3 is outside the "
                                    "container's 3 keys")
    assert skipped["faults-io"] == ("key index 3 = 3 is outside the "
                                    "container's 3 keys")
    assert not report.failed
    ran = {n.split(" (")[0] for n in names}
    assert ran | set(skipped) == {"counter-window", "faults-alloc",
                                  "open-failures", "open-eintr",
                                  "faults-corrupt", "faults-files",
                                  "faults-io", "faults-placed", "policies",
                                  "prefetch-first-use",
                                  "found-refused-before-read",
                                  "failed-read-after",
                                  "found-stream-victim-hit",
                                  "reference",
                                  "batch-residents-pins", "key-bounds",
                                  "partial-reads", "chunk-faults",
                                  "reader-overlap", "in-flight",
                                  "stream-claim", "reader-index",
                                  "trace-records", "trace-file",
                                  "trace-gapped-layers", "trace-reopen",
                                  "trace-over-a-file",
                                  "check-probe",
                                  "reads-under-way", "completion-order",
                                  "stream-claim-kinds", "state-counters",
                                  "state-order", "state-holds",
                                  "state-untold", "state-direct",
                                  "held-victim", "pin-protects", "reset-window",
                                  "hold-layer-no-slot",
                                  "found-claim-wait-hit", "found-direct-partial",
                                  "found-fused-chunked-eio", "found-release-twice",
                                  "found-stream-of-residents-open",
                                  "found-unhold-twice", "found-verify-replaced",
                                  "found-stream-get-between-reads",
                                  "found-verify-truncated", "hold-layer-gives-back",
                                  "stalled-reads", "stalled-read-ahead",
                                  "files-changed-in-place", "check-cross-arc",
                                  "check-cross-fields", "check-cross-fifo",
                                  "check-cross-hotness",
                                  "check-cross-hotness-root", "check-cross-lfu",
                                  "check-cross-lru", "check-cross-s3fifo",
                                  "check-cross-streams", "face-release-twice",
                                  "face-views-released", "face-with-exception",
                                  "face-layer-rollback", "face-stream-failures",
                                  "face-stream-ends"}


def test_a_failed_requirement_is_a_skip_naming_the_values(tmp_path, monkeypatch):
    """``requires`` that does not hold skips the scenario and shows the quantities."""
    from xcache.gate import scenarios as gate_scenarios

    sc = json.loads((ROOT / "gate" / "scenarios" /
                     "faults-alloc-k3-mini.json").read_text())
    sc["requires"] = ["N >= 6*k + 1"]
    (tmp_path / "s.json").write_text(json.dumps(sc))
    monkeypatch.setattr(gate_scenarios, "SCENARIO_DIR", tmp_path)
    names, report = _run(tmp_path / "work")
    assert names == []
    assert report.skipped == [{"scenario": "faults-alloc",
                               "reason": "requires N >= 6*k + 1; here N = 24, "
                                         "k = 4"}]


def test_old_step_fields_are_refused_with_the_new_form(tmp_path, monkeypatch):
    """A step still written with layer/experts cannot run and says what to write."""
    from xcache.gate import scenarios as gate_scenarios

    sc = {"name": "old", "container": "k3-mini", "cache": {"n_slots": 8},
          "steps": [{"op": "get", "layer": 0, "experts": [0]}]}
    (tmp_path / "s.json").write_text(json.dumps(sc))
    monkeypatch.setattr(gate_scenarios, "SCENARIO_DIR", tmp_path)
    with pytest.raises(CannotRun, match="step field 'layer' is the old form"):
        _run(tmp_path / "work")


# -- bad --container values ----------------------------------------------------

def _replay(*args: str) -> subprocess.CompletedProcess[str]:
    """Run replay.py in a fresh interpreter and capture its output."""
    return subprocess.run([sys.executable, str(ROOT / "replay.py"), *args],
                          capture_output=True, text=True, timeout=600)


def _bare_container(folder: Path) -> Path:
    """A valid one-tensor safetensors folder with no layout of any kind."""
    folder.mkdir()
    header = json.dumps({"w": {"dtype": "U8", "shape": [8],
                               "data_offsets": [0, 8]}}).encode()
    header += b" " * (-len(header) % 8)
    (folder / "model.safetensors").write_bytes(
        struct.pack("<Q", len(header)) + header + bytes(8))
    return folder


def test_bad_container_arguments_exit_2_before_the_build(tmp_path):
    """A missing path, a folder that is no container, a shard file: exit 2 at once."""
    out = str(tmp_path / "out")
    p = _replay("--container", str(tmp_path / "nowhere"), out)
    assert p.returncode == 2 and "Built" not in p.stdout
    assert (f"CANNOT RUN: container {str(tmp_path / 'nowhere')!r}: no such file "
            "or folder, and not a preset (presets: k3-mini") in p.stderr
    empty = tmp_path / "empty"
    empty.mkdir()
    p = _replay("gate", "--container", str(empty), out)
    assert p.returncode == 2 and "Built" not in p.stdout
    assert f"container {empty}: not a safetensors container" in p.stderr
    shard = _bare_container(tmp_path / "bare") / "model.safetensors"
    p = _replay("--container", str(shard), out)
    assert p.returncode == 2
    assert "a container file; name its folder" in p.stderr
    assert "Traceback" not in p.stderr


def test_a_shard_that_is_a_symlink_loop_is_named_as_one(tmp_path, folders):
    """--container DIR with a shard linked to itself: exit 2 naming the loop
    (ELOOP), not "does not exist"; through an index and as the one shard."""
    shard = "model-00002-of-00004.safetensors"
    looped = tmp_path / "looped"
    shutil.copytree(folders["deepseek-mini"], looped)
    (looped / shard).unlink()
    (looped / shard).symlink_to(shard)
    single = tmp_path / "single"
    single.mkdir()
    (single / "x.safetensors").symlink_to("x.safetensors")
    loop = f"a symlink loop: {os.strerror(errno.ELOOP)} (errno {errno.ELOOP})"
    index = looped / "model.safetensors.index.json"
    for folder, line in (
            (looped, f"{index}: index: shard {shard!r} is {loop}"),
            (single, f"{single / 'x.safetensors'}: {loop}")):
        p = _replay("--container", str(folder), str(tmp_path / "out"))
        assert p.returncode == 2 and "Built" not in p.stdout
        assert p.stderr == (f"CANNOT RUN: container {folder}: not a safetensors "
                            f"container: {line}\n")


def test_a_container_path_that_is_a_symlink_loop_is_named_as_one(tmp_path):
    """--container naming a link to itself (a shard's name in a folder) or
    one of two links naming each other: exit 2 naming the loop (ELOOP),
    not "no such file or folder, and not a preset"."""
    (tmp_path / "K3loop").mkdir()
    shard = tmp_path / "K3loop" / "model-00001-of-00001.safetensors"
    shard.symlink_to(shard.name)
    (tmp_path / "a").symlink_to("b")
    (tmp_path / "b").symlink_to("a")
    loop = f"a symlink loop: {os.strerror(errno.ELOOP)} (errno {errno.ELOOP})"
    for path in (shard, tmp_path / "a"):
        p = _replay("--container", str(path), str(tmp_path / "out"))
        assert p.returncode == 2 and "Built" not in p.stdout
        assert p.stderr == f"CANNOT RUN: container {str(path)!r}: {path}: {loop}\n"


def test_a_container_without_a_layout_cannot_run(tmp_path):
    """A valid container with no layout file, spec or detectable names: CannotRun."""
    folder = _bare_container(tmp_path / "bare")
    precheck(str(folder))  # a container, so the build would go ahead
    with pytest.raises(CannotRun, match=f"container {folder}: no layout"):
        make_target(str(folder), tmp_path / "work")


def test_an_explicit_layout_that_misses_a_tensor_cannot_run(tmp_path, folders):
    """A layout file naming a tensor the container lacks: CannotRun naming it."""
    import shutil

    folder = tmp_path / "twin"
    shutil.copytree(folders["k3-mini"], folder)
    (folder / "xcache-layout.toml").write_text(
        'expert_template = "language_model.model.layers.{layer}.'
        'block_sparse_moe.experts.{expert}.{tensor}"\n'
        'tensors = ["w1.weight_packed", "w4.weight_packed"]\n'
        'layers = [0]\nn_experts = 24\ntop_k = 4\n')
    with pytest.raises(CannotRun, match="layer 0 expert 0: no tensor "
                       "'language_model.model.layers.0.block_sparse_moe."
                       "experts.0.w4.weight_packed'"):
        make_target(str(folder), tmp_path / "work")


def test_container_option_runs_from_the_front_door(tmp_path, folders):
    """`replay.py --container DIR OUT` exits 0; every scenario's line and the
    last one name the container; the last its layout and the engine build."""
    from xcache.gate.pins import build_id

    report = tmp_path / "r.json"
    where = str(folders["deepseek-mini"])
    p = _replay("--container", where, str(tmp_path / "out"), "--json",
                str(report))
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr
    lines = p.stdout.splitlines()
    pins = json.loads((ROOT / "engine" / "pins.json").read_text())["sha256"]
    assert lines[-1].startswith(
        f"PASS: {PINNED_SCENARIOS} scenarios (83 variants), 890 checks, 3 skipped, "
        f"12 N/A on {where} "
        f"(3 MoE layers x 16 experts, top-4), engine build {build_id(pins)}; ")
    scenario_lines = lines[2:-1]
    assert len(scenario_lines) == PINNED_SCENARIOS
    assert all(ln.split()[1:3] == ["on", where] for ln in scenario_lines)
    assert next(ln for ln in scenario_lines if ln.startswith("reference ")
                ).endswith("PASS  42  FAIL 0  N/A 0")
    reasons = {s["scenario"]: s["reason"]
               for s in json.loads(report.read_text())["skipped"]}
    assert next(ln for ln in scenario_lines if ln.startswith("state-direct")
                ).endswith("  SKIP  " + reasons["state-direct"])
    data = json.loads(report.read_text())
    assert data["container"] == str(folders["deepseek-mini"])
    assert [s["scenario"] for s in data["skipped"]] == [
        "found-direct-partial", "found-stream-victim-hit", "state-direct"]


@pytest.mark.parametrize("form", ["index", "headers", "lfs"])
def test_a_checkpoint_without_weights_is_refused_naming_from_header(tmp_path,
                                                                   form):
    """--container on a checkpoint's folder without its weights: the refusal
    says what it is and to make a twin with xcache-fixtures from-header."""
    from xcache.fixtures import realistic

    ckpt = realistic.expand(ROOT / "fixtures" / "models" / "mixtral-8x7b.json",
                            tmp_path / "ckpt", form=form, layers=[0], experts=2)
    with pytest.raises(CannotRun) as info:
        precheck(str(ckpt))
    text = str(info.value)
    assert text.startswith(f"container {ckpt}: not a safetensors container: ")
    assert text.endswith(
        f"; {ckpt} is a checkpoint's index and config without shard data "
        f"(missing, Git-LFS pointers or header-only); make a twin the cache "
        f"can read, of at most 4 MiB, with `xcache-fixtures from-header "
        f"{ckpt} TWIN` and give --container TWIN")
