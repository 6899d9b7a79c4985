"""examples/decode_loop.py: it runs, and what it prints is the cache's own count.

The loop decodes the first tokens of the shipped OLMoE trace over a twin of
the shipped OLMoE description.  Its printed counters must be the dict the
cache returned, and, with read-ahead done at once (``--io-threads 0``),
exactly what the oracle's cache model counts for the same schedule: hold
each layer's experts, read ahead the next layer's previous choice while
they are held, release.
"""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys

import pytest

from tests.helpers import ROOT
from xcache.fixtures import realistic
from xcache.fixtures.from_header import from_header
from xcache.oracle.cache import CacheModel

EXAMPLE = ROOT / "examples" / "decode_loop.py"
TRACE = ROOT / "fixtures" / "traces" / "olmoe_299.jsonl"
TOKENS = 12


@pytest.fixture(scope="module")
def twin(tmp_path_factory):
    """A twin of OLMoE-1B-7B (16 MoE layers x 64 experts, top-8), all layers."""
    root = tmp_path_factory.mktemp("decode-loop")
    ckpt = realistic.expand(ROOT / "fixtures" / "models" / "olmoe-1b-7b.json",
                            root / "ckpt", form="index")
    from_header(ckpt, root / "twin", scale=0.01)
    return root / "twin"


def _example():
    """The example as a module (it is a script, not a package member)."""
    spec = importlib.util.spec_from_file_location("decode_loop", EXAMPLE)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _printed(text: str) -> dict[str, float]:
    """The figures the loop printed, by counter name."""
    m = re.search(r"requests (\d+), hits (\d+), misses (\d+), read-ahead loads "
                  r"(\d+), first uses of them (\d+)\nhit rate ([\d.]+), adjusted "
                  r"hit rate ([\d.]+) ", text)
    assert m, text
    keys = ("requests", "hits", "misses", "prefetch_loads", "prefetch_first_uses")
    out: dict[str, float] = {k: int(v) for k, v in zip(keys, m.groups(), strict=False)}
    out["hit_rate"], out["adjusted_hit_rate_exact"] = map(float, m.groups()[5:])
    return out


def _oracle(mod, slots: int, prefetch: bool) -> dict[str, float]:
    """The oracle cache model driven by the loop's schedule."""
    model = CacheModel(list(range(16)), 64, 8, expert_bytes=1920, n_slots=slots)
    todo = mod.steps(str(TRACE), TOKENS)
    last: dict[int, list[int]] = {}
    for i, (_t, layer, experts) in enumerate(todo):
        refs = [model.get(layer, e) for e in experts]
        nxt = todo[i + 1][1] if i + 1 < len(todo) else None
        if prefetch and nxt in last:
            model.prefetch([(nxt, e) for e in last[nxt]])
        for r in refs:
            model.release(r)
        last[layer] = experts
    return dict(model.stats())


@pytest.mark.parametrize("prefetch", [True, False])
def test_printed_counters_are_the_cache_and_the_oracle_counts(twin, capsys,
                                                              prefetch):
    """Printed == the cache's stats() == the oracle model's, for 12 tokens."""
    mod = _example()
    argv = [str(twin), str(TRACE), "--tokens", str(TOKENS), "--io-threads", "0"]
    stats = mod.main(argv + ([] if prefetch else ["--no-prefetch"]))
    text = capsys.readouterr().out
    lines = text.splitlines()
    assert lines[0] == f"{twin}: 16 MoE layers x 64 experts, top-8; 64 slots"
    assert re.fullmatch(rf"decoded {TOKENS} tokens in [\d.]+ s: [\d.]+ tok/s",
                        lines[1])
    printed = _printed(text)
    assert printed["requests"] == TOKENS * 16 * 8 == stats["requests"]
    for k in ("requests", "hits", "misses", "prefetch_loads",
              "prefetch_first_uses"):
        assert printed[k] == stats[k], k
    assert printed["hit_rate"] == round(stats["hit_rate"], 4)
    assert printed["adjusted_hit_rate_exact"] == round(
        stats["adjusted_hit_rate_exact"], 4)
    want = _oracle(mod, 64, prefetch)
    for k in ("requests", "hits", "misses", "prefetch_loads",
              "prefetch_first_uses", "evictions", "payload_bytes"):
        assert stats[k] == want[k], k
    if prefetch:  # at 64 slots every hit is owed to read-ahead
        assert stats["hits"] == stats["prefetch_first_uses"] > 0
    else:
        assert stats["hits"] == 0 and stats["prefetch_loads"] == 0


def test_runs_from_another_folder_with_its_reader_threads(twin, tmp_path):
    """`python examples/decode_loop.py` from elsewhere, read-ahead threaded."""
    p = subprocess.run([sys.executable, str(EXAMPLE), str(twin), str(TRACE),
                        "--tokens", "4", "--slots", "200"], cwd=tmp_path,
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    printed = _printed(p.stdout)
    assert printed["requests"] == 4 * 16 * 8
    assert printed["hits"] + printed["misses"] == printed["requests"]


def test_a_trace_of_another_shape_is_refused(twin, tmp_path, capsys):
    """The Mixtral trace routes 32 layers: one line naming both, exit 2."""
    mod = _example()
    with pytest.raises(SystemExit) as e:
        mod.main([str(twin), str(ROOT / "fixtures/traces/mixtral8x7b_humaneval.jsonl")])
    assert e.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1].endswith(
        "routes 32 layers; " + f"{twin} has 16 MoE layers")


@pytest.mark.parametrize("form", ["index", "headers"])
def test_a_checkpoint_without_weights_is_one_line_naming_from_header(
        tmp_path, form):
    """Pointed at a checkpoint folder with no expert bytes: exit 2, one line, no
    traceback, naming the folder and `xcache-fixtures from-header`."""
    ckpt = realistic.expand(ROOT / "fixtures" / "models" / "olmoe-1b-7b.json",
                            tmp_path / "ckpt", form=form)
    p = subprocess.run([sys.executable, str(EXAMPLE), str(ckpt), str(TRACE),
                        "--tokens", "2"], capture_output=True, text=True,
                       timeout=300)
    assert (p.returncode, p.stdout) == (2, "")
    assert p.stderr.startswith(
        f"decode_loop.py: {ckpt} is a checkpoint's index and config without "
        f"shard data (missing, Git-LFS pointers or header-only); make a twin "
        f"the cache can read, of at most 4 MiB, with `xcache-fixtures "
        f"from-header {ckpt} TWIN` and open TWIN instead (the reader: ")
    assert p.stderr.count("\n") == 1 and "Traceback" not in p.stderr
