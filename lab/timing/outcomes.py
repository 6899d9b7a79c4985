"""Which accesses hit and which reads are issued: the live cache, synchronously.

The time lab needs each access's outcome, not only the totals the C
simulator returns.  :func:`replay_outcomes` drives a live
:class:`engine.ExpertCache` -- the engine's own policy code, the cache the
lab's simulator agrees with counter for counter -- over a small container
of the trace's shape (a few bytes per expert, written once per process in
a temporary folder) with no readers (every read ends before the call
returns) and the trace recording on, and reads each access's outcome back
from the recorded trace (docs/TRACE_FORMAT.md).

The calls are those of :func:`lab.predict.evaluate.drive`: for each step,
the speculative reads planned for it (the first ``budget`` predicted
experts not resident) are issued while the previous step is still held,
then the previous step is released and the step's experts are fetched and
held.  So without a plan the counters are the C simulator's in step mode,
and with one they are the predict lab's what-if.  :func:`replay_outcomes`
checks the first against :func:`engine.sim.simulate` on every call and
raises :class:`OutcomeMismatch` if they differ.
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import tempfile
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from multiprocessing.util import Finalize
from pathlib import Path
from typing import Any

import numpy as np

from xcache.lab.predict.predictors import Step

#: The tensor template and bytes of an expert in the outcome container.
TEMPLATE = "layers.{layer}.experts.{expert}.{tensor}"
TINY_BYTES = 16
#: Recorded outcomes (docs/TRACE_FORMAT.md) a demand access can have.
HIT, MISS, HIT_WAITED = 0, 1, 2
#: The recorded outcome of a prefetch key whose read was issued.
READ_ISSUED = 5
#: Record kinds.
KIND_GET, KIND_SPECULATIVE = 0, 2

#: The most keys (layers x experts) the outcome container holds: its header
#: names each, about 90 bytes apiece (Kimi K2's 61 x 384 is 23,424).
MAX_KEYS = 1 << 18

_containers: dict[tuple[int, int], Any] = {}
_folder: list[Path] = []
#: One maker at a time: the thread executor's cells share the process.
_making = threading.Lock()


class OutcomeMismatch(AssertionError):
    """The live cache's counters differ from the C simulator's (never expected)."""


@dataclass
class Outcomes:
    """Per access whether it missed, per step the speculative reads issued before it.

    ``missed[i]`` is a tuple of booleans, one per expert of step ``i`` in
    its order; ``spec[i]`` the experts (of step ``i``'s layer) whose
    speculative read was issued just before step ``i``; ``counters`` the
    cache's counters at the end.
    """

    missed: list[tuple[bool, ...]]
    spec: list[tuple[int, ...]]
    counters: dict[str, int]


def check_keys(n_layers: int, n_experts: int) -> None:
    """ValueError if the trace's shape passes :data:`MAX_KEYS` (names the shape)."""
    if n_layers * n_experts > MAX_KEYS:
        raise ValueError(f"the trace's shape, {n_layers:,} layers x {n_experts:,} "
                         f"experts, is {n_layers * n_experts:,} keys; the time lab "
                         f"replays at most {MAX_KEYS:,}")


def _container(n_layers: int, n_experts: int) -> Any:
    """A container of ``n_layers`` x ``n_experts`` tiny experts, one per process."""
    from xcache.engine import Container  # noqa: PLC0415

    check_keys(n_layers, n_experts)
    with _making:
        return _make_container(n_layers, n_experts, Container)


def _make_container(n_layers: int, n_experts: int, Container: Any) -> Any:  # noqa: N803
    """:func:`_container`'s body, under its lock."""
    key = (n_layers, n_experts)
    if key in _containers:
        return _containers[key]
    if not _folder:
        _folder.append(Path(tempfile.mkdtemp(prefix="xc-timelab-")))
        atexit.register(shutil.rmtree, _folder[0], True)
        # a process-pool worker leaves by os._exit, past atexit: multiprocessing
        # runs its own finalizers there
        Finalize(None, shutil.rmtree, args=(str(_folder[0]), True), exitpriority=0)
    path = _folder[0] / f"shape-{n_layers}x{n_experts}.safetensors"
    header, off = {}, 0
    for layer in range(n_layers):
        for e in range(n_experts):
            header[TEMPLATE.format(layer=layer, expert=e, tensor="w")] = {
                "dtype": "U8", "shape": [TINY_BYTES],
                "data_offsets": [off, off + TINY_BYTES]}
            off += TINY_BYTES
    text = json.dumps(header).encode()
    text += b" " * (-(8 + len(text)) % 8)
    tmp = path.with_name(path.name + f".{os.getpid()}")
    tmp.write_bytes(len(text).to_bytes(8, "little") + text + bytes(off))
    os.replace(tmp, path)
    _containers[key] = Container(str(path))
    return _containers[key]


def replay_outcomes(steps: Sequence[Step], n_layers: int, n_experts: int,
                    top_k: int, slots: int, policy: str,
                    plan: Sequence[Sequence[int]] | None = None,
                    budget: int = 0) -> Outcomes:
    """Each access's outcome under ``policy`` at ``slots`` (docs in the module).

    ``plan[i]`` is the prediction for step ``i``, best first; ``budget``
    the speculative reads per step.  Without a plan the counters are
    checked against the C simulator (``OutcomeMismatch`` if they differ).
    Raises ``engine.MisuseError`` for a policy or size the cache refuses.
    """
    from xcache.engine import ExpertCache  # noqa: PLC0415
    from xcache.oracle.traces import read_engine_trace  # noqa: PLC0415

    cont = _container(n_layers, n_experts)
    fd, rec = tempfile.mkstemp(prefix="outcomes-", suffix=".xctrace",
                               dir=_folder[0])
    os.close(fd)
    try:
        cache = ExpertCache(cont, n_slots=slots, policy=policy, top_k=top_k,
                            layers=range(n_layers), n_experts=n_experts,
                            expert_template=TEMPLATE, tensors=("w",),
                            io_threads=0, batch_threads=1, trace_path=rec,
                            trace_ring_records=1 << 16)
        n_spec: list[int] = []
        issued: list[list[int]] = []
        held: list[Any] = []
        try:
            for i, st in enumerate(steps):
                reads: list[int] = []
                if plan is not None and budget > 0 and plan[i]:
                    res = cache.resident()
                    reads = [e for e in plan[i]
                             if (st.layer, e) not in res][:budget]
                    if reads:
                        cache.prefetch([(st.layer, e) for e in reads],
                                       speculative=True)
                issued.append(reads)
                n_spec.append(len(reads))
                for x in held:
                    x.release()
                held = [cache.get(st.layer, e) for e in st.experts]
            for x in held:
                x.release()
            counters = {k: int(v) for k, v in cache.stats().items()
                        if float(v).is_integer()}
        finally:
            cache.close()
        _, records = read_engine_trace(rec)
    finally:
        os.unlink(rec)
    demand = records[(records["kind"] == KIND_GET)]
    spec = records[(records["kind"] == KIND_SPECULATIVE)]
    n_access = sum(len(st.experts) for st in steps)
    if len(demand) != n_access or len(spec) != sum(n_spec):
        raise OutcomeMismatch(f"the recorded trace holds {len(demand)} demand and "
                              f"{len(spec)} speculative records for {n_access} "
                              f"accesses and {sum(n_spec)} speculative keys")
    miss = demand["outcome"] == MISS
    missed, at = [], 0
    for st in steps:
        missed.append(tuple(bool(m) for m in miss[at:at + len(st.experts)]))
        at += len(st.experts)
    ok = spec["outcome"] == READ_ISSUED
    spec_out, at = [], 0
    for reads in issued:
        spec_out.append(tuple(e for e, good in zip(reads, ok[at:at + len(reads)],
                                                   strict=True) if good))
        at += len(reads)
    out = Outcomes(missed, spec_out, counters)
    if plan is None or budget == 0:
        check_against_simulator(steps, n_experts, slots, policy, out)
    return out


def check_against_simulator(steps: Sequence[Step], n_experts: int, slots: int,
                            policy: str, out: Outcomes) -> dict[str, Any]:
    """The C simulator's step-mode row for ``steps``; OutcomeMismatch if it differs."""
    from xcache.engine.sim import simulate  # noqa: PLC0415

    tok = np.array([st.token for st in steps for _ in st.experts], np.int64)
    lay = np.array([st.layer for st in steps for _ in st.experts], np.int64)
    exp = np.array([e for st in steps for e in st.experts], np.int64)
    row = simulate((tok, lay, exp, n_experts), policy, slots, "step")
    mine = {k: out.counters[k] for k in ("requests", "hits", "misses", "evictions")}
    theirs = {k: row[k] for k in mine}
    if mine != theirs:
        raise OutcomeMismatch(f"{policy} at {slots} slots: the live cache counted "
                              f"{mine}, the C simulator {theirs}")
    return row
