"""A real checkpoint's layout, end to end: detect, twin, verify, cache, replay.

For each public checkpoint described in `fixtures/models/`, the folder a
user without the weights holds (`model.safetensors.index.json` +
`config.json`, written from those facts) goes through the whole workflow: the
fixtures' detector and the engine's (two independent implementations) agree
on the layout, `from-header` writes a twin, `verify` finds every byte in
place, a cache opened on the twin serves every expert byte-exact against
the generator's encoding and the oracle's reader, and the generic replay
set passes on it.  The README's four commands are run as written.
"""

from __future__ import annotations

import doctest
import json
import re
import subprocess
from pathlib import Path

import pytest

from tests.helpers import PINNED_SCENARIOS
from xcache import fixtures
from xcache.fixtures import realistic
from xcache.fixtures.detect import detect_dir
from xcache.fixtures.from_header import from_header
from xcache.fixtures.reader import container_spec
from xcache.fixtures.verify import verify
from xcache.layout_rules import config_view

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "fixtures" / "models"
#: scenario runs of the generic set (variants included), as tests/replay pins
SCENARIO_RUNS = 87
#: scenarios written for their home container's keys (the programs' shrunk
#: findings and the hold_layer refusals, and check-cross-s3fifo's five
#: slots filled as written): a twin may lack those keys or that top-k
FOUND = ("found-", "hold-layer-no-slot", "hold-layer-gives-back",
         "check-cross-s3fifo")
#: runs of the scenario that needs experts in one run each (O_DIRECT cannot
#: pack a scattered one): a twin whose experts are scattered skips them
DIRECT_RUNS = ("state-direct", 2)
#: scenarios of a trace over three MoE layers or more (the layers' places
#: and indices differing, a gap between them): a twin of two layers skips
#: them, saying so
THREE_LAYERS = ("trace-file", "trace-gapped-layers")

#: model -> (layers kept from the checkpoint, experts kept, the twin's
#: expected layout: template, tensors in slot order, MoE layers, top-k)
CASES = {
    "mixtral-8x7b": (
        [0, 1, 2], 8,
        "model.layers.{layer}.block_sparse_moe.experts.{expert}.{tensor}",
        ["w1.weight", "w2.weight", "w3.weight"], [0, 1, 2], 2),
    "qwen2-moe-lm": (
        [0, 1], 8,
        "model.language_model.layers.{layer}.mlp.experts.{expert}.{tensor}",
        ["down_proj.weight", "gate_proj.weight", "up_proj.weight"], [0, 1], 4),
    "deepseek-v3": (
        [2, 3, 4], 8, "model.layers.{layer}.mlp.experts.{expert}.{tensor}",
        ["down_proj.weight", "down_proj.weight_scale_inv", "gate_proj.weight",
         "gate_proj.weight_scale_inv", "up_proj.weight",
         "up_proj.weight_scale_inv"], [3, 4], 8),
    "olmoe-1b-7b": (
        [0, 1], 8, "model.layers.{layer}.mlp.experts.{expert}.{tensor}",
        ["down_proj.weight", "gate_proj.weight", "up_proj.weight"], [0, 1], 8),
    "granite-3.0-1b-a400m": (
        [0, 1], 8, "model.layers.{layer}.block_sparse_moe.{tensor}",
        ["input_linear.weight", "output_linear.weight"], [0, 1], 8),
    "gpt-oss-20b": (
        [0, 1], 8, "model.layers.{layer}.mlp.experts.{tensor}",
        ["down_proj_bias", "down_proj_blocks", "down_proj_scales",
         "gate_up_proj_bias", "gate_up_proj_blocks", "gate_up_proj_scales"],
        [0, 1], 4),
    # hybrid: layer 2 gated-delta linear attention, layer 3 gated attention
    "qwen3-next-80b-a3b": (
        [2, 3], 8, "model.layers.{layer}.mlp.experts.{expert}.{tensor}",
        ["down_proj.weight", "gate_proj.weight", "up_proj.weight"], [2, 3], 8),
    # MLA without a query LoRA; layer 0 is dense
    "deepseek-v2-lite": (
        [0, 1, 2], 8, "model.layers.{layer}.mlp.experts.{expert}.{tensor}",
        ["down_proj.weight", "gate_proj.weight", "up_proj.weight"], [1, 2], 6),
}
#: checkpoints with a second expert group outside the decoder (Qwen3-Next's
#: mtp.layers.0.mlp.experts.*): both detectors take the decoder's group by
#: rule (docs/LAYOUT.md "Detection"), with no layout file
TWO_GROUPS = {"qwen3-next-80b-a3b"}


def _from_expect() -> None:
    """Every description with an `expect` block is a case (no test edit).

    Kept: the layer before the first MoE layer when it is dense, and the
    first two MoE layers, with 8 experts.
    """
    from xcache.fixtures.detect import config_moe_layers

    for path in sorted(DATA.glob("*.json")):
        desc = realistic.load(path)
        exp = desc.get("expect")
        if path.stem in CASES or not exp:
            continue
        moe = config_moe_layers(desc["config"])
        kept = ([moe[0] - 1] if moe[0] > 0 else []) + moe[:2]
        CASES[path.stem] = (kept, 8, exp["template"], exp["tensors"], moe[:2],
                            min(exp["top_k"], 8))
        FAMILY[path.stem] = exp["family"]


def test_every_description_is_a_case():
    """Each description in fixtures/models/ goes through this workflow."""
    assert sorted(p.stem for p in DATA.glob("*.json")) == sorted(CASES)


@pytest.fixture(scope="module")
def twins(tmp_path_factory) -> dict[str, tuple[Path, Path]]:
    """model -> (checkpoint folder: index + config only, its twin)."""
    root = tmp_path_factory.mktemp("new-containers")
    out = {}
    for model, (layers, experts, *_) in CASES.items():
        src = realistic.expand(DATA / f"{model}.json", root / model / "checkpoint",
                               form="index", layers=layers, experts=experts)
        twin = root / model / "twin"
        from_header(src, twin, scale=0.01, top_k=_given(model))
        out[model] = (src, twin)
    return out


#: model -> its layout family
FAMILY = {"mixtral-8x7b": "per-expert", "qwen2-moe-lm": "per-expert",
          "deepseek-v3": "per-expert", "olmoe-1b-7b": "per-expert",
          "granite-3.0-1b-a400m": "fused", "gpt-oss-20b": "fused",
          "qwen3-next-80b-a3b": "per-expert", "deepseek-v2-lite": "per-expert"}


_from_expect()


def _given(model: str) -> int | None:
    """The top-k a user gives the model's checkpoint (its config names none)."""
    return realistic.given_top_k(realistic.load(DATA / f"{model}.json"))


def _expected(model: str) -> dict:
    _, experts, template, tensors, layers, top_k = CASES[model]
    return {"expert_template": template, "tensors": tensors, "layers": layers,
            "n_experts": experts, "top_k": top_k, "family": FAMILY[model]}


@pytest.mark.parametrize("model", sorted(CASES))
def test_both_detectors_agree_on_the_checkpoint_and_its_twin(model, twins):
    """fixtures.detect and engine.layout find the same layout, the expected one."""
    from xcache.engine.detect import detect
    from xcache.engine.layout import resolve

    src, twin = twins[model]
    want = _expected(model)
    if model in TWO_GROUPS:  # the names hold an MTP block's group too
        assert "mtp.layers.0.mlp.experts.0.up_proj.weight" in json.loads(
            (src / "model.safetensors.index.json").read_text())["weight_map"]
    got_src = detect_dir(src, top_k=_given(model))
    # from an index alone the fixtures order tensors by name; from headers by
    # (shard, offset) as the engine does, so the sets agree and the twin's
    # order is the one the cache uses
    assert {k: v for k, v in got_src.items() if k != "tensors"} == {
        k: v for k, v in want.items() if k != "tensors"}
    assert sorted(got_src["tensors"]) == sorted(want["tensors"])
    engine_view = {**detect(twin).cache_kwargs(), "family": detect(twin).family}
    fixtures_view = detect_dir(twin)
    stored = resolve(twin)
    assert stored.source.startswith("fixture spec")
    assert engine_view == fixtures_view == stored.cache_kwargs() | {
        "tensors": engine_view["tensors"], "family": stored.family}
    # the stored spec names the same tensors, in the order it was written
    assert sorted(stored.tensors) == sorted(engine_view["tensors"])
    assert sorted(engine_view["tensors"]) == sorted(want["tensors"])
    assert {k: v for k, v in engine_view.items() if k != "tensors"} == {
        k: v for k, v in want.items() if k != "tensors"}
    assert detect(twin).fused == (FAMILY[model] == "fused")


@pytest.mark.parametrize("model", sorted(CASES))
def test_twin_verifies_and_serves_every_expert_byte_exact(model, twins):
    """verify is clean; every expert equals the encoding and the oracle's read."""
    from xcache import engine
    from xcache.oracle.layout import expert_pieces, read_pieces
    from xcache.oracle.safetensors import Container as OracleContainer

    _, twin = twins[model]
    assert verify(twin) == []
    spec = container_spec(twin)
    reader = OracleContainer(twin)
    with engine.ExpertCache.open(twin, n_slots=spec.top_k + 1) as cache:
        assert cache.expert_bytes == spec.expert_nbytes
        served = 0
        for layer in spec.layers:
            for e in range(spec.n_experts):
                with cache.get(layer, e) as x:
                    got = bytes(x.data)
                assert got == fixtures.expected_expert_bytes(spec, layer, e), (
                    layer, e)
                pieces = expert_pieces(reader, spec.expert_template,
                                       [t for t, _, _ in spec.expert_tensors],
                                       spec.n_experts, layer, e)
                assert got == read_pieces(reader, pieces), (layer, e)
                served += 1
        cache.check()
        stats = cache.stats()
    assert served == len(spec.layers) * spec.n_experts
    assert stats["misses"] == served
    assert stats["payload_bytes"] == served * spec.expert_nbytes


@pytest.mark.nosan  # runs the replay set through the gate's runner
@pytest.mark.parametrize("model", sorted(CASES))
def test_generic_replay_set_passes_on_the_twin(model, twins, tmp_path):
    """`replay.py --container TWIN`, in process: no failure, no skip but named ones."""
    from xcache import engine
    from xcache.gate.report import Report
    from xcache.gate.scenarios import run_scenarios

    _, twin = twins[model]
    report = Report()
    names = run_scenarios(engine, tmp_path / "work", report, [],
                          container=str(twin))
    assert not report.failed, [c["detail"] for c in report.failed][:5]
    # a twin with few keys may skip a scenario that needs more, saying why
    skipped = [s["scenario"] for s in report.skipped]
    # (the programs' shrunk findings name their home container's keys)
    assert len([s for s in skipped if s != DIRECT_RUNS[0] and
                not s.startswith(FOUND) and s not in THREE_LAYERS]) <= 1
    assert all(s["reason"] for s in report.skipped)
    found = [s for s in skipped if s.startswith(FOUND)]
    assert len(names) >= (SCENARIO_RUNS - 2 - DIRECT_RUNS[1] - len(found)
                          - sum(s in THREE_LAYERS for s in skipped))
    engine_reads = [c for c in report.checks if c["backend"] == "engine" and
                    "wrong_reads" in (c.get("actual") or {})]
    assert engine_reads and all(c["actual"]["wrong_reads"] == 0
                                for c in engine_reads)


#: top-k at its ends: (model, --experts, --top-k) -> the reason each scenario
#: skipped beside the programs' findings and the O_DIRECT runs
TOP_K_ENDS = {
    # top-1 by its config (num_experts_per_tok 1): stalled-reads' 2*k slots
    # cannot hold a hit, a held read and a stream's own read
    ("llama-4-scout-17b-16e", None, None): {
        "stalled-reads": "requires 2*k >= 3; here k = 1"},
    # top-1 asked of an 8-expert checkpoint
    ("mixtral-8x7b", None, 1): {"stalled-reads": "requires 2*k >= 3; here k = 1"},
    # every expert routed: top-k equal to the expert count
    # (four experts kept: the traces over three layers need eight)
    ("mixtral-8x7b", 4, 4): dict.fromkeys(
        ("trace-file", "trace-gapped-layers"), "requires E >= 8; here E = 4"),
    ("llama-4-scout-17b-16e", 4, 4): dict.fromkeys(
        ("trace-file", "trace-gapped-layers"), "requires E >= 8; here E = 4"),
}


@pytest.mark.nosan  # runs the replay set through the gate's runner
@pytest.mark.parametrize("case", sorted(TOP_K_ENDS, key=str),
                         ids=lambda c: f"{c[0]}-k{c[2] or 'cfg'}")
def test_replay_set_runs_at_top_1_and_top_k_equal_to_e(case, tmp_path):
    """Top-1 and top-k = E twins: each scenario runs or skips saying why; none fails."""
    from xcache import engine
    from xcache.gate.report import Report
    from xcache.gate.scenarios import run_scenarios

    model, experts, top_k = case
    moe = realistic.tensors(realistic.load(DATA / f"{model}.json"))[0]
    src = realistic.expand(DATA / f"{model}.json", tmp_path / "checkpoint",
                           form="index", layers=[0, 1, 2, 3], experts=experts)
    from_header(src, tmp_path / "twin", scale=0.005, top_k=top_k)
    spec = container_spec(tmp_path / "twin")
    n = experts or config_view(moe)["num_local_experts"]
    assert (spec.top_k, spec.n_experts) == (top_k or 1, n)
    report = Report()
    names = run_scenarios(engine, tmp_path / "work", report, [],
                          container=str(tmp_path / "twin"))
    assert not report.failed, [c["detail"] for c in report.failed][:5]
    skipped = {s["scenario"]: s["reason"] for s in report.skipped
               if not s["scenario"].startswith(FOUND)
               and s["scenario"] != DIRECT_RUNS[0]}
    assert skipped == TOP_K_ENDS[case]
    assert "stalled-reads" in names or "stalled-reads" in skipped


def _readme_commands() -> list[str]:
    """The four commands of README's new-container section, in order."""
    text = (ROOT / "README.md").read_text("utf-8")
    section = text.split("## A new container in four commands", 1)[1]
    section = section.split("\n## ", 1)[0]
    cmds = [ln.strip() for ln in section.splitlines()
            if ln.startswith("    ") and ln.strip()]
    assert len(cmds) == 4, cmds
    return cmds


def _readme_output() -> str:
    """What README's new-container section shows the fourth command print."""
    text = (ROOT / "README.md").read_text("utf-8")
    section = text.split("## A new container in four commands", 1)[1]
    section = section.split("\n## ", 1)[0]
    blocks = re.findall(r"```text\n(.*?)```", section, re.S)
    assert len(blocks) == 1, blocks
    return blocks[0]


@pytest.mark.nosan  # runs the README's commands as subprocesses
@pytest.mark.parametrize("model", ["mixtral-8x7b", "gpt-oss-20b"])
def test_readme_four_commands_take_a_description_to_a_pass(model, tmp_path):
    """The README's commands, as written (console scripts by their entry
    points) and run outside the clone: all four for Mixtral, whose shipped
    description the first names, the
    fourth printing what the README shows; the last three on a fused
    checkpoint's folder (GPT-OSS)."""
    from tests.examples.commands import argv_of

    cmds = _readme_commands()
    assert cmds[0] == "xcache-fixtures checkpoint mixtral-8x7b CHECKPOINT --layers 0-2"
    if model != "mixtral-8x7b":
        layers, experts, *_ = CASES[model]
        realistic.expand(DATA / f"{model}.json", tmp_path / "checkpoint",
                         form="index", layers=layers, experts=experts)
        cmds = [""] + cmds[1:]
    subst = {"CHECKPOINT": str(tmp_path / "checkpoint"),
             "TWIN": str(tmp_path / "twin"), "OUT": str(tmp_path / "out")}
    outputs = []
    for cmd in cmds:
        if not cmd:
            outputs.append("")
            continue
        p = subprocess.run(argv_of(cmd, subst), cwd=tmp_path, capture_output=True,
                           text=True, timeout=600)
        assert p.returncode == 0, (cmd, p.stdout[-2000:], p.stderr[-2000:])
        outputs.append(p.stdout)
    if model == "mixtral-8x7b":
        assert outputs[0].startswith(f"checkpoint {tmp_path / 'checkpoint'}: "
                                     "model.safetensors.index.json")
    assert re.search(r"^twin size: [\d,]+ bytes", outputs[1], re.M)
    assert f"fused: {'yes' if 'oss' in model else 'no'}" in outputs[2]
    lines = outputs[3].splitlines()
    direct = any(ln.startswith(f"{DIRECT_RUNS[0]} ") and "  SKIP  " in ln
                 for ln in lines)
    # the programs' shrunk findings (one run each) name their home's keys
    found = sum(1 for ln in lines if "  SKIP  " in ln and ln.startswith(FOUND))
    # and the traces over three MoE layers need three, and eight experts
    found += sum(1 for ln in lines if "  SKIP  " in ln
                 and ln.split()[0] in THREE_LAYERS)
    # every scenario's line and the verdict name the twin
    assert [ln.split()[1:3] for ln in lines[2:-1]] == [
        ["on", str(tmp_path / "twin")]] * PINNED_SCENARIOS
    assert lines[-1].startswith(
        f"PASS: {PINNED_SCENARIOS} scenarios "
        f"({SCENARIO_RUNS - direct * DIRECT_RUNS[1] - found} variants), ")
    assert f" on {tmp_path / 'twin'} (" in lines[-1]
    if model == "mixtral-8x7b":  # the output the README shows
        want = _readme_output().replace("TWIN", str(tmp_path / "twin"))
        assert doctest.OutputChecker().check_output(
            want, outputs[3], doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE), (
            want, outputs[3])


def test_no_engine_source_names_a_model():
    """The engine's C and Python sources hold no model's name or tensor names."""
    words = re.compile(r"mixtral|deepseek|qwen|olmoe|granite|gpt.?oss|kimi|"
                       r"block_sparse_moe|gate_up_proj|w1\.weight|k3-mini",
                       re.IGNORECASE)
    hits = []
    for path in sorted((ROOT / "engine").rglob("*")):
        if path.suffix not in (".c", ".h", ".py") or not path.is_file():
            continue
        for no, line in enumerate(path.read_text("utf-8").splitlines(), 1):
            if words.search(line):
                hits.append(f"{path.relative_to(ROOT)}:{no}: {line.strip()}")
    assert hits == []


@pytest.mark.parametrize("inside", ["container", "foreign"])
def test_the_gate_refuses_a_dir_it_did_not_write(inside, twins, tmp_path, capsys):
    """`xcache-replay TWIN` (no --container): exit 2, one line, nothing written."""
    from xcache.replay import main as replay_main

    if inside == "container":
        folder = twins["mixtral-8x7b"][1]
        what = "a container (model-00001-of-00019.safetensors)"
    else:
        folder = tmp_path / "notes"
        folder.mkdir()
        (folder / "mine.txt").write_text("x")
        what = "'mine.txt', which the gate did not write"
    before = sorted(p.name for p in folder.iterdir())
    assert replay_main([str(folder)], prog="xcache-replay") == 2
    out, err = capsys.readouterr()
    assert (out, err) == ("", f"CANNOT RUN: {folder} holds {what}: <dir> is the "
                          "scratch folder the gate writes into; to replay on a "
                          f"container give `xcache-replay --container {folder} "
                          "OUT` with a new OUT\n")
    assert sorted(p.name for p in folder.iterdir()) == before
