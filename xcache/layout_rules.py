"""The one rule set of an expert layout: names, config keys, MoE layers, top-k.

Every tool that decides a checkpoint's expert layout by rule -- the
generator's detector (``fixtures.detect``, from names and possibly
header-less shards), ``from-header``, the engine's detector
(``engine.detect``, from the table its C reader validated), hence the
inspector and the gate -- asks this module, so one checkpoint gets one
answer and one refusal one message.  Its config half (keys, where they are
looked up, the MoE-layer rule, the layout file's lines) is
:mod:`xcache.layout_config`, every name of which it re-exports; the two
import nothing else of the project (docs/DESIGN.md §2).  What only a caller
can do stays with it: reading files, and the engine's check of fused
slices against the byte sizes its reader validated.

The rules, all generic (no model is named; docs/LAYOUT.md "Detection"):

* a tensor's *layer* is the number after a module of :data:`LAYER_MODULES`;
* a *per-expert* tensor has ``experts.<E>.<tensor>`` after its layer (the
  number may be glued to a name part of :data:`GLUED`: ``expert_<E>``), a
  *fused* one ``experts.<tensor>`` (or a module of :data:`FUSED_MODULES`):
  one tensor per (layer, part) whose leading dimension holds the experts,
  ``[E, ...]`` or stacked ``[E*I, ...]`` rows; a fused module's vector
  other than ``[E]`` is not an expert tensor;
* components of :data:`NOT_ROUTED` (shared experts, routers) are never
  routed experts; :data:`SHARED_MODULES` are the shared experts;
* several templates are groups (:func:`group_of`): the decoder's is taken,
  an encoder's, attention experts' or multi-token-prediction block's only
  when asked (:data:`GROUPS`);
* config keys (:mod:`xcache.layout_config`): a list shorter than the layer
  count is one value per expert group (text, then vision: the first is
  the decoder's), one as long is one value per layer;
* every expert of a layout has one size: experts of two sizes in one
  group's names make a layout of the first (:func:`_one_size`);
* the top-k is the config's, else the caller's (``--top-k``), else refused.

A refusal a layout file settles (the config and the names disagree, no
top-k, per-layer values that differ, experts of two sizes, several
candidate groups) ends with the lines of that file for this checkpoint
(:func:`layout_text`), the keys detection could not decide commented.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from xcache.layout_config import (
    BLOCK_SCOPES,
    EXPERT_KEYS,
    I32_MAX,
    INNER_SCOPES,
    LAYER_KEYS,
    LAYOUT_FILE,
    PER_LAYER_KEYS,
    SHARED_KEYS,
    STACK_LAYER_KEYS,
    TOP_K_KEYS,
    PerLayerError,
    RuleError,
    config_count,
    config_get,
    config_groups,
    config_moe_layers,
    config_set,
    config_view,
    layout_path,
    layout_text,
    ranges,
    settle_lines,
    top_k_unknown,
)

__all__ = ["ATTENTION_MODULES", "BLOCK_SCOPES", "ENCODER_MODULE", "EXPERT_KEYS",
           "FUSED", "FUSED_MODULES", "GROUPS", "GROUP_WORDS", "I32_MAX",
           "INNER_SCOPES", "LAYER_KEYS", "LAYER_MODULES", "LAYOUT_FILE",
           "MTP_MODULE", "NOT_ROUTED", "PER_EXPERT", "PER_LAYER_KEYS",
           "SHARED_KEYS", "SHARED_MODULES", "STACK_LAYER_KEYS", "TOP_K_KEYS",
           "Hit", "PerLayerError", "RuleError", "Shared", "classify",
           "config_count", "config_get", "config_groups", "config_moe_layers",
           "config_set", "config_view", "detect", "group_of",
           "layer_of", "layout_path", "layout_text", "ranges", "shared_experts"]

#: One tensor per expert: the template holds ``{expert}``.
PER_EXPERT = "per-expert"
#: Stacked tensors, the experts along the leading dimension: no ``{expert}``.
FUSED = "fused"

#: Module names followed by the layer number: ``model.layers.3``,
#: ``transformer.blocks.3``, ``transformer.h.3``.
LAYER_MODULES = ("layers", "blocks", "h", "layer", "block", "decoder_layers")
#: Module names that hold fused expert projections with no ``experts`` module.
FUSED_MODULES = ("input_linear", "output_linear")
#: Module names of a layer's shared experts (every token goes through them).
SHARED_MODULES = ("shared_expert", "shared_experts", "shared_mlp")
#: Name components that are never routed experts.
NOT_ROUTED = (*SHARED_MODULES, "router", "gate", "e_score_correction_bias")
#: The module before ``layers.<N>`` that marks a multi-token-prediction block.
MTP_MODULE = "mtp"
#: The module before ``layers.<N>`` that marks an encoder-decoder's encoder.
ENCODER_MODULE = "encoder"
#: Modules after the layer whose experts are attention heads' (JetMoE's
#: ``self_attention.experts``), not the feed-forward's.
ATTENTION_MODULES = ("self_attention", "self_attn", "attention", "attn")
#: The expert groups detection can be asked for (:func:`group_of`).
GROUPS = ("decoder", "encoder", "attention", "mtp")
#: Each group in a sentence: "the decoder's expert group".
GROUP_WORDS = {"decoder": "decoder's", "encoder": "encoder's",
               "attention": "attention", "mtp": "multi-token-prediction"}
#: A name part the expert number is glued to: ``experts.expert_3.wi.weight``.
GLUED = ("expert_", "expert")

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
            glue = next((g for g in GLUED if nxt.startswith(g)
                         and nxt[len(g):].isdigit()), "")
            if nxt[len(glue):].isdigit():
                if j + 2 >= len(comps):
                    return None
                return Hit(".".join(head + comps[i + 2:j + 1]
                                    + [glue + "{expert}", "{tensor}"]), PER_EXPERT,
                           layer, int(nxt[len(glue):]), ".".join(comps[j + 2:]))
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


def group_of(template: str) -> str:
    """The group of :data:`GROUPS` a template's experts are (docs/LAYOUT.md)."""
    head = head_of(template).split(".")
    middle = template.split("{layer}")[1].split(".")
    return ("mtp" if MTP_MODULE in head else "encoder" if ENCODER_MODULE in head
            else "attention" if any(c in ATTENTION_MODULES for c in middle)
            else "decoder")

# ---------------------------------------------------------------- shared experts

@dataclass(frozen=True)
class Shared:
    """A layer's shared experts: one pattern of names, never routed.

    ``per_layer`` is how many a layer has and ``count_from`` why: a config
    key (one module may hold several), the numbered names (``{expert}``
    in ``template``), or one module when neither says more.
    """

    template: str
    tensors: tuple[str, ...]
    layers: tuple[int, ...]
    per_layer: int
    count_from: str


def shared_experts(config: Mapping[str, Any] | None, names: Iterable[str]
                   ) -> list[Shared]:
    """The shared experts the names hold, one :class:`Shared` per pattern."""
    found: dict[str, tuple[set[int], set[str], dict[int, set[int]]]] = {}
    for name in names:
        comps = name.split(".")
        i = _layer_at(comps)
        j = None if i is None else next(
            (k for k in range(i + 2, len(comps) - 1) if comps[k] in SHARED_MODULES),
            None)
        if i is None or j is None:
            continue
        numbered = comps[j + 1].isdigit() and j + 2 < len(comps)
        tail = comps[j + 2:] if numbered else comps[j + 1:]
        tmpl = ".".join(comps[:i + 1] + ["{layer}"] + comps[i + 2:j + 1]
                        + ["{expert}"] * numbered + ["{tensor}"])
        layers, parts, experts = found.setdefault(tmpl, (set(), set(), {}))
        layer = int(comps[i + 1])
        layers.add(layer)
        parts.add(".".join(tail))
        experts.setdefault(layer, set()).update(
            [int(comps[j + 1])] if numbered else [])
    try:
        said = config_count(config, SHARED_KEYS)
    except RuleError:
        said = None
    out = []
    for tmpl, (layers, parts, experts) in sorted(found.items()):
        if "{expert}" in tmpl:
            n, why = max(map(len, experts.values())), "numbered in the names"
        elif said is not None:
            n, why = said[0], f"{said[1]} {said[0]}"
        else:
            n, why = 1, "one module, no config key says more"
        out.append(Shared(tmpl, tuple(sorted(parts)), tuple(sorted(layers)), n, why))
    return out


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
    group: str  # the chosen group's kind, one of GROUPS


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


#: What detection could not decide, in a layout file's terms: (the refusal,
#: the layout key it leaves open, the comment on that key's line).
Unsure = list[tuple[str, str, str]]
#: A candidate template's layout and what in it is unsure (:func:`_fit`).
Fit = Callable[[str], "tuple[Detected, Unsure]"]


def _choose(where: str, groups: dict[str, list[tuple[Hit, Entry]]],
            group: str | None, fit: Fit, config_where: str) -> str:
    """The template of the expert group to use (docs/LAYOUT.md "Detection")."""
    if group is not None and group not in GROUPS:
        raise RuleError(f"expert group {group!r}: one of "
                        f"{', '.join(map(repr, GROUPS))}")
    want = group or "decoder"
    fits = [t for t in groups if group_of(t) == want]
    if len(fits) == 1 and (len(groups) > 1 or group is not None):
        return fits[0]
    if len(groups) == 1 and group is None:
        return next(iter(groups))
    lines = []
    for tmpl, hits in sorted(groups.items()):
        kind = group_of(tmpl)
        kind = "" if kind == "decoder" else _word(kind) + ", "
        lines.append(f"{tmpl} ({kind}{hits[0][0].family}, {len(hits)} tensors, "
                     f"layers {ranges(h.layer for h, _ in hits)})")
    said = ("several candidate expert layouts" if len(fits) > 1 else
            f"no {_word(want)} "
            "expert group among the candidates")
    text: list[str] = []
    for tmpl in sorted(fits or groups):
        try:
            got = layout_text(*fit(tmpl))
        except RuleError:  # a candidate no layout file makes whole
            continue
        text += [f"# or, for {tmpl}:", *("# " + x for x in got)] if text else got
    raise RuleError(f"{where}: {said}; give a layout file ({LAYOUT_FILE}) to "
                    "choose: " + "; ".join(lines)
                    + (settle_lines(config_where, text) if text else ""))


def _word(group: str) -> str:
    """A group's word in a listing: ``encoder``, ``multi-token-prediction``."""
    return GROUP_WORDS[group].removesuffix("'s")


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
    messages (the layout file a refusal offers is beside it:
    :func:`layout_path`); ``group`` is one of :data:`GROUPS` (None: the
    decoder's).  An expert whose tensors lie in several shards is accepted:
    its pieces are read each from its own file (docs/LAYOUT.md).
    ``given_top_k`` is the top-k when the config has none (``--top-k``).
    """
    es = list(entries)
    groups: dict[str, list[tuple[Hit, Entry]]] = {}
    for e in es:
        hit = classify(e.name)
        if hit is not None:
            groups.setdefault(hit.template, []).append((hit, e))
    try:
        cfg_n = config_count(config, EXPERT_KEYS, config_where)
    except RuleError:  # refused by the layout itself, naming the key
        cfg_n = None
    groups = {t: got for t, hits in groups.items()
              if (got := _with_expert_dim(hits, cfg_n and cfg_n[0]))}
    if not groups:
        raise RuleError(_no_experts(where, es, config, config_where))

    def fit(template: str) -> tuple[Detected, Unsure]:
        return _fit(config, es, groups, template, config_where, given_top_k)

    got, unsure = fit(_choose(where, groups, group, fit, config_where))
    if unsure:
        raise RuleError(unsure[0][0] + settle_lines(config_where,
                                               layout_text(got, unsure)))
    return got


def _with_expert_dim(hits: list[tuple[Hit, Entry]], n: int | None
                     ) -> list[tuple[Hit, Entry]]:
    """A group's tensors that hold the expert dimension (all, unless fused).

    A fused module's vector other than ``[E]`` is the module's own, shared
    by its experts (an ``experts.bias [H]``).  ``E`` is the config's count,
    else the one leading dimension of the group's other tensors.
    """
    if hits[0][0].family != FUSED:
        return hits
    leads = {e.shape[0] for _, e in hits if e.shape is not None and len(e.shape) > 1}
    n = n or (next(iter(leads)) if len(leads) == 1 else None)
    return hits if n is None else [
        (h, e) for h, e in hits
        if e.shape is None or len(e.shape) != 1 or e.shape[0] == n]


def _fit(config: Mapping[str, Any] | None, es: list[Entry],
         groups: dict[str, list[tuple[Hit, Entry]]], template: str,
         config_where: str, given_top_k: int | None) -> tuple[Detected, Unsure]:
    """The layout of one candidate group, and what a layout file must settle.

    A disagreement of config and names, a per-layer value that differs or
    no top-k is :data:`Unsure` (the names' value, the largest, or 1 taken
    meanwhile); any other problem is a RuleError -- after an unsure one,
    that one's refusal (no layout of the names' values would be whole).
    """
    unsure: Unsure = []
    try:
        return _layout(config, es, groups[template], len(groups), template,
                       config_where, given_top_k, unsure), unsure
    except RuleError:
        if unsure:
            raise RuleError(unsure[0][0]) from None
        raise


def _layout(config: Mapping[str, Any] | None, es: list[Entry],
            hits: list[tuple[Hit, Entry]], n_groups: int, template: str,
            config_where: str, given_top_k: int | None,
            unsure: Unsure) -> Detected:
    """:func:`_fit`'s layout, adding to ``unsure`` what it could not decide."""
    settle = f"; give a layout file ({LAYOUT_FILE}) with"
    family = hits[0][0].family
    layers = sorted({h.layer for h, _ in hits})
    group = group_of(template)
    head = head_of(template)
    present = {la for e in es if e.name.startswith(head)
               and (la := layer_of(e.name)) is not None}
    implied = None if group == "mtp" else config_moe_layers(
        config, present, config_where,
        "encoder" if group == "encoder" else "decoder")
    if implied is not None and implied[0] != layers:
        unsure.append((
            f"{config_where} and the tensor names disagree on the MoE layers: "
            f"config.json says {ranges(implied[0])} of the layers present "
            f"({implied[1]}); the names have experts in layers {ranges(layers)}"
            f"{settle} the layers to use", "layers",
            f"the names' (config.json: {ranges(implied[0])})"))
    try:
        cfg_e = config_count(config, EXPERT_KEYS, config_where)
    except PerLayerError as e:
        unsure.append((str(e), "n_experts", f"the largest of {e.key}'s values"))
        cfg_e = (e.most, e.key)
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
        # experts given per group (text 0-63, vision 64-127): the first's;
        # the names may hold every group's, or the first's alone (a twin)
        per = config_groups(config, EXPERT_KEYS, config_where)
        said = (sum(per[0]), f"{per[1]} " + " + ".join(map(str, per[0]))) \
            if per else (n, cfg_e and cfg_e[1])
        same = all(v == list(range(found)) for v in experts_of.values())
        if cfg_e is not None and (found > said[0]
                                  or (same and found not in (n, said[0]))):
            have = (f"0-{found - 1} in every layer" if same else
                    ranges(x for v in experts_of.values() for x in v))
            unsure.append((
                f"{config_where} and the tensor names disagree on the experts "
                f"per layer: config.json says {said[0]} ({said[1]}); the names "
                f"have experts {have}{settle} the experts per layer",
                "n_experts", f"the names' ({said[1]}: {said[0]})"))
            n = found
        n = _one_size(template, by_key, layers, n, parts, unsure)
        lead = by_key.get((layers[0], 0), {})
    _check_complete(template, family, by_key, layers, n, parts)
    order = _order([lead[p] for p in parts if p in lead],
                   [p for p in parts if p in lead])
    try:
        got_k = config_count(config, TOP_K_KEYS, config_where)
    except PerLayerError as e:
        unsure.append((str(e), "top_k", f"the largest of {e.key}'s values"))
        got_k = (e.most, e.key)
    if got_k is None and given_top_k is None:
        unsure.append((top_k_unknown(config_where, config is not None), "top_k",
                       "unknown: the model's experts per token go here"))
        got_k = (1, "a layout file")
    k, k_from = got_k if got_k is not None else (given_top_k, "--top-k")
    assert k is not None
    if k > n:
        raise RuleError(f"{config_where}: {k_from} {k} is more than the {n} "
                        "experts per layer")
    return Detected(template, tuple(order), tuple(layers), n, k, family, k_from,
                    n_groups, group)


def _one_size(template: str, by_key: dict[tuple[int, int], dict[str, Entry]],
              layers: list[int], n: int, parts: list[str], unsure: Unsure) -> int:
    """How many experts, from 0, have their layer's expert 0's shapes.

    The engine takes one size: experts of two sizes in one group's names
    (text then vision experts) make a layout of the first (:data:`Unsure`).
    """
    m, said = n, ""
    for la in layers:
        ref = by_key.get((la, 0), {})
        for x in range(1, m):
            have = by_key.get((la, x), {})
            odd = next((p for p in parts if p in have and p in ref
                        and None not in (have[p].shape, ref[p].shape)
                        and have[p].shape != ref[p].shape), None)
            if odd is not None:
                m, said = x, (f"layer {la} expert {x} has {odd} "
                              f"{_shape_text(have[odd].shape or ())}, expert 0 "
                              f"{_shape_text(ref[odd].shape or ())}")
                break
    if m < n:
        unsure.append((
            f"experts of different sizes under {template}: {said}: one layout "
            f"takes experts 0-{m - 1}; give a layout file ({LAYOUT_FILE}) with "
            "the experts per layer", "n_experts",
            f"experts 0-{m - 1}: one size ({m}-{n - 1} another)"))
    return m


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
    per_group = key.endswith("]")  # stacked rows could be another group's
    for la, e in shaped:
        assert e.shape is not None
        if not e.shape or e.shape[0] % n or (per_group and e.shape[0] != n):
            raise RuleError(
                f"fused expert tensor {e.name} (layer {la}) has shape "
                f"{_shape_text(e.shape)}: its leading dimension must be the "
                f"{n} experts ({key})" + " or a multiple of them" * (not per_group),
                layer=la)
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
