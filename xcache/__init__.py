"""xcache: a streaming expert cache for Mixture-of-Experts inference, and the
suite that verifies it.

Everything installed lives under this one import name.  The repository keeps
its top-level folders as the design lays them out, and the build maps each
to a subpackage (``pyproject.toml``, ``[tool.setuptools]``):

=====================  ======================================================
``xcache.engine``      the C core and its Python face (``engine/``)
``xcache.oracle``      the independent reference model (``oracle/``)
``xcache.fixtures``    the synthetic-shard and twin generator (``fixtures/``)
``xcache.gate``        the pinned replays that gate engine changes (``gate/``)
``xcache.lab``         the policy, prefetch and time labs (``lab/``)
``xcache.faults``      fault injection: I/O faults, corruptions (``faults/``)
``xcache.hunt``        the hunters that drive the gate: mutants, fuzzers
                       (``hunt/``)
``xcache.replay``      the front door behind ``xcache-replay``
=====================  ======================================================

``python -m xcache.data`` prints where the example data the README uses (the
shipped routing traces, the public checkpoints' descriptions) is installed.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

# A clone used in place (``python replay.py`` from its root, before or without
# ``pip install``): the design's folders sit beside this one, not inside it,
# so they join this package's search path.  An installed package holds them
# inside and needs nothing.
_HERE = Path(__file__).resolve().parent
if not (_HERE / "engine").is_dir() and (_HERE.parent / "engine" / "__init__.py"
                                         ).is_file():
    __path__.append(str(_HERE.parent))  # noqa: F821 - a package's own path

try:
    __version__: str = version("xcache")
except PackageNotFoundError:  # a clone used without installing
    __version__ = "0+unknown"
