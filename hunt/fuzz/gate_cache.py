"""``python -m xcache.hunt.fuzz.gate_cache ADAPTER``: --cache's adapter step.

``replay.py --cache ADAPTER OUT`` reads the adapter's manifest
(``xcs.toml``), checks its capabilities and the digests of its sources,
then compiles the cache with its shim (several seconds of a C compiler)
and runs it.  This runs the steps before the compiler, with the gate's own
error handling (``gate/cli.py``): ``load_manifest``, ``capabilities_of``,
``verify_sources``.  Exit 0 with one ``OK`` line, or the gate's
``CANNOT RUN: ...`` line on stderr and exit 2.
"""

from __future__ import annotations

import sys
from pathlib import Path

from xcache.gate import EXIT_CANNOT_RUN
from xcache.hunt.fuzz.gate_files import as_gate


def main(argv: list[str] | None = None) -> int:
    """Check adapter ``argv[0]`` as the gate does before its build; the exit status."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m xcache.hunt.fuzz.gate_cache ADAPTER", file=sys.stderr)
        return EXIT_CANNOT_RUN

    def body() -> int:
        from xcache.gate.outside.backend import capabilities_of  # noqa: PLC0415
        from xcache.gate.outside.build import (  # noqa: PLC0415
            load_manifest,
            verify_sources,
        )

        m = load_manifest(Path(args[0]))
        capabilities_of(m)
        n = verify_sources(m)
        print(f"OK {m.name}: {n} pinned sources")
        return 0

    return as_gate(body)


if __name__ == "__main__":
    sys.exit(main())
