"""The tool fuzzer (hunt/fuzz/tools.py): a fixed, derandomized budget per group.

Each test draws its cases with hypothesis' derandomized generator, so the
same cases run every time; ``XC_TOOL_FUZZ_SCALE=K`` multiplies every
budget (``python -m xcache.hunt.fuzz tools --seconds N`` runs for a time
instead, with fresh cases).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from xcache.hunt.fuzz import tools
from xcache.hunt.fuzz.tools import Case, Outcome, Report, Target

pytestmark = pytest.mark.nosan  # runs the tools as subprocesses on the plain build

SCALE = int(os.environ.get("XC_TOOL_FUZZ_SCALE", "1"))


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A session folder holding the tiny fixture the verify/identify targets copy."""
    w = tmp_path_factory.mktemp("toolfuzz")
    tools.prepare(w)
    return w


def _fail_on_new(report: Report) -> None:
    new = report.new
    assert not new, "tool fuzzer findings:\n" + "\n".join(
        f.line() + "\n    " + f.excerpt for f in new)


@pytest.mark.parametrize("group,examples", [
    (("inspect", "inspect-layout"), 32),
    (("gate-container", "gate-spec", "gate-cache"), 30),
    (("new", "verify"), 30),
    (("from-header", "identify"), 30),
    (("lab",), 20),
    (("predict",), 20),
    (("gate-scenario", "gate-programs"), 16),
    (("checkpoint", "time"), 16),
], ids=["inspect", "gate", "new-verify", "from-header-identify", "lab", "predict",
        "gate-files", "checkpoint-time"])
def test_fuzz_targets(work: Path, group: tuple[str, ...], examples: int) -> None:
    """Every drawn case of these targets ends in success or one exit-2 line."""
    report = Report()
    tools.explore(list(group), work, report, examples=examples * SCALE,
                  derandomize=True)
    assert sum(report.by_target.values()) == examples * SCALE
    _fail_on_new(report)


def test_corpus_regressions(work: Path) -> None:
    """Every kept case of a fixed finding ends acceptably (known-*: CI's run)."""
    cases = tools.corpus_cases(known=False)
    assert cases, "hunt/fuzz/corpus-tools/cases/ is empty"
    report = Report()
    for case in cases:
        tools.check(case, work, report)
    assert report.runs == len(cases)
    _fail_on_new(report)


def test_every_target_has_a_strategy_and_a_seed() -> None:
    """The strategies cover every target, and every seed file exists."""
    # new_case draws both new (spec.json) and new-toml (spec.toml), time_case
    # both time (model.json) and time-toml (model.toml)
    assert set(tools.TARGETS) - set(tools.STRATEGIES) == {"new-toml", "time-toml"}
    assert set(tools.STRATEGIES) <= set(tools.TARGETS)
    for t in tools.TARGETS.values():
        for s in t.seeds:
            assert s == "@fixture" or (tools.SEED / s).exists(), s
    for name in tools.TRACES:
        assert (tools.SEED / name).stat().st_size > 0


def _judge(rc: int | None, stderr: str = "", stdout: str = "",
           exit1_ok: bool = False, names: tuple[str, ...] = ("config.json",)
           ) -> str | None:
    case = Case("inspect", "note", {}, [], names)
    target = Target("inspect", lambda d: [], (), exit1_ok=exit1_ok)
    return tools.judge(case, target, Outcome(rc, stdout, stderr, 0.1))


def test_judge_accepts_only_success_or_one_named_line() -> None:
    """The oracle: exit 0, a documented exit 1, or one exit-2 line naming the file."""
    assert _judge(0) is None
    assert _judge(2, "x/config.json: num_hidden_layers must be ...\n") is None
    assert _judge(2, "usage: prog [-h]\nprog: error: argument --layers: bad\n",
                  names=("--layers",)) is None
    assert _judge(1, stdout="FAIL layout: x\n", exit1_ok=True) is None
    assert _judge(1, stdout="FAIL layout: x\n") == "exit 1"
    assert _judge(1, "oops\n", exit1_ok=True) == \
        "exit 1 without the FAIL line that reports problems"
    assert _judge(2, "a: config.json\nb\n") == \
        "exit 2 with 2 lines on stderr, not one"
    assert _judge(2, "num_hidden_layers must be an integer\n") == \
        "exit 2, but the line names none of config.json"
    assert _judge(1, "Traceback (most recent call last):\n  File ...\n"
                  "MemoryError\n", exit1_ok=True) == "exit 1 with a traceback"
    assert _judge(None) == f"still running after {tools.WALL_SECONDS:g} s"
    assert _judge(-9) == "killed by signal 9"


def test_signature_names_the_innermost_project_file() -> None:
    """A traceback's signature: its exception and its last frame in the project."""
    root = tools.ROOT
    err = (f'Traceback (most recent call last):\n  File "{root}/engine/detect.py", '
           f'line 3, in f\n  File "{sys.prefix}/lib/json/decoder.py", line 9\n'
           "RecursionError: maximum recursion depth exceeded\n")
    assert Outcome(1, "", err, 0.1).signature() == ("RecursionError",
                                                    "engine/detect.py")
    assert Outcome(None, "", "", 30).signature() == ("timeout", "")
    assert Outcome(2, "", "lab: /tmp/a/t.csv:3: 'x' needs 4 ints\n", 1).signature() \
        == ("exit 2: lab: _ _ needs _ ints", "")
    assert Outcome(-24, "", "", 10).signature() == ("signal SIGXCPU", "")


def test_a_case_is_bounded_to_2_gib(work: Path, tmp_path: Path) -> None:
    """A case that allocates 3 GiB dies with a MemoryError, judged a finding."""
    t = Target("probe", lambda d: [sys.executable, "-c",
                                   "b = bytearray(3 << 30)"], ())
    tools.TARGETS["probe"] = t
    try:
        out, d = tools.run_case(Case("probe", "3 GiB"), tmp_path)
    finally:
        del tools.TARGETS["probe"]
    assert out.rc == 1 and out.stderr.strip().endswith("MemoryError")
    assert out.signature() == ("MemoryError", "")


def test_a_sparse_case_file_is_a_hole(tmp_path: Path) -> None:
    """A case's sparse marker lays out a file of that size with no block written."""
    from xcache.hunt.fuzz.case import sparse

    t = Target("probe", lambda d: [sys.executable, "-c", "import os; s = os.stat("
                                   "'big.json'); print(s.st_size, s.st_blocks)"], ())
    tools.TARGETS["probe"] = t
    try:
        out, d = tools.run_case(Case("probe", "1 TiB", {"big.json": sparse(1 << 40)}),
                                tmp_path)
    finally:
        del tools.TARGETS["probe"]
    assert (out.rc, out.stdout) == (0, "1099511627776 0\n")


@pytest.mark.filterwarnings("ignore:Generating overly large repr")
@pytest.mark.parametrize("note", [
    "a sparse file of 1,099,511,627,776 bytes", "a sparse file of 4,294,967,297 bytes",
    "a dotted key of 200,000 parts", "a table header of 65 parts",
    "inline tables nested 30,000 deep", "arrays nested 1,000 deep"])
def test_the_manifest_target_draws_large_files_and_deep_keys(note: str) -> None:
    """The adapter target (replay --cache's xcs.toml) draws each large and deep edit."""
    from hypothesis import find

    from xcache.hunt.fuzz.targets.adapters import gate_cache_case

    c = find(gate_cache_case(), lambda c: c.note == f"adapter/xcs.toml: {note}")
    assert (c.target, c.names) == ("gate-cache", ("xcs.toml",))


# -- the findings fixed so far, each also a case in corpus-tools/cases/ -----------


@pytest.fixture
def ckpt(tmp_path: Path) -> Path:
    """A copy of the seed checkpoint (config.json, index, one shard)."""
    import shutil

    out = tmp_path / "ckpt"
    shutil.copytree(tools.SEED / "ckpt", out)
    return out


def test_config_layer_count_is_not_listed(ckpt: Path) -> None:
    """num_hidden_layers 10**9 lists only the layers present; 2**31 is refused."""
    import json

    from xcache.engine.errors import LayoutError
    from xcache.engine.layout import resolve

    cfg = json.loads((ckpt / "config.json").read_text())
    (ckpt / "config.json").write_text(json.dumps({**cfg, "num_hidden_layers": 10**9}))
    assert resolve(ckpt).layers == (0, 1)
    (ckpt / "config.json").write_text(json.dumps({**cfg, "num_hidden_layers": 2**31}))
    with pytest.raises(LayoutError) as ei:
        resolve(ckpt)
    assert str(ei.value) == (f"{ckpt / 'config.json'}: num_hidden_layers must be "
                             "at most 2147483647 (the engine's limit), got "
                             "2147483648")


def test_nested_config_and_layout_are_one_error(ckpt: Path) -> None:
    """A config.json or layout file nested 5000 deep is a LayoutError naming it."""
    from xcache.engine.errors import LayoutError
    from xcache.engine.layout import load_file, resolve

    (ckpt / "config.json").write_text("[" * 5000 + "]" * 5000)
    with pytest.raises(LayoutError) as ei:
        resolve(ckpt)
    assert str(ei.value) == (f"{ckpt / 'config.json'}: not valid JSON: a value "
                             "nested too deeply")
    lay = ckpt / "lay.toml"
    lay.write_text("x = " + "[" * 5000 + "]" * 5000 + "\n")
    with pytest.raises(LayoutError) as ei:
        load_file(lay)
    assert str(ei.value) == (f"layout file {lay}: line 1: nested deeper than "
                             "the limit of 64 levels (dotted keys, tables, "
                             "arrays and inline tables)")


def test_spec_file_errors_name_the_file(tmp_path: Path) -> None:
    """load_spec names the file: for a bad field, a JSON list, a nested document."""
    import json

    from xcache.fixtures.spec import SpecError, load_spec

    spec = json.loads((tools.SEED / "spec.json").read_text())
    p = tmp_path / "s.json"
    p.write_text(json.dumps({**spec, "top_k": 9}))
    with pytest.raises(SpecError) as ei:
        load_spec(p)
    assert (ei.value.field, str(ei.value)) == (
        "top_k", f"{p}: spec field 'top_k': must be in 1..experts (4), got 9")
    p.write_text("[1, 2]")
    with pytest.raises(SpecError) as ei:
        load_spec(p)
    assert str(ei.value) == (f"spec field '<file>': {p}: must be a table (a JSON "
                             "object), got list")
    p.write_text("[" * 5000 + "]" * 5000)
    with pytest.raises(SpecError) as ei:
        load_spec(p)
    assert str(ei.value) == (f"spec field '<file>': {p}: not valid JSON: a "
                             "value nested too deeply")


def test_gate_spec_file_nested_or_list(tmp_path: Path) -> None:
    """replay --container SPEC: a nested or non-table spec file is CannotRun."""
    from xcache.gate import CannotRun
    from xcache.gate.containers import make_target

    p = tmp_path / "s.toml"
    p.write_text("config = " + "{a = " * 1000 + "1" + "}" * 1000 + "\n")
    with pytest.raises(CannotRun) as ei:
        make_target(str(p), tmp_path / "work")
    assert str(ei.value) == (f"container {p}: not a fixture spec file ({p}: "
                             "line 1: nested deeper than the limit of 64 levels "
                             "(dotted keys, tables, arrays and inline tables))")
    p = tmp_path / "s.json"
    p.write_text("[1]")
    with pytest.raises(CannotRun, match=f"container {p}: not a fixture spec file"):
        make_target(str(p), tmp_path / "work")


def test_gate_layout_of_1e8_experts_stops_at_the_first_gap(ckpt: Path,
                                                           tmp_path: Path) -> None:
    """A layout naming 10**8 experts is refused at expert 4, not after listing all."""
    from xcache.gate import CannotRun
    from xcache.gate.containers import make_target

    text = (tools.SEED / "xcache-layout.toml").read_text()
    (ckpt / "xcache-layout.toml").write_text(
        text.replace("n_experts = 4", "n_experts = 100000000"))
    with pytest.raises(CannotRun) as ei:
        make_target(str(ckpt), tmp_path / "work")
    assert "layer 0 expert 4" in str(ei.value)


def test_binary_and_overflowing_traces_name_the_file(tmp_path: Path) -> None:
    """A binary .jsonl and a CSV token of 2**63: TraceFormatErrors naming the file."""
    from xcache.oracle.traces import TraceFormatError, read_trace

    p = tmp_path / "t.jsonl"
    p.write_bytes(bytes(range(128, 256)))
    with pytest.raises(TraceFormatError) as ei:
        read_trace(p)
    assert str(ei.value) == (f"{p}:0: not UTF-8 text (invalid start byte at byte "
                             "0 of a chunk): a binary trace needs its --format "
                             "(or --format auto)")
    c = tmp_path / "t.csv"
    c.write_text("sequence,token,layer,expert,key\n0,9223372036854775808,0,1,1\n")
    with pytest.raises(TraceFormatError) as ei:
        read_trace(c)
    assert str(ei.value) == (f"{c}:0: token number 9223372036854775808 is beyond "
                             "2**63 - 1")


def test_engine_trace_ids_are_checked_against_its_header(tmp_path: Path) -> None:
    """An engine trace whose record or header holds an id past its counts is refused."""
    import numpy as np

    from xcache.oracle.traces import TraceFormatError, read_trace

    raw = bytearray((tools.SEED / "trace.xctrace").read_bytes())
    p = tmp_path / "t.xctrace"
    bad = bytearray(raw)
    bad[48 + 5 * 24 + 8:48 + 5 * 24 + 12] = np.int32(2**31 - 1).tobytes()
    p.write_bytes(bytes(bad))
    with pytest.raises(TraceFormatError) as ei:
        read_trace(p)
    assert str(ei.value) == (f"{p}:0: record 5: layer 2147483647 is outside 0..1 "
                             "(the header's count)")
    bad = bytearray(raw)
    bad[28:32] = np.uint32(2**32 - 1).tobytes()  # n_experts
    p.write_bytes(bytes(bad))
    with pytest.raises(TraceFormatError) as ei:
        read_trace(p)
    assert str(ei.value) == (f"{p}:0: header expert count 4294967295 is beyond "
                             "the limit of 524288")
    p.write_bytes(bytes(raw))
    assert read_trace(p).n_experts == 8


def test_spec_dtype_of_another_type_is_a_spec_error() -> None:
    """A dtype that is a table or list is a SpecError naming it, not a TypeError."""
    import json

    from xcache.fixtures.spec import SpecError, load_spec

    spec = json.loads((tools.SEED / "spec.json").read_text())
    spec["expert_tensors"][2]["dtype"] = {"a": [1]}
    with pytest.raises(SpecError) as ei:
        load_spec(spec)
    assert str(ei.value) == ("spec field 'expert_tensors[2].dtype': unknown dtype "
                             "{'a': [1]}")


def test_gate_layout_mismatch_names_the_layout_file(ckpt: Path, tmp_path: Path) -> None:
    """replay --container: a layout file naming a missing tensor names that file."""
    from xcache.gate import CannotRun
    from xcache.gate.containers import make_target

    text = (tools.SEED / "xcache-layout.toml").read_text()
    (ckpt / "xcache-layout.toml").write_text(text.replace('"w3.weight"',
                                                          '"w3.weiht"'))
    with pytest.raises(CannotRun) as ei:
        make_target(str(ckpt), tmp_path / "work")
    assert str(ei.value).startswith(
        f"container {ckpt}: the layout (from {ckpt / 'xcache-layout.toml'}) does "
        "not match its tensors: layer 0 expert 0: no tensor "
        "'model.layers.0.mlp.experts.0.w3.weiht'")


def test_dump_toml_leaves_out_none() -> None:
    """TOML has no null: a None value or list item is left out, the rest kept."""
    assert tools.dump_toml({"a": None, "b": [1, None, [None]], "c": {"d": None}}) \
        == b"b = [1, []]\nc = {}\n"
