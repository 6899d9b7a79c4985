"""``python replay.py ...``: the clone's front door, the same as ``xcache-replay``.

The commands live in :mod:`xcache.replay` (gate, lab, predict, time); this
file only runs them, so that ``python replay.py <dir>`` works from the
clone's root once ``pip install -e .`` has built the engine.
"""

from __future__ import annotations

import sys

try:
    from xcache.replay import main
except ModuleNotFoundError as e:  # a clone never installed: one line, no trace
    if not (e.name or "").startswith("xcache"):
        raise
    print(f"replay.py: cannot import {e.name} ({e}); install the clone first: "
          "`pip install -e .` in its root (README, 'Two commands')",
          file=sys.stderr)
    raise SystemExit(2) from None

if __name__ == "__main__":
    sys.exit(main())
