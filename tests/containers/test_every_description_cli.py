"""Every checkpoint described in fixtures/models/ through the four commands.

Each description, top level and ``nested/`` (DBRX's config as DBRX writes
it), goes from the folder a user without the weights holds to an inspected
twin by the command lines alone, run in process: ``xcache-fixtures
checkpoint DESC CKPT --layers L`` (index + config), ``xcache-fixtures
from-header CKPT TWIN --scale auto`` (``--top-k`` where the config names
none), ``xcache-fixtures verify TWIN`` and
``xcache-inspect TWIN``, exit 0 each, no layout file.  ``L`` is the first
two MoE layers and the dense layer before them if there is one (a whole
DeepSeek-V3 takes half a minute in from-header alone; these two or three
layers a few seconds).  The inspector's layout is the one the generator's
detector finds on the checkpoint, the description's ``expect`` block where
it has one, and its shared experts are reported apart from the routed ones.
"""

from __future__ import annotations

import contextlib
import io
import json
from collections.abc import Callable
from pathlib import Path

import pytest

from xcache.engine.inspector import main as inspect_main
from xcache.fixtures import realistic
from xcache.fixtures.__main__ import main as fixtures_main
from xcache.fixtures.detect import config_moe_layers, detect_dir
from xcache.fixtures.layout_file import LAYOUT_FILE
from xcache.layout_rules import classify, ranges

DATA = Path(__file__).resolve().parents[2] / "fixtures" / "models"
DESCRIPTIONS = sorted(DATA.glob("*.json")) + sorted(DATA.glob("nested/*.json"))
#: descriptions whose names hold shared experts: how many per layer the
#: inspector says, and why (the others have none: no such line)
SHARED = {"deepseek-moe-16b": (2, "n_shared_experts 2"),
          "deepseek-v2": (2, "n_shared_experts 2"),
          "deepseek-v2-lite": (2, "n_shared_experts 2"),
          "deepseek-v3": (1, "n_shared_experts 1"),
          "ernie-4.5-21b-a3b": (2, "moe_num_shared_experts 2"),
          "ernie-4.5-vl-28b-a3b": (2, "moe_num_shared_experts 2"),
          "glm-4.5-air": (1, "n_shared_experts 1"),
          "hunyuan-a13b-instruct": (1, "num_shared_expert 1"),
          "llama-4-scout-17b-16e": (1, "one module, no config key says more"),
          "qwen2-57b-a14b": (1, "one module, no config key says more"),
          "qwen2-moe-lm": (1, "one module, no config key says more"),
          "qwen3-next-80b-a3b": (1, "one module, no config key says more")}
#: name components of a shared expert module
MODULES = ("shared_expert", "shared_experts", "shared_mlp")


def _run(main: Callable[[list[str]], int], argv: list[str]) -> tuple[int, str, str]:
    """A command's main in process: (exit status, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(argv)
    return rc, out.getvalue(), err.getvalue()


def _kept(desc: dict) -> list[int]:
    """The first two MoE layers, and the dense layer before the first if any."""
    moe = config_moe_layers(desc["config"])
    assert moe, "every description has MoE layers by its config"
    return ([moe[0] - 1] if moe[0] > 0 else []) + moe[:2]


def test_every_description_is_a_case() -> None:
    """Both folders' descriptions are here: 26 at the top level, DBRX nested."""
    assert len(DESCRIPTIONS) == 27
    assert DESCRIPTIONS[-1] == DATA / "nested" / "dbrx-base.json"


@pytest.mark.parametrize("path", DESCRIPTIONS, ids=lambda p: p.stem)
def test_the_four_commands_take_the_description_to_an_inspected_twin(
        path: Path, tmp_path: Path) -> None:
    """checkpoint, from-header --scale auto, verify, inspect: exit 0 each,
    the layout detection finds, the shared experts apart."""
    desc = realistic.load(path)
    kept = _kept(desc)
    ckpt, twin = tmp_path / "checkpoint", tmp_path / "twin"
    rc, out, err = _run(fixtures_main, [
        "checkpoint", str(path), str(ckpt),
        "--layers", ",".join(map(str, kept))])
    assert (rc, err) == (0, ""), err
    assert out.startswith(f"checkpoint {ckpt}: model.safetensors.index.json + "
                          "config.json; ")
    names = json.loads((ckpt / "model.safetensors.index.json").read_text())[
        "weight_map"]
    top_k = realistic.given_top_k(desc)  # a config without one: --top-k
    want = detect_dir(ckpt, top_k=top_k)
    rc, out, err = _run(fixtures_main, ["from-header", str(ckpt), str(twin),
                                        "--scale", "auto"]
                        + ["--top-k", str(top_k)] * (top_k is not None))
    assert rc == 0, err
    assert "--scale auto: " in out
    rc, out, err = _run(fixtures_main, ["verify", str(twin)])
    assert (rc, err) == (0, ""), out
    # every tensor but another expert group's numbered past the layout's
    # (ERNIE-VL's vision experts 64-127 beside the text experts' layout)
    past = [n for n in names if (hit := classify(n)) and hit.expert >= want[
        "n_experts"] and hit.template == want["expert_template"]]
    assert out == (f"OK: {twin} is exactly the from-header:checkpoint container "
                   f"({len(names) - len(past)} tensors)\n")
    rc, out, err = _run(inspect_main, [str(twin)])
    assert (rc, err) == (0, ""), out
    lines = out.splitlines()
    assert not (ckpt / LAYOUT_FILE).exists()
    layers = want["layers"]
    assert layers == [la for la in kept if la in config_moe_layers(desc["config"])]
    assert lines[1:7] == [
        f"layout: fixture spec (xcache.spec in {twin}/model.safetensors.index.json)",
        f"template: {want['expert_template']}",
        f"MoE layers: {ranges(layers)} ({len(layers)} layer"
        f"{'s' * (len(layers) != 1)})",
        f"experts per layer: {want['n_experts']}",
        f"top-k: {want['top_k']}",
        f"tensors per expert: {len(want['tensors'])}: " + ", ".join(want["tensors"])]
    assert lines[9] == f"fused: {'yes' if want['family'] == 'fused' else 'no'}"
    exp = desc.get("expect") or {}
    if exp:
        assert (want["expert_template"], want["family"], sorted(want["tensors"]),
                want["top_k"]) == (exp["template"], exp["family"],
                                   sorted(exp["tensors"]), exp["top_k"])
    n, why = SHARED.get(path.stem, (0, ""))
    assert exp.get("shared_experts", n) == n
    shared = _shared_lines(desc, names, kept, n, why)
    assert bool(shared) == bool(n)
    assert [ln for ln in lines[10:] if ln.startswith("shared experts: ")] == shared


def _shared_lines(desc: dict, names: dict[str, str], kept: list[int], n: int,
                  why: str) -> list[str]:
    """The inspector's shared-expert lines, from the description's patterns
    and the layers the checkpoint kept (one per module, decoder's first)."""
    found: dict[str, tuple[set[int], set[str]]] = {}
    for t in desc["tensors"]:
        comps = t["name"].split(".")
        j = next((k for k, c in enumerate(comps) if c in MODULES), None)
        if j is None:
            continue
        at = comps.index("layers") + 1  # every pattern's layer module
        has = ({la for la in kept if t["name"].replace("{L}", str(la)) in names}
               if comps[at] == "{L}" else {int(comps[at])})
        if not has:
            continue
        tmpl = ".".join(comps[:at] + ["{layer}"] + comps[at + 1:j + 1] + ["{tensor}"])
        ls, parts = found.setdefault(tmpl, (set(), set()))
        ls |= has
        parts.add(".".join(comps[j + 1:]))
    return [f"shared experts: {n} per layer ({why}), not routed: {tmpl} in "
            f"layers {ranges(ls)} ({len(ls)} layer{'s' * (len(ls) != 1)}); "
            f"tensors {len(parts)}: " + ", ".join(sorted(parts))
            for tmpl, (ls, parts) in sorted(found.items())]
