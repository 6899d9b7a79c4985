"""Many threads on one cache: every served byte exact, check() clean after.

8 threads each run a seeded random mix of get/release, getmany, read-ahead
prefetch (plain and speculative, 2 reader threads), streams, reset_stats,
pin/unpin and check on one k3-mini cache of 8 slots.  AllPinnedError is a legal
answer (other threads may hold or be loading every slot); nothing else is.
Under the sanitizer build the run is smaller, not skipped.
"""

from __future__ import annotations

import os
import random
import threading

import pytest

from tests.helpers import K3_LAYOUT, expert_bytes, open_container
from xcache import engine
from xcache.engine import AllPinnedError, MisuseError, NotFoundError

SANITIZED = bool(os.environ.get("XC_ENGINE_LIB"))
N_THREADS = 8
N_OPS = 300 if SANITIZED else 3000


def test_threads_hammer_one_cache(k3_shard):
    """Random concurrent calls never serve a wrong byte or break an invariant."""
    path = k3_shard
    truth = [expert_bytes(path, e) for e in range(24)]
    c = engine.ExpertCache(open_container(path), **K3_LAYOUT, n_slots=8, top_k=4,
                           batch_threads=3, policy="lfu", io_threads=2,
                           io_depth=4)
    errors: list[str] = []
    wrong = [0]
    all_pinned = [0]

    def worker(seed):
        rnd = random.Random(seed)
        held = []
        pinned = []
        try:
            for _ in range(N_OPS):
                op = rnd.random()
                if op < 0.5:
                    e = rnd.randrange(24)
                    try:
                        x = c.get(0, e)
                    except AllPinnedError:
                        all_pinned[0] += 1
                        continue
                    if bytes(x.data) != truth[e]:
                        wrong[0] += 1
                    if len(held) < 2 and rnd.random() < 0.3:
                        held.append(x)
                    else:
                        x.release()
                elif op < 0.65 and held:
                    x = held.pop(rnd.randrange(len(held)))
                    if bytes(x.data) != truth[x.key[1]]:
                        wrong[0] += 1
                    x.release()
                elif op < 0.72:
                    keys = [(0, rnd.randrange(24)) for _ in range(4)]
                    assert 0 <= c.getmany(keys) <= 4
                elif op < 0.76:
                    keys = [(0, rnd.randrange(24)) for _ in range(3)]
                    assert 0 <= c.prefetch(keys,
                                           speculative=rnd.random() < 0.5) <= 3
                elif op < 0.79:
                    keys = [(0, e) for e in rnd.sample(range(24), 2)]
                    it = c.stream(keys)
                    try:
                        for x in it:
                            if bytes(x.data) != truth[x.key[1]]:
                                wrong[0] += 1
                            x.release()
                    except AllPinnedError:
                        all_pinned[0] += 1
                    finally:
                        it.close()
                elif op < 0.8:
                    c.reset_stats()
                elif op < 0.9:
                    e = rnd.randrange(24)
                    try:
                        c.pin(0, e)
                        pinned.append(e)
                    except NotFoundError:
                        pass
                elif pinned:
                    c.unpin(0, pinned.pop())
                else:
                    c.check()
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(f"thread {seed}: {exc!r}")
        finally:
            for x in held:
                x.release()
            for e in pinned:
                c.unpin(0, e)

    threads = [threading.Thread(target=worker, args=(s,)) for s in range(N_THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    c.drain()
    assert errors == []
    assert wrong[0] == 0
    c.check()
    assert all(s["holds"] == 0 and s["pins"] == 0 and s["state"] != "inflight"
               for s in c.slots())
    s = c.stats()
    assert s["hits"] + s["misses"] == s["requests"]
    assert s["load_failures"] == 0
    for e in c.resident():
        with c.get(*e) as x:
            assert bytes(x.data) == truth[e[1]]
    with c.get(0, 0):
        pass
    with pytest.raises(MisuseError):  # READY with no pin left (docs/CACHE.md)
        c.unpin(0, 0)
