"""Every test check() makes has a break the gate applies (gate/check_probe.py BREAKS).

check()'s tests are read from the source: every ``if`` of
``xc_cache_check`` (engine/csrc/xc_check.c) and of the check functions of
the policies and order structures it calls (``*_check`` in
``xc_policy_*.c`` and ``xc_order_*.c``) whose branch reports a failure,
split at each ``||`` into the leaves a mutant can weaken one at a time.
A new test without a break in ``BREAKS`` (or a reason in ``NO_BREAK``)
fails here, and so does a break no pinned scenario applies on a cache of
the policy it needs.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

from xcache.engine import _lib
from xcache.gate.check_probe import BREAK_NAMES, BREAKS, NO_BREAK, SOUND, expected_name

ROOT = Path(__file__).resolve().parents[2]
CSRC = ROOT / "engine" / "csrc"
SCENARIOS = ROOT / "gate" / "scenarios"
_FAIL = re.compile(r"\bBROKEN\(|\bxc_fail\(|\breturn -1\b")


def _match(text: str, i: int, open_: str, close: str) -> int:
    """The index of the bracket closing the one at ``i``."""
    depth = 0
    for j in range(i, len(text)):
        depth += (text[j] == open_) - (text[j] == close)
        if depth == 0:
            return j
    raise ValueError(f"unbalanced {open_} at {i}")


def _leaves(cond: str) -> list[str]:
    """``cond`` split at every ``||``, unmatched parentheses dropped, spaces folded."""
    out = []
    for part in cond.split("||"):
        keep, stack = [True] * len(part), []
        for j, ch in enumerate(part):
            if ch == "(":
                stack.append(j)
            elif ch == ")":
                if stack:
                    stack.pop()
                else:
                    keep[j] = False
        for j in stack:
            keep[j] = False
        kept = "".join(c for c, k in zip(part, keep, strict=True) if k)
        out.append(" ".join(kept.split()))
    return out


def check_functions() -> dict[str, str]:
    """The body of xc_cache_check and of every policy's and order's ``*_check``."""
    out = {}
    for p in sorted(CSRC.glob("*.c")):
        if p.name != "xc_check.c" and not p.name.startswith(("xc_policy_",
                                                             "xc_order_")):
            continue
        text = p.read_text(encoding="utf-8")
        for m in re.finditer(r"^(?:static )?int (\w+_check)\([^)]*\)\n\{", text,
                             re.M):
            if p.name == "xc_check.c" and m.group(1) != "xc_cache_check":
                continue
            out[m.group(1)] = text[m.end():_match(text, m.end() - 1, "{", "}")]
    return out


def check_tests() -> list[str]:
    """Every test check() makes, as gate.check_probe._T names it."""
    out: list[str] = []
    for fn, body in check_functions().items():
        seen: Counter[str] = Counter()
        for m in re.finditer(r"\bif \(", body):
            close = _match(body, m.end() - 1, "(", ")")
            rest = body[close + 1:].lstrip()
            stmt = (rest[:_match(rest, 0, "{", "}") + 1] if rest.startswith("{")
                    else rest[:rest.index(";") + 1])
            if not _FAIL.search(stmt):
                continue
            for leaf in _leaves(body[m.end():close]):
                seen[leaf] += 1
                n = seen[leaf]
                out.append(f"{fn}: {leaf}" + (f" #{n}" if n > 1 else ""))
    return out


def _named() -> set[str]:
    """Every test id some break of BREAKS names."""
    return {t for v in BREAKS.values() for t in ((v,) if isinstance(v, str) else v)}


def _applied() -> set[tuple[str, int, str]]:
    """(what, variant, policy) of every break_check step of the pinned scenarios."""
    out = set()
    for p in SCENARIOS.glob("*.json"):
        sc = json.loads(p.read_text(encoding="utf-8"))
        if not isinstance(sc, dict) or "steps" not in sc:
            continue
        policy = str(sc.get("cache", {}).get("policy", "lru")).split(":")[0]
        for st in sc["steps"]:
            if st.get("op") == "break_check":
                out.add((st["what"], int(st.get("variant", -1)), policy))
    return out


def test_the_parser_finds_every_function_check_calls():
    """check() and the check of each policy and order structure are read."""
    assert sorted(check_functions()) == [
        "arc_check", "hot_check", "lfu_check", "s3_check", "xc_bset_check",
        "xc_cache_check", "xc_hset_check", "xc_kl_check", "xc_plist_check"]
    tests = check_tests()
    assert len(tests) == 117
    assert "xc_hset_check: s->right[b->tail] != XC_KNIL" in tests
    assert "xc_cache_check: s->state != XC_SLOT_INFLIGHT #3" in tests


def test_every_test_of_check_has_a_break():
    """A test of check() with no break in BREAKS (nor a reason in NO_BREAK) fails."""
    missing = [t for t in check_tests() if t not in _named() and t not in NO_BREAK]
    assert missing == []


def test_every_break_names_a_test_of_the_source():
    """BREAKS and NO_BREAK name only tests the source makes (no stale entry)."""
    tests = set(check_tests())
    assert sorted((_named() | set(NO_BREAK)) - tests) == []
    assert set(NO_BREAK).isdisjoint(_named())


def test_every_break_is_applied_by_a_pinned_scenario():
    """Each (break, variant) of BREAKS runs in a scenario on a cache of its policy."""
    applied = _applied()
    missing = [(what, v, pol) for what, v, pol in BREAKS
               if not any(a[:2] == (what, v) and (pol is None or a[2] == pol)
                          for a in applied)]
    assert missing == []


def test_every_hook_break_has_an_invariant():
    """Every XC_TH_* of the C boundary is in BREAK_NAMES, and the other way round."""
    lib = _lib.lib()
    names = {n[len("XC_TH_"):] for n in dir(lib) if n.startswith("XC_TH_")}
    assert names - {"CROSS_FIRST"} == set(BREAK_NAMES)
    assert {w for w, _ in SOUND} <= set(BREAK_NAMES)
    assert expected_name("ORDER", 7) == "clean"
    assert expected_name("HEAPS", 3) == "INV-POLICY"
