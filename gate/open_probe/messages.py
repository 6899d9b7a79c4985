"""``open-messages``: whole messages against the oracle's tables and the contract."""

from __future__ import annotations

import os
import re
import shutil
from typing import Any

from xcache.gate.open_probe.files import LAYERS, N_EXPERTS, STRIDE
from xcache.gate.open_probe.params import oracle_verdict
from xcache.gate.open_probe.probe import Probe, open_cache


def messages(p: Probe) -> None:
    """Whole messages: policies from the oracle's tables, keys, changes, mlock."""
    from xcache.oracle.policies import POLICIES  # noqa: PLC0415

    err_t = p.engine.EngineError
    cont = p.engine.Container(str(p.files.one))
    try:
        specs = ["nope", "lfr", "lruu", "s3fifo2:small=1", "ARC"]
        specs += [f"{n}:bogus=1" for n in POLICIES]
        specs += [f"{n}:{k}=x" for n, ps in POLICIES.items() for k in ps]
        for spec in specs:
            p.cases += 1
            want = oracle_verdict(spec)
            try:
                open_cache(p, cont, False, n_slots=3, top_k=1,
                            policy=spec).close()
                got = None
            except err_t as e:
                got = str(e)
            if got != want:
                p.fail(f"policy={spec!r}: message {got!r}, oracle {want!r}")
        cache = open_cache(p, cont, False, n_slots=3, top_k=1)
        try:
            for layer, e in ((2, 0), (0, 0), (4, 1), (1, 3), (3, -1)):
                p.cases += 1
                want = (f"({layer}, {e})", f"(layer {layer}, expert {e}) is "
                        f"not a key of this cache ({len(LAYERS)} layers from "
                        f"{LAYERS[0]} to {LAYERS[-1]}, {N_EXPERTS} experts "
                        "each)")
                try:
                    cache.get(layer, e).release()
                    got = "accepted"
                except err_t as x:
                    got = str(x)
                if got != want[1]:
                    p.fail(f"get{want[0]}: {got!r}, contract {want[1]!r}")
        finally:
            cache.close()
    finally:
        cont.close()
    not_published(p)
    mlock_note(p)
    missing_paths(p)


def missing_paths(p: Probe) -> None:
    """Containers at paths that do not exist, or a folder of no shard:
    NOT_FOUND with no offset, layer or expert, naming the path."""
    err_t = p.engine.EngineError
    f = p.files.folder
    empty = f / "empty"
    empty.mkdir(exist_ok=True)
    cases = [(f / "missing.safetensors", "no such file or folder"),
             (f / "no" / "where", "no such file or folder"),
             (p.files.one / "below", "no such file or folder"),
             (empty, "the folder holds no .safetensors file and no "
              "model.safetensors.index.json")]
    for path, what in cases:
        p.cases += 1
        try:
            p.engine.Container(str(path)).close()
            got: Any = "opened"
        except err_t as e:
            got = (e.kind, e.offset, e.layer, e.expert, str(e))
        want = ("not_found", None, None, None, f"{path}: {what}")
        if got != want:
            p.fail(f"Container({path}): {got}, contract {want}")


def not_published(p: Probe) -> None:
    """A verified load of a file whose mtime moved since open: CHANGED, named."""
    src = p.files.one
    path = p.files.folder / "changed.safetensors"
    shutil.copyfile(src, path)
    err_t = p.engine.EngineError
    p.cases += 1
    cont = p.engine.Container(str(path), verify=True)
    try:
        before = os.stat(path).st_mtime_ns
        after = before + 1_234_567_891
        os.utime(path, ns=(after, after))
        cache = open_cache(p, cont, False, n_slots=3, top_k=1)
        try:
            try:
                cache.get(LAYERS[0], 2).release()
                got: Any = "published"
            except err_t as e:
                got = (e.kind, e.offset, e.layer, e.expert, str(e))
        finally:
            cache.close()
    finally:
        cont.close()
        path.unlink()

    def ts(ns: int) -> str:
        return f"{ns // 10**9}.{ns % 10**9:09d}"

    want = ("changed", os.path.getsize(src), LAYERS[0], 2,
            f"layer {LAYERS[0]} expert 2: not published: {path} was modified "
            f"while the container was open (mtime {ts(after)}, was "
            f"{ts(before)})")
    if got != want:
        p.fail(f"verify after a changed mtime: {got}, contract {want}")


def mlock_note(p: Probe) -> None:
    """The mlock note names the arena's bytes, n_slots x stride."""
    cont = p.engine.Container(str(p.files.one))
    try:
        for n_slots in (2, 5):
            p.cases += 1
            cache = open_cache(p, cont, False, n_slots=n_slots, top_k=1,
                                lock_memory=True)
            note, active = cache.mlock_note, cache.mlock_active
            cache.close()
            b = n_slots * STRIDE
            ok = (note == f"mlock active on {b} bytes" if active else
                  re.fullmatch(rf"mlock of {b} bytes refused: .*", note))
            if not ok:
                p.fail(f"lock_memory with {n_slots} slots of {STRIDE} bytes: "
                       f"note {note!r} (active {active})")
    finally:
        cont.close()
