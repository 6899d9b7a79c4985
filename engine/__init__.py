"""The streaming expert cache: a C core with a Python face.

Besides the cache and its errors, the package names what the C core holds
as tables: its policies with their parameters and defaults
(:func:`policy_table`) and the names its traces give read kinds and
outcomes (:func:`read_kind_names`, :func:`trace_outcome_names`).
"""

from xcache.engine import errors, layout
from xcache.engine._lib import policy_table, read_kind_names, trace_outcome_names
from xcache.engine.cache import Expert, ExpertCache
from xcache.engine.container import Container, TensorInfo
from xcache.engine.errors import (
    AllPinnedError,
    BudgetError,
    EngineError,
    EngineIOError,
    FileChangedError,
    FormatError,
    InvariantError,
    LayoutError,
    MisuseError,
    NotFoundError,
    OutOfMemoryError,
    ShortReadError,
)
from xcache.engine.layout import Layout
from xcache.engine.pagecache import drop_page_cache

__all__ = [
    "AllPinnedError",
    "BudgetError",
    "Container",
    "EngineError",
    "EngineIOError",
    "Expert",
    "ExpertCache",
    "FileChangedError",
    "FormatError",
    "InvariantError",
    "Layout",
    "LayoutError",
    "MisuseError",
    "NotFoundError",
    "OutOfMemoryError",
    "ShortReadError",
    "TensorInfo",
    "drop_page_cache",
    "errors",
    "layout",
    "policy_table",
    "read_kind_names",
    "trace_outcome_names",
]
