"""Generated programs: every public operation covered, planted bugs found, shrunk."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.nosan  # runs the replay tool, not the C core

ROOT = Path(__file__).resolve().parents[2]

#: cdef functions that are no operation of a cache in use (its lifetime,
#: its introspection), each covered by every program all the same
_PLUMBING = {"xc_cache_open", "xc_cache_close", "xc_cache_arena",
             "xc_cache_slot", "xc_cache_n_slots", "xc_cache_stride",
             "xc_cache_expert_bytes", "xc_cache_n_tensors", "xc_cache_tensor",
             "xc_cache_contiguous", "xc_cache_stats", "xc_cache_hold_data",
             "xc_cache_mlock_active", "xc_cache_mlock_note"}

#: each remaining cdef function -> the program step op (or option) calling it
_CALLED_BY = {
    "xc_cache_get": "hold", "xc_cache_release": "release",
    "xc_cache_hold": "get", "xc_cache_unhold": "get",
    "xc_cache_hold_layer": "hold_layer", "xc_cache_unhold_many": "unhold_many",
    "xc_cache_getmany": "getmany", "xc_cache_prefetch": "prefetch",
    "xc_cache_drain": "drain", "xc_cache_stream_begin": "stream",
    "xc_cache_stream_next": "stream_next", "xc_cache_stream_end": "stream_rest",
    "xc_cache_pin": "pin", "xc_cache_unpin": "unpin",
    "xc_cache_reset_stats": "reset", "xc_cache_check": "check",
    "xc_cache_trace_flush": "trace", "xc_cache_set_step": "trace",
}

#: xc_cache_opts fields -> the program cache option setting them
_OPTION_OF = {
    "n_slots": "n_slots", "policy": "policy", "chunk_bytes": "chunk_bytes",
    "batch_threads": "batch_threads", "io_threads": "io_threads",
    "trace_path": "trace", "io_depth": "io_depth",
}
#: fields every cache gets from its layout, or that programs leave at default
_FROM_LAYOUT = {"budget_bytes", "top_k", "expert_template", "tensors",
                "n_tensors", "layers", "n_layers", "n_experts",
                "split_min_misses", "lock_memory", "trace_ring_records"}


def _programs() -> list[dict]:
    """Every pinned program, generated."""
    from xcache.gate.containers import make_target
    from xcache.gate.programs import generate, load_programs

    work = Path(os.environ.get("TMPDIR", "/tmp")) / f"xc-progtest-{os.getpid()}"
    targets: dict = {}
    out = []
    for row in load_programs():
        ref = row["container"]
        if ref not in targets:
            targets[ref] = make_target(ref, work)
        out.append(generate(row["seed"], targets[ref], row["option_set"],
                            length=row["length"]))
    return out


def test_every_cdef_operation_and_option_is_in_the_programs() -> None:
    """Every xc_cache_* function and xc_cache_opts field is used by a program."""
    cdef = (ROOT / "engine" / "_cdef.h").read_text()
    funcs = set(re.findall(r"\b(xc_cache_\w+)\s*\(", cdef))
    unknown = funcs - _PLUMBING - set(_CALLED_BY)
    assert not unknown, f"cdef functions no program is known to call: {unknown}"
    body = re.search(r"typedef struct xc_cache_opts \{(.*?)\} xc_cache_opts;",
                     cdef, re.S)
    assert body is not None
    fields = set(re.findall(r"(\w+);", body.group(1)))
    unknown = fields - set(_OPTION_OF) - _FROM_LAYOUT
    assert not unknown, f"xc_cache_opts fields no program sets: {unknown}"
    progs = _programs()
    ops = {s.get("op", "check") for p in progs for s in p["steps"]}
    for fn, op in _CALLED_BY.items():
        if op not in ("trace", "check"):
            assert op in ops, f"{fn}: no program has a {op!r} step"
    assert any(s.get("speculative") for p in progs for s in p["steps"])
    opts = {k for p in progs for k, v in p["cache"].items() if v}
    for opt in [*_OPTION_OF.values(), "direct", "verify", "faults"]:
        assert opt in opts, f"no program sets the cache option {opt!r}"
    faults = {s.get("fault") for p in progs for s in p["steps"]}
    assert {"eof", "eio", "eintr", "partial"} <= faults
    # hold_layer's all-or-none refusals are drawn: more experts than the
    # slots surely free, and a hold_layer meeting an armed fault
    from xcache import fixtures
    top_k = {p["container"]: fixtures.preset(p["container"]).top_k
             for p in progs}
    assert any(s.get("op") == "hold_layer"
               and len(s.get("keys", [])) > top_k[p["container"]] + 1
               for p in progs for s in p["steps"])
    assert any(a.get("op") == "inject" and a.get("then") == "hold_layer"
               for p in progs for a in p["steps"])
    # truncation is drawn under verify too
    assert any(p["cache"].get("verify") and s.get("op") == "truncate"
               for p in progs for s in p["steps"])
    # every verify program changes a shard; some change an expert's shard
    # other than its first piece's (an expert lying across two shards)
    assert all(any(s.get("op") in ("touch", "rewrite") for s in p["steps"])
               for p in progs if p["cache"].get("verify"))
    assert any(_other_shard(p, s) for p in progs for s in p["steps"])
    # unhold_many meets a spent handle among good ones, first, inside, last
    spent = [s for p in progs for s in p["steps"] if "spent_at" in s]
    assert {min(s["spent_at"], 1) for s in spent} == {0, 1}
    # calls into a full cache: a hold of more keys than slots, then a stream
    # (opened and taken in part) of keys that find no slot
    full = [(p, i) for p in progs for i, s in enumerate(p["steps"])
            if s.get("op") == "hold" and len(s["keys"]) > p["cache"]["n_slots"]]
    assert any(p["steps"][i + 2]["op"] == "stream_open" for p, i in full)
    # a shallow queue over its range, read-ahead behind a stalled reader
    depths = {p["cache"]["io_depth"] for p in progs if "io_depth" in p["cache"]}
    assert depths == {1, 2, 3}
    # every traced program sets steps and compares its last records
    for p in progs:
        if p["cache"].get("trace"):
            ops_of = [s["op"] for s in p["steps"] if s["op"] != "check"]
            assert ops_of[0] == "set_step" and "trace" in ops_of, ops_of
    # chunks over their range, O_DIRECT's in 4 KiB multiples
    chunks = {(bool(p["cache"].get("direct")), p["cache"]["chunk_bytes"])
              for p in progs if p["cache"].get("chunk_bytes")}
    assert len({c for d, c in chunks if not d}) >= 5
    assert all(c % 4096 == 0 for d, c in chunks if d)
    assert any(s.get("stalled") for p in progs for s in p["steps"])
    assert {"inject_alloc", "truncate", "corrupt", "trace", "replace"} <= ops
    containers = {p["container"] for p in progs}
    assert containers == {p for p in fixtures.PRESETS if p.endswith("-mini")}


def _other_shard(program: dict, step: dict) -> bool:
    """Whether ``step`` changes a shard other than the one holding its key's
    first bytes (a drawn ``piece`` on an expert lying across shards)."""
    from xcache import fixtures
    from xcache.gate.containers import make_target

    if step.get("op") not in ("touch", "rewrite", "truncate") or "piece" not in step:
        return False
    work = Path(os.environ.get("TMPDIR", "/tmp")) / f"xc-progtest-{os.getpid()}"
    target = make_target(program["container"], work)
    e = fixtures.preset(program["container"]).n_experts
    layer = target.layout["layers"][step["key"] // e]
    pieces = target.pieces(layer, step["key"] % e)
    first = min(pieces, key=lambda p: (p.shard, p.offset))
    return pieces[step["piece"]].shard != first.shard


#: (name, file, original, replacement, container): bugs no scenario was written for
PLANTED = [
    ("hold_layer", "xc_batch.c",
     "if (n > c->n_slots)\n        return xc_fail(XC_E_MISUSE, -1, layer, -1,\n"
     "                       \"hold_layer: %zu experts",
     "if (n > c->n_slots + 1)\n        return xc_fail(XC_E_MISUSE, -1, layer, -1,\n"
     "                       \"hold_layer: %zu experts",
     "k3-mini"),
    ("fused load", "xc_load.c",
     "rc = read_run(ld, shard[t], 0, off[t], ld->tensors[t].nbytes,",
     "rc = read_run(ld, shard[t], 0, off[t], ld->tensors[t].nbytes - 1,",
     "granite-mini"),
    ("index check", "xc_cache.c",
     "pos < 0 || pos >= (int64_t)ld->n_layers || expert < 0 ||\n"
     "        expert >= ld->n_experts)",
     "pos < 0 || pos >= (int64_t)ld->n_layers || expert < 0 ||\n"
     "        expert > ld->n_experts)",
     "deepseek-mini"),
]


@pytest.mark.parametrize("name,file,original,replacement,container", PLANTED,
                         ids=[p[0] for p in PLANTED])
def test_planted_bug_is_found_and_shrunk(tmp_path: Path, name: str, file: str,
                                         original: str, replacement: str,
                                         container: str) -> None:
    """A planted bug fails a program, shrunk to a pinnable scenario of <= 10 steps."""
    eng = tmp_path / "engine"
    shutil.copytree(ROOT / "engine", eng,
                    ignore=shutil.ignore_patterns("*.so", "__pycache__"))
    src = eng / "csrc" / file
    text = src.read_text()
    assert text.count(original) == 1
    src.write_text(text.replace(original, replacement))
    env = {**os.environ, "PYTHONPATH": str(ROOT),
           "XC_OBJ_CACHE": str(Path(os.environ.get("TMPDIR", "/tmp"))
                               / "xc-progtest-objs")}
    py = sys.executable
    subprocess.run([py, "replay.py", "--engine-src", str(eng), "--repin"],
                   cwd=ROOT, env=env, check=True, capture_output=True)
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"programs": [
        {"container": container, "option_sets": ["plain", "chunked"],
         "seeds": list(range(6))}]}))
    proc = subprocess.run(
        [py, "replay.py", "--engine-src", str(eng), "--programs-only",
         "--programs-file", str(plan), "--first-failure", str(tmp_path / "out")],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    start = proc.stdout.index("{\n", proc.stdout.index("(pin it as"))
    end = proc.stdout.index("\n}\n", start) + 2
    sc = json.loads(proc.stdout[start:end])
    ops = [s for s in sc["steps"] if s.get("op", "check") != "check"]
    assert 1 <= len(ops) <= 10, ops
    # pinned as it is, the scenario fails the planted engine the same way
    (tmp_path / "sc.json").write_text(json.dumps(sc))
    check = subprocess.run(
        [py, "-c", "import json,sys; from pathlib import Path;"
         "from xcache.gate.build import build_engine, load_engine;"
         "from xcache.gate.programs import run_one;"
         "e=Path(sys.argv[1]); o=Path(sys.argv[2]); o.mkdir();"
         "so,_=build_engine(e,o); eng=load_engine(e,so);"
         "r=run_one(eng,o,json.load(open(sys.argv[3])),derived=False);"
         "print('FAILED' if r.failed else 'PASSED')",
         str(eng), str(tmp_path / "pinned"), str(tmp_path / "sc.json")],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert check.stdout.strip().endswith("FAILED"), check.stdout + check.stderr


def test_generation_is_deterministic_from_the_seed(tmp_path: Path) -> None:
    """One seed, container and option set give one program; another seed another."""
    from xcache.gate.containers import make_target
    from xcache.gate.programs import generate

    t = make_target("granite-mini", tmp_path)
    a, b = generate(7, t, "readers"), generate(7, t, "readers")
    assert a == b
    assert generate(8, t, "readers")["steps"] != a["steps"]
    # read-ahead with threads is always drained before anything is compared
    steps = a["steps"]
    for i, s in enumerate(steps):
        if s.get("op") == "prefetch" and "keys" in s:  # (raw: misuse)
            assert steps[i + 1]["op"] == "drain"


def test_ddmin_finds_a_one_minimal_failing_subset() -> None:
    """Delta debugging keeps exactly the steps that together make the failure."""
    from xcache.gate.programs import _ddmin

    items = list(range(20))
    assert _ddmin(items, lambda xs: 3 in xs and 17 in xs) == [3, 17]
    assert _ddmin(items, lambda xs: 11 in xs) == [11]


def test_a_long_search_prints_progress_and_stops_at_ctrl_c(tmp_path: Path) -> None:
    """--programs N with a large N prints progress and ends at Ctrl-C: exit
    130 within seconds, one line, nothing of the run left."""
    out = tmp_path / "out.txt"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    with open(out, "wb") as f:
        p = subprocess.Popen(
            [sys.executable, "replay.py", "--programs-only", "--no-programs",
             "--programs", "1000000", "--seed", "5", str(tmp_path / "run")],
            cwd=ROOT, env=env, stdout=f, stderr=subprocess.PIPE,
            start_new_session=True)
        try:
            deadline = time.monotonic() + 300
            while (b"programs: 10 of 1000000 run" not in out.read_bytes()
                   and p.poll() is None and time.monotonic() < deadline):
                time.sleep(0.1)
            assert b"programs: 10 of 1000000 run" in out.read_bytes()
            os.killpg(p.pid, signal.SIGINT)
            rc = p.wait(timeout=60)
        finally:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
    assert p.stderr is not None
    err = p.stderr.read().decode()
    assert rc == 130, err
    assert err.strip().splitlines()[-1] == (
        "replay.py: interrupted; nothing of this run is left")
    assert not (tmp_path / "run").exists()  # the run made it: removed too
