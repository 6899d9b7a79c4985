"""The engine and the oracle, driven side by side, must agree after every step.

A hypothesis rule-based state machine (STYLE.md section 9) opens an engine
``ExpertCache`` and an oracle ``CacheModel`` with the same geometry and
policy, applies every rule to both, and requires the same result or the same
family of error.  After each step the invariants compare everything both
expose: ``check()``, every counter, the resident set, each slot's state,
key, holds, pins and unused-prefetch mark, and the bytes of every held
expert against the oracle reader's bytes (docs/CACHE.md is the contract).
"""

from __future__ import annotations

from typing import Any

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    consumes,
    initialize,
    invariant,
    multiple,
    precondition,
    rule,
)

from tests.helpers import (
    COMPARED_STATS,
    QUEUE_POLICIES,
    S3FIFO_VARIANTS,
    SANITIZED,
    AgreementRules,
    both,
    both_raise,
    load_preset,
    open_preset,
)
from xcache import engine
from xcache.oracle.cache import CacheModel
from xcache.oracle.errors import Misuse

POLICIES = ("lru", "fifo", "lfu", "lfru", "lfru:sample=2,seed=7",
            "lfru:sample=3,seed=12345", "hotness", "hotness:period=3",
            "hotness:period=5", *QUEUE_POLICIES)


class CacheAgreement(AgreementRules, RuleBasedStateMachine):
    """Engine ExpertCache vs oracle CacheModel on one fixture container."""

    refs = Bundle("refs")

    def __init__(self) -> None:
        super().__init__()
        self.cache: engine.ExpertCache | None = None
        self.held: list[tuple[engine.Expert, Any]] = []
        self.released: list[tuple[engine.Expert, Any]] = []

    @initialize(preset=st.sampled_from(["k3-mini", "mixtral-mini"]),
                data=st.data(), policy=st.sampled_from(POLICIES),
                chunk_bytes=st.sampled_from([0, 4096]),
                batch_threads=st.integers(1, 4))
    def open_both(self, preset, data, policy, chunk_bytes, batch_threads):
        """Open both caches with the same geometry, policy and I/O settings."""
        self._open(preset, data, policy, chunk_bytes, batch_threads)

    def _open(self, preset: str, data: st.DataObject, policy: str, chunk_bytes: int,
              batch_threads: int) -> None:
        """Open the engine cache and the oracle model alike."""
        self.p = load_preset(preset)
        n_keys = len(self.p.keys)
        n_slots = data.draw(st.integers(self.p.top_k + 1, self._max_slots(n_keys)),
                            "n_slots")
        self.pool = self._key_pool(n_slots)
        self.cache = engine.ExpertCache(
            open_preset(self.p), n_slots=n_slots, policy=policy,
            chunk_bytes=chunk_bytes, batch_threads=batch_threads,
            **self.p.cache_kwargs())
        self.model = CacheModel(self.p.layers, self.p.n_experts, self.p.top_k,
                                expert_bytes=self.p.expert_bytes, n_slots=n_slots,
                                policy=policy)

    def teardown(self) -> None:
        if self.cache is not None:
            for x, _ in self.held:
                x.release()
            self.cache.close()

    def _max_slots(self, n_keys: int) -> int:
        """The largest cache drawn: room for every key and two spare slots."""
        return n_keys + 2

    def _key_pool(self, n_slots: int) -> list[tuple[int, int]]:
        """The valid keys the rules draw from: all of them."""
        return self.p.keys

    # -- key strategies -----------------------------------------------------
    def _bad_key(self, data: st.DataObject) -> tuple[int, int]:
        """A key outside the container: a layer it lacks or an expert out of range."""
        lo, hi = self.p.layers[0], self.p.layers[-1]
        return data.draw(st.one_of(
            st.tuples(st.sampled_from([lo - 1, hi + 1, -2**31, 2**31 - 1]),
                      st.integers(0, self.p.n_experts - 1)),
            st.tuples(st.sampled_from(self.p.layers),
                      st.sampled_from([-1, self.p.n_experts, 2**31 - 1])),
        ), "bad key")

    # -- rules --------------------------------------------------------------
    @rule(target=refs, data=st.data())
    def get(self, data):
        """Demand get: same slot, or the same error, on both sides."""
        key = self._key(data, "get")
        out = both(lambda: self.cache.get(*key), lambda: self.model.get(*key))
        if out is None:
            return multiple()
        x, ref = out
        assert x.slot == ref.slot, f"get{key}: slot {x.slot} vs {ref.slot}"
        self.held.append(out)
        return out

    @rule(pair=consumes(refs))
    def release(self, pair):
        """Release a held reference on both sides."""
        # both succeed (release returns nothing on either side)
        assert both(pair[0].release, lambda: self.model.release(pair[1])) == (
            None, None)
        self.held.remove(pair)
        self.released.append(pair)

    @precondition(lambda self: self.released)
    @rule(data=st.data())
    def release_again(self, data):
        """Releasing a reference a second time is misuse on both sides."""
        x, ref = data.draw(st.sampled_from(self.released), "released")
        assert both_raise(x.release, lambda: self.model.release(ref)) == "misuse"

    @rule(data=st.data(), size=st.integers(0, 6))
    def getmany(self, data, size):
        """Batch prefetch (duplicates and resident keys included): same count."""
        keys = [self._key(data, f"getmany[{i}]") for i in range(size)]
        if keys and data.draw(st.booleans(), "duplicate?"):
            keys.append(data.draw(st.sampled_from(keys), "dup"))
        out = both(lambda: self.cache.getmany(keys), lambda: self.model.getmany(keys))
        assert out is not None, f"getmany({keys}) failed on both sides"
        n_engine, n_oracle = out
        assert n_engine == n_oracle, f"getmany({keys}): {out}"

    @rule(data=st.data(), op=st.sampled_from(["get", "pin", "unpin", "getmany"]))
    def invalid_key(self, data, op):
        """A key outside the container is misuse everywhere, and changes nothing."""
        key = self._bad_key(data)
        if op == "getmany":
            good = [self._key(data, "getmany good") for _ in range(2)]
            at = data.draw(st.integers(0, len(good)), "bad key position")
            keys = good[:at] + [key] + good[at:]
            calls = (lambda: self.cache.getmany(keys), lambda: self.model.getmany(keys))
        else:
            calls = (lambda: getattr(self.cache, op)(*key),
                     lambda: getattr(self.model, op)(*key))
        with_misuse = []
        try:
            calls[0]()
        except engine.MisuseError:
            with_misuse.append("engine")
        try:
            calls[1]()
        except Misuse:
            with_misuse.append("oracle")
        assert with_misuse == ["engine", "oracle"], f"{op}{key}: {with_misuse}"

    # -- invariants ---------------------------------------------------------
    @invariant()
    def checks_clean(self):
        """Both sides' check() find no broken invariant."""
        if self.cache is None:
            return
        self.cache.check()
        assert self.model.check() is None, self.model.check()

    @invariant()
    def stats_equal(self):
        """Every shared counter and derived rate is equal."""
        if self.cache is None:
            return
        e, o = self.cache.stats(), self.model.stats()
        diff = {k: (e[k], o[k]) for k in COMPARED_STATS if e[k] != o[k]}
        assert not diff, f"engine vs oracle counters differ: {diff}"

    @invariant()
    def slots_equal(self):
        """Resident sets and every slot's state, key, holds, pins and mark agree."""
        if self.cache is None:
            return
        self._assert_slots_agree()

    @invariant()
    def held_bytes_exact(self):
        """Every held expert shows the oracle reader's bytes for its key."""
        for x, _ in self.held:
            got = bytes(x.data)
            want = self.p.payload[x.key]
            assert got == want, (
                f"held {x.key} serves {self.p.who(got)}; expected "
                f"{self.p.who(want)}")


# The profile decides the scale: `ci` 300 examples (about 6 s), `thorough`
# twenty times that; the sanitizer build (XC_ENGINE_LIB) runs a fifth.
_base = settings.default
_examples = 3 * _base.max_examples // (5 if SANITIZED else 1)
CacheAgreement.TestCase.settings = settings(
    _base, max_examples=max(_examples, 10), stateful_step_count=50,
    report_multiple_bugs=False)
TestCacheAgreement = CacheAgreement.TestCase


class QueueCacheAgreement(CacheAgreement):
    """The same machine on the queue policies only, whose state is the longest-lived."""

    @initialize(preset=st.sampled_from(["k3-mini", "mixtral-mini"]),
                data=st.data(),
                # arc has no parameters: it gets half the examples
                policy=st.sampled_from(S3FIFO_VARIANTS) | st.just("arc"),
                chunk_bytes=st.sampled_from([0, 4096]),
                batch_threads=st.integers(1, 4))
    def open_both(self, preset, data, policy, chunk_bytes, batch_threads):
        """Open both caches with a queue policy."""
        self._open(preset, data, policy, chunk_bytes, batch_threads)

    def _max_slots(self, n_keys: int) -> int:
        """Small caches, so that evictions, ghosts and their hits are frequent."""
        return self.p.top_k + 6

    def _key_pool(self, n_slots: int) -> list[tuple[int, int]]:
        """About twice the slots' worth of keys, so evicted keys come back."""
        return self.p.keys[:2 * n_slots + 1]


# A third of the main machine's examples, with longer runs (queue state ages).
QueueCacheAgreement.TestCase.settings = settings(
    CacheAgreement.TestCase.settings, max_examples=max(_examples // 3, 10),
    stateful_step_count=80)
TestQueueCacheAgreement = QueueCacheAgreement.TestCase
