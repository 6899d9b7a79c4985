"""Rare branches of the list and bucket policies, against the oracle.

Each script runs on the engine and on the oracle's CacheModel side by side
(k3-mini, layer 0, 4 slots, top-k 2): every step's victims (keys that left
the resident set) must agree, and the whole sequence must equal the one
worked out by hand.  The scripts reach the walks' rare arms: protected keys
(held, pinned) skipped at the victim end, every key protected (no victim:
all-pinned, nothing changed), ties broken by last use, the eviction of a
bucket's only key, a key inserted again after its eviction, and a
prefetched key (freq 0) below every demand-loaded one.
"""

from __future__ import annotations

import pytest

from tests.helpers import K3_LAYOUT, K3_SPEC, open_container
from xcache import engine
from xcache.oracle.cache import CacheModel
from xcache.oracle.errors import AllPinned

SLOTS = 4

# Steps: ("get", e) get and release at once; ("hold", e) get and keep;
# ("drop", e) release the kept one; ("pin", e) / ("unpin", e); ("many", es)
# getmany; ("full", e) a get that must fail all-pinned.
PROTECTED = [("get", 0), ("get", 1), ("get", 2), ("get", 3), ("hold", 0),
             ("pin", 1), ("get", 4), ("get", 5), ("drop", 0), ("get", 6),
             ("unpin", 1), ("get", 7)]
ALL_HELD = [("hold", 0), ("hold", 1), ("get", 2), ("pin", 2), ("hold", 3),
            ("full", 4), ("drop", 1), ("get", 4), ("get", 5)]
TIES_AND_ONLY = [("get", 0), ("get", 0), ("get", 1), ("get", 2), ("get", 3),
                 ("get", 1), ("get", 4), ("get", 5), ("get", 0), ("get", 4),
                 ("get", 6), ("get", 7)]
REINSERT = [("get", 0), ("get", 1), ("get", 2), ("get", 3), ("get", 4),
            ("get", 0), ("get", 0), ("many", [5, 6]), ("get", 7), ("get", 8)]

EXPECTED = {
    # 0..3 resident; 0 held, 1 pinned: get4 skips them -> 2, get5 -> 3;
    # 0 released: get6 -> 0 (lu 5 oldest of 0, 4, 5); get7 -> 1 (lu 2).
    ("lru", "protected"): [2, 3, 0, 1],
    # insert order 0 1 2 3 4 5 6: the same skips, then the oldest insert.
    ("fifo", "protected"): [2, 3, 0, 1],
    # freq: 0 is 2 (held hit), others 1; get4 skips 0, 1 -> 2 (1, lu 3);
    # get5 -> 3; get6: 4 (1, 7), 5 (1, 8), 0 (2) -> 4; get7: 1 unpinned
    # (1, 2) -> 1.
    ("lfu", "protected"): [2, 3, 4, 1],
    # counts 0:2 1:1 2:1 3:1 (period 256, no halving): as lfu.
    ("hotness", "protected"): [2, 3, 4, 1],
    # every slot held or pinned: get4 fails and changes nothing; 1
    # released: get4 -> 1; get5 -> 4 (the only unprotected key).
    ("lru", "all held"): [1, 4],
    ("fifo", "all held"): [1, 4],
    ("lfu", "all held"): [1, 4],
    ("hotness", "all held"): [1, 4],
    # lru: 0 1 2 3 resident (lu 2 6 4 5 after get1): get4 -> 0; get5 -> 2;
    # get0 -> 3; get4 hits; get6 -> 1; get7 -> 5.
    ("lru", "ties"): [0, 2, 3, 1, 5],
    # fifo: inserts 0 1 2 3 4 5 0 6: get4 -> 0, get5 -> 1, get0 -> 2,
    # get6 -> 3, get7 -> 4.
    ("fifo", "ties"): [0, 1, 2, 3, 4],
    # lfu: (freq, lu) 0 (2, 2), 1 (2, 6), 2 (1, 4), 3 (1, 5): get4 -> 2 (the
    # tie at freq 1 goes to lu 4); get5 -> 3 (1, 5) before 4 (1, 7); get0
    # and get4 hit (0 freq 3, 4 freq 2); get6 -> 5, the only key of freq 1;
    # get7 -> 6, again the only one.
    ("lfu", "ties"): [2, 3, 5, 6],
    ("hotness", "ties"): [2, 3, 5, 6],
    # lru: get4 -> 0; get0 -> 1 (0 again); get0 hits; many [5, 6] -> 2, 3;
    # get7 -> 4; get8 -> 0 (lu 7; 5 and 6 are newer).
    ("lru", "reinsert"): [0, 1, 2, 3, 4, 0],
    # fifo: inserts 0 1 2 3 4 0' 5 6: get4 -> 0; get0 -> 1; many -> 2, 3;
    # get7 -> 4; get8 -> 0 (re-inserted before 5 and 6).
    ("fifo", "reinsert"): [0, 1, 2, 3, 4, 0],
    # lfu: get4 -> 0 (1, lu 1); get0 -> 1; get0 hits (0 freq 2); many [5,
    # 6] (freq 0) -> 2, 3; get7 -> 5 (freq 0 first); get8 -> 6.
    ("lfu", "reinsert"): [0, 1, 2, 3, 5, 6],
    # hotness: count[0] survives eviction: get0 again makes it 2, then 3;
    # many [5, 6] -> 2, 3; 5 and 6 have count 0: get7 -> 5, get8 -> 6.
    ("hotness", "reinsert"): [0, 1, 2, 3, 5, 6],
}
SCRIPTS = {"protected": PROTECTED, "all held": ALL_HELD,
           "ties": TIES_AND_ONLY, "reinsert": REINSERT}


def run_engine(path, policy: str, script: list) -> list[int]:
    """The engine's victims (experts) of a script, checked after every step."""
    c = engine.ExpertCache(open_container(path), **K3_LAYOUT, n_slots=SLOTS,
                           top_k=2, policy=policy)
    held: dict[int, object] = {}
    victims: list[int] = []
    for op, arg in script:
        before = c.resident()
        if op == "get":
            c.get(0, arg).release()
        elif op == "hold":
            held[arg] = c.get(0, arg)
        elif op == "drop":
            held.pop(arg).release()
        elif op == "pin":
            c.pin(0, arg)
        elif op == "unpin":
            c.unpin(0, arg)
        elif op == "many":
            c.getmany([(0, e) for e in arg])
        else:
            with pytest.raises(engine.AllPinnedError):
                c.get(0, arg)
        c.check()
        victims += sorted(k[1] for k in before - c.resident())
    for ref in held.values():
        ref.release()
    return victims


def run_oracle(policy: str, script: list) -> list[int]:
    """The oracle's victims (experts) of the same script."""
    m = CacheModel(K3_LAYOUT["layers"], K3_LAYOUT["n_experts"], 2,
                   expert_bytes=K3_SPEC.expert_nbytes, n_slots=SLOTS,
                   policy=policy)
    held: dict[int, object] = {}
    victims: list[int] = []
    for op, arg in script:
        before = m.resident()
        if op == "get":
            m.release(m.get(0, arg))
        elif op == "hold":
            held[arg] = m.get(0, arg)
        elif op == "drop":
            m.release(held.pop(arg))
        elif op == "pin":
            m.pin(0, arg)
        elif op == "unpin":
            m.unpin(0, arg)
        elif op == "many":
            m.getmany([(0, e) for e in arg])
        else:
            with pytest.raises(AllPinned):
                m.get(0, arg)
        victims += sorted(k[1] for k in before - m.resident())
    return victims


@pytest.mark.parametrize("policy,script", sorted(EXPECTED))
def test_rare_branch_victims_match_the_oracle_and_by_hand(k3_shard, policy, script):
    """Engine and oracle evict the hand-counted experts, step by step."""
    ours = run_engine(k3_shard, policy, SCRIPTS[script])
    theirs = run_oracle(policy, SCRIPTS[script])
    assert ours == theirs
    assert ours == EXPECTED[(policy, script)]
