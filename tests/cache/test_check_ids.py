"""Each failing branch of check() has its own id; the gate names only those ids.

check() (``xc_cache_check`` in engine/csrc/xc_check.c, the policies'
``*_check`` in ``xc_policy_*.c`` and the order structures' in
``xc_order_*.c``) reports ``INV-NAME: [id] text``; the gate judges each
break by the id (gate/check_probe.py ``BREAKS``), never by the text.  The
tests here read the C source: each ``if`` whose statement fails (BROKEN,
xc_fail, ``return -1`` or a local macro that fails) is a failing branch;
each names exactly one id, or passes on the message of a check it calls.
They hold every id to one branch, every id of BREAKS and of the pinned
scenarios to the source, every id of the source to a break (or to
``NO_BREAK`` with why), every break to a pinned scenario, and every call
of one check by another to a break that passes through it.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

from xcache.engine import _lib
from xcache.gate.check_probe import (
    BREAK_NAMES,
    BREAKS,
    NO_BREAK,
    SOUND,
    expected_id,
    expected_name,
    message_id,
)

ROOT = Path(__file__).resolve().parents[2]
CSRC = ROOT / "engine" / "csrc"
SCENARIOS = ROOT / "gate" / "scenarios"
_ID = r"[a-z0-9_]+(?:\.[a-z0-9_]+)+"
#: an id as the source writes it: at the head of a message literal (after
#: the invariant's name in check()'s own), or the
#: argument of a local macro that builds the message around it
_ID_IN_SOURCE = re.compile(rf'"(?:INV-[A-Z-]+: )?\[({_ID})\] |\b[A-Z_]+\("({_ID})"\)')
#: a call of another check function (its message passes through)
_CALL = re.compile(r"\b(\w+_check)\(|->(check)\(")


def _match(text: str, i: int, open_: str, close: str) -> int:
    """The index of the bracket closing the one at ``i``."""
    depth = 0
    for j in range(i, len(text)):
        depth += (text[j] == open_) - (text[j] == close)
        if depth == 0:
            return j
    raise ValueError(f"unbalanced {open_} at {i}")


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


def _ids(text: str) -> list[str]:
    """Every id ``text`` writes, in order."""
    return [a or b for a, b in _ID_IN_SOURCE.findall(text)]


def branches(body: str) -> list[tuple[str, str]]:
    """(condition, statement) of every innermost failing ``if`` of ``body``."""
    macros = [m.group(1) for m in re.finditer(r"^#define (\w+)\(", body, re.M)]
    fail = re.compile(r"\bBROKEN\(|\bxc_fail\(|\breturn -1\b"
                      + "".join(rf"|\b{n}\(" for n in macros))
    out = []
    for m in re.finditer(r"\bif \(", body):
        close = _match(body, m.end() - 1, "(", ")")
        rest = body[close + 1:].lstrip()
        stmt = (rest[:_match(rest, 0, "{", "}") + 1] if rest.startswith("{")
                else rest[:rest.index(";") + 1])
        if fail.search(stmt) and "if (" not in stmt:
            out.append((body[m.end():close], stmt))
    return out


def source_ids() -> dict[str, list[str]]:
    """Each check function -> the ids of its failing branches, in source order."""
    return {fn: [i for _, stmt in branches(body) for i in _ids(stmt)]
            for fn, body in check_functions().items()}


def calls() -> dict[str, set[str]]:
    """Each check function -> the check functions it calls (``check``: the policy's)."""
    fns = check_functions()
    return {fn: {a or b for a, b in _CALL.findall(body)} & (set(fns) | {"check"})
            for fn, body in fns.items()}


def reach(fn: str) -> set[str]:
    """``fn`` and every check function it calls, directly or not (``check``:
    every policy's and order structure's)."""
    graph = calls()
    seen, todo = set(), [fn]
    while todo:
        f = todo.pop()
        if f not in seen:
            seen.add(f)
            todo += (graph.get(f, set()) if f != "check"
                     else [g for g in graph if g != "xc_cache_check"])
    return seen


def owned_ids(fn: str) -> set[str]:
    """The ids ``fn`` and every check it calls can report."""
    ids = source_ids()
    return {i for f in reach(fn) if f in ids for i in ids[f]}


def policy_checks() -> dict[str, str]:
    """Each policy's name -> the check function its ops table names."""
    fns = check_functions()
    out = {}
    for p in sorted(CSRC.glob("xc_policy_*.c")):
        text = p.read_text(encoding="utf-8")
        for m in re.finditer(r"const xc_policy_ops xc_policy_\w+_ops = \{(.*?)\};",
                             text, re.S):
            name = re.search(r'"(\w+)"', m.group(1)).group(1)
            named = [w for w in re.findall(r"\b\w+_check(?:_nop)?\b", m.group(1))]
            out[name] = next((w for w in named if w in fns), named[0])
    return out


def _steps() -> list[tuple[str, dict]]:
    """(policy, step) of every break_check step of the pinned scenarios."""
    out = []
    for p in sorted(SCENARIOS.glob("*.json")):
        sc = json.loads(p.read_text(encoding="utf-8"))
        if not isinstance(sc, dict) or "steps" not in sc:
            continue
        policy = str(sc.get("cache", {}).get("policy", "lru")).split(":")[0]
        out += [(policy, st) for st in sc["steps"] if st.get("op") == "break_check"]
    return out


def _all_ids() -> list[str]:
    """Every id of the source, one entry per failing branch naming it."""
    return [i for ids in source_ids().values() for i in ids]


def test_the_parser_finds_every_check_function():
    """check() and the check of each policy and order structure are read."""
    assert sorted(check_functions()) == [
        "arc_check", "hot_check", "lfu_check", "s3_check", "xc_bset_check",
        "xc_cache_check", "xc_hset_check", "xc_kl_check", "xc_plist_check"]
    ids = source_ids()
    assert len(_all_ids()) == 110
    assert ids["xc_kl_check"] == ["list.prev", "list.mark", "list.order",
                                  "list.count", "list.tail"]
    assert ids["xc_cache_check"][:3] == ["key.state", "key.range", "key.twice"]


def test_every_failing_branch_names_one_id_or_passes_a_called_check_on():
    """A failing branch with no id must be a call of another check; none has two."""
    bad = []
    for fn, body in check_functions().items():
        for cond, stmt in branches(body):
            n = len(_ids(stmt))
            if n > 1 or (n == 0 and not _CALL.search(cond)):
                bad.append(f"{fn}: if ({cond})")
    assert bad == []


def test_every_id_appears_once_and_only_in_a_failing_branch():
    """Each id is written once in all the checks, and nowhere but a failing branch."""
    ids = _all_ids()
    assert sorted(i for i, n in Counter(ids).items() if n > 1) == []
    written = [i for body in check_functions().values() for i in _ids(body)]
    assert sorted(written) == sorted(ids)


def test_every_id_the_gate_names_is_in_the_source():
    """BREAKS, NO_BREAK and the scenarios' check_id name only ids of the source."""
    ids = set(_all_ids())
    named = set(BREAKS.values()) | set(NO_BREAK)
    named |= {st["check_id"] for _, st in _steps() if "check_id" in st}
    assert sorted(named - ids) == []
    assert all(re.fullmatch(_ID, i) for i in named)


def test_every_id_has_a_break_or_a_reason():
    """An id of the source no break reaches fails unless NO_BREAK says why."""
    unreached = sorted(set(_all_ids()) - set(BREAKS.values()))
    print("ids no break reaches:", {i: NO_BREAK.get(i, "?") for i in unreached})
    assert unreached == sorted(NO_BREAK) == ["heaps.none"]
    assert set(NO_BREAK).isdisjoint(BREAKS.values())


def test_every_call_of_one_check_by_another_is_crossed_by_a_break():
    """Each call of a check (the policy's by check(), a list's by a policy's ...)
    is passed by an applied break whose id the called check reports."""
    chains = {p: reach(fn) for p, fn in policy_checks().items()}
    reached = {(pol, expected_id(st["what"], int(st.get("variant", -1)), pol))
               for pol, st in _steps()}
    missing = []
    for caller, callees in sorted(calls().items()):
        for callee in sorted(callees):
            crossing = owned_ids(callee)
            if not any(i in crossing and (caller == "xc_cache_check"
                                          or caller in chains.get(pol, ()))
                       for pol, i in reached):
                missing.append(f"{caller} -> {callee}")
    assert missing == []
    assert policy_checks()["lfru"] == "xc_policy_check_nop"
    assert policy_checks()["sieve"] == "xc_plist_check"


def test_every_break_is_applied_by_a_pinned_scenario():
    """Each (break, variant) of BREAKS runs in a scenario on a cache of its policy."""
    applied = {(st["what"], int(st.get("variant", -1)), pol) for pol, st in _steps()}
    missing = [(what, v, pol) for what, v, pol in BREAKS
               if not any(a[:2] == (what, v) and (pol is None or a[2] == pol)
                          for a in applied)]
    assert missing == []


def test_every_pinned_break_has_its_id():
    """Each break_check step of a pinned scenario has an id in BREAKS (or is sound),
    and a step's own check_id is the one BREAKS gives."""
    no_id, differ = [], []
    for pol, st in _steps():
        what, v = st["what"], int(st.get("variant", -1))
        want = expected_id(what, v, pol)
        if want is None and (what, v) not in SOUND:
            no_id.append((what, v, pol))
        if "check_id" in st and st["check_id"] != want:
            differ.append((what, v, pol, st["check_id"], want))
    assert no_id == []
    assert differ == []


def test_every_hook_break_has_an_invariant():
    """Every XC_TH_* of the C boundary is in BREAK_NAMES, and the other way round."""
    lib = _lib.lib()
    names = {n[len("XC_TH_"):] for n in dir(lib) if n.startswith("XC_TH_")}
    assert names - {"CROSS_FIRST"} == set(BREAK_NAMES)
    assert {w for w, _ in SOUND} <= set(BREAK_NAMES)
    assert expected_name("ORDER", 7) == "clean"
    assert expected_name("HEAPS", 3) == "INV-POLICY"
    assert expected_id("ORDER", 7, "lfru") is None
    assert expected_id("LIST", 0, "arc") == "list.prev"
    assert expected_id("POLICY_STATE", -1, "hotness") == "hotness.sum"
    assert expected_id("POLICY_STATE", -1, "lfu") is None


def test_message_id_reads_the_id_after_the_invariant():
    """The id is the bracketed word after ``INV-NAME: ``; elsewhere it is no id."""
    assert message_id("INV-POLICY: [list.prev] arc: key 3 at position 2 of a "
                      "list is out of place") == "list.prev"
    assert message_id("INV-KEY-UNIQUE: [key.state] slot 0 has state 7") == "key.state"
    assert message_id("INV-POLICY: lfu: no state") is None
    assert message_id("[lfu.none] lfu: no state") is None
    assert message_id("INV-CLOCK: slot 1 [clock.future]") is None
