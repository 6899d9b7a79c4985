"""The one rule set of an expert layout: names, config keys, MoE layers, top-k.

Every tool that decides a checkpoint's expert layout by rule -- the
generator's detector (``fixtures.detect``, from names and possibly
header-less shards), ``from-header``, the engine's detector
(``engine.detect``, from the table its C reader validated), hence the
inspector and the gate -- asks this module, so one checkpoint gets one
answer and one refusal gets one message (docs/LAYOUT.md "Detection").
It imports nothing of the project (docs/DESIGN.md §2): the engine and the
generator may both import it.  What only a caller can do stays with it:
reading files, and the engine's check of fused slices against the byte
sizes its reader validated.

The rules, all generic (no model is named):

* a tensor's *layer* is the number after a layer module component
  (:data:`LAYER_MODULES`: ``layers.<N>``, ``blocks.<N>``, ``h.<N>``, ...);
* a *per-expert* tensor has ``experts.<E>.<tensor>`` after its layer, a
  *fused* one ``experts.<tensor>`` (or a module of :data:`FUSED_MODULES`):
  one tensor per (layer, part) whose leading dimension holds the experts,
  ``[E, ...]`` or stacked ``[E*I, ...]`` rows;
* components of :data:`NOT_ROUTED` (shared experts, routers) are never
  routed experts; a group under :data:`MTP_MODULE` is a
  multi-token-prediction block's, chosen only when asked (:data:`GROUPS`);
* config keys are read from a multimodal model's text model first
  (:data:`INNER_SCOPES`), then the top level, then the sub-blocks of
  :data:`BLOCK_SCOPES` (``ffn_config.moe_top_k``, ``attn_config.kv_n_heads``),
  each list of aliases in order (:data:`EXPERT_KEYS`, :data:`TOP_K_KEYS`,
  :data:`LAYER_KEYS`); an expert count or top-k given per layer (a list)
  counts when its values are one (:data:`PER_LAYER_KEYS`);
* MoE layers follow :func:`config_moe_layers` (explicit lists, interleave
  steps, dense-first counts, the dense complement);
* the top-k is the config's, else the caller's (``--top-k``), else refused.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["BLOCK_SCOPES", "EXPERT_KEYS", "FUSED", "FUSED_MODULES", "GROUPS",
           "INNER_SCOPES", "LAYER_KEYS", "LAYER_MODULES", "MTP_MODULE",
           "NOT_ROUTED", "PER_EXPERT", "PER_LAYER_KEYS", "TOP_K_KEYS", "Hit",
           "RuleError",
           "classify", "config_count", "config_get", "config_moe_layers",
           "config_set", "config_view", "detect", "is_mtp", "layer_of", "ranges"]

#: One tensor per expert: the template holds ``{expert}``.
PER_EXPERT = "per-expert"
#: Stacked tensors, the experts along the leading dimension: no ``{expert}``.
FUSED = "fused"

#: Keys giving the routed experts per layer, the first present wins.
EXPERT_KEYS = ("num_local_experts", "n_routed_experts", "num_experts",
               "moe_num_experts")
#: Keys giving the experts each token is routed to, the first present wins
#: (``top_k`` last: elsewhere it is a sampling setting, where 0 means off).
TOP_K_KEYS = ("num_experts_per_tok", "experts_per_token", "num_experts_per_token",
              "moe_top_k", "moe_topk", "num_selected_experts", "top_k_experts",
              "moe_k", "router_topk", "top_k")
#: Keys a config may give as one value per layer (a list), all alike.
PER_LAYER_KEYS = EXPERT_KEYS + TOP_K_KEYS
#: Keys giving the number of decoder layers.
LAYER_KEYS = ("num_hidden_layers", "n_layers", "num_layers", "n_layer")
#: Sub-documents holding a multimodal model's text model, read first.
INNER_SCOPES = ("text_config", "language_config", "llm_config")
#: Sub-documents of one block's settings, read after the top level.
BLOCK_SCOPES = ("ffn_config", "moe_config", "attn_config")
#: Module names followed by the layer number: ``model.layers.3``,
#: ``transformer.blocks.3``, ``transformer.h.3``.
LAYER_MODULES = ("layers", "blocks", "h", "layer", "block", "decoder_layers")
#: Module names that hold fused expert projections with no ``experts`` module.
FUSED_MODULES = ("input_linear", "output_linear")
#: Name components that are never routed experts.
NOT_ROUTED = ("shared_expert", "shared_experts", "shared_mlp", "router", "gate",
              "e_score_correction_bias")
#: The module before ``layers.<N>`` that marks a multi-token-prediction block.
MTP_MODULE = "mtp"
#: The expert groups detection can be asked for.
GROUPS = ("decoder", "mtp")
#: The conventional layout file (named in refusals; the callers read it).
LAYOUT_FILE = "xcache-layout.toml"
#: The largest layer id, expert count or top-k the engine takes.
I32_MAX = 2**31 - 1


class RuleError(ValueError):
    """A layout the rules refuse; the message is the one every tool prints."""

    def __init__(self, message: str, *, layer: int | None = None,
                 expert: int | None = None) -> None:
        super().__init__(message)
        self.layer = layer
        self.expert = expert


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def ranges(values: Iterable[int]) -> str:
    """Ascending integers as compact ranges: ``0, 3-5, 9``."""
    vals = sorted(set(values))
    out: list[str] = []
    i = 0
    while i < len(vals):
        j = i
        while j + 1 < len(vals) and vals[j + 1] == vals[j] + 1:
            j += 1
        out.append(str(vals[i]) if i == j else f"{vals[i]}-{vals[j]}")
        i = j + 1
    return ", ".join(out) or "none"


# ---------------------------------------------------------------- config keys

def _scopes(config: Mapping[str, Any] | None) -> list[tuple[str, Mapping[str, Any]]]:
    """(key prefix, mapping) in the order keys are looked up."""
    if not isinstance(config, Mapping):
        return []
    inner = [(f"{k}.", config[k]) for k in INNER_SCOPES
             if isinstance(config.get(k), Mapping)]
    outer = [("", config)]
    blocks = [(f"{k}.", config[k]) for k in BLOCK_SCOPES
              if isinstance(config.get(k), Mapping)]
    nested = [(p + f"{k}.", s[k]) for p, s in inner for k in BLOCK_SCOPES
              if isinstance(s.get(k), Mapping)]
    return inner + nested + outer + blocks


def config_get(config: Mapping[str, Any] | None, key: str) -> tuple[str, Any] | None:
    """(where, value) of the first non-null ``key`` in the lookup order, or None.

    ``where`` is the key as the config spells it: ``ffn_config.moe_top_k``.
    """
    for prefix, scope in _scopes(config):
        if scope.get(key) is not None:
            return prefix + key, scope[key]
    return None


def config_view(config: Mapping[str, Any] | None) -> dict[str, Any]:
    """The config flattened: every scope's keys, the first in lookup order winning."""
    out: dict[str, Any] = {}
    for _, scope in reversed(_scopes(config)):
        out.update({k: v for k, v in scope.items() if v is not None})
    return out


def config_set(config: dict[str, Any], key: str, value: Any) -> None:
    """Set ``key`` where :func:`config_get` finds it (else in the text model)."""
    found = config_get(config, key)
    target: dict[str, Any] = config
    path = found[0].split(".")[:-1] if found else (
        [next(k for k in INNER_SCOPES if isinstance(config.get(k), dict))]
        if any(isinstance(config.get(k), dict) for k in INNER_SCOPES) else [])
    for p in path:
        target = target[p]
    target[key] = value


def config_count(config: Mapping[str, Any] | None, keys: Sequence[str],
                 where: str = "config.json", lo: int = 1
                 ) -> tuple[int, str] | None:
    """(value, key) of the first of ``keys`` present, checked ``lo..I32_MAX``.

    ``top_k`` 0 is absent (sampling off); any other value out of range or
    not an integer is a RuleError naming ``where`` and the key.  A key of
    :data:`PER_LAYER_KEYS` may give one value per layer (Hunyuan's
    ``moe_topk: [8, 8, ...]``): each is checked, and they must be one value
    (:func:`_one_value`).
    """
    for k in keys:
        got = config_get(config, k)
        if got is None:
            continue
        name, v = got
        if k == "top_k" and v == 0:
            continue
        if isinstance(v, list) and v and k in PER_LAYER_KEYS:
            for i, x in enumerate(v):
                _check_count(x, f"{name}[{i}]", where, lo)
            return _one_value(v, name, where), name
        _check_count(v, name, where, lo)
        return int(v), name
    return None


def _check_count(v: Any, name: str, where: str, lo: int) -> None:
    if not _is_int(v) or v < lo:
        raise RuleError(f"{where}: {name} must be an integer of at least "
                        f"{lo}, got {v!r}")
    if v > I32_MAX:
        raise RuleError(f"{where}: {name} must be at most {I32_MAX} (the "
                        f"engine's limit), got {v!r}")


def _one_value(values: list[int], name: str, where: str) -> int:
    """The one value of a per-layer list; RuleError naming each value's layers."""
    at: dict[int, list[int]] = {}
    for layer, x in enumerate(values):
        at.setdefault(x, []).append(layer)
    if len(at) == 1:
        return int(values[0])
    said = "; ".join(f"{x} in layer{'s' if len(ls) > 1 else ''} {ranges(ls)}"
                     for x, ls in at.items())
    raise RuleError(f"{where}: {name} gives one value per layer and they differ "
                    f"({said}): one value serves every layer; give a layout "
                    f"file ({LAYOUT_FILE}) with it")


def _int_list(config: Mapping[str, Any], key: str, where: str
              ) -> tuple[list[int], str] | None:
    got = config_get(config, key)
    if got is None:
        return None
    name, v = got
    if not isinstance(v, list) or not all(_is_int(x) for x in v):
        raise RuleError(f"{where}: {name} must be a list of integers, got {v!r}")
    return list(v), name


def config_moe_layers(config: Mapping[str, Any] | None,
                      present: Iterable[int] | None = None,
                      where: str = "config.json") -> tuple[list[int], str] | None:
    """The MoE layer ids the config implies (among ``present``), and why; or None.

    None when the config gives no layer count.  The layers are the
    decoder's ``0..n-1`` and the ``num_nextn_predict_layers`` after them;
    then, in order: an explicit list (``moe_layers``, or per-layer 0/1
    ``moe_layer_freq``) keeps its ids, else the interleave steps keep every
    step-th (``interleave_moe_layer_step``, ``decoder_sparse_step``,
    ``moe_layer_interval``, ``moe_layer_frequency``: (L + 1) % step == 0;
    ``moe_layer_freq``: L % freq == 0; ``expert_layer_period``/``expert_layer_offset``:
    L % period == offset); dense-first counts drop the first layers
    (``first_k_dense_replace``, ``moe_layer_start_index``, and
    ``moe_layer_end_index`` the last); ``mlp_only_layers`` are dense.
    """
    n = config_count(config, LAYER_KEYS, where, lo=0)
    if n is None:
        return None
    total, why = n[0], [f"{n[1]} {n[0]}"]
    extra = config_count(config, ("num_nextn_predict_layers",), where, lo=0)
    if extra and extra[0]:
        total += extra[0]
        why.append(f"{extra[1]} {extra[0]}")
    keep = set(present) if present is not None else None
    ids = [x for x in (sorted(keep) if keep is not None else range(total))
           if 0 <= x < total]
    listed = _int_list(config, "moe_layers", where)
    freq = config_get(config, "moe_layer_freq")
    if listed is None and freq is not None and isinstance(freq[1], list):
        listed = ([i for i, f in enumerate(_int_list(config, "moe_layer_freq",
                                                     where)[0]) if f], freq[0])
        freq = None
    if listed is not None:
        allowed = set(listed[0])
        ids = [x for x in ids if x in allowed]
        why.append(f"{listed[1]} {ranges(listed[0])}")
    else:
        for key, test in (("interleave_moe_layer_step", lambda x, s: (x + 1) % s),
                          ("decoder_sparse_step", lambda x, s: (x + 1) % s),
                          ("moe_layer_interval", lambda x, s: (x + 1) % s),
                          ("moe_layer_frequency", lambda x, s: (x + 1) % s),
                          ("moe_layer_freq", lambda x, s: x % s)):
            step = config_count(config, (key,), where)
            if step is not None:
                ids = [x for x in ids if not test(x, step[0])]
                why.append(f"{step[1]} {step[0]}")
        period = config_count(config, ("expert_layer_period",), where)
        if period is not None:
            off = config_count(config, ("expert_layer_offset",), where, lo=0)
            o = off[0] if off else 0
            ids = [x for x in ids if x % period[0] == o]
            why.append(f"{period[1]} {period[0]}"
                       + (f", {off[1]} {o}" if off else ""))
    for key in ("first_k_dense_replace", "moe_layer_start_index"):
        first = config_count(config, (key,), where, lo=0)
        if first is not None:
            ids = [x for x in ids if x >= first[0]]
            why.append(f"{first[1]} {first[0]}")
    last = config_get(config, "moe_layer_end_index")
    if last is not None and _is_int(last[1]) and last[1] >= 0:
        ids = [x for x in ids if x <= last[1]]
        why.append(f"{last[0]} {last[1]}")
    only = _int_list(config, "mlp_only_layers", where)
    if only and only[0]:
        ids = [x for x in ids if x not in set(only[0])]
        why.append(f"{only[1]} {ranges(only[0])}")
    return ids, ", ".join(why)


def top_k(config: Mapping[str, Any] | None, n_experts: int, given: int | None,
          where: str = "config.json", had_config: bool = True) -> tuple[int, str]:
    """(top-k, where it came from): the config's, else ``given``; else RuleError."""
    found = config_count(config, TOP_K_KEYS, where)
    if found is None and given is None:
        why = ("there is no config.json" if not had_config
               else "it has none of " + ", ".join(TOP_K_KEYS))
        raise RuleError(f"{where}: top-k unknown ({why}); give --top-k, or a "
                        f"layout file ({LAYOUT_FILE}) with top_k")
    k, key = found if found is not None else (given, "--top-k")
    assert k is not None
    if k > n_experts:
        raise RuleError(f"{where}: {key} {k} is more than the {n_experts} "
                        "experts per layer")
    return k, key


# ---------------------------------------------------------------- names

def _layer_at(comps: Sequence[str]) -> int | None:
    """Index of the first layer module component followed by a number."""
    return next((k for k in range(len(comps) - 1)
                 if comps[k] in LAYER_MODULES and comps[k + 1].isdigit()), None)


def layer_of(name: str) -> int | None:
    """The layer number of a tensor name (``model.layers.3.x`` -> 3), or None."""
    comps = name.split(".")
    i = _layer_at(comps)
    return None if i is None else int(comps[i + 1])


@dataclass(frozen=True)
class Hit:
    """A tensor name that fits a routed-expert pattern."""

    template: str
    family: str  # PER_EXPERT or FUSED
    layer: int
    expert: int  # -1 for fused
    tensor: str


def classify(name: str) -> Hit | None:
    """The routed-expert pattern ``name`` fits, or None."""
    comps = name.split(".")
    if any(c in NOT_ROUTED for c in comps):
        return None
    i = _layer_at(comps)
    if i is None:
        return None
    layer = int(comps[i + 1])
    head = comps[:i + 1] + ["{layer}"]
    for j in range(i + 2, len(comps) - 1):
        if comps[j] == "experts":
            nxt = comps[j + 1]
            if nxt.isdigit():
                if j + 2 >= len(comps):
                    return None
                return Hit(".".join(head + comps[i + 2:j + 1]
                                    + ["{expert}", "{tensor}"]), PER_EXPERT,
                           layer, int(nxt), ".".join(comps[j + 2:]))
            return Hit(".".join(head + comps[i + 2:j + 1] + ["{tensor}"]),
                       FUSED, layer, -1, ".".join(comps[j + 1:]))
    for k in range(i + 2, len(comps)):
        if comps[k] in FUSED_MODULES:
            return Hit(".".join(head + comps[i + 2:k] + ["{tensor}"]), FUSED,
                       layer, -1, ".".join(comps[k:]))
    return None


def head_of(template: str) -> str:
    """The part of a template before ``{layer}``: ``model.layers.``."""
    return template.split("{layer}")[0]


def is_mtp(template: str) -> bool:
    """Whether a group's template is a multi-token-prediction block's."""
    return MTP_MODULE in head_of(template).split(".")


# ---------------------------------------------------------------- detection

@dataclass(frozen=True)
class Entry:
    """What a caller knows of one tensor (shape, shard and offset if known)."""

    name: str
    shape: tuple[int, ...] | None = None
    shard: str | None = None
    offset: int | None = None


@dataclass(frozen=True)
class Detected:
    """A detected layout: the five keys, the family and where top-k came from."""

    expert_template: str
    tensors: tuple[str, ...]
    layers: tuple[int, ...]
    n_experts: int
    top_k: int
    family: str
    top_k_from: str
    groups: int  # how many expert groups the names hold
    mtp: bool  # the chosen group is a multi-token-prediction block's


def _generic(name: str) -> str:
    return ".".join("N" if c.isdigit() else c for c in name.split("."))


def _no_experts(where: str, entries: Sequence[Entry], config: Any,
                cfg_where: str) -> str:
    shapes = " / ".join(f"...{m}.<N>...." for m in LAYER_MODULES[:3])
    head = (f"{where}: no routed experts found: no tensor name has the form "
            f"...layers.<N>....experts.<N>.<tensor> (one tensor per expert) or "
            f"...layers.<N>....experts.<tensor> / "
            + " / ".join(f"...layers.<N>....{m}..." for m in FUSED_MODULES)
            + f" (fused; the layer module may be any of {shapes})")
    present = sorted({la for e in entries if (la := layer_of(e.name)) is not None})
    moe = config_moe_layers(config, None, cfg_where) if present else None
    if moe is not None and config_count(config, EXPERT_KEYS, cfg_where):
        dense = [la for la in present if la not in set(moe[0])]
        if dense == present and moe[0]:
            return (f"{where}: no routed experts found: the layers present "
                    f"({ranges(present)}) are all dense by {cfg_where} "
                    f"({moe[1]}); its MoE layers are {ranges(moe[0])}: keep "
                    "one of those (--layers)")
    near = list(dict.fromkeys(_generic(e.name) for e in entries
                              if "expert" in e.name.lower()))
    if near:
        more = f" and {len(near) - 8} more" if len(near) > 8 else ""
        return head + "; names that mention experts: " + ", ".join(near[:8]) + more
    shown = [e.name for e in entries[:5]]
    return head + f"; none of the {len(entries)} tensor names mentions experts" \
        + (" (" + ", ".join(shown) + (", ..." if len(entries) > 5 else "") + ")"
           if shown else "")


def _choose(where: str, groups: dict[str, list[tuple[Hit, Entry]]],
            group: str | None) -> str:
    """The template of the expert group to use (docs/LAYOUT.md "Detection")."""
    if group is not None and group not in GROUPS:
        raise RuleError(f"expert group {group!r}: one of "
                        f"{', '.join(map(repr, GROUPS))}")
    want = group or "decoder"
    fits = [t for t in groups if is_mtp(t) == (want == "mtp")]
    if len(fits) == 1 and (len(groups) > 1 or group is not None):
        return fits[0]
    if len(groups) == 1 and group is None:
        return next(iter(groups))
    lines = []
    for tmpl, hits in sorted(groups.items()):
        kind = "multi-token prediction, " if is_mtp(tmpl) else ""
        lines.append(f"{tmpl} ({kind}{hits[0][0].family}, {len(hits)} tensors, "
                     f"layers {ranges(h.layer for h, _ in hits)})")
    said = ("several candidate expert layouts" if len(fits) > 1 else
            f"no {'multi-token-prediction' if want == 'mtp' else 'decoder'} "
            "expert group among the candidates")
    raise RuleError(f"{where}: {said}; give a layout file ({LAYOUT_FILE}) to "
                    "choose: " + "; ".join(lines))


def _order(entries: list[Entry], parts: list[str]) -> list[str]:
    """Parts by (shard, offset) when every one is known, else by name."""
    if entries and all(t.shard is not None and t.offset is not None
                       for t in entries):
        return [p for _, p in sorted(((t.shard, t.offset), p)
                                     for t, p in zip(entries, parts, strict=True))]
    return sorted(parts)


def _shape_text(shape: Sequence[int]) -> str:
    return "[" + ", ".join(str(d) for d in shape) + "]"


def detect(config: Mapping[str, Any] | None, entries: Iterable[Entry], *,
           where: str, config_where: str = "config.json",
           group: str | None = None,
           given_top_k: int | None = None) -> Detected:
    """The layout the rules give a checkpoint's config and tensors; else RuleError.

    ``where`` names the container and ``config_where`` its config in
    messages; ``group`` is one of :data:`GROUPS` (None: the decoder's);
    An expert whose tensors lie in several shards is accepted: its pieces
    are read each from its own file (docs/LAYOUT.md).  ``given_top_k`` is the top-k when
    the config has none (``--top-k``).
    """
    es = list(entries)
    groups: dict[str, list[tuple[Hit, Entry]]] = {}
    for e in es:
        hit = classify(e.name)
        if hit is not None:
            groups.setdefault(hit.template, []).append((hit, e))
    if not groups:
        raise RuleError(_no_experts(where, es, config, config_where))
    template = _choose(where, groups, group)
    hits = groups[template]
    family = hits[0][0].family
    layers = sorted({h.layer for h, _ in hits})
    mtp = is_mtp(template)
    head = head_of(template)
    present = {la for e in es if e.name.startswith(head)
               and (la := layer_of(e.name)) is not None}
    implied = None if mtp else config_moe_layers(config, present, config_where)
    if implied is not None and implied[0] != layers:
        raise RuleError(
            f"{config_where} and the tensor names disagree on the MoE layers: "
            f"config.json says {ranges(implied[0])} of the layers present "
            f"({implied[1]}); the names have experts in layers {ranges(layers)}")
    cfg_e = config_count(config, EXPERT_KEYS, config_where)
    by_key: dict[tuple[int, int], dict[str, Entry]] = {}
    for h, e in hits:
        by_key.setdefault((h.layer, h.expert), {})[h.tensor] = e
    parts = sorted({h.tensor for h, _ in hits})
    if family == FUSED:
        n = _fused_count(template, cfg_e, by_key, layers, parts, config_where)
        lead = by_key[layers[0], -1]
    else:
        experts_of = {la: sorted({e for (la2, e) in by_key if la2 == la})
                      for la in layers}
        found = max(max(v) for v in experts_of.values()) + 1
        n = found if cfg_e is None else cfg_e[0]
        same = all(v == list(range(found)) for v in experts_of.values())
        if cfg_e is not None and (found > n or (same and found != n)):
            have = (f"0-{found - 1} in every layer" if same else
                    ranges(x for v in experts_of.values() for x in v))
            raise RuleError(
                f"{config_where} and the tensor names disagree on the experts "
                f"per layer: config.json says {n} ({cfg_e[1]}); the names "
                f"have experts {have}")
        lead = by_key.get((layers[0], 0), {})
    _check_complete(template, family, by_key, layers, n, parts)
    order = _order([lead[p] for p in parts if p in lead],
                   [p for p in parts if p in lead])
    k, k_from = top_k(config, n, given_top_k, config_where, config is not None)
    return Detected(template, tuple(order), tuple(layers), n, k, family, k_from,
                    len(groups), mtp)


def _fused_count(template: str, cfg_e: tuple[int, str] | None,
                 by_key: dict[tuple[int, int], dict[str, Entry]],
                 layers: list[int], parts: list[str], where: str) -> int:
    """The expert count of a fused group: the config's, else the leading dimension.

    A leading dimension must be the count or a multiple of it (stacked
    ``[E*I, ...]`` rows); without the config's count every part must lead
    with the same dimension.
    """
    shaped = [(la, e) for la in layers for e in by_key[la, -1].values()
              if e.shape is not None]
    if cfg_e is None:
        leads = sorted({e.shape[0] for _, e in shaped if e.shape})
        if len(leads) != 1:
            raise RuleError(
                f"fused experts under {template} but {where} has none of "
                f"{', '.join(EXPERT_KEYS)} and the leading dimensions are "
                f"{leads or 'unknown'}")
        return leads[0]
    n, key = cfg_e
    for la, e in shaped:
        assert e.shape is not None
        if not e.shape or e.shape[0] % n:
            raise RuleError(
                f"fused expert tensor {e.name} (layer {la}) has shape "
                f"{_shape_text(e.shape)}: its leading dimension must be the "
                f"{n} experts ({key}) or a multiple of them", layer=la)
    return n


def _check_complete(template: str, family: str,
                    by_key: dict[tuple[int, int], dict[str, Entry]],
                    layers: list[int], n: int, parts: list[str]) -> None:
    """Every layer has every expert's every part (in any shards)."""
    fused = family == FUSED
    for la in layers:
        for e in range(1 if fused else n):
            have = by_key.get((la, -1 if fused else e), {})
            for p in parts:
                if p not in have:
                    name = (template.replace("{layer}", str(la))
                            .replace("{expert}", str(e)).replace("{tensor}", p))
                    who = (f"layer {la} (all {n} experts)" if fused
                           else f"layer {la} expert {e}")
                    raise RuleError(f"missing expert tensor: {who} has no {p!r}: "
                                    f"{name} is not in the container",
                                    layer=la, expert=e)
