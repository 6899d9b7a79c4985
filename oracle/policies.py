"""The queue policies of docs/CACHE.md ("S3-FIFO", "ARC"), straight from its text.

Unlike the tick policies of :func:`oracle.cache.choose_victim`, these keep
their own queues of the READY keys and are told the events of
docs/CACHE.md "Events a policy sees": ``hit`` (a demand hit; batch touches
are not hits), ``insert`` (a publish), ``evict`` (a READY victim). A key
enters at ``insert`` and leaves at ``evict``. ``victim(cand)`` is pure: it
names the key the next eviction takes among the candidate keys ``cand``
(READY and unprotected); ``evict(key)`` then performs the moves of the
search that found ``key``. S3-FIFO's passes really walk and rotate the
queues (the C engine uses a closed form): ``victim`` runs the search on
copies, ``evict`` reruns it on the real queues.

One implementation, used by both the live-cache model
(:class:`oracle.cache.CacheModel`) and the offline simulator
(:mod:`oracle.sim`).
"""

from __future__ import annotations

from collections.abc import Mapping

from oracle.errors import Misuse

__all__ = ["QUEUE_POLICIES", "S3FIFO", "ARC", "QueuePolicy", "make_queue_policy"]

#: The queue policies and their parameters with defaults (docs/CACHE.md table).
QUEUE_POLICIES: dict[str, dict[str, int]] = {"s3fifo": {"small": 10}, "arc": {}}


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


class ARC:
    """ARC with ``p`` adapted when a ghost key is published (docs/CACHE.md "ARC")."""

    def __init__(self, n_slots: int) -> None:
        self.c = n_slots
        self.p = 0
        self.T1: list[int] = []
        self.T2: list[int] = []
        self.B1: list[int] = []
        self.B2: list[int] = []

    def victim(self, cand: set[int]) -> int:
        """Oldest candidate of T1 if ``|T1| > p`` (or T2 has none), else of T2."""
        t1 = next((k for k in self.T1 if k in cand), None)
        t2 = next((k for k in self.T2 if k in cand), None)
        if t1 is not None and (len(self.T1) > self.p or t2 is None):
            return t1
        assert t2 is not None, "victim() needs a resident candidate"
        return t2

    def evict(self, key: int, cand: set[int]) -> None:
        """Evict ``key`` into its ghost list (T1 -> B1, T2 -> B2)."""
        assert key == self.victim(cand), key
        if key in self.T1:
            self.T1.remove(key)
            self.B1.append(key)
        else:
            self.T2.remove(key)
            self.B2.append(key)

    def hit(self, key: int) -> None:
        """A demand hit moves the key to T2's back."""
        (self.T1 if key in self.T1 else self.T2).remove(key)
        self.T2.append(key)

    def insert(self, key: int) -> None:
        """Publish: ghost hits adapt p and go to T2, others to T1; then trim ghosts."""
        if key in self.B1:
            self.p = min(self.c, self.p + max(1, len(self.B2) // len(self.B1)))
            self.B1.remove(key)
            self.T2.append(key)
        elif key in self.B2:
            self.p = max(0, self.p - max(1, len(self.B1) // len(self.B2)))
            self.B2.remove(key)
            self.T2.append(key)
        else:
            self.T1.append(key)
        while len(self.T1) + len(self.B1) > self.c and self.B1:
            self.B1.pop(0)
        while (len(self.T1) + len(self.T2) + len(self.B1) + len(self.B2)
               > 2 * self.c and (self.B1 or self.B2)):
            (self.B2 if self.B2 else self.B1).pop(0)


QueuePolicy = S3FIFO | ARC


def make_queue_policy(name: str, params: Mapping[str, int],
                      n_slots: int) -> QueuePolicy | None:
    """Fresh queue-policy state for a cache of ``n_slots``; None for tick policies."""
    if name == "s3fifo":
        return S3FIFO(n_slots, params["small"])
    if name == "arc":
        return ARC(n_slots)
    return None
