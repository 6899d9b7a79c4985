"""Detecting a container's expert layout from ``config.json`` and its names.

:func:`detect` is the last step of :func:`engine.layout.resolve`: it reads
``config.json`` beside the container (``text_config`` first when nested)
and the tensor names, shapes and offsets the C reader validated, and
returns the :class:`engine.layout.Layout` they describe, or raises
:class:`engine.errors.LayoutError` listing what it found and the candidates
(docs/LAYOUT.md "Detection").

Detection knows generic structure only, never a model: ``layers.<N>``
components, an ``experts`` module (``experts.<N>.<tensor>`` per expert, or
``experts.<tensor>`` fused) and the module names of :data:`FUSED_MODULES`.
Each pattern decides the layout family it finds (``per-expert`` or
``fused``, :mod:`engine.layout_core`) together with the template, and the
Layout it returns carries that family.

Why a second detector exists (``fixtures.detect``): the generator must not
import the engine, nor the engine the generator (docs/DESIGN.md §2), and
the two are written apart on purpose -- this one from the C reader's
validated table, that one from names, regular expressions and possibly
header-less shards -- so that a rule one gets wrong the other does not
repeat.  tests/cache/test_detectors_agree.py holds them to the same answer,
family included, on every preset and every real-model description in
fixtures/models/.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from xcache.engine.container import Container, TensorInfo
from xcache.engine.errors import LayoutError
from xcache.engine.layout_core import (
    FUSED,
    I32_MAX,
    LAYOUT_FILE,
    PER_EXPERT,
    Layout,
    folder_of,
    fused_slice,
    is_int,
    missing_tensor,
    ranges,
    shape_text,
)
from xcache.engine.regular import NotRegularFileError, read_regular

#: config.json keys giving the experts per layer, the first present wins.
CONFIG_EXPERTS = ("num_local_experts", "n_routed_experts", "num_experts")
#: config.json keys giving the experts each token is routed to.
CONFIG_TOP_K = ("num_experts_per_tok", "experts_per_token", "moe_top_k")
#: config.json keys giving the number of decoder layers.
CONFIG_LAYERS = ("num_hidden_layers",)
#: Module names that hold fused (stacked) expert projections although no
#: ``experts`` module encloses them.
FUSED_MODULES = ("input_linear", "output_linear")
#: Name components that are never routed experts: shared experts, routers
#: and their score biases.
NOT_ROUTED = ("shared_expert", "shared_experts", "shared_mlp", "router", "gate",
              "e_score_correction_bias")
#: The module name that marks a multi-token-prediction block kept outside
#: the decoder's layers (``mtp.layers.0.mlp.experts.*`` in one real checkpoint): a
#: component of a group's template before ``layers.{layer}``.
MTP_MODULE = "mtp"
#: The expert groups :func:`detect` can be asked for: the decoder's routed
#: experts (the default) or the multi-token-prediction block's.
GROUPS = ("decoder", "mtp")


@dataclass(frozen=True)
class _Hit:
    """One tensor name that fits a routed-expert pattern."""

    template: str
    family: str  # PER_EXPERT or FUSED
    layer: int
    expert: int  # -1 for fused
    tensor: str


def _layer_of(name: str) -> int | None:
    """The N of the first ``layers.N`` in ``name``, or None."""
    comps = name.split(".")
    return next((int(comps[k + 1]) for k in range(len(comps) - 1)
                 if comps[k] == "layers" and comps[k + 1].isdigit()), None)


def _classify(name: str) -> _Hit | None:
    """The routed-expert pattern ``name`` fits, or None."""
    comps = name.split(".")
    if any(c in NOT_ROUTED for c in comps):
        return None
    i = next((k for k in range(len(comps) - 1)
              if comps[k] == "layers" and comps[k + 1].isdigit()), None)
    if i is None:
        return None
    layer = int(comps[i + 1])
    head = comps[:i] + ["layers", "{layer}"]
    for j in range(i + 2, len(comps) - 1):
        if comps[j] == "experts":
            nxt = comps[j + 1]
            if nxt.isdigit():
                if j + 2 >= len(comps):
                    return None
                return _Hit(".".join(head + comps[i + 2:j + 1]
                                     + ["{expert}", "{tensor}"]), PER_EXPERT,
                            layer, int(nxt), ".".join(comps[j + 2:]))
            return _Hit(".".join(head + comps[i + 2:j + 1] + ["{tensor}"]),
                        FUSED, layer, -1, ".".join(comps[j + 1:]))
    for k in range(i + 2, len(comps)):
        if comps[k] in FUSED_MODULES:
            return _Hit(".".join(head + comps[i + 2:k] + ["{tensor}"]), FUSED,
                        layer, -1, ".".join(comps[k:]))
    return None


def _head(template: str) -> str:
    """The part of a template before ``{layer}``: ``model.layers.``."""
    return template.split("{layer}")[0]


def is_mtp(template: str) -> bool:
    """Whether a group's template is a multi-token-prediction block's.

    That is, whether :data:`MTP_MODULE` is a component of the name before
    ``layers.{layer}`` (``mtp.layers.{layer}...``), so the layer numbers
    count the block's own layers, not the decoder's.
    """
    return MTP_MODULE in _head(template).split(".")


def _choose(p: Path, groups: dict[str, list[tuple[_Hit, TensorInfo]]],
            group: str | None) -> str:
    """The template of the expert group to use (docs/LAYOUT.md "Detection").

    The decoder's group when it is the only group outside a
    multi-token-prediction block (``group`` None or ``"decoder"``), the
    block's when ``group`` is ``"mtp"`` and there is exactly one; else a
    LayoutError naming every candidate.
    """
    if group is not None and group not in GROUPS:
        raise LayoutError(f"expert group {group!r}: one of "
                          f"{', '.join(map(repr, GROUPS))}")
    want = group or "decoder"
    fits = [t for t in groups if is_mtp(t) == (want == "mtp")]
    if len(fits) == 1 and (len(groups) > 1 or group is not None):
        return fits[0]
    if len(groups) == 1 and group is None:
        return next(iter(groups))
    lines = []
    for tmpl, hits in groups.items():
        kind = "multi-token prediction, " if is_mtp(tmpl) else ""
        lines.append(f"{tmpl} ({kind}{hits[0][0].family}, {len(hits)} tensors, "
                     f"layers {ranges(h.layer for h, _ in hits)})")
    said = ("several candidate expert layouts" if len(fits) > 1 else
            f"no {'multi-token-prediction' if want == 'mtp' else 'decoder'} "
            "expert group among the candidates" if fits == [] else "")
    raise LayoutError(f"{p}: {said}; give a layout file ({LAYOUT_FILE}) to "
                      "choose: " + "; ".join(lines))


def _generic(name: str) -> str:
    """A name with its number components as ``N``, for lists of near-misses."""
    return ".".join("N" if c.isdigit() else c for c in name.split("."))


class _Config:
    """The MoE keys of config.json (top level, or its ``text_config``)."""

    def __init__(self, folder: Path) -> None:
        self.path = folder / "config.json"
        self.data: dict[str, Any] | None = None
        if not self.path.exists():  # a FIFO or folder is refused, not skipped
            return
        try:
            data = json.loads(read_regular(self.path))
        except NotRegularFileError as e:
            raise LayoutError(str(e)) from None
        except (OSError, ValueError) as e:
            raise LayoutError(f"{self.path}: not valid JSON: {e}") from None
        except RecursionError:
            raise LayoutError(f"{self.path}: not valid JSON: a value nested "
                              "too deeply") from None
        if not isinstance(data, dict):
            raise LayoutError(f"{self.path}: must be a JSON object, got "
                              f"{type(data).__name__}")
        self.data = data

    def get(self, key: str) -> Any:
        """The value of ``key``: ``text_config``'s first, else the top level's."""
        if self.data is None:
            return None
        text = self.data.get("text_config")
        if isinstance(text, dict) and text.get(key) is not None:
            return text[key]
        return self.data.get(key)

    def count(self, keys: Sequence[str], lo: int = 1) -> tuple[int, str] | None:
        """The first of ``keys`` present, as (value, key); checked ``lo..I32_MAX``."""
        for k in keys:
            v = self.get(k)
            if v is None:
                continue
            if not is_int(v) or v < lo:
                raise LayoutError(f"{self.path}: {k} must be an integer of at "
                                  f"least {lo}, got {v!r}")
            if v > I32_MAX:
                raise LayoutError(f"{self.path}: {k} must be at most {I32_MAX} "
                                  f"(the engine's limit), got {v!r}")
            return int(v), k
        return None

    def moe_layers(self, present: set[int]) -> tuple[list[int], str] | None:
        """The MoE layer ids the config implies among ``present``, and why.

        Only the layers ``present`` in the container are listed, so a
        layer count taken from the file costs nothing however large.
        """
        n = self.count(CONFIG_LAYERS)
        if n is None:
            return None
        n_layers, key = n
        why = [f"{key} {n_layers}"]
        extra = self.count(("num_nextn_predict_layers",), lo=0)
        total = n_layers
        if extra:
            total += extra[0]
            why.append(f"num_nextn_predict_layers {extra[0]}")
        ids = [x for x in sorted(present) if x < total]
        first = self.count(("first_k_dense_replace",), lo=0)
        if first is not None:
            ids = [x for x in ids if x >= first[0]]
            why.append(f"first_k_dense_replace {first[0]}")
        freq = self.count(("moe_layer_freq",))
        if freq is not None:
            ids = [x for x in ids if x % freq[0] == 0]
            why.append(f"moe_layer_freq {freq[0]}")
        step = self.count(("decoder_sparse_step",))
        if step is not None:
            ids = [x for x in ids if (x + 1) % step[0] == 0]
            why.append(f"decoder_sparse_step {step[0]}")
        only = self.get("mlp_only_layers")
        if only:
            if not isinstance(only, list) or not all(is_int(x) for x in only):
                raise LayoutError(f"{self.path}: mlp_only_layers must be a "
                                  f"list of integers, got {only!r}")
            skip = set(only)
            ids = [x for x in ids if x not in skip]
            why.append(f"mlp_only_layers {only}")
        return ids, ", ".join(why)


def detect(path: str | os.PathLike[str], *,
           container: Container | None = None, group: str | None = None
           ) -> Layout:
    """Detect the layout from ``config.json`` and the tensor names (docs/LAYOUT.md).

    ``group`` is one of :data:`GROUPS` (None: the decoder's, when the names
    hold a multi-token-prediction group beside it).
    """
    p = Path(os.fsdecode(path))
    if container is None:
        with Container(p) as c:
            return _detect(p, c, group)
    return _detect(p, container, group)


def _detect(p: Path, c: Container, group: str | None = None) -> Layout:
    folder = folder_of(p)
    cfg = _Config(folder)
    infos = c.tensors()
    groups: dict[str, list[tuple[_Hit, TensorInfo]]] = {}
    near: dict[str, None] = {}
    for info in infos:
        hit = _classify(info.name)
        if hit is None:
            if "expert" in info.name.lower():
                near[_generic(info.name)] = None
            continue
        groups.setdefault(hit.template, []).append((hit, info))
    if not groups:
        raise LayoutError(_no_experts(p, infos, list(near)))
    template = _choose(p, groups, group)
    hits = groups[template]
    family = hits[0][0].family
    names_layers = sorted({h.layer for h, _ in hits})
    # a layer with no tensor at all is not in this container (a twin keeps
    # some layers); every layer that is must agree with the config.  The
    # layers are those under the group's own head: a multi-token-prediction
    # block's mtp.layers.0 is not decoder layer 0, and the config's MoE
    # rule is about the decoder's layers only
    head = _head(template)
    present = {la for info in infos if info.name.startswith(head)
               and (la := _layer_of(info.name)) is not None}
    cfg_layers = None if is_mtp(template) else cfg.moe_layers(present)
    if cfg_layers is not None:
        want = cfg_layers[0]
        if want != names_layers:
            raise LayoutError(
                f"{cfg.path} and the tensor names disagree on the MoE layers: "
                f"config.json says {ranges(want)} of the layers present "
                f"({cfg_layers[1]}); the names have experts in layers "
                f"{ranges(names_layers)}")
    cfg_e = cfg.count(CONFIG_EXPERTS)
    by_key: dict[tuple[int, int], dict[str, TensorInfo]] = {}
    for h, info in hits:
        by_key.setdefault((h.layer, h.expert), {})[h.tensor] = info
    first = names_layers[0]
    if family == FUSED:
        lead = by_key[first, -1]
        first_info = min(lead.values(), key=lambda t: (t.shard, t.offset))
        n_experts = (cfg_e[0] if cfg_e is not None
                     else first_info.shape[0] if first_info.shape else 0)
        if n_experts < 1:
            raise LayoutError(
                f"fused expert tensor {first_info.name} (layer {first}) has "
                f"shape {shape_text(first_info.shape)}: no leading dimension to "
                f"take n_experts from", layer=first)
    else:
        experts_of = {la: sorted({e for (la2, e) in by_key if la2 == la})
                      for la in names_layers}
        found = max(max(v) for v in experts_of.values()) + 1
        if cfg_e is None:
            n_experts = found
        else:
            n_experts = cfg_e[0]
            same = all(v == list(range(found)) for v in experts_of.values())
            if found > n_experts or (same and found != n_experts):
                have = (f"0-{found - 1} in every layer" if same else
                        ranges(e for v in experts_of.values() for e in v))
                raise LayoutError(
                    f"{cfg.path} and the tensor names disagree on the experts "
                    f"per layer: config.json says {n_experts} ({cfg_e[1]}); "
                    f"the names have experts {have}")
        lead = by_key.get((first, 0), {})
    parts = [t for t, _ in sorted(lead.items(),
                                  key=lambda kv: (kv[1].shard, kv[1].offset))]
    extra = sorted({h.tensor for h, _ in hits} - set(parts))
    tensors = tuple(parts + extra)
    top = cfg.count(CONFIG_TOP_K)
    if top is None:
        why = ("there is no config.json" if cfg.data is None
               else "it has none of " + ", ".join(CONFIG_TOP_K))
        raise LayoutError(f"{cfg.path}: top-k unknown ({why}); give a layout "
                          f"file ({LAYOUT_FILE}) with top_k")
    if top[0] > n_experts:
        raise LayoutError(f"{cfg.path}: {top[1]} {top[0]} is more than the "
                          f"{n_experts} experts per layer")
    source = ("detected (config.json and tensor names" if cfg.data is not None
              else "detected (tensor names")
    if len(groups) > 1 or group is not None:
        source += (", the multi-token-prediction expert group" if
                   is_mtp(template) else ", the decoder's expert group")
    layout = Layout(template, tensors, tuple(names_layers), n_experts, top[0],
                    source + ")", family=family)
    _check_detected(layout, by_key, c.shards)
    return layout


def _no_experts(p: Path, infos: list[TensorInfo], near: list[str]) -> str:
    head = (f"{p}: no routed experts found: no tensor name has the form "
            f"...layers.<N>....experts.<N>.<tensor> (one tensor per expert) or "
            f"...layers.<N>....experts.<tensor> / "
            + " / ".join(f"...layers.<N>....{m}..." for m in FUSED_MODULES)
            + " (fused)")
    if near:
        shown = near[:8]
        more = f" and {len(near) - len(shown)} more" if len(near) > 8 else ""
        return head + "; names that mention experts: " + ", ".join(shown) + more
    shown = [t.name for t in infos[:5]]
    return head + f"; none of the {len(infos)} tensor names mentions experts" \
        + (" (" + ", ".join(shown) + (", ..." if len(infos) > 5 else "") + ")"
           if shown else "")


def _check_detected(layout: Layout, by_key: dict[tuple[int, int],
                    dict[str, TensorInfo]], shards: list[str]) -> None:
    """Every layer has every expert, each in one shard; fused tensors split."""
    for layer in layout.layers:
        for e in range(layout.n_experts):
            have = by_key.get((layer, -1 if layout.fused else e), {})
            for t in layout.tensors:
                if t not in have:
                    raise missing_tensor(layout, layer, e, t)
            where = sorted({have[t].shard for t in layout.tensors})
            if len(where) > 1:
                names = ", ".join(os.path.basename(shards[s]) for s in where)
                raise LayoutError(
                    f"layer {layer} expert {e}: its tensors are split across "
                    f"shards {names}; each expert's tensors must be in one "
                    f"shard", layer=layer, expert=e)
            if layout.fused:
                for t in layout.tensors:
                    fused_slice(have[t], layer, layout.n_experts)
                break  # every expert of a fused layer has the same tensors
