"""ExpertCache.open and resolve on a checkpoint without its weights: one clear error.

The folder a user holds before the weights (index and config; shards
missing, Git-LFS pointers or header-only) has no expert bytes.  Opening a
cache on it raises the C reader's error, of its class and kind, led by what
the folder is and what to do (``xcache-fixtures from-header``), with no
chained traceback.
"""

from __future__ import annotations

import pytest

from tests.helpers import ROOT
from xcache.engine import ExpertCache, FormatError
from xcache.engine.layout import resolve
from xcache.engine.weightless import weightless_hint
from xcache.fixtures import realistic

MODEL = ROOT / "fixtures" / "models" / "mixtral-8x7b.json"


def _advice(path: str) -> str:
    """What the error says first, for the checkpoint at ``path``."""
    return (f"{path} is a checkpoint's index and config without shard data "
            f"(missing, Git-LFS pointers or header-only); make a twin the "
            f"cache can read, of at most 4 MiB, with `xcache-fixtures "
            f"from-header {path} TWIN` and open TWIN instead (the reader: ")


#: per form: the file the reader's own error names, and its kind
READER = {"index": ("model.safetensors.index.json", "index"),
          "headers": ("model-00001-of-00019.safetensors", "length"),
          "lfs": ("model-00001-of-00019.safetensors", "header_too_large")}


@pytest.mark.parametrize("form", realistic.FORMS)
@pytest.mark.parametrize("opener", ["open", "resolve"])
def test_a_weightless_checkpoint_is_one_error_saying_what_to_do(tmp_path, form,
                                                                opener):
    """Every form: the reader's FormatError, led by the advice, no chained cause."""
    ckpt = realistic.expand(MODEL, tmp_path / "ckpt", form=form, layers=[0],
                            experts=2)
    with pytest.raises(FormatError) as info:
        if opener == "open":
            ExpertCache.open(ckpt, n_slots=2)
        else:
            resolve(ckpt)
    err = info.value
    text = str(err)
    assert text.startswith(_advice(str(ckpt))) and text.endswith(")")
    reader = text[len(_advice(str(ckpt))):-1]
    name, kind = READER[form]
    assert reader.startswith(f"{ckpt / name}: byte ")
    assert err.kind == kind
    assert err.__cause__ is None and err.__suppress_context__


def test_a_container_with_data_keeps_the_readers_own_error(tmp_path):
    """A truncated shard that holds data (a real, damaged container): no advice."""
    from xcache.fixtures.writer import generate

    box = tmp_path / "mm"
    generate("mixtral-mini", box)
    (box / "config.json").write_text("{}")
    shard = box / "model-00002-of-00003.safetensors"
    shard.write_bytes(shard.read_bytes()[:-10])
    assert weightless_hint(box) == ""
    with pytest.raises(FormatError) as info:
        ExpertCache.open(box, n_slots=2)
    assert "from-header" not in str(info.value)
    assert str(info.value).startswith(str(shard))
