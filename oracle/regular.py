"""Only regular files are read (docs/DESIGN.md, "Only regular files").

A FIFO named where a shard, a trace, a config or a layout belongs would make a
plain ``open()`` wait for a writer forever (and ``open`` retries on EINTR,
so Ctrl-C cannot end it); a directory or ``/dev/zero`` is read as garbage.
:func:`open_regular` opens with ``O_NONBLOCK`` -- which never waits -- then
asks ``fstat`` what was opened, and refuses anything but a regular file with
:class:`NotRegularFileError` naming the file and what it is, before a single
byte is read. The engine has its own copy (``engine/regular.py``: the engine
never imports the oracle); fixtures and the lab use this one.
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


def read_regular(path: str | os.PathLike[str]) -> bytes:
    """All the bytes of a regular file; NotRegularFileError for anything else."""
    with open_regular(path) as f:
        return f.read()
