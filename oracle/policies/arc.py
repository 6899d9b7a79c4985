"""ARC (docs/CACHE.md "ARC"): T1/T2 resident lists, B1/B2 ghosts, target p.

A queue policy with no parameters, written from the docs to give
libCacheSim's ARC miss for miss: a demand miss on a ghost key adapts ``p``
(a float) before its victim is chosen, so the cache tells the policy the
key it chooses for (``want``) and the request itself (``request``).
"""

from __future__ import annotations

from collections.abc import Mapping

NAME = "arc"
#: Parameters in the C table's order, with their defaults (none).
PARAMS: dict[str, int] = {}
#: libCacheSim's name for the same policy: tests/policies and
#: bench/policy_replay.py compare every policy that has one, cell by cell.
LIBCACHESIM = "ARC"


def make(n_slots: int, params: Mapping[str, int]) -> ARC:
    """Fresh ARC state for a cache of ``n_slots``."""
    return ARC(n_slots)


def _first(lists: tuple[list[int], ...], cand: set[int]) -> int:
    """The first candidate of the first list that holds one."""
    for lst in lists:
        for k in lst:
            if k in cand:
                return k
    raise AssertionError("victim() needs a resident candidate")


class ARC:
    """ARC with libCacheSim's rules (docs/CACHE.md "ARC"); lists oldest first."""

    def __init__(self, n_slots: int) -> None:
        self.c = n_slots
        self.p = 0.0
        self.T1: list[int] = []
        self.T2: list[int] = []
        self.B1: list[int] = []
        self.B2: list[int] = []
        #: the key whose demand miss the current victim choice and eviction
        #: serve (set by the cache), or None (a batch load)
        self.want: int | None = None
        #: keys a demand miss took out of a ghost list, until published
        self.returning: set[int] = set()
        #: the key the last request took out of a ghost list, or None
        self.ret: int | None = None

    def _adapted(self, key: int) -> tuple[float, bool]:
        """``p`` after a ghost hit on ``key`` (in B1 or B2), and whether it was B2."""
        if key in self.B1:
            up = self.p + max(len(self.B2) / len(self.B1), 1.0)
            return min(up, float(self.c)), False
        return max(self.p - max(len(self.B1) / len(self.B2), 1.0), 0.0), True

    def _replace(self, p: float, from_b2: bool, cand: set[int]) -> int:
        """REPLACE: T1's or T2's oldest candidate, the other list's as fallback."""
        n1 = len(self.T1)
        t1_first = (n1 > 0 and (n1 > p or (n1 == p and from_b2))) or not self.T2
        return _first((self.T1, self.T2) if t1_first else (self.T2, self.T1), cand)

    def victim(self, cand: set[int]) -> int:
        """The key the next eviction takes among ``cand``; changes nothing."""
        want = self.want
        if want is not None and (want in self.B1 or want in self.B2):
            return self._replace(*self._adapted(want), cand)
        if len(self.T1) + len(self.B1) >= self.c and not self.B1:
            return _first((self.T1, self.T2), cand)  # T1 fills the cache
        return self._replace(self.p, False, cand)

    def request(self, key: int) -> None:
        """A demand request: a key in a ghost list adapts p and leaves it."""
        self.ret = None
        if key in self.B1 or key in self.B2:
            self.p = self._adapted(key)[0]
            (self.B1 if key in self.B1 else self.B2).remove(key)
            self.returning.add(key)
            self.ret = key

    def evict(self, key: int, cand: set[int]) -> None:
        """Evict ``key``: trim the ghosts unless serving a ghost hit; ghost the key."""
        if self.want is None or self.ret != self.want:
            if len(self.T1) + len(self.B1) >= self.c:
                if not self.B1:
                    self.T1.remove(key)  # T1 fills the cache: no ghost
                    return
                self.B1.pop(0)
            elif (len(self.T1) + len(self.T2) + len(self.B1) + len(self.B2)
                  >= 2 * self.c and self.B2):
                self.B2.pop(0)
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
        """Publish: a returning or ghost key to T2 (a ghost adapts p), others to T1."""
        if key in self.returning:
            self.returning.discard(key)
            self.T2.append(key)
        elif key in self.B1 or key in self.B2:  # a batch load's ghost hit
            self.p = self._adapted(key)[0]
            (self.B1 if key in self.B1 else self.B2).remove(key)
            self.T2.append(key)
        else:
            self.T1.append(key)
