"""``python -m xcache.hunt.fuzz.gate_container REF``: --container's container step.

``replay.py gate DIR --container REF`` builds the engine (about 20 s) before
it opens the container, which is too slow to fuzz.  This runs the same
container step on this checkout's engine, with the gate's own error
handling (``gate/cli.py``): ``precheck``, then ``make_target`` (the layout,
every key's pieces).  Exit 0 with one ``OK`` line, or the gate's
``CANNOT RUN: ...`` line on stderr and exit 2.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from xcache.gate import EXIT_CANNOT_RUN
from xcache.gate.containers import make_target, precheck
from xcache.hunt.fuzz.gate_files import as_gate


def main(argv: list[str] | None = None) -> int:
    """Load container ``argv[0]`` as the gate does; return the exit status."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m xcache.hunt.fuzz.gate_container REF", file=sys.stderr)
        return EXIT_CANNOT_RUN
    ref = args[0]

    def body() -> int:
        precheck(ref)
        with tempfile.TemporaryDirectory() as work:
            target = make_target(ref, Path(work))
            print(f"OK {ref}: {len(target.keys)} keys")
        return 0

    return as_gate(body)

if __name__ == "__main__":
    sys.exit(main())
