"""Which bytes make expert (layer, e): the expert layout of a container.

A :class:`Layout` is the five things :class:`engine.ExpertCache` needs --
``expert_template``, ``tensors``, ``layers``, ``n_experts``, ``top_k`` --
plus where they came from.  :func:`resolve` finds it for a container, in
this order (docs/LAYOUT.md):

1. an explicit layout (a TOML file path or a mapping) given by the caller;
2. ``xcache-layout.toml`` in the container's folder;
3. a fixture's own spec stored in the container (metadata key
   ``xcache.spec``, in the index's ``metadata`` or the first shard's
   ``__metadata__``);
4. detection from ``config.json`` beside the container and the tensor
   names, shapes and offsets the C reader validated.

A layout's family (:attr:`Layout.family`, :mod:`engine.layout_core`) is
``per-expert`` (the template holds ``{expert}``: one whole tensor per
expert) or ``fused`` (no ``{expert}``: one ``[n_experts, ...]`` tensor per
layer and tensor part, expert e being slice e along the leading
dimension).  A layout file or spec may name it (key ``family``); it is
decided once, here or in detection, and checked against the template.

Detection is :mod:`engine.detect`; the Layout value and the helpers both
share are :mod:`engine.layout_core`.  Every problem raises
:class:`engine.errors.LayoutError` naming the file, key, layer, expert or
tensor concerned.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from xcache.engine._lib import misuse
from xcache.engine.container import Container
from xcache.engine.detect import detect
from xcache.engine.errors import EngineError, LayoutError
from xcache.engine.layout_core import (
    FAMILIES,
    FUSED,
    I32_MAX,
    LAYOUT_FILE,
    PER_EXPERT,
    Layout,
    check_family,
    check_template,
    expert_pieces,
    folder_of,
    fused_slice,
    is_int,
)
from xcache.engine.regular import TooLargeError, read_regular
from xcache.engine.weightless import explained
from xcache.layout_rules import ranges
from xcache.toml_nesting import check_nesting

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib

__all__ = ["FAMILIES", "FUSED", "KEYS", "LAYOUT_FILE", "OPTIONAL_KEYS",
           "PER_EXPERT", "Layout", "Summary", "UNSET", "cache_keywords",
           "expert_pieces", "from_mapping", "from_spec", "fused_slice",
           "has_layout", "load_file", "ranges", "resolve", "resolve_given",
           "summarize"]

#: The metadata key under which a fixture container stores its spec (JSON).
SPEC_KEY = "xcache.spec"
#: The index file name the C reader looks for in a folder.
INDEX_NAME = "model.safetensors.index.json"
#: The keys of a layout, exactly: ExpertCache's layout keyword arguments.
KEYS = ("expert_template", "tensors", "layers", "n_experts", "top_k")
#: Keys a layout file or mapping may add: the family, else the template's.
OPTIONAL_KEYS = ("family",)
#: The largest layout file read (a real one is a few hundred bytes).
MAX_LAYOUT_BYTES = 1 << 20


# -- explicit layouts ---------------------------------------------------------


def _check_tensors(where: str, key: str, v: Any) -> tuple[str, ...]:
    if (not isinstance(v, (list, tuple)) or not v or not all(
            isinstance(t, str) and t and "\0" not in t for t in v)):
        raise LayoutError(f"{where}: key {key!r} must be a non-empty list of "
                          f"non-empty strings, got {v!r}")
    seen: set[str] = set()
    for t in v:
        if t in seen:
            raise LayoutError(f"{where}: key {key!r} names {t!r} twice")
        seen.add(t)
    return tuple(v)


def _check_layers(where: str, key: str, v: Any) -> tuple[int, ...]:
    if (not isinstance(v, (list, tuple)) or not v
            or not all(is_int(x) and 0 <= x <= I32_MAX for x in v)):
        raise LayoutError(f"{where}: key {key!r} must be a non-empty list of "
                          f"integers from 0 to {I32_MAX}, got {v!r}")
    for a, b in zip(v[:-1], v[1:], strict=True):
        if b <= a:
            raise LayoutError(f"{where}: key {key!r} must be strictly "
                              f"ascending: {b} follows {a}")
    return tuple(v)


def _check_count(where: str, key: str, v: Any, hi: int, what: str = "") -> int:
    if not is_int(v) or not 1 <= v <= hi:
        raise LayoutError(f"{where}: key {key!r} must be an integer from 1 to "
                          f"{hi}{what}, got {v!r}")
    return int(v)


def from_mapping(data: Any, where: str = "layout", source: str = "given"
                 ) -> Layout:
    """A Layout from a mapping of exactly the five layout keys, each checked."""
    if isinstance(data, Layout):
        return data
    if not isinstance(data, Mapping):
        raise LayoutError(f"{where}: must be a table of {', '.join(KEYS)}, "
                          f"got {type(data).__name__} {data!r}")
    for k in data:
        if k not in KEYS and k not in OPTIONAL_KEYS:
            raise LayoutError(f"{where}: unknown key {k!r} (a layout has "
                              f"exactly {', '.join(KEYS)}, and optionally "
                              f"{', '.join(OPTIONAL_KEYS)})")
    for k in KEYS:
        if k not in data:
            raise LayoutError(f"{where}: missing key {k!r} (a layout has "
                              f"exactly {', '.join(KEYS)})")
    template = check_template(where, "expert_template", data["expert_template"])
    tensors = _check_tensors(where, "tensors", data["tensors"])
    layers = _check_layers(where, "layers", data["layers"])
    n = _check_count(where, "n_experts", data["n_experts"], I32_MAX)
    top_k = _check_count(where, "top_k", data["top_k"], n, " (n_experts)")
    family = check_family(where, template, data.get("family"))
    return Layout(template, tensors, layers, n, top_k, source, family=family)


def load_file(path: str | os.PathLike[str]) -> Layout:
    """The Layout of a TOML layout file; LayoutError naming the file and key.

    A regular file of at most :data:`MAX_LAYOUT_BYTES` (its size asked
    before a byte is read), nested at most ``MAX_NESTING`` levels
    (``xcache.toml_nesting``, measured before ``tomllib`` parses it).
    """
    p = Path(os.fsdecode(path))
    where = f"layout file {p}"
    try:
        text = read_regular(p, MAX_LAYOUT_BYTES, "a layout file").decode("utf-8")
        check_nesting(text, where)
        data = tomllib.loads(text)
    except TooLargeError as e:
        raise LayoutError(f"{where}: {e.strerror}") from None
    except OSError as e:
        raise LayoutError(f"{where}: cannot read it: {e.strerror or e}"
                          ) from None
    except UnicodeDecodeError as e:
        raise LayoutError(f"{where}: not UTF-8 text: {e}") from None
    except tomllib.TOMLDecodeError as e:
        raise LayoutError(f"{where}: not valid TOML: {e}") from None
    except ValueError as e:  # nested past the limit: names the line
        raise LayoutError(str(e)) from None
    except RecursionError:
        raise LayoutError(f"{where}: not valid TOML: a value nested too "
                          "deeply") from None
    return from_mapping(data, where, source=f"layout file {p}")


def from_spec(text: str, where: str) -> Layout:
    """The Layout of a fixture spec (JSON text stored under ``xcache.spec``)."""
    try:
        spec = json.loads(text)
    except ValueError as e:
        raise LayoutError(f"{where}: not valid JSON: {e}") from None
    except RecursionError:
        raise LayoutError(f"{where}: not valid JSON: a value nested too "
                          "deeply") from None
    if not isinstance(spec, Mapping):
        raise LayoutError(f"{where}: must be a JSON object, got "
                          f"{type(spec).__name__}")
    for k in ("expert_template", "expert_tensors", "layers", "experts",
              "top_k"):
        if k not in spec:
            raise LayoutError(f"{where}: missing key {k!r}")
    template = check_template(where, "expert_template", spec["expert_template"])
    parts = spec["expert_tensors"]
    if not isinstance(parts, list) or not all(
            isinstance(t, Mapping) and "name" in t for t in parts):
        raise LayoutError(f"{where}: key 'expert_tensors' must be a list of "
                          f"tables with a name, got {parts!r}")
    tensors = _check_tensors(where, "expert_tensors",
                             [t["name"] for t in parts])
    layers = spec["layers"]
    if is_int(layers) and 1 <= layers <= I32_MAX:  # a count: 0..n-1
        layers = list(range(layers))
    layers = _check_layers(where, "layers", layers)
    n = _check_count(where, "experts", spec["experts"], I32_MAX)
    top_k = _check_count(where, "top_k", spec["top_k"], n, " (experts)")
    family = check_family(where, template, spec.get("family"))
    return Layout(template, tensors, layers, n, top_k,
                  f"fixture spec ({where})", family=family)


# -- where a container lives ------------------------------------------------------


def _index_path(path: Path) -> Path | None:
    """The index file the C reader would use for ``path``, if any."""
    if path.is_dir():
        idx = path / INDEX_NAME
        return idx if idx.is_file() else None
    return path if path.name.endswith(".json") else None


def _spec_from(path: Path, container: Container) -> Layout | None:
    """The layout of a fixture spec stored in the container, or None."""
    idx = _index_path(path)
    if idx is not None:
        try:
            meta = json.loads(read_regular(idx)).get("metadata")
        except (OSError, ValueError, AttributeError, RecursionError):
            meta = None  # the C reader validated it; nothing more to say
        text = meta.get(SPEC_KEY) if isinstance(meta, dict) else None
        if isinstance(text, str):
            return from_spec(text, f"{SPEC_KEY} in {idx}")
    text = container.metadata.get(SPEC_KEY)
    if text is not None:
        shard = container.shards[0] if container.shards else str(path)
        return from_spec(text, f"{SPEC_KEY} in {shard}")
    return None


def resolve(path: str | os.PathLike[str], layout: Any = None, *,
            container: Container | None = None, group: str | None = None
            ) -> Layout:
    """The expert layout of the container at ``path`` (docs/LAYOUT.md).

    ``layout`` is a :class:`Layout`, a mapping of the five keys, a path to a
    TOML layout file, or None to look for ``xcache-layout.toml``, then a
    fixture spec, then detect.  ``container`` is an already open
    :class:`Container` over ``path`` (else one is opened and closed here).
    ``group`` is the expert group detection takes (``engine.detect.detect``).
    Raises LayoutError; a container that fails validation raises the C
    reader's own error (led by what to do when ``path`` is a checkpoint
    without its weights: ``engine.weightless``).
    """
    if layout is not None:
        return resolve_given(layout)
    p = Path(os.fsdecode(path))
    if container is not None:
        return _resolve_in(p, container, group)
    try:
        c = Container(p)
    except EngineError as e:  # a checkpoint without its weights: what to do
        made = explained(e, p)
        if made is e:
            raise
        raise made from None
    with c:
        return _resolve_in(p, c, group)


def has_layout(path: str | os.PathLike[str], container: Container) -> bool:
    """Whether anything describes experts: a layout file, config.json, a spec, names."""
    p = Path(os.fsdecode(path))
    folder = folder_of(p)
    if (folder / LAYOUT_FILE).exists() or (folder / "config.json").exists():
        return True
    if SPEC_KEY in container.metadata:
        return True
    idx = _index_path(p)
    if idx is not None:
        try:
            meta = json.loads(read_regular(idx)).get("metadata")
        except (OSError, ValueError, AttributeError, RecursionError):
            meta = None
        if isinstance(meta, dict) and SPEC_KEY in meta:
            return True
    return any("expert" in n.lower() for n in container.names())


def resolve_given(layout: Any) -> Layout:
    """An explicit layout: a Layout, a mapping of the five keys, or a TOML file path.

    A value of another type is a MisuseError naming ``layout``; a bad
    mapping or file is a LayoutError.
    """
    if isinstance(layout, Layout):
        return layout
    if isinstance(layout, Mapping):
        return from_mapping(layout, "layout argument")
    if isinstance(layout, (str, bytes, os.PathLike)):
        return load_file(layout)
    raise misuse(f"layout must be an engine.layout.Layout, a mapping or a "
                 f"path to a TOML layout file, got {type(layout).__name__} "
                 f"{layout!r}")


class _Unset:
    """The type of :data:`UNSET`: one object, shown by what it means."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "<from layout>"


#: A layout keyword of ExpertCache left out (None is a value, and a misuse);
#: a signature shows it as ``top_k=<from layout>``.
UNSET: Any = _Unset()


def cache_keywords(layout: Any, given: Mapping[str, Any]) -> dict[str, Any]:
    """The five layout keywords of a cache: from ``layout``, else ``given``.

    ``given`` maps each of :data:`KEYS` to the caller's value or
    :data:`UNSET`.  Giving ``layout`` and any keyword, or no layout and not
    every keyword, is a MisuseError naming them.
    """
    if layout is not None:
        both = [k for k in KEYS if given[k] is not UNSET]
        if both:
            raise misuse(f"give either layout or the layout keywords "
                         f"(expert_template, tensors, layers, n_experts, "
                         f"top_k), not both: layout and "
                         f"{', '.join(both)} were given")
        return resolve_given(layout).cache_kwargs()
    for k in KEYS:
        if given[k] is UNSET:
            raise misuse(f"{k} is required (or give layout=)")
    return dict(given)


def _resolve_in(p: Path, c: Container, group: str | None = None) -> Layout:
    explicit = folder_of(p) / LAYOUT_FILE
    if explicit.exists():  # a FIFO or folder is refused by load_file
        return load_file(explicit)
    spec = _spec_from(p, c)
    if spec is not None:
        return spec
    return detect(p, container=c, group=group)


# -- pieces -------------------------------------------------------------------------


@dataclass(frozen=True)
class Summary:
    """What ``engine.inspector`` prints about a layout over a container."""

    layout: Layout
    expert_bytes: int
    n_keys: int
    scattered: int  # experts that are not one run of one shard


def summarize(layout: Layout, container: Container) -> Summary:
    """Check every expert of ``layout`` is in ``container``; count bytes and runs."""
    infos = {t.name: t for t in container.tensors()}
    nbytes = None
    scattered = 0
    for layer in layout.layers:
        for e in range(layout.n_experts):
            pieces = expert_pieces(layout, layer, e, infos)
            total = sum(n for _, _, n in pieces)
            if nbytes is None:
                nbytes = total
            elif total != nbytes:
                raise LayoutError(
                    f"layer {layer} expert {e} is {total} bytes but layer "
                    f"{layout.layers[0]} expert 0 is {nbytes}: every expert "
                    f"must have one layout", layer=layer, expert=e)
            runs = 0
            end: tuple[int, int] | None = None
            for name, start, n in pieces:
                info = infos[name]
                if end != (info.shard, info.offset + start):
                    runs += 1
                end = (info.shard, info.offset + start + n)
            scattered += runs > 1
    return Summary(layout, nbytes or 0,
                   len(layout.layers) * layout.n_experts, scattered)

