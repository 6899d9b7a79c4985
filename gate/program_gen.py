"""The program generator: a seed, a container and an option set give a program.

:func:`generate` draws the steps of one program (:mod:`gate.programs` says
what a program is and runs it); :func:`with_checks` puts a derived check
after each operation.  Generation is deterministic from (seed, container,
option set, policy) and never depends on timing.
"""

from __future__ import annotations

import random
from typing import Any

from xcache.gate import CannotRun
from xcache.gate.containers import Target
from xcache.gate.operations import OPERATIONS
from xcache.gate.program_draws import Draws
from xcache.oracle.cache import POLICIES

#: The option sets a program's cache may take, by name.
OPTION_SETS: dict[str, dict[str, Any]] = {
    "plain": {"batch_threads": 1},
    "pool": {"batch_threads": 2},
    "chunked": {"chunk_bytes": 256, "batch_threads": 1},
    "direct": {"direct": True, "batch_threads": 1},
    "direct-chunked": {"direct": True, "chunk_bytes": 4096, "batch_threads": 1},
    "readers": {"io_threads": 2, "batch_threads": 1},
    # one reader and a shallow queue (io_depth drawn 1..3 by each program)
    "depth": {"io_threads": 1, "io_depth": 1, "batch_threads": 1},
    "verify": {"verify": True, "batch_threads": 1},
    "traced": {"trace": True, "batch_threads": 1},
}

#: Corruptions a program's last step may make of its container.
CORRUPTIONS = ("too_short", "header_too_large", "header_past_end", "length",
               "offsets", "dtype")

#: The fault kinds a program arms (an ``eintr`` storm is a persistent one; a
#: ``burst`` interleaves interrupts in a row with progress, ``nowait`` faults
#: the loader's page-cache copy; faults/README.md).
FAULTS = ("eof", "eio", "eintr", "partial", "eintr_storm", "eagain", "burst",
          "nowait")

#: The operations a misuse step calls with a key outside the layout (each
#: an operation of the registry, :data:`gate.operations.OPERATIONS`, whose
#: compiler takes ``raw`` keys; tests/replay/test_op_table.py holds them).
MISUSE_OPS = ("get", "pin", "unpin", "prefetch", "getmany")


class _Gen(Draws):
    """The state a program's generator tracks, conservatively."""

    def __init__(self, rng: random.Random, target: Target,
                 opts: dict[str, Any], n_slots: int) -> None:
        self.rng, self.opts, self.n_slots = rng, opts, n_slots
        q = target.quantities
        self.n_keys, self.E, self.k = q["N"], q["E"], q["k"]
        self.layers = list(target.layout["layers"])
        self.readers = bool(opts.get("io_threads"))
        self.steps: list[dict[str, Any]] = []
        self.holds: dict[str, int] = {}      # hold label -> references
        self.layer_holds: dict[str, int] = {}  # hold_layer label -> experts
        self.released: list[tuple[str, str]] = []  # (op, label) given back
        self.pinned: dict[int, int] = {}     # flat key -> pins asked
        self.stream: tuple[str, int] | None = None  # open label, keys
        self.face: dict[str, int] = {}  # face label -> holds it may keep
        self.face_released: list[str] = []  # face labels given back
        self.face_serial = 0  # face labels have their own numbers
        self.serial = 0
        # a small hot set makes hits, the rest of the keys misses
        self.hot = rng.sample(range(self.n_keys), min(self.n_keys, 2 * self.k))
        self.target = target
        # whether a read-ahead holds the reader first: drawn apart, so the
        # other draws are those of programs without a shallow queue
        self.stalls = random.Random(0)
        # container reads drawn apart too
        self.reads = random.Random(1)

    # -- helpers -------------------------------------------------------------

    def key(self, rng: random.Random | None = None) -> int:
        """A flat key index: mostly from the hot set (drawn from ``rng``,
        default the program's)."""
        rng = rng or self.rng
        if rng.random() < 0.6:
            return rng.choice(self.hot)
        return rng.randrange(self.n_keys)

    def keys(self, most: int, rng: random.Random | None = None) -> list[int]:
        """One to ``most`` distinct flat key indices."""
        rng = rng or self.rng
        n = rng.randint(1, max(1, min(most, self.n_keys)))
        out: list[int] = []
        while len(out) < n:
            k = self.key(rng)
            if k not in out:
                out.append(k)
        return out

    def busy(self) -> int:
        """Slots that may be held, pinned or reserved now (an upper bound)."""
        stream = self.stream[1] if self.stream else 0
        return (sum(self.holds.values()) + sum(self.layer_holds.values())
                + sum(1 for v in self.pinned.values() if v > 0) + stream
                + sum(self.face.values()))

    def room(self) -> int:
        """Slots surely free for new misses."""
        return self.n_slots - self.busy()

    def label(self, prefix: str) -> str:
        self.serial += 1
        return f"{prefix}{self.serial}"

    def add(self, step: dict[str, Any]) -> None:
        """Append one step; its op must be one of the operations registry."""
        if step["op"] not in OPERATIONS:
            raise CannotRun(f"program generator: op {step['op']!r} is not in "
                            "the operations registry (gate/operations.py)")
        self.steps.append(step)

    def read_ahead(self, keys: list[int], speculative: bool) -> None:
        step: dict[str, Any] = {"op": "prefetch", "keys": keys}
        if speculative:
            step["speculative"] = True
        if (self.opts.get("io_depth") and len(keys) > 1
                and self.stalls.random() < 0.8):
            # its first read holds the one reader: the queue's fill is fixed
            step["stalled"] = True
        if self.readers:  # the reads end before anything is compared
            step["then"] = "drain"
        self.add(step)
        if self.readers:
            self.add({"op": "drain"})

    # -- operations ------------------------------------------------------------

    def op_get(self) -> None:
        self.add({"op": "get", "keys": self.keys(3)})

    def op_getmany(self) -> None:
        self.add({"op": "getmany", "keys": self.keys(self.k + 1),
                  **({"then_get": True} if self.rng.random() < 0.3 else {})})

    def op_prefetch(self) -> None:
        self.read_ahead(self.keys(self.k), self.rng.random() < 0.5)

    def op_drain(self) -> None:
        self.add({"op": "drain"})

    def op_hold(self) -> None:
        if self.busy() >= self.n_slots // 2:
            return self.op_give_back()
        label = self.label("h")
        keys = self.keys(2)
        self.holds[label] = len(keys)
        self.add({"op": "hold", "keys": keys, "label": label})
        return None

    def op_give_back(self) -> None:
        rng = self.rng
        if self.released and rng.random() < 0.15:  # a second release: misuse
            op, label = rng.choice(self.released)
            self.add({"op": op, "label": label})
            return
        if self.holds and (not self.layer_holds or rng.random() < 0.5):
            label = rng.choice(sorted(self.holds))
            del self.holds[label]
            self.released.append(("release", label))
            self.add({"op": "release", "label": label})
        elif self.layer_holds:
            label = rng.choice(sorted(self.layer_holds))
            if rng.random() < 0.25:  # a spent handle among them: all stay
                self.add({"op": "unhold_many", "label": label, "spent_at":
                          rng.randint(0, self.layer_holds[label])})
                return
            del self.layer_holds[label]
            self.released.append(("unhold_many", label))
            self.add({"op": "unhold_many", "label": label})
        elif self.pinned:
            self.op_unpin()

    def op_hold_layer(self) -> None:
        rng = self.rng
        li = rng.randrange(len(self.layers))
        base = li * self.E
        if rng.random() < 0.12:  # misuse: an expert twice, or too many
            e = rng.randrange(self.E)
            raw = ([["layer_first", e], ["layer_first", e]]
                   if rng.random() < 0.5 else
                   [["layer_first", i % self.E] for i in range(self.n_slots + 1)])
            self.add({"op": "hold_layer", "raw": raw, "label": self.label("m")})
            return
        if rng.random() < 0.2:  # perhaps too few slots: refused all or none
            n = rng.randint(1, min(self.E, self.n_slots))
            label = self.label("L")
            self.layer_holds[label] = n  # (an upper bound: it may hold none)
            self.add({"op": "hold_layer", "label": label, "keys": [
                base + e for e in rng.sample(range(self.E), n)]})
            return None
        # every expert may miss: hits and misses alike need a slot of their own
        most = min(self.k + 1, self.E, self.room() - 1)
        if most < 1:
            return self.op_give_back()
        n = rng.randint(1, most)
        experts = rng.sample(range(self.E), n)
        label = self.label("L")
        self.layer_holds[label] = n
        self.add({"op": "hold_layer", "keys": [base + e for e in experts],
                  "label": label})
        return None

    def op_pin(self) -> None:
        if self.busy() >= self.n_slots // 2:
            return self.op_unpin()
        k = self.key()
        self.pinned[k] = self.pinned.get(k, 0) + 1
        self.add({"op": "pin", "keys": [k]})
        return None

    def op_unpin(self) -> None:
        live = sorted(k for k, v in self.pinned.items() if v > 0)
        if live and self.rng.random() < 0.8:
            k = self.rng.choice(live)
            self.pinned[k] -= 1
        else:  # perhaps unpinned, perhaps never pinned: misuse then
            k = self.key()
        self.add({"op": "unpin", "keys": [k]})

    def op_stream(self) -> None:
        most = min(self.k + 1, self.room() - 1)
        if most < 1:
            return self.op_give_back()
        keys = self.keys(most)
        if self.stream is None and not self.readers and self.rng.random() < 0.5:
            label = self.label("s")
            self.stream = (label, len(keys))
            first = [k for k in keys if self.rng.random() < 0.3]
            # opened, taken in part, finished: compared after each (the
            # model leaves the misses under way until they are read)
            self.add({"op": "stream_open", "keys": keys, "label": label,
                      **({"get_first": first[:1]} if first else {})})
            failing = [k for k in keys if k not in first[:1]]
            fault = failing and self.reads.random() < 0.3
            if fault:  # one of its own reads fails, after a claim perhaps
                self.add({"op": "inject", "nth": 1,
                          "fault": self.reads.choice(["eio", "eof"]),
                          "place": {"key": self.reads.choice(failing)}})
            self.add({"op": "stream_next", "label": label,
                      "count": self.rng.randint(0, len(keys))})
            self.add({"op": "stream_rest", "label": label})
            if fault:
                self.add({"op": "clear"})
            self.stream = None
            return None
        self.add({"op": "stream", "keys": keys})
        return None

    def op_stream_rest(self) -> None:
        if self.stream is not None:
            self.add({"op": "stream_rest", "label": self.stream[0]})
            self.stream = None

    def op_reset(self) -> None:
        self.add({"op": "reset"})

    def op_misuse(self) -> None:
        rng = self.rng
        bad = rng.choice([["layer_last+1", 0], ["layer_first", "E"],
                          ["layer_first", -1], ["layer_first-1", 0]])
        op = rng.choice(list(MISUSE_OPS))
        self.add({"op": op, "raw": [bad]})

    def op_trace(self) -> None:
        if self.opts.get("trace"):
            self.add({"op": "trace"})

    def trace_steps(self, rng: random.Random) -> None:
        """A traced program's records carry steps: ``set_step`` at its start
        and now and then (0, small, past 32 bits, the largest), and a
        ``trace`` step at its end so every record written is compared."""
        self.add({"op": "set_step", "step": rng.choice(
            [0, 1, 7, 2**32 + 5, 2**64 - 1])})

    def op_fault(self) -> None:
        """Arm one fault, make one call that meets it, disarm."""
        if self.stream is not None:  # a reservation's read would meet it
            return self.op_stream_rest()
        rng = self.rng
        kind = rng.choice(FAULTS)
        if rng.random() < 0.2:
            self.add({"op": "inject_alloc", "nth": 1})
        elif kind == "eintr_storm":
            self.add({"op": "inject", "fault": "eintr", "nth": 1,
                      "persistent": True})
        elif kind == "burst":  # 999 in a row pass, 1000 fail, progress resets
            self.add({"op": "inject", "fault": rng.choice(["eintr_burst",
                                                           "eagain_burst"]),
                      "nth": rng.randint(1, 3),
                      "arg": rng.choice([1, 600, 999, 1000]),
                      "progress": rng.choice([0, 100, 100, 512]),
                      "persistent": rng.random() < 0.75})
        elif kind == "nowait":  # every other page-cache copy is whole
            self.add({"op": "inject", "fault": "nowait_" + rng.choice(
                ["partial", "eagain", "eof", "eio"]),
                "nth": rng.randint(1, 3), "arg": rng.choice([0, 1, 100, 1000]),
                "persistent": rng.random() < 0.5})
        else:
            step: dict[str, Any] = {"op": "inject", "fault": kind,
                                    "nth": rng.randint(1, 3)}
            if kind == "partial":
                step.update(arg=rng.choice([1, 7, 100]),
                            persistent=rng.random() < 0.5)
            self.add(step)
        serial = (self.opts.get("batch_threads", 2) == 1 and not self.readers
                  and not self.opts.get("direct"))
        most = min(self.k, self.E, self.room() - 1)
        if (not self.opts.get("direct") and self.steps[-1]["op"] == "inject"
                and self.reads.random() < 0.15):  # a container read meets it
            self.add({"op": "container_read", "keys": [self.key(self.reads)]})
        elif serial and self.steps[-1]["op"] == "inject" and most >= 1 \
                and rng.random() < 0.3:  # a read of the layer's fails: none held
            li = rng.randrange(len(self.layers))
            label = self.label("L")
            self.layer_holds[label] = most
            self.add({"op": "hold_layer", "label": label, "keys": [
                li * self.E + e for e in rng.sample(range(self.E),
                                                    rng.randint(1, most))]})
        elif serial and rng.random() < 0.5:
            self.add({"op": "getmany", "keys": self.keys(self.k)})
        else:
            self.add({"op": "get", "keys": self.keys(2)})
        self.steps[-2]["then"] = self.steps[-1]["op"]  # armed, met, cleared
        self.steps[-1]["then"] = "clear"
        self.add({"op": "clear"})
        return None

    def piece(self, key: int, rng: random.Random) -> dict[str, Any]:
        """Which of ``key``'s pieces a file change acts on, drawn from
        ``rng`` over all of them (``{}``: the first in file order, 30 % of
        the time): a shard other than the first one's of an expert that
        lies across shards, a tensor other than the first."""
        pieces = self.target.pieces(self.layers[key // self.E], key % self.E)
        if len(pieces) < 2 or rng.random() < 0.3:
            return {}
        # a shard first (the expert's own, each as likely), then its piece
        shards = sorted({p.shard for p in pieces})
        shard = rng.choice(shards)
        return {"piece": rng.choice([i for i, p in enumerate(pieces)
                                     if p.shard == shard])}

    def op_truncate(self) -> None:
        k = self.key()
        # the piece from a generator of its own: the draws after it stay
        piece = self.piece(k, random.Random(f"{self.rng.random()}/piece"))
        self.add({"op": "truncate", "key": k, "then": "get",
                  "at": self.rng.choice([0, 1, 100, 4096]), **piece})
        self.add({"op": "get", "keys": [k]})
        self.container_read(k, self.reads)

    def op_replace(self) -> None:
        self.add({"op": "replace", "then": "get"})
        self.add({"op": "get", "keys": self.keys(2)})

    def op_file_time(self, rng: random.Random) -> None:
        """With verify: a shard's mtime moved alone, or a piece rewritten in
        place with its mtime put back (the shard of any of the key's pieces,
        :meth:`piece`), then gets and a getmany (refused: changed)."""
        k = self.key()
        step: dict[str, Any] = ({"op": "touch", "key": k} if rng.random() < 0.5
                                else {"op": "rewrite", "key": k,
                                      "keep_mtime": True})
        self.add({**step, **self.piece(k, rng), "then": "get"})
        self.add({"op": "get", "keys": [k, *self.keys(1, rng)], "then": "getmany"})
        # more loads, so that experts not yet resident meet the change too
        self.add({"op": "getmany", "keys": self.keys(self.k + 1, rng)})
        self.container_read(k, rng)

    def container_read(self, key: int, rng: random.Random) -> None:
        """Half of the time, the key's tensors read through the container's
        face (not under O_DIRECT, whose windows the oracle's container
        reads do not model)."""
        if not self.opts.get("direct") and rng.random() < 0.5:
            self.add({"op": "container_read", "keys": [key]})


#: The share of a program's operations a step of the Python face follows.
FACE_SHARE = 0.2
#: The share of a program's operations a call over a crowded cache follows.
CROWD_SHARE = 0.1

#: Operation -> weight in a program (sums need not be 100).
_WEIGHTS: dict[str, int] = {
    "get": 16, "getmany": 8, "prefetch": 8, "drain": 2, "hold": 6,
    "give_back": 8, "hold_layer": 8, "pin": 4, "unpin": 4, "stream": 6,
    "stream_rest": 3, "reset": 2, "misuse": 5, "trace": 3, "fault": 8,
}


def generate(seed: int, target: Target, option_set: str = "plain",
             policy: str | None = None, length: int = 24,
             policies: list[str] | None = None) -> dict[str, Any]:
    """The program (a scenario dict) of ``seed`` on ``target`` with ``option_set``.

    ``policy`` is the cache's policy, else one drawn from ``policies``
    (default: the oracle's).  ``length`` operations are drawn; some make
    more than one step (a fault is armed, met and cleared).  Every step is
    followed by a check of :data:`gate.programs.COMPARED`.
    """
    if option_set not in OPTION_SETS:
        raise CannotRun(f"program option set {option_set!r} is not one of "
                        f"{', '.join(OPTION_SETS)}")
    rng = random.Random(f"{seed}/{target.ref}/{option_set}/{policy}")
    q = target.quantities
    opts: dict[str, Any] = {**OPTION_SETS[option_set], "faults": True}
    if policy is None:
        policy = rng.choice(sorted(policies or POLICIES))
    opts["policy"] = policy
    n_slots = rng.randint(q["k"] + 2, max(q["k"] + 2, min(3 * q["k"], q["N"])))
    opts["n_slots"] = n_slots
    drawn = random.Random(f"{seed}/{target.ref}/{option_set}/{policy}/depth")
    if "io_depth" in opts:  # the queue's depth over its shallow range
        opts["io_depth"] = drawn.randint(1, 3)
    if opts.get("chunk_bytes"):  # the chunk over its range: a byte, odd
        # sizes, a tensor's own size, past it (O_DIRECT: 4 KiB multiples)
        opts["chunk_bytes"] = (drawn.choice([4096, 8192, 12288, 65536])
                               if opts.get("direct") else drawn.choice(
                                   [1, 7, 64, 256, 1000, 4096, 65536,
                                    *_tensor_sizes(target)]))
    gen = _Gen(rng, target, opts, n_slots)
    gen.stalls = random.Random(f"{seed}/{target.ref}/{option_set}/{policy}/stall")
    gen.reads = random.Random(f"{seed}/{target.ref}/{option_set}/{policy}/read")
    names = list(_WEIGHTS)
    weights = [_WEIGHTS[n] for n in names]
    # the Python face's steps come from a generator of their own, between
    # the operations drawn (which draw as they did before the face's)
    face = random.Random(f"{seed}/{target.ref}/{option_set}/{policy}/face")
    # and so do the calls over a crowded cache
    crowd = random.Random(f"{seed}/{target.ref}/{option_set}/{policy}/crowd")
    # a traced program's steps (set_step, the last trace) from their own
    steps = random.Random(f"{seed}/{target.ref}/{option_set}/{policy}/steps")
    if opts.get("trace"):
        gen.trace_steps(steps)
    for _ in range(length):
        getattr(gen, "op_" + rng.choices(names, weights)[0])()
        if opts.get("trace") and steps.random() < 0.1:
            gen.trace_steps(steps)
        if face.random() < FACE_SHARE:
            gen.op_face(face)
        if crowd.random() < CROWD_SHARE:
            gen.op_crowd(crowd)
    gen.op_stream_rest()
    if opts.get("trace"):  # every record written so far is compared (a
        gen.add({"op": "trace"})  # tail may leave no cache to read it of)
    if opts.get("verify"):  # a verified cache always meets a file changed
        gen.op_file_time(random.Random(
            f"{seed}/{target.ref}/{option_set}/{policy}/file"))
    tail = rng.random()
    if tail < 0.25:
        gen.op_truncate()
    elif tail < 0.35 and opts.get("verify"):
        gen.op_replace()
    elif tail < 0.55:
        gen.add({"op": "corrupt", "kind": rng.choice(CORRUPTIONS)})
    else:  # no tail: perhaps a read held under way, a file changed in place
        # (drawn from a generator of their own: the steps above stay as
        # they were before these existed)
        held = random.Random(f"{seed}/{target.ref}/{option_set}/{policy}/held")
        if held.random() < 0.5:
            gen.op_held_read(held)
            gen.op_trace()
        if opts.get("verify"):
            held.random()  # (the draw that once decided a change here)
    return {
        "name": f"program-{target.ref}-{option_set}-{seed}",
        "title": f"generated program: seed {seed}, {target.ref}, "
                 f"{option_set}, {policy}",
        "container": target.ref, "cache": opts,
        "program": {"seed": seed, "option_set": option_set},
        **({"requires": ["contiguous == 1"]} if opts.get("direct") else {}),
        "steps": with_checks(gen.steps),
    }


def _tensor_sizes(target: Target) -> list[int]:
    """The byte sizes of an expert's pieces, and one byte less: chunks cut
    at a tensor's end, or one byte before it."""
    pieces = target.pieces(target.layout["layers"][0], 0)
    return sorted({n for p in pieces for n in (p.nbytes, p.nbytes - 1)
                   if n > 0})


def with_checks(ops: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The operation steps each followed by a derived check (numbered).

    A step with ``"then"`` is checked together with the one after it (a
    prefetch with its drain, a fault with the call that meets it, a stream
    opened with its end).
    """
    out: list[dict[str, Any]] = []
    for i, step in enumerate(ops):
        out.append(step)
        if step.get("then") and i + 1 < len(ops):
            continue
        out.append({"op": "check", "name": f"step {i + 1} {step['op']}",
                    "expect": ({"wrong_reads": 0} if step["op"] == "corrupt"
                               else {"wrong_reads": 0, "invariants": "clean"})})
    return out
