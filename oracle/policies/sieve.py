"""SIEVE (docs/CACHE.md "SIEVE"; Zhang et al., NSDI '24): a FIFO queue and a hand.

A queue policy: it keeps its own queue of the READY keys and is told the
events of docs/CACHE.md "Events a policy sees".  Keys sit in insertion
order, each with a visited bit; a hit only sets the bit; an insert goes
to the newest end unvisited.  To evict, the hand walks from where it
stopped (the oldest key when it has none) towards the newest, wrapping to
the oldest: it clears each visited key it passes and takes the first
unvisited candidate; it stops on the key after the victim (none when the
victim was the newest).  Like S3-FIFO's, the walk is really run: ``victim``
on copies, ``evict`` on the real state.
"""

from __future__ import annotations

from collections.abc import Mapping

NAME = "sieve"
#: Parameters in the C table's order, with their defaults (none).
PARAMS: dict[str, int] = {}
#: libCacheSim's name for the same policy: tests/policies and
#: bench/policy_replay.py compare every policy that has one, cell by cell.
LIBCACHESIM = "Sieve"


def make(n_slots: int, params: Mapping[str, int]) -> SIEVE:
    """Fresh SIEVE state (no parameters; ``n_slots`` is not needed)."""
    return SIEVE()


class SIEVE:
    """SIEVE over resident keys: ``queue`` oldest first, ``visited``, ``hand``."""

    def __init__(self) -> None:
        self.queue: list[int] = []
        self.visited: dict[int, bool] = {}
        #: the position in ``queue`` the next walk starts at (None: the oldest)
        self.hand: int | None = None
        #: set by the cache around a demand miss (SIEVE does not use it)
        self.want: int | None = None

    def _walk(self, visited: dict[int, bool], cand: set[int]) -> int:
        """Run the hand over ``visited`` (cleared as it goes); the victim's position."""
        i = self.hand if self.hand is not None else 0
        while True:  # some key of the queue is a candidate, so this ends
            k = self.queue[i]
            if k in cand and not visited[k]:
                return i
            visited[k] = False
            i = (i + 1) % len(self.queue)

    def victim(self, cand: set[int]) -> int:
        """The key the next eviction takes among ``cand``; changes nothing."""
        return self.queue[self._walk(dict(self.visited), cand)]

    def request(self, key: int) -> None:
        """A demand request: SIEVE learns nothing from it."""

    def evict(self, key: int, cand: set[int]) -> None:
        """Evict ``key`` (the victim among ``cand``): the hand walks to it."""
        i = self._walk(self.visited, cand)
        assert self.queue[i] == key, (self.queue[i], key)
        del self.queue[i]
        del self.visited[key]
        self.hand = i if i < len(self.queue) else None

    def insert(self, key: int) -> None:
        """Publish: the key goes to the newest end, unvisited."""
        self.queue.append(key)
        self.visited[key] = False

    def hit(self, key: int) -> None:
        """A demand hit: the key is visited."""
        self.visited[key] = True
