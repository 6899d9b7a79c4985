#!/usr/bin/env python3
"""The coverage-guided fuzz target: bytes -> a container on disk -> the C reader.

Run through ``python -m xcache.hunt.fuzz run`` (which builds the instrumented
engine and sets up the sanitizer runtime); this file is the libFuzzer
entry point that command starts.  Each input is decoded by
``hunt.fuzz.inputs.materialise`` (raw file, header, or index), opened by
``engine.Container`` and by the oracle reader, and the two verdicts are
compared by ``hunt.fuzz.verdicts.compare_oracle``: a sanitizer report, a
crash or a disagreement is a finding, saved by libFuzzer as ``crash-*``.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile

import atheris

from xcache.hunt.fuzz import inputs, verdicts

_DIR = tempfile.mkdtemp(
    prefix="xc-fuzz-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None
)


def _clear() -> None:
    for entry in os.scandir(_DIR):
        if entry.is_dir(follow_symlinks=False):
            shutil.rmtree(entry.path)
        else:
            os.unlink(entry.path)


def test_one_input(data: bytes) -> None:
    """libFuzzer's callback: one input through both readers."""
    _clear()
    path = inputs.materialise(data, _DIR)
    verdicts.compare_oracle(path)


def main() -> None:
    """Hand sys.argv (libFuzzer flags, corpus folders) to atheris and fuzz."""
    from xcache import engine  # noqa: F401  (load the instrumented build before fuzzing)

    atheris.Setup(sys.argv, test_one_input)
    try:
        atheris.Fuzz()
    finally:
        shutil.rmtree(_DIR, ignore_errors=True)


if __name__ == "__main__":
    main()
