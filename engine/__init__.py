"""The streaming expert cache: a C core with a Python face."""

from engine import errors
from engine.container import Container, TensorInfo
from engine.errors import (
    AllPinnedError,
    BudgetError,
    EngineError,
    EngineIOError,
    FileChangedError,
    FormatError,
    MisuseError,
    NotFoundError,
    OutOfMemoryError,
    ShortReadError,
)

__all__ = [
    "AllPinnedError",
    "BudgetError",
    "Container",
    "EngineError",
    "EngineIOError",
    "FileChangedError",
    "FormatError",
    "MisuseError",
    "NotFoundError",
    "OutOfMemoryError",
    "ShortReadError",
    "TensorInfo",
    "errors",
]
