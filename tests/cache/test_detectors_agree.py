"""engine.detect and fixtures.detect give one answer, family included, everywhere.

The two detectors stay two on purpose (their docstrings say why); this is
what keeps them in step: every preset and every real-model description in
fixtures/models/, each detected by both, compared key for key.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from xcache import engine, fixtures
from xcache.engine.detect import detect
from xcache.engine.layout import resolve
from xcache.fixtures import realistic
from xcache.fixtures.detect import (
    DetectError,
    config_moe_layers,
    detect_dir,
    text_config,
)
from xcache.fixtures.from_header import from_header
from xcache.fixtures.reader import container_spec

DATA = Path(__file__).resolve().parents[2] / "fixtures" / "models"

#: every preset's family
PRESET_FAMILY = {"k3-mini": "per-expert", "mixtral-mini": "per-expert",
                 "deepseek-mini": "per-expert", "granite-mini": "fused",
                 "gptoss-mini": "fused", "huge-sparse": "per-expert"}
#: every real-model description's family
MODEL_FAMILY = {"deepseek-v3": "per-expert", "gpt-oss-20b": "fused",
                "granite-3.0-1b-a400m": "fused", "mixtral-8x7b": "per-expert",
                "olmoe-1b-7b": "per-expert", "qwen2-moe-lm": "per-expert",
                "qwen3-next-80b-a3b": "per-expert", "deepseek-v2-lite": "per-expert"}
#: the descriptions added with an `expect` block name their own family
MODEL_FAMILY.update({p.stem: d["expect"]["family"] for p in sorted(DATA.glob("*.json"))
                     if "expect" in (d := json.loads(p.read_text("utf-8")))})
#: descriptions with a second expert group outside the decoder (Qwen3-Next's
#: mtp.layers.0.mlp.experts.*): (the decoder's template, the block's); both
#: detectors take the decoder's by the rule of docs/LAYOUT.md "Detection",
#: and the block's when asked for group "mtp"
TWO_GROUPS = {"qwen3-next-80b-a3b": ("model.layers.{layer}.mlp.experts.{expert}"
                                     ".{tensor}",
                                     "mtp.layers.{layer}.mlp.experts.{expert}"
                                     ".{tensor}")}
#: descriptions with an encoder's or attention experts' group beside the
#: decoder's MLP experts: (the group, its template, its tensors)
OTHER_GROUPS = {
    "switch-base-128": ("encoder", "encoder.block.{layer}.layer.1.mlp.experts."
                        "expert_{expert}.{tensor}", ("wi.weight", "wo.weight")),
    "jetmoe-8b": ("attention", "model.layers.{layer}.self_attention.experts."
                  "{tensor}", ("input_linear.weight", "output_linear.weight"))}
#: how a Layout's source names each group
WORDS = {"encoder": "encoder's", "attention": "attention"}




def _engine_view(path: Path) -> dict:
    """The engine's detection as fixtures.detect spells it (six keys, lists)."""
    lay = detect(path)
    return {**lay.cache_kwargs(), "family": lay.family}


def test_the_tables_cover_every_preset_and_description():
    """A new preset or description must be added here, so it is compared too."""
    assert sorted(PRESET_FAMILY) == sorted(fixtures.PRESETS)
    assert sorted(MODEL_FAMILY) == sorted(p.stem for p in DATA.glob("*.json"))


@pytest.fixture(scope="module")
def presets(tmp_path_factory) -> dict[str, Path]:
    """Every preset generated once, with a config.json giving top-k if it had none."""
    root = tmp_path_factory.mktemp("presets")
    out = {}
    for name in fixtures.PRESETS:
        lay = fixtures.generate(name, root / name)
        cfg = lay.dir / "config.json"
        if not cfg.exists():
            spec = lay.spec
            cfg.write_text(json.dumps({"num_experts_per_tok": spec.top_k,
                                       "num_local_experts": spec.n_experts}))
        out[name] = lay.dir
    return out


@pytest.mark.parametrize("name", sorted(PRESET_FAMILY))
def test_both_detectors_agree_on_every_preset(presets, name):
    """Both find the preset's spec, tensor order and family, or refuse it alike."""
    folder = presets[name]
    spec = fixtures.preset(name)
    stored = resolve(folder)  # the stored spec, not detection
    assert stored.source.startswith("fixture spec")
    assert stored.family == spec.family == PRESET_FAMILY[name]
    engine_view = _engine_view(folder)
    assert detect_dir(folder) == engine_view
    assert engine_view["family"] == spec.family == PRESET_FAMILY[name]
    assert {k: v for k, v in engine_view.items() if k != "tensors"} == {
        "expert_template": spec.expert_template, "layers": list(spec.layers),
        "n_experts": spec.n_experts, "top_k": spec.top_k, "family": spec.family}
    assert sorted(engine_view["tensors"]) == sorted(
        p for p, _, _ in spec.expert_tensors)


@pytest.fixture(scope="module")
def twins(tmp_path_factory) -> dict[str, tuple[Path, Path]]:
    """Description -> (index + config folder of its first two MoE layers, twin)."""
    root = tmp_path_factory.mktemp("models")
    out = {}
    for path in sorted(DATA.glob("*.json")):
        desc = realistic.load(path)
        moe = config_moe_layers(text_config(desc["config"]))
        assert moe, f"{path.name}: the config names no MoE layers"
        src = realistic.expand(desc, root / path.stem / "src", form="index",
                               layers=moe[:2], experts=4)
        twin = root / path.stem / "twin"
        from_header(src, twin, scale=0.01, top_k=realistic.given_top_k(desc))
        out[path.stem] = (src, twin)
    return out


@pytest.mark.parametrize("model", sorted(MODEL_FAMILY))
def test_both_detectors_agree_on_every_real_model(twins, model):
    """On each description's twin both detectors say the same six keys."""
    src, twin = twins[model]
    engine_view = _engine_view(twin)
    assert detect_dir(twin) == engine_view
    assert engine_view["family"] == MODEL_FAMILY[model]
    # from the index alone the fixtures' detector sees the same layout
    from_index = detect_dir(src, top_k=realistic.given_top_k(
        realistic.load(DATA / f"{model}.json")))
    assert from_index["family"] == MODEL_FAMILY[model]
    assert {k: from_index[k] for k in ("expert_template", "layers")} == {
        k: engine_view[k] for k in ("expert_template", "layers")}
    assert container_spec(twin).family == MODEL_FAMILY[model]
    assert resolve(twin).family == MODEL_FAMILY[model]


@pytest.mark.parametrize("model", sorted(TWO_GROUPS))
def test_both_detectors_choose_the_decoder_group_and_the_mtp_one_when_asked(
        twins, model):
    """Beside an MTP block's experts both take the decoder's, or the block's."""
    src, twin = twins[model]
    decoder, mtp = TWO_GROUPS[model]
    moe = config_moe_layers(text_config(realistic.load(DATA / f"{model}.json")
                                        ["config"]))
    for path in (src, twin):
        assert detect_dir(path)["expert_template"] == decoder
    assert detect(twin).expert_template == decoder
    assert detect(twin).layers == tuple(moe[:2])  # not the block's layer 0
    assert "the decoder's expert group" in detect(twin).source
    asked = _engine_view_of(detect(twin, group="mtp"))
    assert asked == detect_dir(twin, group="mtp")
    assert {k: asked[k] for k in ("expert_template", "layers", "n_experts")} == {
        "expert_template": mtp, "layers": [0], "n_experts": 4}
    assert "the multi-token-prediction expert group" in detect(
        twin, group="mtp").source
    for ask in (lambda: detect(twin, group="both"),
                lambda: detect_dir(twin, group="both")):
        with pytest.raises((engine.LayoutError, DetectError)) as e:
            ask()
        assert "'both'" in str(e.value) and "mtp" in str(e.value)


@pytest.mark.parametrize("model", sorted(OTHER_GROUPS))
def test_both_detectors_take_an_encoders_or_attention_group_when_asked(twins, model):
    """Asked for it, both take the other group and say so in the source."""
    src, twin = twins[model]
    group, template, tensors = OTHER_GROUPS[model]
    lay = detect(twin, group=group)
    assert _engine_view_of(lay) == detect_dir(twin, group=group)
    assert (lay.expert_template, lay.tensors, lay.n_experts) == (
        template, tensors, 4)
    assert lay.source == ("detected (config.json and tensor names, the "
                          f"{WORDS[group]} expert group)")
    assert detect(twin).expert_template != template


def test_both_detectors_refuse_an_mtp_group_the_names_lack(twins):
    """Asked for the MTP group of a model without one, both say there is none."""
    _, twin = twins["mixtral-8x7b"]
    with pytest.raises(engine.LayoutError) as e:
        detect(twin, group="mtp")
    assert "no multi-token-prediction expert group among the candidates" in str(
        e.value)
    with pytest.raises(DetectError) as f:
        detect_dir(twin, group="mtp")
    assert str(f.value) == str(e.value)


def _engine_view_of(lay) -> dict:
    """A Layout as fixtures.detect spells it (six keys, lists)."""
    return {**lay.cache_kwargs(), "family": lay.family}
