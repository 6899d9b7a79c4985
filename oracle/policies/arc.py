"""ARC (docs/CACHE.md "ARC"): T1/T2 resident lists, B1/B2 ghosts, target p.

A queue policy with no parameters; ``p`` adapts when a ghost key is
published again.
"""

from __future__ import annotations

from collections.abc import Mapping

NAME = "arc"
#: Parameters in the C table's order, with their defaults (none).
PARAMS: dict[str, int] = {}


def make(n_slots: int, params: Mapping[str, int]) -> ARC:
    """Fresh ARC state for a cache of ``n_slots``."""
    return ARC(n_slots)


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
