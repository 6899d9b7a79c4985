"""Only regular files are read (docs/DESIGN.md, "Only regular files").

A FIFO named where a shard, a trace, a config or a layout belongs would make a
plain ``open()`` wait for a writer forever (and ``open`` retries on EINTR,
so Ctrl-C cannot end it); a directory or ``/dev/zero`` is read as garbage.
:func:`open_regular` opens with ``O_NONBLOCK`` -- which never waits -- then
asks ``fstat`` what was opened, and refuses anything but a regular file with
:class:`NotRegularFileError` naming the file and what it is, before a single
byte is read. This is the engine's copy, for the engine's Python (layout
files, config.json); the engine never imports the oracle, which has its own
(``oracle/regular.py``, used by the oracle, fixtures and the lab). The C
reader holds the same rule in ``xc_open_regular`` (engine/csrc/xc_io.c).
"""

from __future__ import annotations

import os
import stat
from typing import IO, Any

#: What a file of each type is, for the message.
_KINDS = {
    stat.S_IFDIR: "a directory", stat.S_IFIFO: "a FIFO",
    stat.S_IFCHR: "a character device", stat.S_IFBLK: "a block device",
    stat.S_IFSOCK: "a socket", stat.S_IFLNK: "a symbolic link",
}


class NotRegularFileError(OSError):
    """A path names a FIFO, a directory, a device... where a regular file is read.

    ``str()`` is the whole line ("PATH: is a FIFO, not a regular file; only
    regular files are read"); ``strerror`` the part after the path, for
    callers that name the file themselves; ``filename`` the path; ``kind``
    what it is ("a FIFO").
    """

    def __init__(self, path: str, kind: str) -> None:
        why = f"is {kind}, not a regular file; only regular files are read"
        super().__init__(f"{path}: {why}")
        self.strerror = why
        self.filename = path
        self.kind = kind

    def __str__(self) -> str:
        return f"{self.filename}: {self.strerror}"


def file_kind(mode: int) -> str:
    """What a file of st_mode is ("a FIFO", "a directory", ...)."""
    return _KINDS.get(stat.S_IFMT(mode), "not a regular file")


def open_regular(path: str | os.PathLike[str], mode: str = "rb",
                 encoding: str | None = None) -> IO[Any]:
    """Open a regular file for reading ("rb", or "r" with encoding), never blocking.

    Raises NotRegularFileError (an OSError) naming the file if it is anything
    else, and the OSError of ``open()`` (FileNotFoundError, ...) if it cannot
    be opened; nothing is left open after a failure.
    """
    if mode not in ("rb", "r"):
        raise ValueError(f"open_regular reads only: mode {mode!r}")
    name = os.fspath(path)
    fd = os.open(name, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise NotRegularFileError(os.fsdecode(name), file_kind(st.st_mode))
        # O_NONBLOCK is cleared for the reads.  A stat that is no
        # os.stat_result is a fake file system's (pyfakefs, in tests): its
        # descriptor is no kernel one, so there is no flag to clear.
        if isinstance(st, os.stat_result):
            os.set_blocking(fd, True)
        if mode == "r":
            return open(fd, encoding=encoding or "utf-8", closefd=True)
        return open(fd, "rb", closefd=True)
    except BaseException:
        os.close(fd)
        raise


#: The most bytes :func:`read_regular` reads when its caller states no limit.
MAX_READ_BYTES = 256 << 20


class TooLargeError(OSError):
    """A regular file past the limit of what reads it (a sparse TiB, say).

    ``str()`` is the whole line ("PATH: larger than the limit of N bytes
    for WHAT"); ``strerror`` the part after the path; ``limit`` the limit.
    """

    def __init__(self, path: str, limit: int, what: str = "") -> None:
        why = f"larger than the limit of {limit:,} bytes" + (
            f" for {what}" if what else "")
        super().__init__(f"{path}: {why}")
        self.strerror = why
        self.filename = path
        self.limit = limit

    def __str__(self) -> str:
        return f"{self.filename}: {self.strerror}"


def read_capped(f: IO[Any], path: str | os.PathLike[str], max_bytes: int,
                what: str = "") -> Any:
    """Every byte (or character) of the open regular file ``f``, at most ``max_bytes``.

    Its size is asked first (a sparse terabyte is refused unread), then
    one byte past the limit is read (a file that grew is refused too):
    TooLargeError naming ``path``, the limit and ``what`` it is.
    """
    size = os.fstat(f.fileno()).st_size
    data = f.read(max_bytes + 1) if size <= max_bytes else None
    if data is None or len(data) > max_bytes:
        raise TooLargeError(os.fsdecode(path), max_bytes, what)
    return data


def read_regular(path: str | os.PathLike[str], max_bytes: int = MAX_READ_BYTES,
                 what: str = "") -> bytes:
    """All the bytes of a regular file of at most ``max_bytes``.

    NotRegularFileError for anything but a regular file, TooLargeError
    past the limit (both OSErrors naming the file).
    """
    with open_regular(path) as f:
        return read_capped(f, path, max_bytes, what)
