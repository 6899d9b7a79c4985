"""The conformance run of an outside cache and its report.

:func:`run` checks the adapter's pinned digests, builds the cache with its
shim, runs the scenarios against it with the oracle as the judge, and
writes ``conformance.md`` and ``conformance.json``: one row per contract of
:data:`CONTRACTS`, each PASS, FAIL (the first failing check and its
numbers) or N/A (the capabilities it lacks).  Every check of every scenario
belongs to exactly one contract: its scenario's, unless a check name
prefix of :data:`CONTRACTS` claims it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from xcache.gate.backends import factory
from xcache.gate.outside.backend import capabilities_of, check_table, outside_factory
from xcache.gate.outside.build import build, load_manifest, verify_sources
from xcache.gate.report import Report

#: contract id -> (what it promises, [(scenario, check name prefix or "")]).
#: A check belongs to the contract with the longest matching prefix.
CONTRACTS: dict[str, tuple[str, list[tuple[str, str]]]] = {
    "serial-reads": ("byte-exact serial reads, misses under pressure",
                     [("reference", ""), ("policies", "routed reads")]),
    "batch-reads": ("batch reads byte-exact", [
        ("reference", "batch prefetch"), ("reference", "mixed batch")]),
    "batch-residents": ("a batch never evicts a resident it names", [
        ("batch-residents-pins", "a batch")]),
    "prefetch-not-hit": ("a prefetch or batch load is not a demand hit", [
        ("reference", "prefetch loads <= hits"), ("reference", "mixed counters"),
        ("counter-window", "batch_before_get"),
        ("counter-window", "first_consumption"),
        ("counter-window", "repeat_consumption"),
        ("counter-window", "unconsumed_schedule")]),
    "counter-windows": ("reset starts a new window of every counter", [
        ("counter-window", "reset_then_warm"), ("state-counters", ""),
        ("reset-window", "")]),
    "adjusted-hit-rate": ("adjusted hits discount prefetch first uses", [
        ("check-probe", "one prefetch used")]),
    "short-read": ("a read ending early (end of file, a truncated shard) "
                   "is never published; the rest survives", [
        ("partial-reads", ""), ("faults-io", "F1"), ("chunk-faults", ""),
        ("faults-io", "F6 persistent"),
        ("counter-window", "truncated_shard")]),
    "eintr": ("interrupted and partial reads, and interrupted opens, are "
              "retried", [
        ("faults-io", "F3"), ("chunk-faults", "an EINTR storm"),
        ("chunk-faults", "every pread"), ("open-eintr", "")]),
    "open-failures": ("a file that will not open is reported, no descriptor "
                      "is kept, and a later open serves", [
        ("open-failures", "")]),
    "io-errors": ("an I/O error publishes nothing", [
        ("faults-io", "F2"), ("faults-io", "F6 a batch")]),
    "key-bounds": ("keys outside the layout are misuse and change nothing",
                   [("key-bounds", "")]),
    "pins": ("a pinned expert is never a victim; unpin frees it", [
        ("batch-residents-pins", "")]),
    "holds": ("a held expert is never a victim; release gives it back", [
        ("state-holds", ""), ("held-victim", ""), ("hold-layer-no-slot", "")]),
    "policies": ("every policy's counters on real routing", [
        ("policies", "")]),
    "reader-refusals": ("a malformed container is refused at open", [
        ("reader-index", ""), ("reader-overlap", ""), ("faults-corrupt", "")]),
    "replaced-file": ("a file replaced while open keeps serving its bytes", [
        ("faults-files", "")]),
    "allocation": ("a refused allocation changes nothing", [
        ("faults-alloc", "")]),
    "direct-io": ("O_DIRECT reads widened and checked", [("state-direct", "")]),
    "streams": ("streams yield every key once, in order", [
        ("stream-claim", ""), ("stream-claim-kinds", ""),
        ("state-order", "the stream"), ("state-untold", "")]),
    "victim-order": ("a key named twice in a batch is touched once", [
        ("state-order", "")]),
    "reads-under-way": ("calls racing a read under way wait and are counted",
                        [("in-flight", ""), ("reads-under-way", ""),
                         ("completion-order", "")]),
    "trace": ("the access trace records every access", [
        ("trace-records", "")]),
    "invariant-check": ("the cache's check names each broken invariant", [
        ("check-probe", "")]),
}


#: Contracts that rest on capabilities a check may be judged without: a
#: cache lacking any of them gets N/A for the whole contract, naming them,
#: rather than a PASS decided by the other values its checks pin (the
#: adjusted hit rate cannot be judged from invariants and prefetch loads).
REQUIRES: dict[str, tuple[str, ...]] = {
    "adjusted-hit-rate": ("counter:prefetch_first_uses",),
}


#: Checks that pin values of another contract than their own: (scenario,
#: check name prefix) -> {contract: the values it claims}.  A failing
#: check counts against the contracts of the values it got wrong: its own
#: for the values none of these claims.
VALUE_CLAIMS: dict[tuple[str, str], dict[str, tuple[str, ...]]] = {
    # the hits after a batch whose reads all failed, or some of them:
    # prefetch accounting
    ("faults-io", "F6 persistent"): {
        "prefetch-not-hit": ("hits", "prefetch_first_uses")},
    ("partial-reads", "the same experts load whole"): {
        "prefetch-not-hit": ("hits",)},
    # the misses after a reset: the counter window
    ("reference", "mixed counters"): {"counter-windows": ("misses",)},
}


def blame(check: dict[str, Any]) -> list[str]:
    """The contracts a failed check counts against (:data:`VALUE_CLAIMS`)."""
    own = contract_of(check["scenario"], check["check"])
    base = check["scenario"].split(" (")[0]
    claims = next((c for (sc, prefix), c in VALUE_CLAIMS.items()
                   if sc == base and check["check"].startswith(prefix)), {})
    expected, actual = check.get("expected"), check.get("actual")
    if not claims or not isinstance(expected, dict) or \
            not isinstance(actual, dict):
        return [own]
    bad = [k for k, v in expected.items() if actual.get(k) != v]
    out = [cid for cid, keys in claims.items() if set(keys) & set(bad)]
    if any(all(k not in keys for keys in claims.values()) for k in bad):
        out.insert(0, own)
    return out or [own]


def contract_of(scenario: str, check: str) -> str:
    """The contract a check belongs to (``other`` when none claims it)."""
    base = scenario.split(" (")[0]
    best, size = "other", -1
    for cid, (_, claims) in CONTRACTS.items():
        for sc, prefix in claims:
            if sc == base and check.startswith(prefix) and len(prefix) > size:
                best, size = cid, len(prefix)
    return best


def verdicts(report: Report, backend: str, caps: Any = None
             ) -> list[dict[str, Any]]:
    """One row per contract: its verdict and what decides it.

    With ``caps`` (the backend's capabilities), a contract of
    :data:`REQUIRES` whose capabilities the backend lacks is N/A.
    """
    rows: dict[str, dict[str, Any]] = {
        cid: {"contract": cid, "promise": text, "verdict": "N/A",
              "passed": 0, "failed": 0, "na": 0, "first_failure": None,
              "missing": []}
        for cid, (text, _) in CONTRACTS.items()}
    rows["other"] = {"contract": "other", "promise": "checks no contract "
                     "claims", "verdict": "N/A", "passed": 0, "failed": 0,
                     "na": 0, "first_failure": None, "missing": []}
    first_in: dict[str, list[str]] = {}  # scenario run -> its first failure's
    for c in report.checks:
        if c["backend"] != backend:
            continue
        if c["passed"]:
            rows[contract_of(c["scenario"], c["check"])]["passed"] += 1
            continue
        # a failure after another in the same run is judged on a state the
        # first already broke: it counts against the first one's contracts
        blamed = first_in.setdefault(c["scenario"], blame(c))
        for cid in blamed:
            row = rows[cid]
            row["failed"] += 1
            if row["first_failure"] is None:
                row["first_failure"] = (f"{c['scenario']}: {c['check']}: "
                                        f"{c['detail']}")
    for n in report.not_applicable:
        if n["backend"] != backend:
            continue
        row = rows[contract_of(n["scenario"], n["check"])]
        row["na"] += 1
        row["missing"] = list(dict.fromkeys([*row["missing"], *n["missing"]]))
    out = []
    for row in rows.values():
        lacks = [need for need in REQUIRES.get(row["contract"], ())
                 if caps is not None and not caps.has(need)]
        if lacks:
            row.update(verdict="N/A", passed=0, failed=0, first_failure=None,
                       missing=list(dict.fromkeys([*lacks, *row["missing"]])))
            out.append(row)
            continue
        if row["failed"]:
            row["verdict"] = "FAIL"
        elif row["passed"]:
            row["verdict"] = "PASS"
        if row["contract"] == "other" and not (row["passed"] or row["failed"]
                                               or row["na"]):
            continue
        out.append(row)
    return out


def write_report(out: Path, name: str, rows: list[dict[str, Any]],
                 extra: dict[str, Any]) -> None:
    """``out/conformance.md`` and ``out/conformance.json`` of ``rows``.

    A ``programs`` row gets a section of its own below the table (the
    steps left out, the values not compared) and, when it FAILs, its
    shrunk program in ``out/programs-shrunk.json``.
    """
    lines = [f"# Conformance of {name}", "",
             "| contract | promise | verdict | checks (pass/fail/N/A) | why |",
             "|---|---|---|---|---|"]
    for r in rows:
        why = (r["first_failure"] if r["verdict"] == "FAIL" else
               ("lacks " + ", ".join(r["missing"]) if r["missing"] else
                "no check of it ran") if r["verdict"] == "N/A" else "")
        why = (why or "").replace("|", "\\|")
        lines.append(f"| {r['contract']} | {r['promise']} | {r['verdict']} | "
                     f"{r['passed']}/{r['failed']}/{r['na']} | {why} |")
    lines.append("")
    for r in rows:
        if r["contract"] != "programs":
            continue
        left = ", ".join(f"{k} ({n})" for k, n in r["left_out"].items())
        lines += ["## Programs", "",
                  f"{r['passed']} passed, {r['failed']} failed, {r['na']} N/A"
                  + (f" (lacks {', '.join(r['missing'])})" if r["missing"]
                     else "") + ".",
                  f"Steps left out, by the capability each lacks: "
                  f"{left or 'none'}.",
                  "Values not compared: "
                  f"{', '.join(r['not_compared']) or 'none'}.", ""]
        if "scenario" in r:
            lines += ["The first failing program, shrunk, is "
                      "`programs-shrunk.json` (pin it in gate/scenarios/).", ""]
            (out / "programs-shrunk.json").write_text(
                json.dumps(r["scenario"], indent=1) + "\n")
    for fname, text in (("conformance.md", "\n".join(lines)),
                        ("conformance.json", json.dumps(
                            {"cache": name, **extra, "contracts": rows},
                            indent=1, default=str) + "\n")):
        tmp = out / f".{fname}.tmp-{os.getpid()}"
        tmp.write_text(text)
        os.replace(tmp, out / fname)


def _judged(detail: str) -> str:
    """A check line without its list of values not compared (the row has it)."""
    head, sep, tail = detail.partition("; N/A ")
    if not sep:
        return detail
    _, sep, expected = tail.partition("; expected ")
    return head + (f"; expected {expected}" if sep else "")


def programs_row(ffi: Any, lib: Any, caps: Any, label: str, work: Path,
                 plan: list[dict[str, Any]], shrink_s: float = 120.0
                 ) -> dict[str, Any]:
    """Run the seeded programs of ``plan`` on the oracle and the cache: one row.

    Each program is cut to what the cache declares
    (:class:`gate.outside.programs.Restrict`); the first that fails is
    shrunk (:func:`gate.programs.shrink`, ``shrink_s`` seconds at most)
    and kept as a scenario with the oracle's values pinned.
    """
    from xcache.gate import programs  # noqa: PLC0415
    from xcache.gate.containers import make_target  # noqa: PLC0415
    from xcache.gate.outside.programs import Restrict, row  # noqa: PLC0415
    from xcache.oracle.cache import POLICIES  # noqa: PLC0415

    def backends(target: Any, opts: dict[str, Any]) -> list[Any]:
        return [factory("oracle", None, target, opts),
                outside_factory(ffi, lib, caps, label, target, opts)]

    restrict = Restrict(caps)
    report = programs._Quiet()
    policies = sorted(set(caps.policies) & set(POLICIES)) or None
    names = programs.run_programs(None, work, report, plan,
                                  shrink_failures=False, policies=policies,
                                  backends=backends, restrict=restrict)
    shrunk = first = None
    if report.failed:
        f = report.failed[0]
        first = f"{f['scenario']}: {_judged(f['detail'])}"
        at = plan[names.index(f["scenario"])]
        target = make_target(at["container"], work)
        prog = restrict(programs.generate(at["seed"], target, at["option_set"],
                                          length=at.get("length", 24),
                                          policies=policies), target)
        assert isinstance(prog, dict)
        small = programs.shrink(None, work, prog, target, budget_s=shrink_s,
                                log=print, backends=backends)
        again = programs.run_one(None, work, small, target, backends=backends)
        if again.failure is not None:
            g = again.failure
            first += (f"; shrunk to {len(programs.operations(small))} steps, "
                      f"first failing there {g['check']}: "
                      f"{_judged(g['detail'])}")
        shrunk = programs.pinned(small, again)
    out = row(report, restrict, shrunk, first)
    print(f"programs: {out['passed']} passed, {out['failed']} failed, "
          f"{out['na']} N/A of {len(plan)}")
    return out


def run(adapter: Path, out: Path, work: Path, only: list[str], timeout: float,
        extra_cflags: tuple[str, ...] = (), report: Report | None = None,
        container: str | None = None,
        plan: list[dict[str, Any]] | None = None,
        scenarios: bool = True) -> tuple[list[dict[str, Any]], Report]:
    """Verify, build and judge the adapter's cache; write and return the rows.

    ``container``: every scenario on this container, the oracle's values
    the expected ones (as ``replay.py --container``).  ``plan``: seeded
    programs to run too (:func:`programs_row`: the ``programs`` row);
    ``scenarios`` False runs them alone (the report then has that row only).
    """
    from xcache.gate.scenarios import run_scenarios  # noqa: PLC0415

    m = load_manifest(adapter)
    n = verify_sources(m)
    print(f"Verified {n} pinned source digests of {m.name}")
    caps = capabilities_of(m)
    ffi, lib = build(m, work / "build", extra_cflags)
    check_table(lib, ffi, caps, m)
    print(f"Built {m.name} with its shim ({' '.join([*m.cflags, *extra_cflags])})")
    label = m.name

    def backends(engine: Any, target: Any, opts: dict[str, Any]) -> list[Any]:
        return [factory("oracle", None, target, opts),
                outside_factory(ffi, lib, caps, label, target, opts)]

    report = report or Report()
    names = (run_scenarios(None, work, report, only, timeout,
                           container=container, backends=backends)
             if scenarios else [])
    rows = verdicts(report, label, caps) if scenarios else []
    if plan:
        rows.append(programs_row(ffi, lib, caps, label, work, plan))
    write_report(out, m.name, rows, {"scenarios": names,
                                     "programs": len(plan or []),
                                     "cflags": [*m.cflags, *extra_cflags],
                                     "container": container,
                                     "skipped": report.skipped})
    return rows, report
