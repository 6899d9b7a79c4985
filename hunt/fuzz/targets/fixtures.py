"""Targets of ``python -m xcache.fixtures``: new, verify, from-header, identify.

``new`` / ``new-toml`` change the spec (JSON or TOML); ``verify`` the
fixture's index, the spec stored in it, or a shard; ``from-header`` the
checkpoint's ``config.json``, its index or an option; ``identify`` its
``--offset`` / ``--length``.  ``verify`` and ``identify`` run on the
session's fixture (:func:`prepare`).
"""

from __future__ import annotations

import json
from pathlib import Path

from hypothesis import strategies as st

from xcache.hunt.fuzz.case import PY, Case, Target, _fixture
from xcache.hunt.fuzz.mutate import (
    _opt,
    byte_edit,
    dump_json,
    json_file_case,
    mutated_doc,
    toml_file_case,
)
from xcache.hunt.fuzz.targets.containers import CONFIG, INDEX, SPEC

TARGETS = (
    Target("new", lambda d: [PY, "-m", "xcache.fixtures", "new", "spec.json", "out"],
           ("spec.json",)),
    Target("new-toml", lambda d: [PY, "-m", "xcache.fixtures", "new", "spec.toml",
                                  "out"],
           ("spec.toml",)),
    Target("verify", lambda d: [PY, "-m", "xcache.fixtures", "verify", "fx"],
           ("@fixture",), exit1_ok=True),
    Target("from-header", lambda d: [PY, "-m", "xcache.fixtures", "from-header", "ckpt",
                                     "out"], ("ckpt",)),
    Target("identify", lambda d: [PY, "-m", "xcache.fixtures", "identify", "fx",
                                  "fx/model-00001-of-00002.safetensors"],
           ("@fixture",)),
)

_FIXTURE: Path | None = None


def prepare(work: Path) -> None:
    """Make the session's fixture (the verify/identify targets need it)."""
    global _FIXTURE
    _FIXTURE = _fixture(work)


@st.composite
def new_case(draw: st.DrawFn) -> Case:
    """fixtures new SPEC OUT, the spec as JSON or TOML."""
    if draw(st.booleans()):
        return draw(json_file_case("new", "spec.json", SPEC, ("spec.json",)))
    return draw(toml_file_case("new-toml", "spec.toml", SPEC, ("spec.toml",)))


@st.composite
def verify_case(draw: st.DrawFn) -> Case:
    """fixtures verify on the fixture with its index, spec or a shard changed."""
    assert _FIXTURE is not None, "prepare() makes the fixture first"
    idx = json.loads((_FIXTURE / "model.safetensors.index.json").read_text())
    which = draw(st.sampled_from(["index", "spec", "shard"]))
    rel = "fx/model.safetensors.index.json"
    if which == "index":
        return draw(json_file_case("verify", rel, idx, ("index.json", "fx")))
    if which == "spec":
        spec = json.loads(idx["metadata"]["xcache.spec"])
        new, note = draw(mutated_doc(spec))
        idx = json.loads(json.dumps(idx))
        idx["metadata"]["xcache.spec"] = dump_json(new).decode()
        return Case("verify", f"xcache.spec in the index: {note}",
                    {rel: json.dumps(idx).encode()}, [], ("index.json", "fx"))
    shard = "fx/model-00002-of-00002.safetensors"
    data = (_FIXTURE / "model-00002-of-00002.safetensors").read_bytes()
    new_b, note = draw(byte_edit(data))
    return Case("verify", f"{shard}: {note}", {shard: new_b}, [],
                ("model-00002-of-00002", "fx"))


@st.composite
def from_header_case(draw: st.DrawFn) -> Case:
    """fixtures from-header on the checkpoint: config, index or an option."""
    which = draw(st.sampled_from(["config", "config", "index", "args", "args"]))
    if which == "config":
        c = draw(json_file_case("from-header", "ckpt/config.json", CONFIG,
                                ("config.json",)))
    elif which == "index":
        c = draw(json_file_case("from-header", "ckpt/model.safetensors.index.json",
                                INDEX, ("index.json", "ckpt")))
    else:
        args, names = draw(_opt(["--scale", "--layers", "--experts", "--top-k",
                                 "--seed"]))
        c = Case("from-header", " ".join(args), {}, args, names)
    return c


@st.composite
def identify_case(draw: st.DrawFn) -> Case:
    """fixtures identify with hostile --offset / --length."""
    args, names = draw(_opt(["--offset", "--length"]))
    if draw(st.booleans()):
        more, more_names = draw(_opt(["--offset", "--length"]))
        args, names = args + more, names + more_names
    return Case("identify", " ".join(args), {}, args, names)


STRATEGIES = {
    "new": new_case,
    "verify": verify_case,
    "from-header": from_header_case,
    "identify": identify_case,
}
