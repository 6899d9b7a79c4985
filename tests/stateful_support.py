"""What the model-based tests share: fixture containers, expected bytes, errors.

Each preset is generated once per session into a temporary folder (removed
at exit); its expected expert payloads come from the oracle's own reader
(``oracle.safetensors``): the tensors of the expert in the spec's order,
concatenated -- the slot layout docs/CACHE.md "Reads" defines.
"""

from __future__ import annotations

import atexit
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import engine
import fixtures
from faults.kinds import kind_of
from oracle import safetensors as ost

_ROOT: Path | None = None
_PRESETS: dict[str, Preset] = {}


@dataclass(frozen=True)
class Preset:
    """A generated fixture container and what the tests need to know of it."""

    name: str
    path: Path
    spec: fixtures.Spec
    layers: tuple[int, ...]
    n_experts: int
    top_k: int
    parts: tuple[str, ...]
    expert_bytes: int
    payload: dict[tuple[int, int], bytes]  # the oracle reader's bytes per key
    file_offset: dict[tuple[int, int], int]  # where each expert's run begins

    @property
    def keys(self) -> list[tuple[int, int]]:
        """Every valid (layer, expert) key, in key-id order."""
        return [(la, e) for la in self.layers for e in range(self.n_experts)]

    def cache_kwargs(self) -> dict[str, object]:
        """The ExpertCache arguments that describe this container's experts."""
        return {"top_k": self.top_k, "expert_template": self.spec.expert_template,
                "tensors": self.parts, "layers": self.layers,
                "n_experts": self.n_experts}

    def who(self, data: bytes) -> str:
        """Name whose bytes ``data`` starts with (fixtures.identify)."""
        return str(fixtures.identify(data, self.spec))


def preset(name: str) -> Preset:
    """The preset's container, generated on first use in this session."""
    global _ROOT
    if name in _PRESETS:
        return _PRESETS[name]
    if _ROOT is None:
        _ROOT = Path(tempfile.mkdtemp(prefix="xc-stateful-"))
        atexit.register(shutil.rmtree, _ROOT, True)
    spec = fixtures.preset(name)
    folder = _ROOT / name
    fixtures.generate(name, folder)
    oc = ost.open_container(folder)
    payload, file_offset = {}, {}
    for layer in spec.layers:
        for e in range(spec.n_experts):
            names = spec.expert_names(layer, e)
            payload[layer, e] = b"".join(oc.read_bytes(n) for n in names)
            file_offset[layer, e] = oc.tensor(names[0]).offset
    p = Preset(name, folder, spec, tuple(spec.layers), spec.n_experts, spec.top_k,
               tuple(part for part, _, _ in spec.expert_tensors),
               spec.expert_nbytes, payload, file_offset)
    _PRESETS[name] = p
    return p


def open_container(p: Preset, *, direct: bool = False) -> engine.Container:
    """The engine's container over a preset's folder."""
    return engine.Container(p.path, direct=direct)


def engine_family(exc: BaseException) -> str:
    """The failure kind of an engine exception (faults.kinds)."""
    return kind_of(exc)


def oracle_family(exc: BaseException) -> str:
    """The failure kind of an oracle exception, in the engine's names."""
    return kind_of(exc)
