"""The streaming expert cache: a C core with a Python face."""

from engine import errors, layout
from engine.cache import Expert, ExpertCache
from engine.container import Container, TensorInfo
from engine.errors import (
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
from engine.layout import Layout
from engine.pagecache import drop_page_cache

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
]
