"""Containers an outside cache serves (gate/outside/served.py): every scenario
runs on one, so a cache that knows only its own tensor naming is judged on
its caching, not refused at open everywhere.

The cache under test is tinycache whose open reads the first shard's
safetensors header and refuses (XCS_EFORMAT) a container whose tensors are
not named ``blk.*``, as a cache of another engine would.
"""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import bad_adapter
from xcache.gate import CannotRun
from xcache.gate.outside import conformance
from xcache.gate.outside.build import load_manifest
from xcache.gate.outside.served import Served, materialise, retarget

#: tinycache's open, preceded by the check of the tensor naming
OWN = r'''#include <errno.h>

static int own_naming(const xcs_layout *l)
{
    FILE *f;
    do
        f = fopen(l->pieces[0].path, "rb");
    while (!f && errno == EINTR);
    if (!f)
        return -1;
    unsigned char n8[8];
    uint64_t n = 0;
    int ok = 0;
    if (fread(n8, 1, 8, f) == 8) {
        for (int i = 7; i >= 0; i--)
            n = n << 8 | n8[i];
        char *hdr = n < (1u << 24) ? malloc(n + 1) : NULL;
        if (hdr && fread(hdr, 1, n, f) == n) {
            hdr[n] = 0;
            ok = strstr(hdr, "\"blk.") != NULL;
        }
        free(hdr);
    }
    fclose(f);
    return ok;
}

static int shim_open(const xcs_layout *l, void **out)
{
    int own = own_naming(l);
    if (own <= 0)
        return own < 0 ? XCS_EIO : XCS_EFORMAT;
'''

#: the one container the naming-bound cache serves
DECL = '''
[[containers]]
preset = "mixtral-mini"
expert_template = "blk.{layer}.ffn.{expert}.{tensor}"
tensors = ["gate", "down", "up"]
'''


def _rows(tmp: Path, declare: bool, plan: list[dict[str, Any]] | None = None
          ) -> dict[str, dict[str, Any]]:
    """Rows by contract of the naming-bound cache over every scenario."""
    a = bad_adapter(tmp, "static int shim_open(const xcs_layout *l, "
                         "void **out)\n{\n", OWN)
    if declare:
        (a / "xcs.toml").write_text((a / "xcs.toml").read_text() + DECL)
    (tmp / "out").mkdir()
    with contextlib.redirect_stdout(io.StringIO()):
        rows, _ = conformance.run(a, tmp / "out", tmp / "work", [], 120.0,
                                  plan=plan, scenarios=plan is None)
    return {r["contract"]: r for r in rows}


def _count(rows: dict[str, dict[str, Any]]) -> dict[str, int]:
    return {v: sum(1 for r in rows.values() if r["verdict"] == v)
            for v in ("PASS", "FAIL", "N/A")}


def test_undeclared_the_naming_bound_cache_fails_at_open(tmp_path: Path
                                                          ) -> None:
    """Without [[containers]] every scenario it can run fails at open."""
    rows = _rows(tmp_path, False)
    assert _count(rows) == {"PASS": 0, "FAIL": 16, "N/A": 9}
    assert rows["serial-reads"]["first_failure"] == (
        "reference: scenario ran to completion: ShimError: open: shim code "
        "-7 (failed)")


def test_declared_every_scenario_runs_on_the_served_container(tmp_path: Path
                                                              ) -> None:
    """With its container declared: 0 FAIL; open faults, which the judge
    cannot model off their home container, N/A naming the judge."""
    rows = _rows(tmp_path, True)
    assert _count(rows) == {"PASS": 15, "FAIL": 0, "N/A": 10}
    assert rows["serial-reads"]["verdict"] == "PASS"
    assert rows["open-failures"]["missing"] == [
        "fault:open (of oracle, the judge)"]
    report = json.loads((tmp_path / "out" / "conformance.json").read_text())
    assert report["served"] == [{"name": "mixtral-mini-served0",
                                 "preset": "mixtral-mini",
                                 "family": "per-expert", "overridden": True}]


def test_programs_are_retargeted(tmp_path: Path) -> None:
    """Programs pinned to k3-mini and granite-mini run on the served one."""
    plan = [{"container": c, "option_set": "plain", "seed": 0, "length": 12}
            for c in ("k3-mini", "granite-mini")]
    row = _rows(tmp_path, True, plan)["programs"]
    assert (row["verdict"], row["passed"], row["failed"]) == ("PASS", 2, 0)


def test_retarget_keeps_the_family_and_a_served_home(tmp_path: Path) -> None:
    """A served home stays; another goes to a served one of its family."""
    served = [Served("k3-mini", "k3-mini", "k3-mini", "per-expert", False),
              Served("/w/g.json", "g", "granite-mini", "fused", True)]
    assert retarget("k3-mini", served) is None
    assert retarget("mixtral-mini", served) == "k3-mini"
    assert retarget("gptoss-mini", served) == "/w/g.json"
    assert retarget("gptoss-mini", []) is None


@pytest.mark.parametrize(("table", "text"), [
    ({"preset": "nope"}, "containers[0].preset must be one of"),
    ({"preset": "k3-mini", "colour": 1}, "containers[0].colour is no field"),
    ({"preset": "k3-mini", "layout": "listed"},
     "containers[0].layout must be one of contiguous, dtype-sorted"),
    ({"preset": "mixtral-mini", "tensors": ["a"]},
     "containers[0].tensors names 1 tensors; preset mixtral-mini has 3"),
])
def test_a_bad_declaration_is_refused_naming_the_field(
        tmp_path: Path, table: dict[str, Any], text: str) -> None:
    """A [[containers]] table with a bad field: CannotRun naming it."""
    a = bad_adapter(tmp_path, "#include <string.h>\n", "#include <string.h>\n")
    body = "\n".join(f"{k} = {json.dumps(v)}" for k, v in table.items())
    (a / "xcs.toml").write_text((a / "xcs.toml").read_text()
                                + f"\n[[containers]]\n{body}\n")
    with pytest.raises(CannotRun, match=text.replace("[", r"\[").replace(
            "]", r"\]")):
        materialise(load_manifest(a).containers, tmp_path / "w", a)
