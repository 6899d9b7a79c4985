"""Targets over a checkpoint folder: ``engine.inspector`` and the gate's container step.

``inspect`` / ``gate-container`` change the checkpoint's ``config.json``,
its index or its ``xcache-layout.toml``; ``inspect-layout`` the file of
``--layout``; ``gate-spec`` a fixture spec handed to ``--container``.
"""

from __future__ import annotations

import json

import tomllib
from hypothesis import strategies as st

from xcache.hunt.fuzz.case import PY, SEED, Case, Target
from xcache.hunt.fuzz.mutate import json_file_case, toml_file_case

CONFIG = json.loads((SEED / "ckpt" / "config.json").read_text())
INDEX = json.loads((SEED / "ckpt" / "model.safetensors.index.json").read_text())
LAYOUT = tomllib.loads((SEED / "xcache-layout.toml").read_text())
SPEC = json.loads((SEED / "spec.json").read_text())

TARGETS = (
    Target("inspect", lambda d: [PY, "-m", "xcache.engine.inspector", "ckpt"],
           ("ckpt",), exit1_ok=True),
    Target("inspect-layout", lambda d: [PY, "-m", "xcache.engine.inspector", "ckpt",
                                        "--layout", "layout.toml"],
           ("ckpt",), exit1_ok=True),
    Target("gate-container", lambda d: [PY, "-m", "xcache.hunt.fuzz.gate_container",
                                        "ckpt"], ("ckpt",)),
    Target("gate-spec", lambda d: [PY, "-m", "xcache.hunt.fuzz.gate_container",
                                   "spec.toml"], ("spec.toml",)),
)


@st.composite
def inspect_case(draw: st.DrawFn) -> Case:
    """engine.inspector on the checkpoint: config.json, the index, or a layout file."""
    which = draw(st.sampled_from(["config", "config", "layout", "index"]))
    if which == "config":
        return draw(json_file_case("inspect", "ckpt/config.json", CONFIG,
                                   ("config.json",)))
    if which == "index":
        return draw(json_file_case("inspect", "ckpt/model.safetensors.index.json",
                                   INDEX, ("index.json", "ckpt")))
    return draw(toml_file_case("inspect", "ckpt/xcache-layout.toml", LAYOUT,
                               ("xcache-layout.toml",)))


@st.composite
def inspect_layout_case(draw: st.DrawFn) -> Case:
    """engine.inspector --layout FILE with the file changed."""
    return draw(toml_file_case("inspect-layout", "layout.toml", LAYOUT,
                               ("layout.toml",)))


@st.composite
def gate_container_case(draw: st.DrawFn) -> Case:
    """replay --container's container step on the checkpoint folder."""
    c = draw(inspect_case())
    c.target = "gate-container"
    return c


@st.composite
def gate_spec_case(draw: st.DrawFn) -> Case:
    """replay --container SPEC.toml: a spec file."""
    return draw(toml_file_case("gate-spec", "spec.toml", SPEC, ("spec.toml",)))


STRATEGIES = {
    "inspect": inspect_case,
    "inspect-layout": inspect_layout_case,
    "gate-container": gate_container_case,
    "gate-spec": gate_spec_case,
}
