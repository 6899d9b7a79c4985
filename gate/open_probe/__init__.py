"""The open probe: opening things, and the C face only a C caller reaches.

Every scenario and program opens its containers and caches once, with
memory to spare, through the Python face, so the paths of an *open* that
goes wrong were never run by the gate.  This probe runs them on small
containers it writes itself (:class:`~gate.open_probe.files.Files`), five check lines,
a module each:

- ``open-nomem``: an allocation countdown (the engine's fault seam,
  ``engine.alloc``): for n = 1, 2, ... the n-th allocation is refused over
  ``Container()`` (one file whose header is out of data order, an index
  of two shards, O_DIRECT and verify), ``ExpertCache()`` with every policy
  and option set (threads, read-ahead, chunking, budget, mlock, a trace
  ring; per-expert, sharded and fused layouts), the simulator for every
  policy and mode, and ``hold_layer``, until the call no longer meets the
  fault.  Every refusal must be ``nomem`` with no offset, layer or expert
  and a message of the documented forms naming what ran out (exact
  numbers); the engine's live allocations must be back at the baseline;
  an open that met a refusal must not succeed (``hold_layer``'s per-read
  error records are the one allocation allowed to fail: it must then
  still hold every expert, byte-exact); and the open that finally
  succeeds must behave (every expert byte-exact, ``check()`` clean, the
  simulator's counts the oracle's).
- ``open-leaks``: open, use and close through the C face and the Python
  face leave the live-allocation count where it was.
- ``open-params``: every parameter of every policy at its range's ends,
  one past each end, and values that are not unsigned decimals, through
  the cache and the simulator: accepted or refused, and the whole message,
  as the oracle's spec parser (``oracle.policies.parse_policy``) says;
  budgets of top_k + 1 slots accepted, one slot or one byte less refused
  with the contract's message (xc.h, ``xc_cache_open``).
- ``open-c-face``: ``xc_cache_open`` called through the cffi lib with the
  layouts the Python face refuses before C sees them: exactly 2**31 - 1
  keys (accepted: the tables' allocation is refused by the countdown, so
  nothing large is ever allocated), 2**31 keys (too many), a tensor the
  container lacks, an expert whose tensor has another size, or the same
  size with its dimensions in another order, layers not ascending, NULL
  arguments, an unknown policy, and each refused allocation of an open:
  the status, every field of the raw error record (offsets of -1: the
  Python face shows any negative one as None) and the message as xc.h's
  contract says.
- ``open-messages``: whole messages against the text derived from the
  oracle's own tables (the valid policies and their parameters) or the
  contract: an unknown policy, a bad parameter, a key outside the cache,
  an expert not published because its file changed (verify), the mlock
  note's byte count (``n_slots * stride``), and containers at paths that
  do not exist (``not_found`` naming the path).

All of it takes well under a second.
"""

from __future__ import annotations

import gc
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from xcache.gate.open_probe.c_face import c_face
from xcache.gate.open_probe.files import (
    EXPERT_BYTES,
    N_KEYS,
    POLICY_SPECS,
    STRIDE,
    Files,
    expert_bytes,
)
from xcache.gate.open_probe.leaks import leaks
from xcache.gate.open_probe.messages import messages
from xcache.gate.open_probe.nomem import container_nomem, nomem
from xcache.gate.open_probe.params import (
    budget_message,
    oracle_verdict,
    params,
    valid_policies,
)
from xcache.gate.open_probe.probe import Probe, close_if_open, countdown

__all__ = ["CHECKS", "EXPERT_BYTES", "N_KEYS", "POLICY_SPECS", "STRIDE",
           "Files", "Probe", "budget_message", "close_if_open", "container_nomem",
           "countdown", "expert_bytes",
           "oracle_verdict", "run_checks", "valid_policies"]


#: (check name, what it runs, its description).
CHECKS: tuple[tuple[str, Callable[[Probe], None], str], ...] = (
    ("open-nomem", nomem, "refused allocations during opens, hold_layer and "
     "the simulator"),
    ("open-leaks", leaks, "opens and closes through the C and Python faces"),
    ("open-params", params, "policy parameters and budgets"),
    ("open-c-face", c_face, "xc_cache_open with layouts only C can give"),
    ("open-messages", messages, "messages against the oracle's tables and "
     "the contract"),
)


def run_checks(engine: Any, work: Path, report: Any) -> list[str]:
    """Run every check of the probe; one line each in ``report``."""
    shm = Path("/dev/shm")
    folder = Path(tempfile.mkdtemp(prefix="xc-open-probe-",
                                   dir=shm if shm.is_dir() else work))
    names = []
    try:
        files = Files(folder)
        for name, run, what in CHECKS:
            p = Probe(engine, files)
            gc.collect()  # older garbage goes now, not in a measurement
            try:
                run(p)
            except p.engine.EngineError as e:
                p.fail(f"raised {type(e).__name__} ({e.kind}): {e}")
            finally:
                p.alloc.disarm()
            detail = (f"{p.cases} cases: {what}" if not p.failures else
                      f"{len(p.failures)} failure(s) in {p.cases} cases; "
                      f"first: {p.failures[0]}")
            report.add(name, "engine", name, not p.failures, detail, 0,
                       len(p.failures))
            names.append(name)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return names
