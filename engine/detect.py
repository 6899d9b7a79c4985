"""Detecting a container's expert layout from ``config.json`` and its names.

:func:`detect` is the last step of :func:`engine.layout.resolve`: it reads
``config.json`` beside the container and takes the tensor names, shapes,
shards and offsets the C reader validated to the one rule set every tool
shares, :mod:`xcache.layout_rules` (names -> template, family, MoE layers,
experts, top-k; docs/LAYOUT.md "Detection").  It returns the
:class:`engine.layout.Layout` they describe, or raises
:class:`engine.errors.LayoutError` with the rules' message -- the same one
the generator's ``fixtures.detect`` and ``from-header`` print.

What stays here is what only the engine can do: reading the config as a
regular file, and checking each fused tensor's byte size against the
slices the experts make (:func:`engine.layout_core.fused_slice`).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from xcache import layout_rules as rules
from xcache.engine.container import Container, TensorInfo
from xcache.engine.errors import LayoutError
from xcache.engine.layout_core import FUSED, Layout, folder_of, fused_slice
from xcache.engine.regular import NotRegularFileError, TooLargeError, read_regular

#: The expert groups :func:`detect` can be asked for (the rules' list).
GROUPS = rules.GROUPS


def read_config(folder: Path) -> dict[str, Any] | None:
    """``folder``'s config.json as a JSON object, None if there is none."""
    path = folder / "config.json"
    if not path.exists():  # a FIFO or folder is refused, not skipped
        return None
    try:
        data = json.loads(read_regular(path))
    except (NotRegularFileError, TooLargeError) as e:
        raise LayoutError(str(e)) from None
    except (OSError, ValueError) as e:
        raise LayoutError(f"{path}: not valid JSON: {e}") from None
    except RecursionError:
        raise LayoutError(f"{path}: not valid JSON: a value nested "
                          "too deeply") from None
    if not isinstance(data, dict):
        raise LayoutError(f"{path}: must be a JSON object, got "
                          f"{type(data).__name__}")
    return data


def detect(path: str | os.PathLike[str], *,
           container: Container | None = None, group: str | None = None,
           top_k: int | None = None) -> Layout:
    """Detect the layout from ``config.json`` and the tensor names (docs/LAYOUT.md).

    ``group`` is one of :data:`GROUPS` (None: the decoder's, when the names
    hold an encoder's, attention experts' or multi-token-prediction group
    beside it); ``top_k`` is the top-k when the config gives none.
    """
    p = Path(os.fsdecode(path))
    if container is None:
        with Container(p) as c:
            return _detect(p, c, group, top_k)
    return _detect(p, container, group, top_k)


def _detect(p: Path, c: Container, group: str | None = None,
            top_k: int | None = None) -> Layout:
    folder = folder_of(p)
    config = read_config(folder)
    infos = c.tensors()
    entries = [rules.Entry(t.name, tuple(t.shape), os.path.basename(c.shards[t.shard]),
                           t.offset) for t in infos]
    try:
        got = rules.detect(config, entries, where=str(p),
                           config_where=str(folder / "config.json"),
                           group=group, given_top_k=top_k)
    except rules.RuleError as e:
        raise LayoutError(str(e), layer=-1 if e.layer is None else e.layer,
                          expert=-1 if e.expert is None else e.expert) from None
    source = ("detected (config.json and tensor names" if config is not None
              else "detected (tensor names")
    if got.groups > 1 or group is not None:
        source += f", the {rules.GROUP_WORDS[got.group]} expert group"
    if got.top_k_from == "--top-k":
        source += ", top-k given"
    layout = Layout(got.expert_template, got.tensors, got.layers, got.n_experts,
                    got.top_k, source + ")", family=got.family)
    if layout.family == FUSED:
        _check_fused(layout, {t.name: t for t in infos})
    return layout


def _check_fused(layout: Layout, infos: dict[str, TensorInfo]) -> None:
    """Every fused tensor splits into n_experts slices of whole bytes."""
    for layer in layout.layers:
        for t in layout.tensors:
            fused_slice(infos[layout.tensor_name(layer, 0, t)], layer,
                        layout.n_experts)
