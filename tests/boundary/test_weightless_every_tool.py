"""Every tool that refuses a checkpoint without its weights names from-header.

A folder of index + config whose shards are missing, Git-LFS pointers or
header-only copies (``xcache-fixtures checkpoint --form index|lfs|headers``)
is refused by ``xcache-fixtures verify`` and by ``xcache-replay CKPT`` (the
folder given as the gate's scratch folder) as by ``xcache-inspect``,
``xcache-replay --container`` and ``ExpertCache.open``: each says what to do
in the one sentence of ``xcache.weightless``.
"""

from __future__ import annotations

import contextlib
import io
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.helpers import ROOT
from xcache import weightless
from xcache.fixtures import realistic
from xcache.fixtures.__main__ import main as fixtures_main
from xcache.replay import main as replay_main

MODEL = ROOT / "fixtures" / "models" / "mixtral-8x7b.json"


def _run(main: Callable[..., int], *args: object, **kw: object
         ) -> tuple[int, str, str]:
    """A command's main in process: (exit status, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(*args, **kw)
    return rc, out.getvalue(), err.getvalue()


def _advice(ckpt: Path, then: str) -> str:
    return (f"{ckpt} is a checkpoint's index and config without shard data "
            "(missing, Git-LFS pointers or header-only); make a twin the cache "
            f"can read, of at most 4 MiB, with `xcache-fixtures from-header "
            f"{ckpt} TWIN` and {then}")


@pytest.mark.parametrize("form", realistic.FORMS)
def test_verify_adds_the_hint_after_its_verdict(tmp_path: Path, form: str) -> None:
    """verify: the spec it cannot recover, the hint line, then FAIL; exit 1."""
    ckpt = realistic.expand(MODEL, tmp_path / "ckpt", form=form, layers=[0],
                            experts=2)
    rc, out, err = _run(fixtures_main, ["verify", str(ckpt)])
    assert (rc, err) == (1, "")
    assert out.splitlines() == [
        f"cannot recover the spec: {ckpt / 'model.safetensors.index.json'}: no "
        "xcache.spec stored (not a fixture?)",
        f"hint: {_advice(ckpt, 'verify TWIN')}",
        f"FAIL: 1 problem(s) in {ckpt}"]


@pytest.mark.parametrize("form", realistic.FORMS)
def test_replay_on_the_checkpoint_names_from_header(tmp_path: Path, form: str
                                                    ) -> None:
    """xcache-replay CKPT (--container forgotten): one line, the twin to make."""
    ckpt = realistic.expand(MODEL, tmp_path / "ckpt", form=form, layers=[0],
                            experts=2)
    before = sorted(p.name for p in ckpt.iterdir())
    held = ("model.safetensors.index.json" if form == "index"
            else "model-00001-of-00019.safetensors")
    rc, out, err = _run(replay_main, [str(ckpt)], prog="xcache-replay")
    assert (rc, out) == (2, "")
    assert err == (f"CANNOT RUN: {ckpt} holds a container ({held}): <dir> is the "
                   "scratch folder the gate writes into; "
                   + _advice(ckpt, "give `xcache-replay --container TWIN OUT`")
                   + "\n")
    assert sorted(p.name for p in ckpt.iterdir()) == before


def test_a_folder_with_its_weights_gets_no_hint(tmp_path: Path) -> None:
    """A real container (shard data present) with a config: no hint anywhere."""
    from xcache.fixtures.writer import generate

    k3 = tmp_path / "k3"
    generate("mixtral-mini", k3)
    (k3 / "config.json").write_text("{}")
    assert weightless.weightless_hint(k3) == ""
    rc, _, err = _run(replay_main, [str(k3)], prog="xcache-replay")
    assert rc == 2 and "from-header" not in err and "--container" in err


def test_the_header_limit_is_the_readers() -> None:
    """The largest header a shard may have is the C reader's and the oracle's."""
    from xcache.engine import _lib
    from xcache.oracle.bounds import HEADER_MAX_BYTES

    assert weightless.HEADER_MAX_BYTES == _lib.lib().XC_HEADER_MAX_BYTES \
        == HEADER_MAX_BYTES == 100_000_000


def test_a_sparse_terabyte_index_is_no_checkpoint_and_is_not_read(tmp_path: Path
                                                                  ) -> None:
    """An index past the limit (a hole of 1 TiB): no hint, refused by its size."""
    ckpt = realistic.expand(MODEL, tmp_path / "ckpt", form="index", layers=[0],
                            experts=2)
    with open(ckpt / "model.safetensors.index.json", "r+b") as f:
        f.truncate(1 << 40)
    assert weightless.INDEX_MAX_BYTES == 256 << 20
    assert weightless.weightless_hint(ckpt) == ""
