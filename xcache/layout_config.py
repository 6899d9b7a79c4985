"""The config.json half of the layout rules: keys, per-layer values, MoE layers.

And the layout file that settles what the config leaves open (its lines,
:func:`layout_text`, and where a refusal says they go, :func:`settle_lines`).

:mod:`xcache.layout_rules` (the one rule set every detector asks) reads a
checkpoint's config through this module, and re-exports every name of it:
which keys give the routed experts, the top-k, the layer count and the
shared experts (each a list of aliases, the first present winning), where
they are looked up (a multimodal model's text model first, then the top
level, then the sub-blocks of :data:`BLOCK_SCOPES`: DBRX's
``ffn_config.moe_top_k``), a value given per layer, and the MoE-layer rule
(:func:`config_moe_layers`).  Tools that only read a config (the
description expander, ``from-header``'s shapes) use these functions, so a
nested config is read the same way everywhere.  Like the rules, it imports
nothing of the project (docs/DESIGN.md §2).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

__all__ = ["BLOCK_SCOPES", "EXPERT_KEYS", "I32_MAX", "INNER_SCOPES", "LAYER_KEYS",
           "LAYOUT_FILE", "PER_LAYER_KEYS", "SHARED_KEYS", "STACK_LAYER_KEYS",
           "TOP_K_KEYS", "PerLayerError", "RuleError", "config_count",
           "config_get", "config_groups", "config_moe_layers", "config_set",
           "config_view", "layout_path", "layout_text", "ranges",
           "settle_lines", "top_k_unknown"]

#: Keys giving the routed experts per layer, the first present wins.
EXPERT_KEYS = ("num_local_experts", "n_routed_experts", "num_experts",
               "moe_num_experts")
#: Keys giving the experts each token is routed to, the first present wins
#: (``top_k`` last: elsewhere it is a sampling setting, where 0 means off).
TOP_K_KEYS = ("num_experts_per_tok", "experts_per_token", "num_experts_per_token",
              "moe_top_k", "moe_topk", "num_selected_experts", "top_k_experts",
              "moe_k", "router_topk", "top_k")
#: Keys giving the shared experts of a MoE layer (always used, never routed).
SHARED_KEYS = ("n_shared_experts", "num_shared_experts", "moe_num_shared_experts",
               "num_shared_expert")
#: Keys a config may give as one value per layer (a list), all alike.
PER_LAYER_KEYS = EXPERT_KEYS + TOP_K_KEYS + SHARED_KEYS
#: Keys giving the number of decoder layers.
LAYER_KEYS = ("num_hidden_layers", "n_layers", "num_layers", "n_layer")
#: An encoder-decoder model's layer count of each stack, read before
#: :data:`LAYER_KEYS` (T5's ``num_layers`` is then the encoder's).
STACK_LAYER_KEYS = {"decoder": ("num_decoder_layers", "decoder_layers"),
                    "encoder": ("num_encoder_layers", "encoder_layers")}
#: Sub-documents holding a multimodal model's text model, read first.
INNER_SCOPES = ("text_config", "language_config", "llm_config")
#: Sub-documents of one block's settings, read after the top level.
BLOCK_SCOPES = ("ffn_config", "moe_config", "attn_config")
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


class PerLayerError(RuleError):
    """A per-layer list whose values differ: ``key`` and the largest value.

    A layout file settles it (the engine takes one value);
    ``layout_rules.detect`` offers the largest as that value.
    """

    def __init__(self, message: str, key: str, most: int) -> None:
        super().__init__(message)
        self.key = key
        self.most = most


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
    (:func:`_one_value`).  A list shorter than the layer count gives one
    value per expert group (ERNIE-VL's ``moe_num_experts: [64, 64]``, text
    then vision: :func:`config_groups`): the first group's counts.
    """
    for k in keys:
        got = config_get(config, k)
        if got is None:
            continue
        name, v = got
        if k == "top_k" and v == 0:
            continue
        if _per_group(config, v):
            for i, x in enumerate(v):
                _check_count(x, f"{name}[{i}]", where, lo)
            return int(v[0]), f"{name}[0]"
        if isinstance(v, list) and v and k in PER_LAYER_KEYS:
            for i, x in enumerate(v):
                _check_count(x, f"{name}[{i}]", where, lo)
            return _one_value(v, name, where), name
        _check_count(v, name, where, lo)
        return int(v), name
    return None


def _per_group(config: Mapping[str, Any] | None, v: Any) -> bool:
    """Whether ``v`` is a list shorter than the layer count: one value per group."""
    n = next((got[1] for k in LAYER_KEYS if (got := config_get(config, k))), None)
    return isinstance(v, list) and bool(v) and _is_int(n) and len(v) < n


def config_groups(config: Mapping[str, Any] | None, keys: Sequence[str],
                  where: str = "config.json") -> tuple[list[int], str] | None:
    """(values, key) of the first of ``keys`` when it gives one value per group.

    A multimodal model may give its MoE keys per expert group, as lists
    shorter than the layer count (ERNIE-VL: text experts 0-63, then vision
    experts 64-127 in the same names); the first group is the decoder's
    default (docs/LAYOUT.md "One group").  None when the key is absent or
    one value.
    """
    for k in keys:
        got = config_get(config, k)
        if got is not None:
            if not _per_group(config, got[1]):
                return None
            config_count(config, (k,), where)  # each value checked
            return [int(x) for x in got[1]], got[0]
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
    raise PerLayerError(f"{where}: {name} gives one value per layer and they "
                        f"differ ({said}): one value serves every layer; give "
                        f"a layout file ({LAYOUT_FILE}) with it", name,
                        max(values))


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
                      where: str = "config.json", stack: str = "decoder"
                      ) -> tuple[list[int], str] | None:
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
    ``stack`` "encoder" (an encoder-decoder model's other stack) counts
    its layers by :data:`STACK_LAYER_KEYS` and keeps every
    ``encoder_sparse_step``-th alone; a key given per expert group is the
    first group's (:func:`config_count`).
    """
    n = config_count(config, STACK_LAYER_KEYS[stack] + LAYER_KEYS, where, lo=0)
    if n is None:
        return None
    total, why = n[0], [f"{n[1]} {n[0]}"]
    extra = config_count(config, ("num_nextn_predict_layers",), where, lo=0)
    if extra and extra[0] and stack == "decoder":
        total += extra[0]
        why.append(f"{extra[1]} {extra[0]}")
    keep = set(present) if present is not None else None
    ids = [x for x in (sorted(keep) if keep is not None else range(total))
           if 0 <= x < total]
    if stack == "encoder":
        step = config_count(config, ("encoder_sparse_step",), where)
        if step is not None:
            ids = [x for x in ids if not (x + 1) % step[0]]
            why.append(f"{step[1]} {step[0]}")
        return ids, ", ".join(why)
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
    if last is not None and _per_group(config, last[1]):
        last = (f"{last[0]}[0]", last[1][0])
    if last is not None and _is_int(last[1]) and last[1] >= 0:
        ids = [x for x in ids if x <= last[1]]
        why.append(f"{last[0]} {last[1]}")
    only = _int_list(config, "mlp_only_layers", where)
    if only and only[0]:
        ids = [x for x in ids if x not in set(only[0])]
        why.append(f"{only[1]} {ranges(only[0])}")
    return ids, ", ".join(why)


def layout_path(config_where: str) -> str:
    """The layout file beside the config named ``config_where``."""
    head, sep, _ = config_where.rpartition("/")
    return head + sep + LAYOUT_FILE


def settle_lines(config_where: str, text: list[str]) -> str:
    """The end of a refusal a layout file settles: where, then its lines.

    The refusal stays its first line; a command prints the lines after it
    on its standard output, before that line (which it prints last, as
    one line: docs/LAYOUT.md "The layout file").
    """
    return (f"; these lines in {layout_path(config_where)} settle it\n"
            + "\n".join("    " + line for line in text))


def _toml_str(s: str) -> str:
    """``s`` as a TOML basic string."""
    return '"' + "".join(c if c >= " " and c not in '"\\\x7f' else f"\\u{ord(c):04x}"
                         for c in s) + '"'


def layout_text(d: Any, unsure: Sequence[tuple[str, str, str]] = ()
                ) -> list[str]:
    """The lines of a layout file (docs/LAYOUT.md) holding ``d``'s five keys.

    ``d`` is a detected layout (``layout_rules.Detected``, or anything with
    its five attributes).
    A key ``unsure`` names (detection could not decide it) ends with
    its comment.
    """
    notes = {key: note for _, key, note in unsure}
    values = {"expert_template": _toml_str(d.expert_template),
              "tensors": "[" + ", ".join(map(_toml_str, d.tensors)) + "]",
              "layers": "[" + ", ".join(map(str, d.layers)) + "]",
              "n_experts": str(d.n_experts), "top_k": str(d.top_k)}
    return [f"{k} = {v}" + (f"  # {notes[k]}" if k in notes else "")
            for k, v in values.items()]


def top_k_unknown(where: str, had_config: bool = True) -> str:
    """The refusal of a config without a top-k (and no ``--top-k``)."""
    why = ("there is no config.json" if not had_config
           else "it has none of " + ", ".join(TOP_K_KEYS))
    return (f"{where}: top-k unknown ({why}); give --top-k, or a layout file "
            f"({LAYOUT_FILE}) with top_k")
