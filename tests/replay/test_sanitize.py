"""``replay.py --sanitize``: an ASan + UBSan replay in a child (gate/sanitize.py)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers import group_members
from xcache.gate import CannotRun, cli, sanitize
from xcache.gate.sanitize import SANITIZER_EXIT, parse_report

ROOT = Path(__file__).resolve().parents[2]

ASAN_TEXT = """\
=================================================================
==4242==ERROR: AddressSanitizer: heap-buffer-overflow on address 0x6020 at pc 0x7f
READ of size 1 at 0x602000000011 thread T1
    #0 0x7f1234 in __interceptor_strcmp ../sanitizer_common_interceptors.inc:447
    #1 0x7f5678 in ends_with /tmp/x/engine/csrc/xc_st.c:78
    #2 0x7f9abc in xc_st_open /tmp/x/engine/csrc/xc_st.c:301
SUMMARY: AddressSanitizer: heap-buffer-overflow in __interceptor_strcmp
"""

UBSAN_TEXT = """\
/x/csrc/xc_stream.c:85:41: runtime error: index -1 out of bounds for type 'xc_slot'
    #0 0x7f0001 in xc_stream_open /tmp/x/engine/csrc/xc_stream.c:85
    #1 0x7f0002 in _cffi_f_xc_stream_open /tmp/b/_xc.c:9001
"""

#: A read one byte past a heap block at every cache open: the plain build
#: reads the block's slack (no output changes), ASan reports it.
PLANT_AFTER = "    c->seen = xc_calloc(c->ld.n_keys, sizeof *c->seen);\n"
PLANTED = ("    if (c->seen != NULL) {\n"
           "        volatile unsigned char past =\n"
           "            ((const unsigned char *)c->seen)"
           "[c->ld.n_keys * sizeof *c->seen];\n"
           "        (void)past;\n"
           "    }\n")


def test_an_asan_report_names_its_first_frame_and_the_engine_frame() -> None:
    """An interceptor's report gives its first frame and the engine's under it."""
    r = parse_report(ASAN_TEXT, "reference [engine]", "asan.4242")
    assert (r.sanitizer, r.what) == ("AddressSanitizer", "heap-buffer-overflow")
    assert r.first_frame == ("#0 __interceptor_strcmp "
                             "sanitizer_common_interceptors.inc:447")
    assert r.engine_frame == "#1 ends_with xc_st.c:78"
    assert r.line() == ("AddressSanitizer: heap-buffer-overflow at #0 "
                        "__interceptor_strcmp sanitizer_common_interceptors"
                        ".inc:447 (engine: #1 ends_with xc_st.c:78)")
    check = sanitize.report_check(r)
    assert (check["scenario"], check["backend"], check["check"]) == (
        "reference", "engine", "sanitizer")
    assert check["detail"] == f"during reference: {r.line()}"


def test_a_ubsan_report_names_the_runtime_error() -> None:
    """A UBSan report gives its runtime error and its first (engine) frame."""
    r = parse_report(UBSAN_TEXT, "p-7-k3 [engine]")
    assert r.sanitizer == "UndefinedBehaviorSanitizer"
    assert r.what == ("runtime error: index -1 out of bounds for type "
                      "'xc_slot'")
    assert r.first_frame == r.engine_frame == "#0 xc_stream_open xc_stream.c:85"
    assert r.line() == ("UndefinedBehaviorSanitizer: runtime error: index -1 "
                        "out of bounds for type 'xc_slot' at #0 "
                        "xc_stream_open xc_stream.c:85")


def test_the_child_environment(tmp_path: Path) -> None:
    """The child preloads the runtimes and stops at the first report, into logs."""
    env = sanitize.child_env(tmp_path, [Path("/l/libasan.so"),
                                        Path("/l/libubsan.so")], base={})
    assert env == {
        "LD_PRELOAD": "/l/libasan.so:/l/libubsan.so",
        "ASAN_OPTIONS": "halt_on_error=1:abort_on_error=0:exitcode=86:"
                        "print_stacktrace=1:detect_leaks=0:"
                        f"alloc_dealloc_mismatch=0:log_path={tmp_path}/asan",
        "UBSAN_OPTIONS": "halt_on_error=1:abort_on_error=0:exitcode=86:"
                         f"print_stacktrace=1:log_path={tmp_path}/ubsan",
        sanitize.CHILD_ENV: str(tmp_path), "XC_GATE_IN_PROCESS": "1"}


def _fake_cc(tmp_path: Path, prints: str) -> Path:
    cc = tmp_path / "fakecc"
    cc.write_text(f"#!/bin/sh\necho '{prints}'\n")
    cc.chmod(0o755)
    return cc


def test_no_runtime_found_names_what_was_looked_for(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """A compiler without libasan: exit 2 naming the compiler, the file, its answer."""
    cc = _fake_cc(tmp_path, "libasan.so")  # what gcc prints when it has none
    monkeypatch.setenv("CC", str(cc))
    with pytest.raises(CannotRun) as e:
        sanitize.runtime_libraries()
    message = (f"--sanitize: no libasan.so found: `{cc} "
               "-print-file-name=libasan.so` gave 'libasan.so' (install the "
               "compiler's sanitizer runtimes, e.g. libasan8 and libubsan1)")
    assert str(e.value) == message
    out = tmp_path / "out"
    assert cli.run(["--sanitize", str(out)]) == 2
    assert capsys.readouterr().err == f"CANNOT RUN: {message}\n"
    assert not out.exists() or not any(out.iterdir())


def test_sanitize_refuses_an_outside_cache(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--sanitize with --cache is exit 2: there is no engine to instrument."""
    assert cli.run(["--sanitize", "--cache", str(tmp_path / "adapter"),
                    str(tmp_path / "out")]) == 2
    assert capsys.readouterr().err == (
        "CANNOT RUN: --sanitize builds the engine; --cache judges an outside "
        "cache: give one of them\n")


@pytest.mark.parametrize(("rc", "expected"), [
    (0, 0), (1, 1), (2, 2), (130, 130), (SANITIZER_EXIT, 2), (7, 2)])
def test_the_childs_status_without_a_report(
        tmp_path: Path, rc: int, expected: int,
        capsys: pytest.CaptureFixture[str]) -> None:
    """With no report: 0, 1, 2 and 130 as they are; any other status is 2."""
    assert sanitize._verdict(rc, [], tmp_path, None, 1.0, 2.0) == expected
    err = capsys.readouterr().err
    if rc == SANITIZER_EXIT:
        assert err == ("CANNOT RUN: the sanitized replay ended with the "
                       f"sanitizers' exit status 86 but left no report in "
                       f"{tmp_path}\n")
    elif rc == 7:
        assert err == ("CANNOT RUN: the sanitized replay ended with exit "
                       "status 7\n")
    else:
        assert err == ""


@pytest.mark.parametrize("rc", [0, 1, SANITIZER_EXIT])
def test_a_report_is_a_failed_check_in_the_json(
        tmp_path: Path, rc: int, capsys: pytest.CaptureFixture[str]) -> None:
    """Any report is exit 1, one FAIL line, and a "sanitizer" check in --json."""
    (tmp_path / "current").write_text("reference [engine]\n")
    (tmp_path / "asan.4242").write_text(ASAN_TEXT)
    dest = tmp_path / "r.json"
    if rc != SANITIZER_EXIT:  # the child wrote its report
        dest.write_text(json.dumps({"passed": rc == 0, "scenarios": ["a"],
                                    "checks": [{"check": "x",
                                                "passed": rc == 0}]}))
    reports = sanitize.read_reports(tmp_path)
    assert sanitize._verdict(rc, reports, tmp_path, dest, 1.0, 2.0) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[0] == ("  FAIL  sanitizer [engine] during reference: "
                      "AddressSanitizer: heap-buffer-overflow at #0 "
                      "__interceptor_strcmp sanitizer_common_interceptors.inc"
                      ":447 (engine: #1 ends_with xc_st.c:78)")
    assert out[-1] == (f"FAIL: a sanitizer report {out[0][27:]}; sanitized "
                       "replay: 1.0 s wall, 2.0 s CPU")
    doc = json.loads(dest.read_text())
    assert doc["passed"] is False
    assert [c["check"] for c in doc["checks"]] == (
        ["sanitizer"] if rc == SANITIZER_EXIT else ["x", "sanitizer"])
    from xcache.hunt.mutants.run import Stage, by_sanitizer, failed_checks

    names = failed_checks(doc)
    assert names[-1] == "reference: sanitizer"
    assert by_sanitizer(Stage("caught", 1, names)) is (rc != 1)


def _engine_copy(tmp_path: Path) -> Path:
    """A scratch engine tree with the planted read past a heap block, re-pinned."""
    eng = tmp_path / "src" / "engine"
    shutil.copytree(ROOT / "engine", eng, ignore=shutil.ignore_patterns(
        "__pycache__", "*.so", "*.o"))
    c = eng / "csrc" / "xc_cache.c"
    text = c.read_text()
    assert text.count(PLANT_AFTER) == 1
    c.write_text(text.replace(PLANT_AFTER, PLANT_AFTER + PLANTED))
    subprocess.run([sys.executable, "replay.py", "--engine-src", str(eng),
                    "--repin"], cwd=ROOT, check=True, capture_output=True)
    return eng


def _planted_line(eng: Path) -> int:
    lines = (eng / "csrc" / "xc_cache.c").read_text().splitlines()
    return next(i for i, ln in enumerate(lines, 1)
                if "[c->ld.n_keys * sizeof *c->seen]" in ln)


@pytest.mark.slow
@pytest.mark.nosan  # builds two engines and replays each (minutes)
def test_a_planted_read_past_a_block_is_caught_by_sanitize_alone(
        tmp_path: Path) -> None:
    """The plain replay passes the planted read; --sanitize fails it by name."""
    eng = _engine_copy(tmp_path)
    base = [sys.executable, "replay.py", "--engine-src", str(eng),
            "--scenario", "reference", "--no-programs"]
    plain = subprocess.run([*base, str(tmp_path / "plain")], cwd=ROOT,
                           capture_output=True, text=True)
    assert plain.returncode == 0, plain.stdout + plain.stderr
    dest = tmp_path / "san.json"
    san = subprocess.run([*base, "--sanitize", str(tmp_path / "san"),
                          "--json", str(dest)], cwd=ROOT, capture_output=True,
                         text=True)
    assert san.returncode == 1, san.stdout + san.stderr
    line = ("  FAIL  sanitizer [engine] during reference: AddressSanitizer: "
            "heap-buffer-overflow at #0 xc_cache_open "
            f"xc_cache.c:{_planted_line(eng)}")
    assert line in san.stdout.splitlines(), san.stdout
    doc = json.loads(dest.read_text())
    assert [(c["scenario"], c["check"]) for c in doc["checks"]
            if not c["passed"]] == [("reference", "sanitizer")]
    assert os.listdir(tmp_path / "san") == []  # the child's work, the logs


def _default_sigint() -> None:
    """In the started gate: SIGINT as a terminal gives it (a background job
    inherits it ignored, and Python then installs no handler)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.slow
@pytest.mark.nosan  # builds a sanitized engine (links it at least)
@pytest.mark.parametrize("to", ["group", "parent"])
def test_ctrl_c_ends_the_parent_and_the_child_leaving_nothing(
        tmp_path: Path, to: str) -> None:
    """SIGINT (the terminal's, or the gate's alone) mid-run: 130, nothing left,
    not even the OUT folder the gate made."""
    out = tmp_path / "out"
    p = subprocess.Popen([sys.executable, "replay.py", "--sanitize", str(out)],
                         cwd=ROOT, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True,
                         start_new_session=True, preexec_fn=_default_sigint)
    try:
        assert p.stdout is not None
        p.stdout.readline()  # the parent's line: the child is started
        for _ in range(1200):  # the child is replaying once its scenarios go
            if p.stdout.readline().startswith("Built the engine"):
                break
        assert len(group_members(p.pid)) >= 2  # the gate and its child
        if to == "group":
            os.killpg(p.pid, signal.SIGINT)
        else:
            p.send_signal(signal.SIGINT)
        _, err = p.communicate(timeout=120)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
    assert p.returncode == 130, err
    assert err.splitlines()[-1] == ("replay.py: interrupted; nothing of this "
                                    "run is left")
    assert "Traceback" not in err
    assert group_members(p.pid) == []
    assert not out.exists()  # the gate made it: nothing of the run is left


def test_the_mutation_run_replays_with_sanitize_and_reads_the_check(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """hunt.mutants --sanitize replays so; a sanitizer check is a sanitizer kill."""
    from xcache.hunt.mutants import run as mrun

    calls: list[list[str]] = []
    report = {"checks": [{"scenario": "found-claim-wait-hit",
                          "check": "sanitizer", "passed": False}]}

    def fake_run(cmd: list[str], cwd: Path, timeout: float,
                 env: object = None) -> tuple[int, str, str]:
        calls.append(list(cmd))
        if "--repin" in cmd:
            return 0, "", ""
        Path(cmd[cmd.index("--json") + 1]).write_text(json.dumps(report))
        return 1, "", ""

    monkeypatch.setattr(mrun, "_run", fake_run)
    stage = mrun._replay(ROOT, tmp_path, 60.0, 30.0, keep=False, sanitize=True)
    assert calls[1][-1] == "--sanitize"
    assert (stage.verdict, stage.caught_by) == (
        "caught", ["found-claim-wait-hit: sanitizer"])
    assert mrun.by_sanitizer(stage)
    assert mrun._replay(ROOT, tmp_path, 60.0, 30.0, keep=False).caught_by == [
        "found-claim-wait-hit: sanitizer"]
    assert "--sanitize" not in calls[-1]
    assert mrun.parser().parse_args(["--sanitize"]).sanitize is True


def _stalling_cc(tmp_path: Path, deaf: bool = False) -> Path:
    """A compiler that answers -print-file-name as gcc does, and whose compile
    leaves its temporary file in TMPDIR and stalls (as an interrupted cc1 did);
    a ``deaf`` one ignores SIGINT (as one the build's pool starts just after
    the interrupt reached the group does not see it)."""
    cc = tmp_path / "bin" / "cc-stalls"
    cc.parent.mkdir()
    trap = "trap '' INT\n" if deaf else ""
    cc.write_text('#!/bin/sh\ncase "$*" in *-print-file-name*) exec gcc "$@";; '
                  f'esac\n{trap}: > "${{TMPDIR:-/tmp}}/ccSTALL.s"\n'
                  f': > {tmp_path / "compiling"}\nexec sleep 60\n')
    cc.chmod(0o755)
    return cc


@pytest.mark.nosan  # preloads the sanitizer runtimes into its child
@pytest.mark.parametrize("deaf", [False, True], ids=["cc", "cc-ignoring-SIGINT"])
def test_ctrl_c_during_the_childs_build_leaves_nothing_and_says_so_once(
        tmp_path: Path, deaf: bool) -> None:
    """SIGINT to the group while the child compiles: 130, one line, no OUT, no
    compiler file left in TMPDIR (it left ccXXXX.s there, and two lines), no
    compiler left running (CI saw two, started after the interrupt)."""
    tmp, out = tmp_path / "tmp", tmp_path / "w" / "OUT"
    tmp.mkdir()
    env = dict(os.environ, TMPDIR=str(tmp),
               CC=str(_stalling_cc(tmp_path, deaf)),
               XC_OBJ_CACHE=str(tmp_path / "objects"))
    p = subprocess.Popen([sys.executable, "replay.py", "--sanitize", str(out)],
                         cwd=ROOT, stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE, text=True, env=env,
                         start_new_session=True, preexec_fn=_default_sigint)
    try:
        for _ in range(1200):
            if (tmp_path / "compiling").exists() or p.poll() is not None:
                break
            time.sleep(0.05)
        assert (tmp_path / "compiling").exists()
        os.killpg(p.pid, signal.SIGINT)
        _, err = p.communicate(timeout=120)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
    assert (p.returncode, err) == (
        130, "replay.py: interrupted; nothing of this run is left\n")
    assert os.listdir(tmp) == []
    assert not (tmp_path / "w").exists()
    assert group_members(p.pid) == []


def test_ctrl_c_as_the_parent_starts_its_child_leaves_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """SIGINT between making OUT and the child's start (it escaped as a
    KeyboardInterrupt, leaving OUT and the log folder): 130, nothing left."""
    real = subprocess.Popen

    def popen(cmd: list[str], **kw: object) -> subprocess.Popen[bytes]:
        os.kill(os.getpid(), signal.SIGINT)
        return real([sys.executable, "-c", "pass"])

    monkeypatch.setattr(sanitize, "runtime_libraries", lambda: [])
    monkeypatch.setattr(sanitize.subprocess, "Popen", popen)
    old = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        rc = sanitize.run_parent(["x"], str(tmp_path / "w" / "OUT"), False)
    finally:
        signal.signal(signal.SIGINT, old)
    assert (rc, capsys.readouterr().err) == (
        130, "replay.py: interrupted; nothing of this run is left\n")
    assert os.listdir(tmp_path) == []
