"""The streaming expert cache: a C core with a Python face."""

from engine import errors
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
    MisuseError,
    NotFoundError,
    OutOfMemoryError,
    ShortReadError,
)
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
    "MisuseError",
    "NotFoundError",
    "OutOfMemoryError",
    "ShortReadError",
    "TensorInfo",
    "drop_page_cache",
    "errors",
]
