"""The containers an outside cache serves, and where each scenario and program runs.

A cache that reads the container itself may know only its own tensor
naming, one dtype or one layout family: on any other container it fails
at open, which says nothing of its caching.  The manifest's
``[[containers]]`` tables declare what it serves, each a fixture preset
(``fixtures/presets.py``) with optional overrides::

    [[containers]]
    preset = "mixtral-mini"                      # a preset (required)
    name = "mixtral-blk"                         # its name in the report
    expert_template = "blk.{layer}.ffn.{expert}.{tensor}"
    tensors = ["gate", "down", "up"]             # the expert tensors renamed
    dtype = "BF16"                               # every expert tensor's dtype
    layout = "contiguous"                        # or "dtype-sorted"

A declaration without overrides serves the preset itself; one with them is
written as a spec file (``fixtures/spec.py``) the fixture generator makes.
Without ``[[containers]]`` the cache serves every container (it is handed
each expert's pieces).  :func:`retarget` sends a scenario or program whose
home container the cache does not serve to a served one of the same
layout family (per-expert or fused), else the first declared; there its
expected values are the oracle's (a derived run, as ``--container``), and
a scenario that cannot apply there is a SKIP naming why (its
``requires``), never a FAIL.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from xcache import fixtures
from xcache.fixtures.presets import preset_dict
from xcache.gate import CannotRun

#: the fields of a ``[[containers]]`` table, each with its type check
FIELDS = {"preset": str, "name": str, "expert_template": str, "tensors": list,
          "dtype": str, "layout": str}

#: the layouts a declaration may ask for
LAYOUTS = ("contiguous", "dtype-sorted")


@dataclass(frozen=True)
class Served:
    """One container the cache serves: its reference (a preset name or a
    spec file), its name and layout family."""

    ref: str
    name: str
    preset: str
    family: str
    overridden: bool


def check_tables(tables: Any, where: Path) -> list[dict[str, Any]]:
    """The ``[[containers]]`` tables, each field's type and value checked
    (``CannotRun`` naming the field)."""
    if not isinstance(tables, list) or not all(isinstance(t, dict)
                                               for t in tables):
        raise CannotRun(f"{where}: containers must be an array of tables "
                        "([[containers]])")
    for i, t in enumerate(tables):
        at = f"{where}: containers[{i}]"
        for k, v in t.items():
            if k not in FIELDS:
                raise CannotRun(f"{at}.{k} is no field (fields: "
                                f"{', '.join(FIELDS)})")
            if not isinstance(v, FIELDS[k]) or (
                    k == "tensors" and not all(isinstance(x, str) for x in v)):
                raise CannotRun(f"{at}.{k} has the wrong type: {v!r}")
        if t.get("preset") not in fixtures.PRESETS:
            raise CannotRun(f"{at}.preset must be one of "
                            f"{', '.join(fixtures.PRESETS)}, not "
                            f"{t.get('preset')!r}")
        if t.get("layout", "contiguous") not in LAYOUTS:
            raise CannotRun(f"{at}.layout must be one of {', '.join(LAYOUTS)}")
        if t.get("dtype", "BF16") not in fixtures.spec.DTYPE_BITS:
            raise CannotRun(f"{at}.dtype {t['dtype']!r} is no safetensors "
                            "dtype")
    return tables


def materialise(tables: list[dict[str, Any]], work: Path, where: Path
                ) -> list[Served]:
    """Each declared container as a reference :func:`gate.containers.make_target`
    takes: the preset's name, or a spec file written under ``work``."""
    out = []
    for i, t in enumerate(tables):
        base = preset_dict(t["preset"])
        overrides = {k: v for k, v in t.items() if k not in ("preset", "name")}
        name = t.get("name", t["preset"] if not overrides
                     else f"{t['preset']}-served{i}")
        if not overrides:
            out.append(Served(t["preset"], name, t["preset"],
                              str(fixtures.preset(t["preset"]).family), False))
            continue
        d = dict(base, name=name)
        for k in ("expert_template", "layout"):
            if k in t:
                d[k] = t[k]
        tensors = [dict(x) for x in base["expert_tensors"]]
        if "tensors" in t:
            if len(t["tensors"]) != len(tensors):
                raise CannotRun(f"{where}: containers[{i}].tensors names "
                                f"{len(t['tensors'])} tensors; preset "
                                f"{t['preset']} has {len(tensors)}")
            for x, new in zip(tensors, t["tensors"], strict=True):
                x["name"] = new
        if "dtype" in t:
            for x in tensors:
                x["dtype"] = t["dtype"]
        d["expert_tensors"] = tensors
        try:
            spec = fixtures.load_spec(d)
        except ValueError as e:
            raise CannotRun(f"{where}: containers[{i}]: {e}") from e
        path = work / "served" / f"{name}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(d, indent=1) + "\n")
        out.append(Served(str(path), name, t["preset"], str(spec.family),
                          True))
    return out


def family_of(ref: str) -> str | None:
    """The layout family of a preset (None for anything else)."""
    if ref in fixtures.PRESETS:
        return str(fixtures.preset(ref).family)
    return None


def retarget(home: str, served: list[Served]) -> str | None:
    """Where a run whose home container is ``home`` runs: None at home (served,
    or no declaration), else the served container's reference."""
    if not served or any(s.ref == home for s in served):
        return None
    fam = family_of(home)
    same = [s for s in served if s.family == fam]
    return (same or served)[0].ref


def describe(served: list[Served]) -> list[dict[str, Any]]:
    """The declared containers for the report."""
    return [{"name": s.name, "preset": s.preset, "family": s.family,
             "overridden": s.overridden} for s in served]
