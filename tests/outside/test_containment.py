"""A cache that exits, aborts, faults, hangs or lies is a named FAIL, not a dead gate.

Each bad shim is tinycache's adapter copied with one planted line in
``shim.c``; ``replay.py --cache`` runs it in the cache's own process
(gate/outside/host.py) and must exit 1 within ``--timeout`` with the
failure named in a report on disk.  Bad manifests exit 2 with one line.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from tests.helpers import bad_adapter

ROOT = Path(__file__).resolve().parents[2]
ADAPTER = ROOT / "examples" / "tinycache"

GET_TOP = "shim *s = h;\n    const void *part[64]"
LEN = "    *len = total;\n"

#: each bad shim: (the line replaced, its replacement, the class and the
#: text its FAIL names)
BAD = {
    "exit": (GET_TOP, GET_TOP.replace("h;", "h;\n    exit(0);"), "crashed",
             "get(layer 0, expert 0): the cache's process exited with status 0"),
    "abort": (GET_TOP, GET_TOP.replace("h;", "h;\n    abort();"), "crashed",
              "get(layer 0, expert 0): the cache's process was killed by "
              "SIGABRT (Aborted)"),
    "null-deref": (GET_TOP, GET_TOP.replace(
        "h;", "h;\n    *(volatile int *)0 = 1;"), "crashed",
        "the cache's process was killed by SIGSEGV (Segmentation fault)"),
    "deadlock": (GET_TOP, GET_TOP.replace("h;", "h;\n    for (;;) sleep(1);"),
                 "hung", "get(layer 0, expert 0) did not return before its "
                 "run's deadline (3 s after the run's first call)"),
    "64-MiB-length": (LEN, "    *len = (size_t)64 << 20;\n", "wrong bytes",
                      "get returned a length of 67108864 bytes for an expert "
                      "of 1632 bytes (nothing read)"),
    "null-data": (LEN, LEN + "    *data = NULL;\n", "wrong bytes",
                  "get returned 0 with a NULL data pointer (length 1632)"),
    "memory": (GET_TOP, GET_TOP.replace(
        # address space taken without touching it: the cap is met in
        # milliseconds however loaded the machine (touching each page made
        # a loaded machine meet the 3 s deadline first)
        "h;", "h;\n    for (;;) { char *p = malloc(1 << 20); if (!p) abort(); "
              "p[0] = 1; }"), "crashed",
        "was killed by SIGABRT (Aborted) (its address space was capped at"),
    "null-table": ("    return &table;", "    return NULL;", "crashed",
                   "xcs_shim() returned NULL, not its table"),
}


def replay(*args: str | Path) -> subprocess.CompletedProcess[str]:
    """``replay.py`` with ``args``, its output captured."""
    return subprocess.run([sys.executable, str(ROOT / "replay.py"),
                           *map(str, args)], capture_output=True, text=True,
                          cwd=ROOT, timeout=300)


# Under CI's sanitizer run the cache's child inherits the ASan preload: ASan
# maps terabytes of shadow memory (past the child's address-space cap) and
# reports a NULL dereference itself, with its own exit status.
@pytest.mark.nosan
@pytest.mark.parametrize("name", sorted(BAD))
def test_bad_shim_is_a_named_fail(tmp_path: Path, name: str) -> None:
    """Each bad shim: exit 1 within --timeout, its FAIL named with its class
    in conformance.md, .json and the JUnit XML, the gate alive to write them."""
    old, new, cls, text = BAD[name]
    adapter = bad_adapter(tmp_path, old, new)
    out = tmp_path / "out"
    t0 = time.monotonic()
    got = replay("--cache", adapter, out, "--scenario", "reference",
                 "--timeout", "3", "--junit", tmp_path / "j.xml")
    took = time.monotonic() - t0
    assert got.returncode == 1, got.stdout + got.stderr
    assert took < 3 + 20, took
    row = "shim" if name == "null-table" else "serial-reads"
    assert got.stdout.splitlines()[-1].startswith("FAIL: ")
    assert f"({row}); report in {out / 'conformance.md'}" in got.stdout
    rows = {r["contract"]: r for r in json.loads(
        (out / "conformance.json").read_text())["contracts"]}
    assert [c for c, r in rows.items() if r["verdict"] == "FAIL"] == [row]
    f = rows[row]["failures"][0]
    assert f["class"] == cls
    assert text in f["detail"], f["detail"]
    assert text in (out / "conformance.md").read_text()
    case = ET.parse(tmp_path / "j.xml").getroot().find(
        f"testcase[@name='{row}']/failure")
    assert case is not None and case.get("type") == cls
    assert text in (case.text or "")


def test_deadlock_everywhere_costs_three_timeouts(tmp_path: Path) -> None:
    """A get that never returns, over the whole default set (programs too):
    three runs hang (each killed at --timeout), the rest are not started,
    and the run ends in seconds with every hang a FAIL of class hung."""
    old, new, _, _ = BAD["deadlock"]
    adapter = bad_adapter(tmp_path, old, new)
    t0 = time.monotonic()
    got = replay("--cache", adapter, tmp_path / "out", "--timeout", "2")
    took = time.monotonic() - t0
    assert got.returncode == 1, got.stderr
    assert took < 3 * 2 + 40, took
    rows = {r["contract"]: r for r in json.loads(
        (tmp_path / "out" / "conformance.json").read_text())["contracts"]}
    assert rows["programs"]["verdict"] == "FAIL"
    classes = {f["class"] for r in rows.values() for f in r["failures"]}
    assert classes == {"hung"}
    details = [f["detail"] for r in rows.values() for f in r["failures"]]
    assert sum("did not return before its run's deadline (2 s" in d
               for d in details) == 3
    assert all("did not return" in d or "the cache hung 3 times already" in d
               for d in details), details


def test_faults_empty_is_clean(tmp_path: Path) -> None:
    """tinycache declaring ``faults = []`` runs every scenario with 0 FAIL:
    the fault contracts it can no longer be judged on are N/A."""
    adapter = bad_adapter(tmp_path, "#include <string.h>\n",
                          "#include <string.h>\n",
                          ('faults = ["io", "io_second", "open"]',
                           "faults = []"))
    got = replay("--cache", adapter, tmp_path / "out", "--no-programs")
    assert got.returncode == 0, got.stdout[-2000:] + got.stderr
    rows = {r["contract"]: r for r in json.loads(
        (tmp_path / "out" / "conformance.json").read_text())["contracts"]}
    assert [c for c, r in rows.items() if r["verdict"] == "FAIL"] == []
    assert rows["open-failures"]["verdict"] == "N/A"
    assert rows["open-failures"]["missing"] == ["fault:open"]
    assert rows["serial-reads"]["verdict"] == "PASS"


def test_out_is_replaced_whole(tmp_path: Path) -> None:
    """A FAIL run after a PASS run leaves no PASS report and no shrunk program
    behind; --json writes the same report; a foreign file in OUT is refused."""
    out = tmp_path / "out"
    ok = replay("--cache", ADAPTER, out, "--scenario", "reference",
                "--json", tmp_path / "r.json")
    assert ok.returncode == 0, ok.stderr
    (out / "programs-shrunk.json").write_text("{}\n")  # as a FAIL leaves it
    assert json.loads((tmp_path / "r.json").read_text()) == json.loads(
        (out / "conformance.json").read_text())
    old, new, _, _ = BAD["abort"]
    bad = bad_adapter(tmp_path, old, new)
    got = replay("--cache", bad, out, "--scenario", "reference")
    assert got.returncode == 1
    assert sorted(p.name for p in out.iterdir()) == ["conformance.json",
                                                      "conformance.md"]
    assert "| serial-reads |" in (out / "conformance.md").read_text()
    assert "crashed" in (out / "conformance.md").read_text()
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(
        ".")) == []
    (out / "notes.txt").write_text("mine\n")
    refused = replay("--cache", ADAPTER, out, "--scenario", "reference")
    assert refused.returncode == 2
    assert (out / "notes.txt").read_text() == "mine\n"


#: bad manifests: (the replacement in xcs.toml, raw bytes instead, the one
#: line's text after the manifest's path)
MANIFESTS = {
    "name-type": ('name = "tinycache"', "name = 3",
                  "name must be a non-empty string, not 3"),
    "cflags-type": ('cflags = ["-O2"', 'cflags = [1, "-O2"',
                    "cflags must be a list of strings"),
    "ops-type": ('ops = ["get", "getmany", "hold", "prefetch", "reset_stats", '
                 '"check"]', 'ops = "get"',
                 "capabilities.ops must be a list of strings, not 'get'"),
    "pins-type": ('pins = "flag"', "pins = 1",
                  "capabilities.pins must be a string, not 1"),
    "shim-outside": ('shim = "shim.c"', 'shim = "../shim.c"',
                     "shim = '../shim.c' leaves the adapter folder"),
    "source-outside": ('path = "tinycache.h"', 'path = "/etc/passwd"',
                       "sources[1].path = '/etc/passwd' leaves the adapter "
                       "folder"),
    "not-utf8": ("# The adapter", "# The \xff adapter", "not UTF-8 text ("),
}


@pytest.mark.parametrize("name", sorted(MANIFESTS))
def test_bad_manifest_is_exit_2_one_line(tmp_path: Path, name: str) -> None:
    """A manifest with a field of the wrong type, a path leaving the adapter
    folder or bytes that are not UTF-8: exit 2, one line naming the file and
    the field, and no OUT made."""
    old, new, text = MANIFESTS[name]
    dest = tmp_path / "adapter"
    shutil.copytree(ADAPTER, dest)
    raw = (dest / "xcs.toml").read_bytes().decode()
    assert raw.count(old) == 1, old
    raw = raw.replace(old, new)
    (dest / "xcs.toml").write_bytes(raw.encode("latin-1") if name == "not-utf8"
                                    else raw.encode())
    got = replay("--cache", dest, tmp_path / "out" / "deep")
    assert got.returncode == 2
    lines = got.stderr.strip().splitlines()
    assert lines == [f"CANNOT RUN: {dest / 'xcs.toml'}: {text}"
                     + lines[0].split(text, 1)[1]], got.stderr
    assert not (tmp_path / "out").exists()


#: what an AddressSanitizer report looks like in the cache's log (shortened)
ASAN_REPORT = """\
earlier output of the process
==2916==ERROR: AddressSanitizer: heap-use-after-free on address 0x61f00003c680
READ of size 3072 at 0x61f00003c680 thread T0
    #0 0x7f6c3484814a in __interceptor_memcpy sanitizer_common_interceptors.inc:827
    #1 0x7f6c31d969ca in worker_release worker.c:12

freed by thread T0 here:
    #0 0x7f6c348b78d5 in __interceptor_realloc asan_malloc_linux.cpp:85
    #1 0x7f6c31d969ca in shim_get shim.c:154

SUMMARY: AddressSanitizer: heap-use-after-free interceptors.inc:827 in memcpy
Shadow byte legend (one shadow byte represents 8 application bytes):
  Left alloca redzone:     ca
  Right alloca redzone:    cb
==2916==ABORTING
"""


def test_a_sanitizer_report_is_named_by_its_verdict(tmp_path: Path) -> None:
    """A crashed cache's words are its sanitizer's verdict (the ERROR line,
    the access's first frame, the SUMMARY), not the report's shadow legend;
    without a report, the last three lines it wrote."""
    from xcache.gate.outside.host import Host
    log = tmp_path / "cache-process.log"
    host = Host(tmp_path / "none.so", "none", log)
    log.write_text("before the spawn\n" * 3 + ASAN_REPORT)
    host.log_from = len("before the spawn\n" * 3)
    assert host._tail() == (
        "==2916==ERROR: AddressSanitizer: heap-use-after-free on address "
        "0x61f00003c680 / #0 0x7f6c3484814a in __interceptor_memcpy "
        "sanitizer_common_interceptors.inc:827 / SUMMARY: AddressSanitizer: "
        "heap-use-after-free interceptors.inc:827 in memcpy")
    log.write_text("one\ntwo\n\nthree\nfour\n")
    host.log_from = 0
    assert host._tail() == "two / three / four"
    ubsan = "shim.c:40:9: runtime error: signed integer overflow\n"
    log.write_text("x\n" + ubsan + "y\n")
    assert host._tail() == ubsan.strip()
