"""The draws of a program that make several steps at once.

:class:`Draws` is the part of the program generator
(:class:`gate.program_gen._Gen`) that draws a few steps together: calls
into a crowded cache (:meth:`Draws.op_crowd`), a read held under way by a
stall and the calls over its key meanwhile (:meth:`Draws.op_held_read`), and
the steps of the Python face (:meth:`Draws.op_face`).  A mixin: every
attribute it uses is the generator's own; docs/SCENARIOS.md "Programs".
"""

from __future__ import annotations

import random
from typing import Any


class Draws:
    """Several steps drawn together (a mixin of the program generator)."""

    # the generator's state these draws read and change
    opts: dict[str, Any]
    steps: list[dict[str, Any]]
    stream: tuple[str, int] | None
    face: dict[str, int]
    face_released: list[str]
    face_serial: int
    readers: bool
    reads: random.Random
    n_keys: int
    n_slots: int
    E: int
    k: int
    layers: list[int]

    def op_crowd(self, rng: random.Random) -> None:
        """A call made when (nearly) every slot is taken, drawn from ``rng``.

        Keys held under a new label until 0, 1 or 2 slots are surely free
        (more when the bound :meth:`busy` keeps is above the truth), or
        every key but the call's (the cache full: the others refused), then
        one call over keys that mostly miss -- a stream (opened and taken
        in part, or whole), a getmany, a read-ahead, a hold_layer or gets --
        so that its first keys, or all of them, find no slot; then the
        label is given back.
        """
        if self.stream is not None:
            return
        label = self.label("c")
        m = rng.randint(1, min(self.n_keys - 1, self.k + 1))
        if rng.random() < 0.4:  # full: every other key held, the rest refused
            keys = rng.sample(range(self.n_keys), m)
            crowd = [k for k in range(self.n_keys) if k not in keys]
            rng.shuffle(crowd)
        else:
            n = self.room() - rng.choice([0, 1, 2])
            if n < 1:
                return
            crowd = self.keys(n, rng)
            others = [k for k in range(self.n_keys) if k not in crowd]
            if not others:
                return
            keys = rng.sample(others, min(m, len(others)))
        self.add({"op": "hold", "keys": crowd, "label": label})
        what = rng.choice(["stream", "stream", "getmany", "prefetch",
                           "hold_layer", "get"])
        if what == "stream" and not self.readers and rng.random() < 0.5:
            s = self.label("s")
            self.add({"op": "stream_open", "keys": keys, "label": s})
            self.add({"op": "stream_next", "label": s,
                      "count": rng.randint(0, len(keys))})
            self.add({"op": "stream_rest", "label": s})
        elif what == "prefetch":
            self.read_ahead(keys, rng.random() < 0.5)
        elif what == "hold_layer":
            li = keys[0] // self.E
            same = [k for k in keys if k // self.E == li]
            m = self.label("L")
            self.add({"op": "hold_layer", "keys": same, "label": m})
            self.add({"op": "unhold_many", "label": m})
        else:
            self.add({"op": what, "keys": keys})
        self.add({"op": "release", "label": label})

    def op_held_read(self, rng: random.Random) -> None:
        """A get whose read a stall holds (if it reads), the calls over its key
        meanwhile, the release: checked once, after the join.

        The key may be resident (the get then hits and reads nothing): the
        wait ends either way (``or_ended``), and the stall is then replaced
        by a harmless fault so that no later read meets it.
        """
        k = self.key()
        steps: list[dict[str, Any]] = [
            {"op": "inject", "fault": "stall", "nth": 1},
            {"op": "background_get", "keys": [k]},
            {"op": "await_read", "or_ended": True},
            {"op": "inject", "fault": "delay", "nth": 1, "arg": 0},
            {"op": "getmany", "keys": [k, *self.keys(self.k)][:self.k + 1]},
            {"op": "background_get", "keys": [k]},
            {"op": "await_waiting", "if_held": True},
            {"op": "unstall"}, {"op": "join"}, {"op": "clear"}]
        if rng.random() < 0.5:  # a prefetch instead: it skips the key too
            steps[4] = {"op": "prefetch", "keys": steps[4]["keys"]}
            if self.readers:  # its reads end (the held one is a get's)
                steps.insert(5, {"op": "drain"})
        elif not self.readers and self.reads.random() < 0.4:
            # a stream begun over it and keys got just before (resident:
            # the key in flight is then its only one missing) instead: the
            # key in flight is left for later (counted then), the others
            # counted now; taken after
            label = self.label("s")
            got = [j for j in self.keys(2, self.reads) if j != k]
            if got:
                steps.insert(0, {"op": "get", "keys": got})
            at = 5 if got else 4  # where the getmany stood
            steps[at] = {"op": "stream_open", "label": label, "keys": [k, *got]}
            steps.insert(-1, {"op": "stream_rest", "label": label})
        for st in steps[:-1]:
            st["then"] = "held"
        for st in steps:
            self.add(st)

    def op_face(self, rng: random.Random) -> None:
        """A few steps of the Python face (gate/face_ops.py), drawn from ``rng``.

        Held experts, layer holds and streams taken (some in a ``with``
        block left by an exception), read, released (again: misuse) or
        dropped; a layer hold naming an expert twice or more experts than
        slots; a stream or layer hold under an armed fault (two failed
        reads: which error, and when).  Streams only without readers (the
        order they yield in is then fixed).  What the steps still hold at
        the end is released or dropped, so the slots the operations drawn
        after them see free are those they saw before the face had steps
        (and they are drawn the same); the labels given back stay, for a
        read or a release again later.
        """
        for _ in range(rng.randint(1, 2)):
            self.face_action(rng)
        for label in sorted(self.face):
            held = self.face.pop(label)
            if held and rng.random() < 0.2:
                self.add({"op": "face_drop", "label": label})
                continue
            self.face_released.append(label)
            if held:
                self.add({"op": "face_release", "label": label})

    def face_action(self, rng: random.Random) -> None:
        """One step of :meth:`op_face`."""
        what = rng.choices(["get", "hold_layer", "stream", "read", "release",
                            "drop", "fault"], [3, 3, 3, 2, 3, 1, 2])[0]
        serial = not self.readers and not self.opts.get("direct")
        live = sorted(self.face)
        if what == "read" and (live or self.face_released):
            self.add({"op": "face_read",
                      "label": rng.choice(live + self.face_released)})
        elif what in ("release", "drop") and live:
            label = rng.choice(live)
            del self.face[label]
            if what == "drop":
                self.add({"op": "face_drop", "label": label})
                return
            self.face_released.append(label)
            self.add({"op": "face_release", "label": label})
        elif what == "release" and self.face_released:  # again: misuse
            self.add({"op": "face_release",
                      "label": rng.choice(self.face_released)})
        elif what == "fault" and serial and self.room() > 2:
            start = len(self.steps)
            self.add({"op": "inject", "fault": rng.choice(["eio", "eof"]),
                      "nth": rng.randint(1, 2)})
            if rng.random() < 0.5:  # a second read fails too
                self.add({"op": "inject", "fault": rng.choice(["eio", "eof"]),
                          "nth": 1, "second": True})
            # a layer's reads in parallel would meet the faults in any order
            one = self.opts.get("batch_threads", 2) == 1
            self.face_step(rng, rng.choice(["stream", "hold_layer"])
                           if one else "stream")
            self.add({"op": "clear"})
            for i in range(start, len(self.steps) - 1):  # checked once
                self.steps[i]["then"] = self.steps[i + 1]["op"]
        elif what in ("get", "hold_layer") or (what == "stream" and serial):
            self.face_step(rng, what)

    def face_step(self, rng: random.Random, what: str) -> None:
        """A face step taking objects under a new label: ``what`` is
        ``get``, ``hold_layer`` or ``stream`` (each miss needs a slot)."""
        most = min(self.k + 1, self.E, self.room() - 1)
        if most < 1:
            return
        self.face_serial += 1
        step: dict[str, Any] = {"op": "face_" + what,
                                "label": f"f{self.face_serial}"}
        if what == "get":
            step["keys"] = self.keys(min(2, most), rng)
        elif what == "hold_layer":
            base = rng.randrange(len(self.layers)) * self.E
            experts = rng.sample(range(self.E), rng.randint(1, most))
            if rng.random() < 0.1:  # misuse: an expert named twice
                experts.append(experts[0])
            elif rng.random() < 0.05:  # misuse: more experts than slots
                experts = [e % self.E for e in range(self.n_slots + 1)]
            step["keys"] = [base + e for e in experts]
        else:
            step["keys"] = self.keys(most, rng)
            if rng.random() < 0.5:
                step["count"] = rng.randint(0, len(step["keys"]))
            if rng.random() < 0.5:
                step["keep"] = True
        if rng.random() < 0.3:
            step["with"] = rng.choice(["end", "raise", "release",
                                       "release_raise"])
        kept = step.get("keep") if what == "stream" else "with" not in step
        self.face[step["label"]] = len(step["keys"]) if kept else 0
        self.add(step)
