"""The scenario's options and the model's top-k reach the shim (xcs_shim.h ABI 2).

``xcs_layout.options`` carries top_k, direct, chunk_bytes, io_threads,
batch_threads and verify; a shim of ABI 1 still runs when its manifest
declares no option, and is refused with a line saying why when it does.
"""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import pytest

from tests.helpers import bad_adapter
from xcache.gate import CannotRun
from xcache.gate.backend_api import Declined
from xcache.gate.containers import make_target
from xcache.gate.outside.backend import (
    capabilities_of,
    check_table,
    outside_factory,
)
from xcache.gate.outside.build import compile_module, load_manifest
from xcache.gate.outside.host import Host

#: tinycache's check entry made to report the options its open was given
ECHO_OLD = "static int shim_check(void *h, char *msg, size_t cap)\n{\n"
ECHO_NEW = ECHO_OLD + """    if (seen.size) {
        snprintf(msg, cap, "top_k %d direct %d chunk_bytes %llu io_threads %d "
                 "batch_threads %d verify %d", seen.top_k, seen.direct,
                 (unsigned long long)seen.chunk_bytes, seen.io_threads,
                 seen.batch_threads, seen.verify);
        return 1;
    }
"""
KEEP_OLD = "    if (!honoured(l->options))\n"
KEEP_NEW = "    seen = *l->options;\n    if (0)\n"


def _host(adapter: Path, tmp: Path) -> tuple[Host, object, object]:
    m = load_manifest(adapter)
    caps = capabilities_of(m)
    with contextlib.redirect_stdout(io.StringIO()):
        so, modname = compile_module(m, tmp / "build")
    return Host(so, modname, tmp / "cache.log"), caps, m


def test_every_option_and_top_k_reach_the_shim(tmp_path: Path) -> None:
    """Each option a scenario gives is what the shim's open sees, and
    top_k is the container's."""
    adapter = bad_adapter(tmp_path, KEEP_OLD, KEEP_NEW)
    shim = (adapter / "shim.c").read_text().replace(
        ECHO_OLD, ECHO_NEW).replace(
        "static int honoured(", "static xcs_options seen;\n\n"
                                "static int honoured(")
    (adapter / "shim.c").write_text(shim)
    host, caps, m = _host(adapter, tmp_path)
    target = make_target("k3-mini", tmp_path)
    folder = tmp_path / "copy"
    target.populate(folder)
    try:
        check_table(host.start(), caps, m)
        for opts, want in [
            ({"direct": True, "chunk_bytes": 256, "io_threads": 2,
              "batch_threads": 3, "verify": True},
             "top_k 4 direct 1 chunk_bytes 256 io_threads 2 batch_threads 3 "
             "verify 1"),
            ({}, "top_k 4 direct 0 chunk_bytes 0 io_threads 0 "
                 "batch_threads 0 verify 0")]:
            make = outside_factory(host, caps, m.name, target,
                                   {"n_slots": 4, "policy": "lru", **opts})
            backend = make(folder)
            assert backend.values()["invariants"] == want
            backend.close()
    finally:
        host.close()


def test_tinycache_refuses_an_option_it_cannot_honour(tmp_path: Path) -> None:
    """tinycache's open refuses direct (it declares batch_threads only): the
    run is Declined (N/A naming the option and its value), never a FAIL."""
    host, caps, m = _host(Path(__file__).resolve().parents[2] / "examples" /
                          "tinycache", tmp_path)
    target = make_target("k3-mini", tmp_path)
    folder = tmp_path / "copy"
    target.populate(folder)
    try:
        make = outside_factory(host, caps, m.name, target,
                               {"n_slots": 4, "policy": "lru", "direct": True})
        with pytest.raises(Declined) as e:
            make(folder)
        assert e.value.needs == ["option:direct (1 refused at open)"]
        make = outside_factory(host, caps, m.name, target,
                               {"n_slots": 4, "policy": "lru",
                                "batch_threads": 2})
        make(folder).close()
    finally:
        host.close()


def test_a_shim_of_abi_1_runs_without_options(tmp_path: Path) -> None:
    """An ABI 1 shim whose manifest declares no option runs (exit 0)."""
    adapter = bad_adapter(tmp_path, "    .abi = XCS_ABI,", "    .abi = 1,",
                          ('options = ["batch_threads"]', "options = []"))
    host, caps, m = _host(adapter, tmp_path)
    try:
        check_table(host.start(), caps, m)
    finally:
        host.close()


@pytest.mark.parametrize(("abi", "text"), [
    ("1", "shim ABI 1 is given no options, yet the manifest declares "
            "options ['batch_threads'] honoured: options reach a shim of "
            "ABI 2 (xcs_layout.options)"),
    ("7", "shim ABI 7; the gate runs ABI 1 to 3 (set .abi = XCS_ABI"),
])
def test_a_shim_of_another_abi_is_refused_saying_why(
        tmp_path: Path, abi: str, text: str) -> None:
    """An ABI 1 shim declaring an option, or an ABI the gate does not know:
    CannotRun naming the shim and what to do."""
    adapter = bad_adapter(tmp_path, "    .abi = XCS_ABI,", f"    .abi = {abi},")
    host, caps, m = _host(adapter, tmp_path)
    try:
        with pytest.raises(CannotRun, match=re.escape(text)):
            check_table(host.start(), caps, m)
    finally:
        host.close()
