"""S3-FIFO (docs/CACHE.md "S3-FIFO"): a small queue S, a main queue M, a ghost G.

A queue policy: it keeps its own queues of the READY keys and is told the
events of docs/CACHE.md "Events a policy sees".  Its passes really walk and
rotate the queues (the C engine uses a closed form): ``victim`` runs the
search on copies, ``evict`` reruns it on the real queues.
"""

from __future__ import annotations

from collections.abc import Mapping

from xcache.oracle.errors import Misuse

NAME = "s3fifo"
#: Parameters in the C table's order, with their defaults: the small queue's
#: and the ghost's share of the slots in percent, and the hits a key needs
#: while in S to move to M.
PARAMS = {"small": 10, "ghost": 90, "promote": 2}
#: libCacheSim's name for the same policy: tests/policies and
#: bench/policy_replay.py compare every policy that has one, cell by cell.
LIBCACHESIM = "S3FIFO"


def validate(params: Mapping[str, int]) -> None:
    """Refuse parameters the engine refuses (``Misuse``)."""
    if not 0 <= params["small"] <= 100:
        raise Misuse("policy s3fifo: small is a percentage 0..100")
    if not 0 <= params["ghost"] <= 100:
        raise Misuse("policy s3fifo: ghost is a percentage 0..100")
    if not 1 <= params["promote"] <= 3:
        raise Misuse("policy s3fifo: promote is a hit count 1..3")


def make(n_slots: int, params: Mapping[str, int]) -> S3FIFO:
    """Fresh S3-FIFO state for a cache of ``n_slots``."""
    return S3FIFO(n_slots, params["small"], params["ghost"], params["promote"])


class S3FIFO:
    """S3-FIFO over resident keys: small queue S, main M, ghost G, freq 0..3.

    Lists are oldest (front) first; ``s = max(1, c * small // 100)``, G holds
    at most ``c * ghost // 100`` keys, and a key hit ``promote`` times in S
    moves to M when S's pass meets it.
    """

    def __init__(self, n_slots: int, small: int = 10, ghost: int = 90,
                 promote: int = 2) -> None:
        validate({"small": small, "ghost": ghost, "promote": promote})
        self.c = n_slots
        self.s = max(1, n_slots * small // 100)
        self.g_cap = n_slots * ghost // 100
        self.promote = promote
        self.S: list[int] = []
        self.M: list[int] = []
        self.G: list[int] = []
        self.freq: dict[int, int] = {}
        #: an eviction has happened (ends the warm-up rule of insert)
        self.evicted = False
        #: keys a demand miss took out of G, until published
        self.returning: set[int] = set()
        #: set by the cache around a demand miss (S3-FIFO does not use it)
        self.want: int | None = None

    @staticmethod
    def _m_pass(M: list[int], freq: dict[int, int], cand: set[int]) -> int:
        """Walk M round and round: a freq-0 candidate goes, others rotate at freq-1."""
        while True:  # some entry of M is a candidate, so this ends
            k = M.pop(0)
            if k in cand and freq[k] == 0:
                return k
            freq[k] = max(0, freq[k] - 1)
            M.append(k)

    def _search(self, S: list[int], M: list[int], freq: dict[int, int],
                cand: set[int]) -> tuple[str, int]:
        """One eviction's passes over (S, M, freq), moving them; (pass, victim)."""
        if ((len(M) > self.c - self.s or not S)
                and any(k in cand for k in M)):
            return "M", self._m_pass(M, freq, cand)
        for k in list(S):
            if freq[k] >= self.promote:  # protected or not: to M at freq 0
                S.remove(k)
                freq[k] = 0
                M.append(k)
            elif k in cand:
                S.remove(k)
                return "S", k
            # a protected entry below the threshold stays where it is
        return "M", self._m_pass(M, freq, cand)

    def victim(self, cand: set[int]) -> int:
        """The key the next eviction takes among ``cand``; changes nothing."""
        return self._search(list(self.S), list(self.M), dict(self.freq), cand)[1]

    def request(self, key: int) -> None:
        """A demand request: a key in G leaves it and will enter M."""
        if key in self.G:
            self.G.remove(key)
            self.returning.add(key)

    def evict(self, key: int, cand: set[int]) -> None:
        """Evict ``key`` (the victim among ``cand``); an S victim enters G."""
        self.evicted = True
        where, k = self._search(self.S, self.M, self.freq, cand)
        assert k == key, (k, key)
        del self.freq[k]
        if where == "S" and self.g_cap > 0:
            if len(self.G) == self.g_cap:
                self.G.pop(0)
            self.G.append(k)

    def insert(self, key: int) -> None:
        """Publish: a returning or ghost key to M's back; else S's (M's in warm-up)."""
        if key in self.returning:
            self.returning.discard(key)
            self.M.append(key)
        elif key in self.G:  # a batch load of a ghost key
            self.G.remove(key)
            self.M.append(key)
        elif not self.evicted and len(self.S) >= self.s:
            self.M.append(key)  # warm-up: S is full before any eviction
        else:
            self.S.append(key)
        self.freq[key] = 0

    def hit(self, key: int) -> None:
        """A demand hit: freq + 1, at most 3."""
        self.freq[key] = min(3, self.freq[key] + 1)
