"""The tool fuzzer's seed corpus: small valid inputs of every kind the tools read.

``python -m xcache.hunt.fuzz tools --write-seeds`` rewrites
``hunt/fuzz/corpus-tools/seed/`` from this module (deterministic, about 40 KB):

* ``ckpt/``: a tiny real checkpoint (2 MoE layers x 4 experts, top-2, one
  shard with its data, an index and a ``config.json``), whose layout
  ``engine.layout`` detects from ``config.json`` and the names;
* ``xcache-layout.toml``: the same layout as an explicit layout file;
* ``spec.toml`` / ``spec.json``: a tiny fixture spec (``fixtures new``);
* ``programs.json``: the shipped ``gate/scenarios/programs.json`` cut to
  two programs (``replay.py --programs-file``);
* ``trace.*``: one routing trace (12 tokens, 2 layers, 8 experts, top-2) in
  every format ``oracle.traces.read_trace`` reads;
* ``desc.json``: the shipped Mixtral-8x7B description cut to 2 layers and 2
  shards (``fixtures checkpoint DESC OUT``);
* ``model.json`` / ``model.toml``: the time lab's shipped disk and compute
  model (``replay.py time --model FILE``), as JSON and as TOML;
* ``adapter/``: an outside cache's adapter folder (``replay.py --cache``):
  its manifest ``xcs.toml`` (a source pinned by its digest, capabilities,
  a design, a deviation, a served container), the source and the shim.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

SEED = Path(__file__).resolve().parent / "corpus-tools" / "seed"

TEMPLATE = "model.layers.{layer}.mlp.experts.{expert}.{tensor}"
LAYERS, EXPERTS, TOP_K, HIDDEN, INTER = 2, 4, 2, 8, 4

CONFIG = {
    "architectures": ["MixtralForCausalLM"],
    "model_type": "mixtral",
    "hidden_size": HIDDEN,
    "intermediate_size": INTER,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "num_hidden_layers": LAYERS,
    "num_local_experts": EXPERTS,
    "num_experts_per_tok": TOP_K,
    "vocab_size": 16,
    "torch_dtype": "bfloat16",
}

LAYOUT_TOML = f"""\
expert_template = "{TEMPLATE}"
tensors = ["w1.weight", "w2.weight", "w3.weight"]
layers = [0, 1]
n_experts = {EXPERTS}
top_k = {TOP_K}
"""

SPEC = {
    "name": "tiny",
    "seed": 7,
    "layers": [0, 1],
    "experts": 4,
    "top_k": 2,
    "expert_template": TEMPLATE,
    "layout": "dtype-sorted",
    "shards": 2,
    "index": True,
    "expert_tensors": [
        {"name": "w1.weight", "dtype": "F8_E4M3", "shape": [8, 4]},
        {"name": "w1.weight_scale", "dtype": "F32", "shape": [1]},
        {"name": "w2.weight", "dtype": "BF16", "shape": [4, 8]},
    ],
    "trunk": [{"name": "model.embed_tokens.weight", "dtype": "BF16",
               "shape": [16, 8]}],
}


def _toml_value(v: object) -> str:
    return json.dumps(v) if not isinstance(v, bool) else str(v).lower()


def spec_toml(spec: dict) -> str:
    """A fixture spec as TOML text (the subset the seed uses)."""
    lines = []
    for k, v in spec.items():
        if k not in ("expert_tensors", "trunk"):
            lines.append(f"{k} = {_toml_value(v)}")
    for k in ("expert_tensors", "trunk"):
        for t in spec[k]:
            lines.append("")
            lines.append(f"[[{k}]]")
            lines += [f"{a} = {_toml_value(b)}" for a, b in t.items()]
    return "\n".join(lines) + "\n"


def _safetensors(tensors: list[tuple[str, str, list[int]]]) -> bytes:
    """A safetensors file of zero-filled tensors, in the order given."""
    size = {"BF16": 2, "F32": 4}
    hdr: dict = {"__metadata__": {"format": "pt"}}
    pos = 0
    for name, dtype, shape in tensors:
        n = size[dtype] * int(np.prod(shape))
        hdr[name] = {"dtype": dtype, "shape": shape, "data_offsets": [pos, pos + n]}
        pos += n
    body = json.dumps(hdr, separators=(",", ":")).encode()
    body += b" " * (-len(body) % 8)
    data = bytes((i * 7) & 0x7F for i in range(pos))
    return len(body).to_bytes(8, "little") + body + data


def checkpoint(folder: Path) -> None:
    """Write the tiny checkpoint ``ckpt/`` into ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    tensors = [("model.embed_tokens.weight", "BF16", [16, HIDDEN])]
    for la in range(LAYERS):
        tensors.append((f"model.layers.{la}.self_attn.q_proj.weight", "BF16",
                        [HIDDEN, HIDDEN]))
        tensors.append((f"model.layers.{la}.mlp.gate.weight", "BF16",
                        [EXPERTS, HIDDEN]))
        for e in range(EXPERTS):
            for t, shape in (("w1", [INTER, HIDDEN]), ("w2", [HIDDEN, INTER]),
                             ("w3", [INTER, HIDDEN])):
                tensors.append((TEMPLATE.format(layer=la, expert=e,
                                                tensor=t + ".weight"),
                                "BF16", shape))
    tensors.append(("lm_head.weight", "BF16", [16, HIDDEN]))
    shard = "model-00001-of-00001.safetensors"
    raw = _safetensors(tensors)
    (folder / shard).write_bytes(raw)
    total = len(raw) - 8 - int.from_bytes(raw[:8], "little")
    (folder / "model.safetensors.index.json").write_text(json.dumps(
        {"metadata": {"total_size": total},
         "weight_map": {n: shard for n, _, _ in tensors}}, indent=1) + "\n")
    (folder / "config.json").write_text(json.dumps(CONFIG, indent=1) + "\n")


def routes() -> list[list[list[int]]]:
    """12 tokens x 2 layers of top-2 expert ids out of 8 (deterministic)."""
    rng = np.random.default_rng(3)
    return [[sorted(int(x) for x in rng.choice(8, 2, replace=False))
             for _ in range(2)] for _ in range(12)]


def traces(folder: Path) -> None:
    """Write the seed trace in every format ``read_trace`` reads."""
    from xcache.oracle.traces import read_trace, write_csv, write_oracle_general
    from xcache.oracle.traces.engine_dump import (
        _ENGINE_HEADER,
        _ENGINE_RECORD,
    )
    from xcache.oracle.traces.engine_dump import ENGINE_MAGIC as _ENGINE_MAGIC

    r = routes()
    jl = folder / "trace.jsonl"
    jl.write_text("".join(json.dumps({"tok": i, "layers": t}) + "\n"
                          for i, t in enumerate(r)))
    (folder / "trace-megatron.jsonl").write_text("".join(
        json.dumps({"step": 0, "layer": la, "top_indices": [r[i][la] for i in
                                                             range(12)]}) + "\n"
        for la in range(2)))
    (folder / "trace.txt").write_text("".join(
        f"{i} {la} {' '.join(map(str, r[i][la]))}\n"
        for i in range(12) for la in range(2)))
    ids = np.array([e for t in r for lay in t for e in lay], "<i4")
    ids.tofile(folder / "trace.i32")
    pairs = np.array([(la, e) for t in r for la, lay in enumerate(t) for e in lay],
                     "<i4")
    pairs.tofile(folder / "trace.pairs")
    tr = read_trace(jl)
    write_csv(tr, folder / "trace.csv")
    write_oracle_general(tr, folder / "trace.oracleGeneral")
    head = np.zeros(1, _ENGINE_HEADER)
    head["magic"], head["version"] = _ENGINE_MAGIC, 1
    head["record_bytes"], head["layer_limit"] = _ENGINE_RECORD.itemsize, 2
    head["n_experts"], head["top_k"], head["n_slots"] = 8, 2, 6
    rec = np.zeros(len(ids), _ENGINE_RECORD)
    rec["step"] = np.repeat(np.arange(12), 4)
    rec["layer"] = pairs[:, 0]
    rec["expert"] = pairs[:, 1]
    rec["outcome"] = 1  # miss: a demand access
    (folder / "trace.xctrace").write_bytes(head.tobytes() + rec.tobytes())


def programs(folder: Path) -> None:
    """Write ``programs.json``: the shipped programs file cut to two programs."""
    shipped = json.loads((Path(__file__).resolve().parents[2] / "gate" /
                          "scenarios" / "programs.json").read_text())
    rows = [dict(r, seeds=r["seeds"][:1]) for r in shipped["programs"]
            if (r["container"], r["option_sets"]) in (("k3-mini", ["plain"]),
                                                     ("granite-mini", ["pool"]))]
    (folder / "programs.json").write_text(json.dumps(
        {**shipped, "programs": rows}, indent=1) + "\n")


def description(folder: Path) -> None:
    """Write ``desc.json``: Mixtral-8x7B's description, 2 layers in 2 shards."""
    root = Path(__file__).resolve().parents[2]
    desc = json.loads((root / "fixtures" / "models" / "mixtral-8x7b.json")
                      .read_text())
    desc["model"] = "Mixtral-8x7B cut to 2 layers (the tool fuzzer's seed)"
    desc["shards"] = 2
    desc["config"]["num_hidden_layers"] = 2
    (folder / "desc.json").write_text(json.dumps(desc, indent=1) + "\n")


def time_models(folder: Path) -> None:
    """Write ``model.json`` and ``model.toml``: the shipped NVMe model."""
    from xcache.hunt.fuzz.mutate import dump_toml

    root = Path(__file__).resolve().parents[2]
    model = json.loads((root / "lab" / "timing" / "models" / "nvme.json")
                       .read_text())
    (folder / "model.json").write_text(json.dumps(model, indent=1) + "\n")
    (folder / "model.toml").write_bytes(dump_toml(model))


#: The seed adapter's files: a source its manifest pins, and its shim.
ADAPTER_FILES = {"cache.c": "/* the tool fuzzer's seed cache: never compiled */\n"
                            "int seed_cache;\n",
                 "shim.c": "/* the tool fuzzer's seed shim: never compiled */\n"}


def adapter(folder: Path) -> None:
    """Write ``adapter/``: a manifest over a pinned source and a shim."""
    import hashlib

    from xcache.hunt.fuzz.mutate import dump_toml

    folder.mkdir(parents=True, exist_ok=True)
    for name, text in ADAPTER_FILES.items():
        (folder / name).write_text(text)
    manifest = {
        "name": "seedcache", "shim": "shim.c", "cflags": ["-O2", "-std=c11"],
        "capabilities": {
            "ops": ["get", "hold", "prefetch", "reset_stats"],
            "policies": ["lru"], "counters": ["requests", "hits", "misses"],
            "facts": ["n_slots", "resident"], "pins": "flag",
            "faults": ["io"], "errors": "typed"},
        "design": {"holds": "whole-set", "policy": "sampled"},
        "deviations": {"op:getmany": "no synchronous batch"},
        "sources": [{"path": "cache.c", "sha256": hashlib.sha256(
            ADAPTER_FILES["cache.c"].encode()).hexdigest()}],
        "containers": [{"preset": "k3-mini"}],
    }
    (folder / "xcs.toml").write_bytes(dump_toml(manifest))


def write_seeds(folder: Path = SEED) -> list[Path]:
    """Rewrite every seed input into ``folder``; return the files written."""
    folder.mkdir(parents=True, exist_ok=True)
    checkpoint(folder / "ckpt")
    (folder / "xcache-layout.toml").write_text(LAYOUT_TOML)
    (folder / "spec.json").write_text(json.dumps(SPEC, indent=1) + "\n")
    (folder / "spec.toml").write_text(spec_toml(SPEC))
    traces(folder)
    programs(folder)
    description(folder)
    time_models(folder)
    adapter(folder / "adapter")
    return sorted(p for p in folder.rglob("*") if p.is_file())
