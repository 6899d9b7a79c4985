"""S3-FIFO (docs/CACHE.md "S3-FIFO"): a small queue S, a main queue M, a ghost G.

A queue policy: it keeps its own queues of the READY keys and is told the
events of docs/CACHE.md "Events a policy sees".  Its passes really walk and
rotate the queues (the C engine uses a closed form): ``victim`` runs the
search on copies, ``evict`` reruns it on the real queues.
"""

from __future__ import annotations

from collections.abc import Mapping

from oracle.errors import Misuse

NAME = "s3fifo"
#: Parameters in the C table's order, with their defaults.
PARAMS = {"small": 10}


def validate(params: Mapping[str, int]) -> None:
    """Refuse parameters the engine refuses (``Misuse``)."""
    if not 0 <= params["small"] <= 100:
        raise Misuse("policy s3fifo: small is a percentage 0..100")


def make(n_slots: int, params: Mapping[str, int]) -> S3FIFO:
    """Fresh S3-FIFO state for a cache of ``n_slots``."""
    return S3FIFO(n_slots, params["small"])


class S3FIFO:
    """S3-FIFO over resident keys: small queue S, main M, ghost G, freq 0..3.

    Lists are oldest (front) first; ``s = max(1, c * small // 100)`` and G
    holds at most ``max(1, c - s)`` keys.
    """

    def __init__(self, n_slots: int, small: int = 10) -> None:
        if not 0 <= small <= 100:
            raise Misuse("policy s3fifo: small is a percentage 0..100")
        self.s = max(1, n_slots * small // 100)
        self.g_cap = max(1, n_slots - self.s)
        self.S: list[int] = []
        self.M: list[int] = []
        self.G: list[int] = []
        self.freq: dict[int, int] = {}

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
        if len(S) < self.s and M and any(k in cand for k in M):
            return "M", self._m_pass(M, freq, cand)
        for k in list(S):
            if freq[k] >= 1:  # protected or not: promoted to M at freq 0
                S.remove(k)
                freq[k] = 0
                M.append(k)
            elif k in cand:
                S.remove(k)
                return "S", k
            # a protected entry with freq 0 stays where it is
        return "M", self._m_pass(M, freq, cand)

    def victim(self, cand: set[int]) -> int:
        """The key the next eviction takes among ``cand``; changes nothing."""
        return self._search(list(self.S), list(self.M), dict(self.freq), cand)[1]

    def evict(self, key: int, cand: set[int]) -> None:
        """Evict ``key`` (the victim among ``cand``); an S victim enters G."""
        where, k = self._search(self.S, self.M, self.freq, cand)
        assert k == key, (k, key)
        del self.freq[k]
        if where == "S":
            if len(self.G) == self.g_cap:
                self.G.pop(0)
            self.G.append(k)

    def insert(self, key: int) -> None:
        """A published key: out of G into M's back, else S's back; freq 0."""
        if key in self.G:
            self.G.remove(key)
            self.M.append(key)
        else:
            self.S.append(key)
        self.freq[key] = 0

    def hit(self, key: int) -> None:
        """A demand hit: freq + 1, at most 3."""
        self.freq[key] = min(3, self.freq[key] + 1)
