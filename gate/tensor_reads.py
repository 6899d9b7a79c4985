"""The differential check ``tensor-reads``: every tensor through every read mode.

The scenarios read experts through the cache; a user (``engine.inspector``,
a twin's verification, a tool of their own) also reads whole tensors
through ``engine.Container.read``, which takes its own path in C
(``xc_st_read_tensor``): a plain ``pread`` loop, or with ``direct=True`` an
aligned bounce buffer copied out chunk by chunk.  This check opens every
home preset of the gate (per-expert, fused, dense-leading, sharded) plain,
with ``verify`` and with ``direct`` where the file system takes O_DIRECT,
reads every tensor and compares its bytes with the oracle's reader
(``oracle.safetensors.Container.read_bytes``).  One check line; the first
tensor that differs is named with its container, mode and byte offset.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

#: The containers read: the gate's home presets.
PRESETS = ("k3-mini", "granite-mini", "mixtral-mini", "deepseek-mini",
           "gptoss-mini")
#: The read modes: ``engine.Container`` keyword arguments.
MODES: dict[str, dict[str, bool]] = {
    "plain": {}, "verify": {"verify": True}, "direct": {"direct": True}}


def _first_difference(got: bytes, want: bytes) -> str:
    """Where two byte strings first differ, in words."""
    if len(got) != len(want):
        return f"{len(got)} bytes, not {len(want)}"
    at = next(i for i in range(len(got)) if got[i] != want[i])
    return f"byte {at} is {got[at]}, not {want[at]}"


def compare(engine: Any, folder: Path, direct_ok: bool) -> tuple[int, list[str]]:
    """Tensors read from ``folder`` in every mode, and each difference found."""
    from xcache.oracle.safetensors import Container as OracleContainer  # noqa: PLC0415

    oracle = OracleContainer(folder)
    names = oracle.names()
    read, wrong = 0, []
    for mode, kwargs in MODES.items():
        if mode == "direct" and not direct_ok:
            continue
        cont = engine.Container(str(folder), **kwargs)
        try:
            for name in names:
                got = cont.read(name).tobytes()
                read += 1
                want = oracle.read_bytes(name)
                if got != want:
                    wrong.append(f"{folder.name} {mode} {name}: "
                                 f"{_first_difference(got, want)}")
        finally:
            cont.close()
    return read, wrong


def _tiny(folder: Path) -> Path:
    """A container of one shard of 3 small tensors, 200-odd bytes in all."""
    import json  # noqa: PLC0415
    import struct  # noqa: PLC0415

    folder.mkdir(parents=True, exist_ok=True)
    header, data = {}, b""
    for i, n in enumerate((16, 48, 64)):
        header[f"t{i}"] = {"dtype": "U8", "shape": [n],
                           "data_offsets": [len(data), len(data) + n]}
        data += bytes((i * 31 + j) % 251 for j in range(n))
    text = json.dumps(header, separators=(",", ":")).encode()
    (folder / "model.safetensors").write_bytes(
        struct.pack("<Q", len(text)) + text + data)
    return folder


def run_checks(engine: Any, work: Path, report: Any) -> list[str]:
    """Read every tensor of every home preset in every mode; one check line."""
    from xcache.gate.containers import make_target  # noqa: PLC0415
    from xcache.oracle.reads import probe_direct  # noqa: PLC0415

    read, wrong, modes = 0, [], set()
    for ref in PRESETS:
        target = make_target(ref, work)
        folder = target.pristine
        shard = next(p for p in sorted(folder.iterdir())
                     if p.name.endswith(".safetensors"))
        direct_ok = bool(probe_direct(str(shard)))
        modes |= {m for m in MODES if m != "direct" or direct_ok}
        n, bad = compare(engine, folder, direct_ok)
        read += n
        wrong += bad
    # a file smaller than one O_DIRECT block: its probe meets the end of
    # the file, which is no failure (the file reads with O_DIRECT or not
    # as the oracle's probe says, and serves the same bytes either way)
    tiny = _tiny(work / "tensor-reads-tiny")
    direct_ok = bool(probe_direct(str(tiny / "model.safetensors")))
    n, bad = compare(engine, tiny, direct_ok)
    read += n
    wrong += bad
    cont = engine.Container(str(tiny), direct=True)
    try:
        if bool(cont.direct_active) != direct_ok:
            wrong.append(f"{tiny.name} direct: direct_active is "
                         f"{cont.direct_active}, not {direct_ok} (the oracle's "
                         "probe of a file smaller than one block)")
    finally:
        cont.close()
    name = "tensor-reads"
    detail = (f"{read} tensor reads of {len(PRESETS) + 1} containers "
              f"({', '.join(m for m in MODES if m in modes)}), every byte the "
              "oracle's" if not wrong else
              f"{len(wrong)} of {read} tensor reads differ; first: {wrong[0]}")
    report.add(name, "engine", name, not wrong, detail, 0, len(wrong))
    return [name]
