"""The C policy table is made from the policy files: one XC_POLICY_REGISTER line each.

Every ``engine/csrc/xc_policy_<name>.c`` that defines ``xc_policy_<name>_ops``
ends with ``XC_POLICY_REGISTER(xc_policy_<name>_ops, rank)``; the library's
table lists exactly those, by rank, and the oracle's registry the same names.
"""

from __future__ import annotations

import re
from pathlib import Path

from xcache.engine import _lib
from xcache.oracle.policies import LIBCACHESIM, REGISTRY

CSRC = Path(__file__).resolve().parents[2] / "engine" / "csrc"
_REGISTER = re.compile(r"^XC_POLICY_REGISTER\(xc_policy_(\w+)_ops, (\d+)\);$", re.M)


def registered() -> dict[str, int]:
    """Each policy file's registration: name -> rank."""
    out: dict[str, int] = {}
    for p in sorted(CSRC.glob("xc_policy_*.c")):
        found = _REGISTER.findall(p.read_text(encoding="utf-8"))
        assert len(found) <= 1, p.name
        for name, rank in found:
            assert p.name == f"xc_policy_{name}.c"
            out[name] = int(rank)
    return out


def test_the_table_is_the_registered_files_in_rank_order():
    """The C table lists every registering file's policy, ordered by rank."""
    regs = registered()
    assert list(_lib.policy_table()) == sorted(regs, key=lambda n: (regs[n], n))
    assert regs == {"lru": 10, "fifo": 20, "lfu": 30, "lfru": 40, "hotness": 50,
                    "s3fifo": 60, "arc": 70, "sieve": 80}
    assert len(set(regs.values())) == len(regs)


def test_only_the_shared_list_file_does_not_register():
    """Every xc_policy_*.c is a policy, but the one-list state shared by several."""
    names = {p.stem.removeprefix("xc_policy_") for p in CSRC.glob("xc_policy_*.c")}
    assert names - set(registered()) == {"list"}


def test_no_c_file_names_a_policy_ops_but_its_own():
    """No other C file names a policy's ops: views and checks go through the ops."""
    for p in sorted(CSRC.glob("*.[ch]")):
        text = p.read_text(encoding="utf-8")
        named = set(re.findall(r"xc_policy_(\w+?)_ops\b", text)) & set(registered())
        assert named <= {p.stem.removeprefix("xc_policy_")}, p.name


def test_the_oracle_registry_names_the_same_policies():
    """The oracle's modules are the engine's policies; each libCacheSim twin is one."""
    assert set(REGISTRY) == set(registered())
    assert set(LIBCACHESIM) <= set(REGISTRY)
    assert LIBCACHESIM["sieve"] == "Sieve"
