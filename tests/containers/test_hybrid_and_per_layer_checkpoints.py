"""Jamba-v0.1 and Hunyuan-A13B whole, through the four commands, with no layout file.

Jamba interleaves its MoE layers with dense ones by ``expert_layer_period``
/ ``expert_layer_offset`` and its Mamba layers with attention ones by
``attn_layer_period`` / ``attn_layer_offset``; Hunyuan gives its top-k,
expert width and shared-expert count as per-layer lists and names its
shared expert ``shared_mlp`` and its router ``gate.wg``.  Each whole
checkpoint (every layer, every expert; index + config only) goes through
``checkpoint``, ``from-header --scale auto``, ``verify`` and the
inspector, exit 0 each, the layout detected from names and config alone;
the generic replay set then passes on the twin.
"""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import pytest

from xcache.engine.inspector import main as inspect_main
from xcache.fixtures.__main__ import main as fixtures_main
from xcache.fixtures.detect import detect_dir
from xcache.fixtures.layout_file import LAYOUT_FILE

DATA = Path(__file__).resolve().parents[2] / "fixtures" / "models"

#: model -> (the inspector's layout lines, the trunk tensors of layer 1 the
#: twin keeps beside the experts: shared experts, routers, mixers)
WANT = {
    "jamba-v0.1": (
        ["template: model.layers.{layer}.feed_forward.experts.{expert}.{tensor}",
         "MoE layers: 1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31 "
         "(16 layers)",
         "experts per layer: 16", "top-k: 2",
         "tensors per expert: 3: down_proj.weight, gate_proj.weight, up_proj.weight"],
        ["feed_forward.router.weight", "mamba.x_proj.weight", "mamba.A_log"]),
    "hunyuan-a13b-instruct": (
        ["template: model.layers.{layer}.mlp.experts.{expert}.{tensor}",
         "MoE layers: 0-31 (32 layers)", "experts per layer: 64", "top-k: 8",
         "tensors per expert: 3: down_proj.weight, gate_proj.weight, up_proj.weight"],
        ["mlp.shared_mlp.gate_proj.weight", "mlp.shared_mlp.down_proj.weight",
         "mlp.gate.wg.weight", "self_attn.query_layernorm.weight"]),
}


def _run(main, argv: list[str]) -> tuple[int, str, str]:
    """A command's main in process: (exit status, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(argv)
    return rc, out.getvalue(), err.getvalue()


@pytest.fixture(scope="module")
def twins(tmp_path_factory) -> dict[str, tuple[Path, Path, str]]:
    """model -> (checkpoint folder, its twin, the inspector's output)."""
    root = tmp_path_factory.mktemp("hybrid")
    out = {}
    for model in WANT:
        ckpt, twin = root / model / "checkpoint", root / model / "twin"
        assert _run(fixtures_main, ["checkpoint", str(DATA / f"{model}.json"),
                                    str(ckpt)])[0] == 0
        rc, said, err = _run(fixtures_main, ["from-header", str(ckpt), str(twin),
                                             "--scale", "auto"])
        assert (rc, err) == (0, ""), err  # no stand-in: every shape from the config
        assert "--scale auto: " in said
        assert _run(fixtures_main, ["verify", str(twin)])[0] == 0
        rc, shown, err = _run(inspect_main, [str(twin)])
        assert rc == 0, (shown, err)
        out[model] = (ckpt, twin, shown)
    return out


@pytest.mark.parametrize("model", sorted(WANT))
def test_the_whole_checkpoint_is_detected_without_a_layout_file(twins, model):
    """The index and config alone give the layout: MoE layers, experts, top-k."""
    ckpt, twin, shown = twins[model]
    assert not (ckpt / LAYOUT_FILE).exists()
    lines, _ = WANT[model]
    for line in lines:
        assert line in shown.splitlines(), (line, shown)
    want = detect_dir(ckpt)
    assert detect_dir(twin) == want
    assert f"experts per layer: {want['n_experts']}" in shown


@pytest.mark.parametrize("model", sorted(WANT))
def test_shared_experts_routers_and_mixers_stay_trunk(twins, model):
    """The twin keeps them with their own bytes, outside the expert layout."""
    _, twin, _ = twins[model]
    names = json.loads((twin / "model.safetensors.index.json").read_text())[
        "weight_map"]
    layout = detect_dir(twin)
    _, trunk = WANT[model]
    for part in trunk:
        assert f"model.layers.1.{part}" in names, part
        assert part.split(".", 1)[1] not in layout["tensors"]


@pytest.mark.nosan  # runs the replay set through the gate's runner
@pytest.mark.parametrize("model", sorted(WANT))
def test_the_replay_set_passes_on_the_whole_twin(twins, model, tmp_path):
    """`replay.py --container TWIN`, in process: no check fails; a skip says why."""
    from xcache import engine
    from xcache.gate.report import Report
    from xcache.gate.scenarios import run_scenarios

    _, twin, _ = twins[model]
    report = Report()
    names = run_scenarios(engine, tmp_path / "work", report, [],
                          container=str(twin))
    assert not report.failed, [c["detail"] for c in report.failed][:5]
    assert all(s["reason"] for s in report.skipped)
    # top-8 leaves check-cross-s3fifo's five slots too few, and the shrunk
    # stream finding's nine (its home's keys and O_DIRECT reads); nothing
    # else skips
    assert {s["scenario"] for s in report.skipped} <= {
        "check-cross-s3fifo", "found-stream-victim-hit"}
    assert len(names) >= 70
