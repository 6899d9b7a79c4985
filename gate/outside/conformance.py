"""The conformance run of an outside cache and its report.

:func:`run` checks the adapter's pinned digests, builds the cache with its
shim, runs the scenarios against it with the oracle as the judge, and
writes ``conformance.md`` and ``conformance.json``: one row per contract of
the contracts registry (:data:`gate.contracts.CONTRACTS`), each PASS, FAIL
(the first failing check and its numbers) or N/A (the capabilities it
lacks).  Every check of every scenario belongs to exactly one contract, the
one its scenario file declares for it: the check step's ``contract``, else
the first of the scenario's ``contracts`` (docs/SCENARIOS.md).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from xcache.gate import programs
from xcache.gate.backend_api import Pins
from xcache.gate.containers import make_target
from xcache.gate.contracts import (
    CONTRACTS,
    REQUIRES,
    UNCLAIMED,
    VALUE_OWNERS,
    check_contracts,
    declared,
)
from xcache.gate.outside.backend import (
    capabilities_of,
    check_table,
    judge_factory,
    outside_factory,
)
from xcache.gate.outside.build import compile_module, load_manifest, verify_sources
from xcache.gate.outside.designs import alters
from xcache.gate.outside.host import GRACE_S, CacheFailure, Host
from xcache.gate.outside.programs import Restrict, row
from xcache.gate.outside.reporting import (
    KEPT,
    classify,
    deviations,
    failure,
    write_report,
)
from xcache.gate.outside.served import Served, describe, materialise, retarget
from xcache.gate.report import Report
from xcache.gate.scenarios import (
    WATCHDOG,
    load_scenarios,
    run_scenarios,
    scenario_files,
)
from xcache.oracle.cache import POLICIES

#: the bound :func:`gate.programs.run_one` gives each program run (seconds)
PROGRAM_S = 60.0


def _claims(scenarios: list[dict[str, Any]] | None
            ) -> dict[str, tuple[str, dict[str, tuple[str, ...]]]]:
    """Each check, as ``scenario\0check``: its contract and value claims
    (:func:`gate.contracts.check_contracts`), plus each scenario's default
    under ``scenario\0`` (the runner's own lines: a crash, a close)."""
    if scenarios is None:
        scenarios = load_scenarios([])
    out: dict[str, tuple[str, dict[str, tuple[str, ...]]]] = {}
    for sc in scenarios:
        out[sc["name"] + "\0"] = ((declared(sc) or [UNCLAIMED])[0], {})
        for check, claim in check_contracts(sc).items():
            out[f"{sc['name']}\0{check}"] = claim
    return out


def _claim(claims: dict[str, tuple[str, dict[str, tuple[str, ...]]]],
           scenario: str, check: str) -> tuple[str, dict[str, tuple[str, ...]]]:
    """The contract of one reported check (a variant's suffix taken off)."""
    base = scenario.split(" (")[0]
    suffix = scenario[len(base):]
    name = check[:len(check) - len(suffix)] if suffix and \
        check.endswith(suffix) else check
    return claims.get(f"{base}\0{name}") or \
        claims.get(f"{base}\0", (UNCLAIMED, {}))


def contract_of(scenario: str, check: str,
                claims: dict[str, Any] | None = None) -> str:
    """The contract a reported check belongs to, as its scenario declares."""
    return _claim(claims if claims is not None else _claims(None),
                  scenario, check)[0]


def blame(check: dict[str, Any], claims: dict[str, Any] | None = None
          ) -> list[str]:
    """The contracts a failed check counts against: its own, and those its
    step gives the values it got wrong (``value_contracts``)."""
    own, by_value = _claim(claims if claims is not None else _claims(None),
                           check["scenario"], check["check"])
    expected, actual = check.get("expected"), check.get("actual")
    if not isinstance(expected, dict) or not isinstance(actual, dict):
        return [own]
    bad = [k for k, v in expected.items() if actual.get(k) != v]
    owned = list(dict.fromkeys(VALUE_OWNERS[k] for k in bad
                               if k in VALUE_OWNERS))
    bad = [k for k in bad if k not in VALUE_OWNERS]
    if not bad and owned:
        return owned
    out = [cid for cid, keys in by_value.items() if set(keys) & set(bad)]
    if any(all(k not in keys for keys in by_value.values()) for k in bad):
        out.insert(0, own)
    return list(dict.fromkeys([*(out or [own]), *owned]))


def verdicts(report: Report, backend: str, caps: Any = None,
             scenarios: list[dict[str, Any]] | None = None
             ) -> list[dict[str, Any]]:
    """One row per contract: its verdict and what decides it.

    Each check counts for the contract its scenario file declares for it
    (``scenarios``: the files run; default every shipped one).  With
    ``caps`` (the backend's capabilities), a contract of
    :data:`~gate.contracts.REQUIRES` whose capabilities the backend lacks
    is N/A -- unless a run of its scenarios crashed or hung there: then it
    FAILs on those alone.
    """
    claims = _claims(scenarios)
    rows: dict[str, dict[str, Any]] = {
        cid: {"contract": cid, "promise": text, "verdict": "N/A",
              "passed": 0, "failed": 0, "na": 0, "first_failure": None,
              "failures": [], "missing": []}
        for cid, text in CONTRACTS.items()}
    rows[UNCLAIMED] = {"contract": UNCLAIMED, "promise": "checks no contract "
                       "claims", "verdict": "N/A", "passed": 0, "failed": 0,
                       "na": 0, "first_failure": None, "failures": [],
                       "missing": []}
    scenario_contracts = {cid for cid, _ in claims.values()}
    first_in: dict[str, list[str]] = {}  # scenario run -> its first failure's
    for c in report.checks:
        if c["backend"] != backend:
            continue
        if c["passed"]:
            rows[contract_of(c["scenario"], c["check"], claims)]["passed"] += 1
            # a value every check judges passes for its own contract too,
            # when no scenario declares that one (relations)
            for cid in {VALUE_OWNERS[k] for k in c.get("expected") or {}
                        if k in VALUE_OWNERS} - scenario_contracts:
                rows[cid]["passed"] += 1
            continue
        # a failure after another in the same run is judged on a state the
        # first already broke: it counts against the first one's contracts
        blamed = first_in.setdefault(c["scenario"], blame(c, claims))
        own = contract_of(c["scenario"], c["check"], claims)
        if own not in blamed and set(blame(c, claims)) <= set(
                VALUE_OWNERS.values()):
            rows[own]["passed"] += 1  # only values every check judges were
            # wrong: the check's own values held
        for cid in blamed:
            row = rows[cid]
            row["failed"] += 1
            if row["first_failure"] is None:
                row["first_failure"] = (f"{c['scenario']}: {c['check']}: "
                                        f"{c['detail']}")
            if len(row["failures"]) < KEPT:
                row["failures"].append(failure(c))
    for n in report.not_applicable:
        if n["backend"] != backend:
            continue
        row = rows[contract_of(n["scenario"], n["check"], claims)]
        row["na"] += 1
        row["missing"] = list(dict.fromkeys([*row["missing"], *n["missing"]]))
    out = []
    for row in rows.values():
        lacks = [need for need in REQUIRES.get(row["contract"], ())
                 if caps is not None and not caps.has(need)]
        if lacks:
            # a crash or a hang is the cache's failure whatever it lacks
            broke = [f for f in row["failures"]
                     if f["class"] in ("crashed", "hung")]
            row.update(verdict="FAIL" if broke else "N/A", passed=0,
                       failed=len(broke), failures=broke,
                       first_failure=(f"{broke[0]['scenario']}: "
                                      f"{broke[0]['check']}: "
                                      f"{broke[0]['detail']}" if broke
                                      else None),
                       missing=list(dict.fromkeys([*lacks, *row["missing"]])))
            out.append(row)
            continue
        if row["failed"]:
            row["verdict"] = "FAIL"
        elif row["passed"]:
            row["verdict"] = "PASS"
        if row["contract"] == UNCLAIMED and not (row["passed"] or row["failed"]
                                               or row["na"]):
            continue
        out.append(row)
    return out


def _judged(detail: str) -> str:
    """A check line without its list of values not compared (the row has it)."""
    head, sep, tail = detail.partition("; N/A ")
    if not sep:
        return detail
    _, sep, expected = tail.partition("; expected ")
    return head + (f"; expected {expected}" if sep else "")


def programs_row(host: Host, caps: Any, label: str, work: Path,
                 plan: list[dict[str, Any]], shrink_s: float = 120.0,
                 bound: float = PROGRAM_S - GRACE_S,
                 design: Any = None) -> dict[str, Any]:
    """Run the seeded programs of ``plan`` on the oracle and the cache: one row.

    Each program is cut to what the cache declares
    (:class:`gate.outside.programs.Restrict`); the first that fails is
    shrunk (:func:`gate.programs.shrink`, ``shrink_s`` seconds at most)
    and kept as a scenario with the oracle's values pinned.  Every call
    of a program's run returns within ``bound`` seconds of its first, or
    the cache's process is killed and the program FAILs.  ``design``: the
    cache's declared design, which the judge plays.
    """
    def backends(target: Any, opts: dict[str, Any]) -> list[Any]:
        return [judge_factory(target, opts, caps, design),
                outside_factory(host, caps, label, target, opts, bound,
                                design)]

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
    out["failures"] = program_failures(report, plan, names, shrunk)
    print(f"programs: {out['passed']} passed, {out['failed']} failed, "
          f"{out['na']} N/A of {len(plan)}")
    return out


def program_failures(report: Any, plan: list[dict[str, Any]],
                     names: list[str], shrunk: dict[str, Any] | None
                     ) -> list[dict[str, Any]]:
    """Each failing program as a report entry: its class, and how to run it
    again (the first: its shrunk scenario)."""
    out = []
    for i, f in enumerate(report.failed[:KEPT]):
        at = plan[names.index(f["scenario"])]
        rerun = (f"programs-shrunk.json ({len(programs.operations(shrunk))} "
                 "steps; pin it in gate/scenarios/ and run --scenario "
                 f"{shrunk['name']})" if i == 0 and shrunk is not None else
                 "--programs-file FILE, FILE holding " + json.dumps(
                     {"length": at.get("length", 24), "programs": [{
                         "container": at["container"],
                         "option_sets": [at["option_set"]],
                         "seeds": [at["seed"]]}]}))
        out.append({"program": f["scenario"], "check": f["check"],
                    "detail": _judged(f["detail"]),
                    "class": classify(f), "reproduce": rerun})
    return out


def table_row(message: str) -> dict[str, Any]:
    """The one row of a cache whose process could not read its shim's table."""
    return {"contract": "shim", "promise": "xcs_shim() returns the table, in "
            "a process that lives", "verdict": "FAIL", "passed": 0,
            "failed": 1, "na": 0, "first_failure": message,
            "failures": [{"scenario": "xcs_shim()", "variant": None,
                          "check": "the shim's table was read",
                          "detail": message,
                          "class": ("hung" if message.startswith("CacheHung")
                                    else "crashed"),
                          "reproduce": "any run: the table is read first"}],
            "missing": []}


def own_policy(caps: Any) -> tuple[Any, Any]:
    """(``options(opts)``, ``moved(scenario)``): a variant's options with the
    cache's own policy where the scenario names one it lacks, and whether a
    scenario names one.  A cache of one policy is judged by every scenario,
    the judge running its policy, not only by those written for it."""
    have = sorted(p for p in caps.policies if p in POLICIES)

    def base(p: Any) -> str:
        return str(p or "lru").split(":")[0]

    def options(opts: dict[str, Any]) -> dict[str, Any]:
        if not have or base(opts.get("policy")) in caps.policies:
            return opts
        return {**opts, "policy": have[0]}

    def moved(sc: dict[str, Any]) -> bool:
        named = [sc["cache"].get("policy"),
                 *(v.get("cache", {}).get("policy", sc["cache"].get("policy"))
                   for v in sc.get("variants") or [])]
        return bool(have) and (bool(sc.get("every_policy")) or any(
            base(p) not in caps.policies for p in named))
    return options, moved


def run_served(work: Path, report: Report, only: list[str], timeout: float,
               container: str | None, backends: Any, served: list[Served],
               derive: Any = None, options: Any = None) -> list[str]:
    """Run the scenarios, each on its home container if the cache serves it,
    else on a served one (:func:`gate.outside.served.retarget`); ``container``
    (``--container``) puts every one there.  ``derive(scenario)``: whether
    its values are the judge's, at home too.  The names of the variants run."""
    if container is not None or not served:
        return run_scenarios(None, work, report, only, timeout,
                             container=container, backends=backends,
                             derive=derive, options=options)
    groups: dict[str | None, list[Path]] = {}
    for path, sc in scenario_files(only):
        groups.setdefault(retarget(str(sc["container"]), served),
                          []).append(path)
    names: list[str] = []
    for i, (ref, paths) in enumerate(groups.items()):
        folder = work / "retargeted" / str(i)
        folder.mkdir(parents=True, exist_ok=True)
        for p in paths:
            shutil.copyfile(p, folder / p.name)
        names += run_scenarios(None, work, report, [], timeout, container=ref,
                               backends=backends, folder=folder,
                               derive=derive, options=options)
    return names


def run(adapter: Path, out: Path, work: Path, only: list[str], timeout: float,
        extra_cflags: tuple[str, ...] = (), report: Report | None = None,
        container: str | None = None,
        plan: list[dict[str, Any]] | None = None,
        scenarios: bool = True) -> tuple[list[dict[str, Any]], Report]:
    """Verify, build and judge the adapter's cache; write and return the rows.

    The cache runs in a process of its own (:class:`Host`): a crash, an
    exit or a hang is a FAIL of the run it happened in, and the next run
    gets a fresh process.  Every run's calls return within ``timeout``
    seconds of its first (programs: within :data:`PROGRAM_S`, less the
    grace).  ``container``: every scenario on this container, the oracle's
    values the expected ones (as ``replay.py --container``).  ``plan``:
    seeded programs to run too (:func:`programs_row`: the ``programs``
    row); ``scenarios`` False runs them alone (the report then has that
    row only).
    """
    m = load_manifest(adapter)
    n = verify_sources(m)
    print(f"Verified {n} pinned source digests of {m.name}")
    caps = capabilities_of(m)
    so, modname = compile_module(m, work / "build", extra_cflags)
    print(f"Built {m.name} with its shim ({' '.join([*m.cflags, *extra_cflags])})")
    label = m.name
    served = materialise(m.containers, work, m.folder / "xcs.toml")
    host = Host(so, modname, work / "cache-process.log")
    report = report or Report()
    extra = {"programs": len(plan or []), "cflags": [*m.cflags, *extra_cflags],
             "container": container, "deviations": deviations(m, caps)}
    if served:
        extra["served"] = describe(served)
    # the runner's own bound comes after the session's, which names the call
    WATCHDOG.reset(stop_when_stuck=False, cap=timeout + GRACE_S)
    try:
        try:
            check_table(host.start(), caps, m)
        except CacheFailure as e:
            rows = [table_row(f"{type(e).__name__}: {e}")]
            write_report(out, m.name, rows, {"scenarios": [], **extra,
                                              "skipped": []})
            return rows, report

        def backends(engine: Any, target: Any, opts: dict[str, Any]
                     ) -> list[Any]:
            return [judge_factory(target, opts, caps, m.design),
                    outside_factory(host, caps, label, target, opts, timeout,
                                    m.design)]

        # a scenario whose calls a declared design (flag pins too) makes
        # otherwise is judged against the judge playing it: the values
        # pinned for this project's engine do not apply there
        altered = alters(m.design, caps.pins is Pins.FLAG)
        options, moved = own_policy(caps)

        def derive(sc: dict[str, Any]) -> bool:
            return moved(sc) or bool(altered and altered(sc))
        names = (run_served(work, report, only, timeout + GRACE_S,
                            container, backends, served, derive, options)
                 if scenarios else [])
        rows = verdicts(report, label, caps) if scenarios else []
        if plan:
            plan = [{**p, "container": retarget(p["container"], served)
                     or p["container"]} for p in plan]
            rows.append(programs_row(host, caps, label, work, plan,
                                     bound=min(timeout, PROGRAM_S - GRACE_S),
                                     design=m.design))
    finally:
        host.close()
    write_report(out, m.name, rows, {"scenarios": names, **extra,
                                     "skipped": report.skipped,
                                     "processes": host.spawns})
    return rows, report
