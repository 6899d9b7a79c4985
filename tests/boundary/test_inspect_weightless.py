"""engine.inspector on a checkpoint without its weights points at from-header."""

from __future__ import annotations

import pytest

from tests.helpers import ROOT
from xcache.engine.inspector import main
from xcache.fixtures import realistic

MODEL = ROOT / "fixtures" / "models" / "mixtral-8x7b.json"


@pytest.mark.parametrize("form", realistic.FORMS)
@pytest.mark.parametrize("at_index", [False, True])
def test_checkpoint_without_shard_data_names_from_header(tmp_path, capsys, form,
                                                          at_index):
    """Index + config, shards missing, LFS pointers or header-only: a hint, then
    FAIL (the verdict is the last line)."""
    ckpt = realistic.expand(MODEL, tmp_path / "ckpt", form=form, layers=[0],
                            experts=2)
    path = str(ckpt / "model.safetensors.index.json") if at_index else str(ckpt)
    assert main([path]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2 and lines[1].startswith("FAIL ")
    assert lines[0] == (
        f"hint: {path} is a checkpoint's index and config without shard data "
        f"(missing, Git-LFS pointers or header-only); make a twin the cache "
        f"can read, of at most 4 MiB, with `xcache-fixtures from-header "
        f"{path} TWIN` and inspect TWIN")


def test_no_hint_when_a_shard_has_its_data_or_there_is_no_config(tmp_path,
                                                                 capsys):
    """A corrupt real container, or an index without config.json, gets no hint."""
    from xcache.fixtures.writer import generate

    k3 = tmp_path / "k3"
    generate("mixtral-mini", k3)
    (k3 / "config.json").write_text("{}")  # index and config: data decides
    shard = k3 / "model-00002-of-00003.safetensors"
    shard.write_bytes(shard.read_bytes()[:-10])  # truncated, but has data
    assert main([str(k3)]) == 1
    out = capsys.readouterr().out
    assert out.startswith("FAIL ") and "hint:" not in out
    ckpt = realistic.expand(MODEL, tmp_path / "ckpt", form="index", layers=[0],
                            experts=2)
    (ckpt / "config.json").unlink()
    assert main([str(ckpt)]) == 1
    assert "hint:" not in capsys.readouterr().out
