"""The conformance report of an outside cache: Markdown, JSON and JUnit XML.

Each contract row lists every failing check it counts (:func:`failure`):
the check, its line, its class (:data:`CLASSES`) and how to reproduce it
(the scenario and variant, or the shrunk program).  ``conformance.md``
shows the first :data:`SHOWN` of a row in full and counts the rest;
``conformance.json`` keeps the first :data:`KEPT`.  :func:`deviations`
lists what the manifest does not declare -- what the cache was not judged
on -- and its ``[deviations]`` notes.  :func:`write_junit` writes one
testcase per contract for a CI system to display.
"""

from __future__ import annotations

import fnmatch
import json
import os
import shutil
import uuid
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from xcache.fixtures.folders import make_folders
from xcache.fixtures.ownership import write_file as write_owned
from xcache.gate import CannotRun
from xcache.gate.backend_api import FAMILIES, Capabilities, Errors, Pins

#: a failing check's classes, in the order a check is given the first that
#: fits: the values of each (an exception's name, or a compared value)
CLASSES: dict[str, tuple[str, ...]] = {
    "crashed": ("CacheCrashed",),
    "hung": ("CacheHung", "timed out after", "the backend is stuck"),
    "wrong bytes": ("ShimBrokeContract", "wrong_reads"),
    "lost or leaked hold": ("held", "holding", "pinned", "open_files"),
    "refusal differs": ("ShimError", "last_error", "errors", "error_fields",
                        "reads"),
    "extra reads": ("io_bytes", "payload_bytes", "published", "spec_loads"),
    "wrong residents": ("resident", "ready_slots", "inflight_slots"),
    "broken invariant": ("invariants", "check_broken"),
}

#: failures of a row shown in full in conformance.md; kept in the JSON
SHOWN = 3
KEPT = 50


def classify(check: dict[str, Any]) -> str:
    """The class of a failed check: by the exception its line names, else by
    the first class one of its wrong values belongs to (else ``miscount``)."""
    expected, actual = check.get("expected"), check.get("actual")
    detail = str(check.get("detail", ""))
    if not (isinstance(expected, dict) and isinstance(actual, dict)):
        for cls, marks in CLASSES.items():  # an exception's name, or words
            if any(f"{m}: " in detail if m[0].isupper() else
                   " " in m and m in detail for m in marks):
                return cls
        return "crashed" if "Error: " in detail else "miscount"
    bad = {k for k, v in expected.items() if actual.get(k) != v}
    for cls, marks in CLASSES.items():
        if bad & set(marks):
            return cls
    return "miscount"


def failure(check: dict[str, Any]) -> dict[str, Any]:
    """One failing scenario check as a report entry, with its reproduction."""
    scenario = str(check["scenario"])
    base = scenario.split(" (")[0]
    variant = scenario[len(base):].strip()[1:-1] or None
    return {"scenario": base, "variant": variant, "check": check["check"],
            "detail": check["detail"], "class": classify(check),
            "reproduce": f"--scenario {base}" + (f" (variant {variant})"
                                                 if variant else "")}


def deviations(m: Any, caps: Capabilities) -> dict[str, Any]:
    """What the manifest does not declare, by capability family, and its notes."""
    from xcache.oracle.cache import POLICIES  # noqa: PLC0415

    have = {"op": {o.value for o in caps.ops},
            "option": {o.value for o in caps.options},
            "policy": set(caps.policies), "counter": set(caps.counters),
            "fact": {f.value for f in caps.facts},
            "fault": {f.value for f in caps.faults}}
    out: dict[str, Any] = {}
    for family, names in FAMILIES.items():
        if family in have:
            every = list(POLICIES) if names is None else list(names)
            lacks = [n for n in every if n not in have[family]]
            if lacks:
                out[family] = lacks
    if caps.pins is Pins.NONE:
        out["pins"] = "none: pins not judged"
    elif caps.pins is Pins.FLAG:
        out["pins"] = "flag: pin counts not judged (the judge plays flag pins)"
    if m.design is not None and m.design.inexact():
        out["exact"] = (f"victims: {', '.join(m.design.inexact())} -- "
                        "residents, hits, misses and bytes read are not "
                        "compared; bytes served, holds, relations and "
                        "misuse are")
    if caps.errors is not Errors.TYPED:
        out["errors"] = f"{caps.errors.value}: error kinds not compared"
    if m.deviations:
        out["notes"] = dict(m.deviations)
    return out


def _why(r: dict[str, Any]) -> str:
    if r["verdict"] == "FAIL":
        return str(r["first_failure"])
    if r["verdict"] == "N/A":
        return ("lacks " + ", ".join(r["missing"]) if r["missing"] else
                "no check of it ran")
    return ""


def _entry(f: dict[str, Any]) -> str:
    where = (f"program {f['program']}" if "program" in f else
             f"{f['scenario']}" + (f" ({f['variant']})" if f.get("variant")
                                   else ""))
    return (f"- **{f['class']}** — {where}: {f['check']}: {f['detail']}\n"
            f"  reproduce: `{f['reproduce']}`")


def markdown(name: str, rows: list[dict[str, Any]],
             extra: dict[str, Any]) -> str:
    """``conformance.md``: the table, each FAIL's checks, the programs, the
    deviations."""
    lines = [f"# Conformance of {name}", "",
             "| contract | promise | verdict | checks (pass/fail/N/A) | why |",
             "|---|---|---|---|---|"]
    for r in rows:
        why = _why(r).replace("|", "\\|").replace("\n", " ")
        lines.append(f"| {r['contract']} | {r['promise']} | {r['verdict']} | "
                     f"{r['passed']}/{r['failed']}/{r['na']} | {why} |")
    lines.append("")
    failing = [r for r in rows if r["verdict"] == "FAIL"]
    if failing:
        lines += ["## Failures", ""]
    for r in failing:
        fs = r.get("failures", [])
        lines += [f"### {r['contract']}: {r['failed']} failing check"
                  + ("s" if r["failed"] != 1 else ""), ""]
        lines += [_entry(f) for f in fs[:SHOWN]]
        if r["failed"] > SHOWN:
            lines.append(f"- and {r['failed'] - SHOWN} more (conformance.json "
                         f"lists {min(r['failed'], KEPT)})")
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
    dev = extra.get("deviations") or {}
    if dev:
        lines += ["## Not judged on", "",
                  "What the manifest does not declare: a check needing it "
                  "is N/A.", ""]
        for family, v in dev.items():
            if family == "notes":
                lines += [f"- note on {k}: {t}" for k, t in v.items()]
            else:
                lines.append(f"- {family}: "
                             + (", ".join(v) if isinstance(v, list) else v))
        lines.append("")
    return "\n".join(lines)


def _atomic(dest: Path, text: str) -> None:
    """Write ``text`` as the new file ``dest`` of the staged OUT (the one writer)."""
    write_owned(dest, lambda tmp: tmp.write_text(text, encoding="utf-8"),
                option="OUT", what="report of this run")


def write_report(out: Path, name: str, rows: list[dict[str, Any]],
                 extra: dict[str, Any]) -> None:
    """``out/conformance.md`` and ``out/conformance.json`` of ``rows``.

    A ``programs`` row that FAILs has its shrunk program in
    ``out/programs-shrunk.json`` too.
    """
    for r in rows:
        if r["contract"] == "programs" and "scenario" in r:
            _atomic(out / "programs-shrunk.json",
                    json.dumps(r["scenario"], indent=1) + "\n")
    _atomic(out / "conformance.md", markdown(name, rows, extra))
    _atomic(out / "conformance.json", json_text(name, rows, extra))


def json_text(name: str, rows: list[dict[str, Any]],
              extra: dict[str, Any]) -> str:
    """The text of ``conformance.json`` (and of ``--json FILE``)."""
    return json.dumps({"cache": name, **extra, "contracts": rows}, indent=1,
                      default=str) + "\n"


def junit(name: str, rows: list[dict[str, Any]]) -> str:
    """JUnit XML: one testcase per contract row; a FAIL's text its checks."""
    suite = ET.Element("testsuite", {
        "name": f"conformance of {name}", "tests": str(len(rows)),
        "failures": str(sum(r["verdict"] == "FAIL" for r in rows)),
        "skipped": str(sum(r["verdict"] == "N/A" for r in rows)),
        "errors": "0"})
    for r in rows:
        case = ET.SubElement(suite, "testcase", {
            "classname": f"xcs.{name}", "name": r["contract"]})
        if r["verdict"] == "FAIL":
            fs = r.get("failures", [])
            text = "\n".join(_entry(f) for f in fs)
            if r["failed"] > len(fs):
                text += f"\n- and {r['failed'] - len(fs)} more"
            el = ET.SubElement(case, "failure", {
                "message": f"{r['failed']} failing check(s): "
                           f"{str(r['first_failure'])[:300]}",
                "type": fs[0]["class"] if fs else "failed"})
            el.text = text or str(r["first_failure"])
        elif r["verdict"] == "N/A":
            ET.SubElement(case, "skipped", {"message": _why(r)})
    ET.indent(suite)
    return ET.tostring(suite, encoding="unicode", xml_declaration=True) + "\n"


def write_file(dest: Path, text: str, *, option: str,
               is_ours: Callable[[Path], bool],
               what: str = "report the gate wrote") -> None:
    """Write ``text`` to ``dest`` (``option``'s file) through the one writer.

    ``fixtures.ownership.write_file``: ``dest`` is checked again as it is
    written (only a file ``is_ours`` accepts is replaced; a user's file, a
    FIFO or a folder that appeared during the run is refused with
    ``OutputRefused``), then written whole under another name and renamed.
    """
    write_owned(Path(dest), lambda tmp: tmp.write_text(text, encoding="utf-8"),
                option=option, is_ours=is_ours, what=what)


#: what a conformance run writes in its OUT: an OUT holding anything else
#: is not the gate's to replace
OUT_WRITES = ("conformance.md", "conformance.json", "programs-shrunk.json",
              "replay-work", "replay-work-*")


@contextmanager
def staged_out(out: Path, made: list[str]) -> Iterator[Path]:
    """A new folder beside ``out`` to write the run in; it replaces ``out``
    whole at the end of the block.

    ``out`` must be new, or a folder holding only what a conformance run
    writes (:data:`OUT_WRITES`; else ``CannotRun`` before anything is
    made).  The parents made for it are added to ``made``.  When the block
    fails (an error, Ctrl-C) the new folder goes and ``out`` is as it was.
    """
    if os.path.lexists(out) and not out.is_dir():
        raise CannotRun(f"{out}: not a folder (the report is a folder)")
    if out.is_dir():
        foreign = [e for e in sorted(os.listdir(out))
                   if not any(fnmatch.fnmatch(e, g) for g in OUT_WRITES)]
        if foreign:
            raise CannotRun(f"{out} holds {foreign[0]!r}, which a conformance "
                            "run did not write: the report replaces the "
                            "folder whole; give a new or empty one")
    made += make_folders(out.parent)
    tag = uuid.uuid4().hex[:12]
    stage = out.parent / f".{out.name}.conformance-{tag}"
    os.mkdir(stage)
    try:
        yield stage
        old = None
        if os.path.lexists(out):
            old = out.parent / f".{out.name}.old-{tag}"
            os.rename(out, old)
        os.rename(stage, out)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(stage, ignore_errors=True)
        raise
