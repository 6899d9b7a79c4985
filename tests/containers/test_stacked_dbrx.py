"""DBRX's stacked [E*I, H] experts, as the real checkpoint stores them, end to end.

``fixtures/models/nested/dbrx-base.json`` holds DBRX's facts; its config
is nested (``d_model``, ``n_layers``, ``ffn_config``, ``attn_config``), which
``fixtures.realistic`` reads as the layout rules do, so the folder a user
holds is written from the description itself, its ``--experts`` subset
said where DBRX says it (``ffn_config.moe_num_experts``).  from-header
keeps the checkpoint's own ``[E*I, H]`` shape; the engine serves expert e as rows
``[e*I, (e+1)*I)`` and agrees byte for byte with the oracle and the
generator's encoding.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from xcache import engine, fixtures
from xcache import layout_rules as rules
from xcache.engine import _lib
from xcache.engine.detect import detect
from xcache.fixtures import realistic
from xcache.fixtures.detect import detect_dir
from xcache.fixtures.from_header import from_header
from xcache.fixtures.reader import container_spec, read_header
from xcache.fixtures.shapes import derive
from xcache.fixtures.verify import verify
from xcache.oracle.layout import expert_pieces, read_pieces
from xcache.oracle.safetensors import Container as OracleContainer

DESC = Path(__file__).resolve().parents[2] / "fixtures" / "models" / "nested" \
    / "dbrx-base.json"
TEMPLATE = "transformer.blocks.{layer}.ffn.experts.{tensor}"
PARTS = ["mlp.w1", "mlp.v1", "mlp.w2"]


def _checkpoint(folder: Path, layers: list[int], experts: int) -> Path:
    """DBRX's index + real config.json for ``layers`` and ``experts`` experts."""
    src = realistic.expand(DESC, folder, form="index", layers=layers,
                           experts=experts)
    cfg = copy.deepcopy(json.loads(DESC.read_text("utf-8"))["config"])
    rules.config_set(cfg, "moe_num_experts", experts)
    assert json.loads((src / "config.json").read_text()) == cfg
    return src


def _slot_shapes(cache: engine.ExpertCache) -> list[tuple[str, tuple[int, ...]]]:
    """What C reports for each slot tensor: its name and the slice's shape."""
    ffi, lib = _lib.ffi(), _lib.lib()
    info = ffi.new("xc_slot_tensor *")
    out = []
    for k in range(lib.xc_cache_n_tensors(cache._ptr)):
        _lib.check(lib.xc_cache_tensor(cache._ptr, k, info))
        out.append((ffi.string(info.name).decode(),
                    tuple(int(info.shape[d]) for d in range(info.ndim))))
    return out


def test_config_rules_give_dbrx_shapes_from_its_nested_config():
    """d_model, n_heads, attn_config.kv_n_heads, ffn_config: every described shape."""
    desc = json.loads(DESC.read_text("utf-8"))
    _, ts = realistic.tensors(desc, None, None)
    got = derive(desc["config"], [t[0] for t in ts])
    assert {t[0]: (t[1], t[2]) for t in ts} == got
    assert got["transformer.blocks.7.ffn.experts.mlp.w1"] == (
        "BF16", (16 * 10752, 6144))
    assert got["transformer.blocks.7.norm_attn_norm.attn.Wqkv.weight"] == (
        "BF16", (8192, 6144))
    assert len(ts) == 40 * 8 + 3  # 2 norms, Wqkv, out_proj, router, w1, v1, w2


@pytest.fixture(scope="module")
def twin(tmp_path_factory) -> Path:
    """The scaled twin of DBRX blocks 0-1 with 4 experts, from index + config."""
    root = tmp_path_factory.mktemp("dbrx")
    src = _checkpoint(root / "src", [0, 1], 4)
    assert detect_dir(src) == {"expert_template": TEMPLATE,
                               "tensors": sorted(PARTS), "layers": [0, 1],
                               "n_experts": 4, "top_k": 4, "family": "fused"}
    out = root / "twin"
    from_header(src, out, scale=1 / 64)
    return out


def test_twin_keeps_the_stacked_shape_and_verifies(twin):
    """The twin's w1/v1/w2 are [4 * I, H] as the checkpoint has them; verify clean."""
    cfg = json.loads((twin / "config.json").read_text())
    i, h = cfg["ffn_config"]["ffn_hidden_size"], cfg["d_model"]
    assert (i, h) == (168, 96)
    shapes = {}
    for shard in sorted(twin.glob("*.safetensors")):
        header = read_header(shard)[0]
        shapes.update({k: tuple(v["shape"]) for k, v in header.items()
                       if k != "__metadata__"})
    for la in (0, 1):
        for p in PARTS:
            assert shapes[TEMPLATE.format(layer=la, tensor=p)] == (4 * i, h)
    assert verify(twin) == []


def test_engine_serves_row_slices_equal_to_the_oracle_and_the_encoding(twin):
    """Expert e is rows [e*I, (e+1)*I) of each tensor: engine == oracle == encoding."""
    spec = container_spec(twin)
    lay = detect(twin)
    assert (lay.family, lay.expert_template, list(lay.layers), lay.n_experts) == (
        "fused", TEMPLATE, [0, 1], 4)
    reader = OracleContainer(twin)
    i, h = 168, 96
    with engine.ExpertCache.open(twin, n_slots=spec.top_k + 1) as cache:
        assert cache.expert_bytes == 3 * i * h * 2
        assert _slot_shapes(cache) == [(p, (i, h)) for p in lay.tensors]
        for layer in (0, 1):
            for e in range(4):
                with cache.get(layer, e) as x:
                    got = bytes(x.data)
                    assert [(t, v.nbytes) for t, v in x.tensors.items()] == [
                        (p, i * h * 2) for p in lay.tensors]
                assert got == fixtures.expected_expert_bytes(spec, layer, e)
                pieces = expert_pieces(reader, TEMPLATE, list(lay.tensors), 4,
                                       layer, e)
                assert [(p.start, p.nbytes) for p in pieces] == [
                    (e * i * h * 2, i * h * 2)] * 3
                assert got == read_pieces(reader, pieces)
        cache.check()
        assert cache.stats()["misses"] == 8


@pytest.mark.nosan  # runs the replay set through the gate's runner
def test_generic_replay_set_passes_on_the_stacked_twin(twin, tmp_path):
    """`replay.py --container TWIN` in process: no failure on [E*I, H] experts."""
    from xcache.gate.report import Report
    from xcache.gate.scenarios import run_scenarios

    report = Report()
    names = run_scenarios(engine, tmp_path / "work", report, [], container=str(twin))
    assert not report.failed, [c["detail"] for c in report.failed][:5]
    assert len(names) >= 55
    assert all(s["reason"] for s in report.skipped)
    reads = [c for c in report.checks if c["backend"] == "engine"
             and "wrong_reads" in (c.get("actual") or {})]
    assert reads and all(c["actual"]["wrong_reads"] == 0 for c in reads)
