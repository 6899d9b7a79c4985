"""The expert layout as a value, and the rules every maker of one shares.

:class:`Layout` is what :mod:`engine.layout` (explicit layouts, layout
files, fixture specs) and :mod:`engine.detect` (config.json and tensor
names) both build; the helpers here are the checks and messages they share.
Both import this module and neither imports the other's private names, so
there is no import circle: ``layout_core`` <- ``detect`` <- ``layout``.

The layout *family* is one field, decided once where a layout is built:

* :data:`PER_EXPERT` -- the template holds ``{expert}``: every expert has
  whole tensors of its own;
* :data:`FUSED` -- the template has no ``{expert}``: it names one
  ``[n_experts, ...]`` tensor per (layer, part), expert e being slice e
  along the leading dimension.

:func:`check_family` is the one place that relates a family to a template
and :func:`expert_pieces` the one place in the engine's Python that turns
a family into bytes; everything else reads :attr:`Layout.family`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from xcache.engine.container import TensorInfo
from xcache.engine.errors import LayoutError

#: One tensor per expert: the template holds ``{expert}``.
PER_EXPERT = "per-expert"
#: Stacked ``[n_experts, ...]`` tensors: the template has no ``{expert}``.
FUSED = "fused"
#: Every layout family, in the order docs/LAYOUT.md lists them.
FAMILIES = (PER_EXPERT, FUSED)

#: The conventional name of an explicit layout file inside a container folder.
LAYOUT_FILE = "xcache-layout.toml"
#: The largest layer id, expert count or top-k the C engine takes.
I32_MAX = 2**31 - 1


def is_int(v: Any) -> bool:
    """Whether ``v`` is an integer and not a bool."""
    return isinstance(v, int) and not isinstance(v, bool)


def check_template(where: str, key: str, v: Any) -> str:
    """``v`` if it is a valid expert template; else LayoutError naming ``key``."""
    need = "a string holding {layer} and {tensor} (and {expert} unless the " \
           "experts are fused)"
    if not isinstance(v, str) or "{layer}" not in v or "{tensor}" not in v:
        raise LayoutError(f"{where}: key {key!r} must be {need}, got {v!r}")
    rest = v.replace("{layer}", "").replace("{expert}", "").replace(
        "{tensor}", "")
    if "{" in rest or "}" in rest or "\0" in v:
        raise LayoutError(f"{where}: key {key!r} may hold no braces other than "
                          f"{{layer}}, {{expert}} and {{tensor}}, got {v!r}")
    return v


def check_family(where: str, template: str, declared: Any = None, *,
                 key: str = "family", template_key: str = "expert_template"
                 ) -> str:
    """The family of a layout with ``template``, checked against ``declared``.

    ``declared`` is the family the source names (None: it names none, as
    layout files and specs written before the field did not, and the
    template decides).  A family that is not one of :data:`FAMILIES`, or one
    the template contradicts, is a LayoutError naming ``where`` and ``key``.
    """
    has_expert = "{expert}" in template
    if declared is None:
        return PER_EXPERT if has_expert else FUSED
    if declared not in FAMILIES:
        raise LayoutError(f"{where}: key {key!r} must be one of "
                          f"{', '.join(map(repr, FAMILIES))}, got {declared!r}")
    if (declared == PER_EXPERT) != has_expert:
        said = ("holds {expert}, which only a 'per-expert' layout may"
                if has_expert else
                "has no {expert}, which a 'per-expert' layout needs")
        raise LayoutError(f"{where}: key {key!r} is {declared!r} but key "
                          f"{template_key!r} {said}: {template!r}")
    return str(declared)


@dataclass(frozen=True)
class Layout:
    """The expert layout of a container and where it came from (``source``).

    ``family`` is :data:`PER_EXPERT` or :data:`FUSED`; left out, it is the
    one the template implies, and given, the template must agree (a
    LayoutError otherwise).  The makers in :mod:`engine.layout` and
    :mod:`engine.detect` pass it, checked with :func:`check_family` against
    the file and key it came from.
    """

    expert_template: str
    tensors: tuple[str, ...]
    layers: tuple[int, ...]
    n_experts: int
    top_k: int
    source: str = "given"
    family: str = field(default="", kw_only=True)

    def __post_init__(self) -> None:
        fam = check_family(f"layout ({self.source})", self.expert_template,
                           self.family or None)
        object.__setattr__(self, "family", fam)

    @property
    def fused(self) -> bool:
        """Whether experts are slices of stacked tensors (family ``fused``)."""
        return self.family == FUSED

    def cache_kwargs(self) -> dict[str, Any]:
        """The five keyword arguments of ``engine.ExpertCache`` for this layout."""
        return {"expert_template": self.expert_template,
                "tensors": list(self.tensors), "layers": list(self.layers),
                "n_experts": self.n_experts, "top_k": self.top_k}

    def tensor_name(self, layer: int, expert: int, tensor: str) -> str:
        """The container name of ``tensor`` of (layer, expert) (fused: of the layer)."""
        return (self.expert_template.replace("{layer}", str(layer))
                .replace("{expert}", str(expert)).replace("{tensor}", tensor))


def folder_of(path: Path) -> Path:
    """The folder of a container path: itself if a folder, else its parent."""
    return path if path.is_dir() else path.parent


def shape_text(shape: Sequence[int]) -> str:
    """A shape as the messages print it: ``[8, 32, 16]``."""
    return "[" + ", ".join(str(d) for d in shape) + "]"


def fused_slice(info: TensorInfo, layer: int, n_experts: int) -> int:
    """Bytes of expert slices of fused tensor ``info``; LayoutError if none.

    The leading dimension is ``n_experts`` (``[E, ...]``) or a multiple of
    it (stacked ``[E*I, ...]`` rows, expert e being rows ``[e*I, (e+1)*I)``):
    either way expert e is bytes ``[e*nb, (e+1)*nb)``, nb = nbytes / E.
    """
    if not info.shape or info.shape[0] <= 0 or info.shape[0] % n_experts:
        raise LayoutError(
            f"fused expert tensor {info.name} (layer {layer}) has shape "
            f"{shape_text(info.shape)}: its leading dimension must be "
            f"n_experts ({n_experts}) or a multiple of it", layer=layer)
    if info.nbytes % n_experts:
        raise LayoutError(
            f"fused expert tensor {info.name} (layer {layer}) has shape "
            f"{shape_text(info.shape)} ({info.nbytes} bytes), which does not "
            f"split into n_experts ({n_experts}) slices of whole bytes",
            layer=layer)
    return info.nbytes // n_experts


def missing_tensor(layout: Layout, layer: int, expert: int, tensor: str
                   ) -> LayoutError:
    """The error for a tensor of (layer, expert) that the container lacks."""
    name = layout.tensor_name(layer, expert, tensor)
    who = (f"layer {layer} (all {layout.n_experts} experts)" if layout.fused
           else f"layer {layer} expert {expert}")
    return LayoutError(f"missing expert tensor: {who} has no {tensor!r}: "
                       f"{name} is not in the container",
                       layer=layer, expert=expert)


def expert_pieces(layout: Layout, layer: int, expert: int,
                  infos: Mapping[str, TensorInfo]) -> list[tuple[str, int, int]]:
    """Expert (layer, expert) as ``(tensor name, byte start in it, nbytes)`` pieces.

    ``infos`` maps tensor names to their :class:`TensorInfo`.  Per-expert
    tensors give ``(name, 0, nbytes)``; fused ones ``(name, e*nb/E, nb/E)``.
    """
    out = []
    for t in layout.tensors:
        name = layout.tensor_name(layer, expert, t)
        info = infos.get(name)
        if info is None:
            raise missing_tensor(layout, layer, expert, t)
        if layout.fused:
            nb = fused_slice(info, layer, layout.n_experts)
            out.append((name, expert * nb, nb))
        else:
            out.append((name, 0, info.nbytes))
    return out
