"""The oracle's model of the read path (docs/CACHE.md "How the bytes are read").

:class:`ReadPath` reads an expert as the engine does: through descriptors
opened at the start (a file replaced later keeps serving the bytes
validated then), one read per chunk or tensor
(:func:`oracle.layout.expert_reads`), each through the read loop
docs/CACHE.md states (interrupted preads retried, the
:data:`oracle.bounds.IO_MAX_RETRIES`-th in a row an I/O error; a partial
pread continued; end of file a short read), under the two modelled fault
injectors (faults/README.md); O_DIRECT loads through :mod:`oracle.reads`
(a read at end of file returns nothing, whatever its length: "O_DIRECT
and end of file"); and the file check as a load ends (a shard replaced,
or with ``verify`` changed in any way, is ``"changed"``).

A case the model does not decide raises :class:`oracle.errors.NotModelled`.
Never imports ``engine`` or ``gate``.
"""

from __future__ import annotations

import os
from typing import Any

from xcache.oracle.bounds import DIRECT_ALIGN, IO_MAX_RETRIES
from xcache.oracle.errors import NotModelled
from xcache.oracle.layout import expert_pieces, expert_reads, is_contiguous
from xcache.oracle.reads import direct_reads, probe_direct, window_ok
from xcache.oracle.safetensors import Container

#: A key: (layer id, expert).
Key = tuple[int, int]

#: Faults that interleave bursts of interrupted preads with progress.
_BURSTS = {"eintr_burst": "eintr", "eagain_burst": "eagain"}


class ReadPath:
    """The modelled reads of one :class:`oracle.reading_cache.ReadingCache`.

    :meth:`_open_reads` opens its descriptors and arms no fault; the
    backend's layout (``self.layout``) names the experts' tensors.
    """

    layout: dict[str, Any]

    def _open_reads(self, folder: Any, opts: dict[str, Any]) -> None:
        """Open every shard under ``folder`` and set the read options of ``opts``."""
        self.reader = Container(folder)
        self.chunk_bytes = int(opts.get("chunk_bytes", 0))
        self.verify = bool(opts.get("verify"))
        # Reads go through descriptors opened now, as the engine's do, so a
        # file replaced later keeps serving the bytes validated at open.
        self.fds: dict[str, tuple[int, tuple[int, int, int]]] = {}
        for shard in self.reader.shards():
            fd = os.open(shard, os.O_RDONLY)
            self.fds[shard] = (fd, _identity(os.fstat(fd)))
        self.opened = {s: os.fstat(fd) for s, (fd, _) in self.fds.items()}
        #: the two modelled injectors (the first forwards to the second)
        self.faults: list[dict[str, Any] | None] = [None, None]
        #: which shards read with O_DIRECT; the bytes each key's last load asked
        self.direct = _direct_shards(self, bool(opts.get("direct")))
        self.asked: dict[tuple[int, int], int] = {}
        #: whether a stall fired during the current load
        self._stalled_now = False

    def _close_reads(self) -> None:
        """Close the held descriptors."""
        for fd, _ in self.fds.values():
            os.close(fd)
        self.fds.clear()

    def _pread(self, want: int, shard: str = "", pos: int = 0) -> int | str:
        """One pread of ``want`` bytes at ``pos`` of ``shard`` through the
        modelled injectors (faults/io.py, xc_fault.c).

        Returns how many bytes it may return (``want``, or fewer for a
        ``partial`` fault or a burst's progress), or ``"eof"``, ``"eio"``,
        ``"eintr"`` or ``"eagain"``.  A fault counts the preads that reach
        it from its arming -- a placed one only those of its file covering
        its byte, a placed partial returning the bytes before it; the first
        injector's EOF, EIO or EINTR never reaches the second.  A burst of
        ``arg`` fails that many preads in a row from its nth, then lets one
        read at most ``progress`` bytes (0: as asked); persistent, the cycle
        repeats.  Page-cache faults (``nowait_*``) count no pread.
        """
        limit = want
        for f in self.faults:
            if f is None or f["fault"].startswith("nowait_"):
                continue
            place = f.get("place")
            if place is not None:
                name, at = place
                if os.path.basename(shard) != name or not \
                        pos <= at < pos + want or \
                        (f["fault"] == "partial" and at == pos):
                    continue
            f["reads"] += 1
            pos = f["reads"] - f["nth"]
            burst = _BURSTS.get(f["fault"])
            if pos < 0 or (not f["persistent"] and
                           pos > (f["arg"] if burst else 0)):
                continue
            f["fired"] = f.get("fired", 0) + 1
            if f["fault"] == "stall":  # the read goes on; it ends later
                self._stalled_now = True
                continue
            if burst is not None:
                if pos % (f["arg"] + 1) < f["arg"]:
                    return burst
                if 0 < f.get("progress", 0) < limit:
                    limit = int(f["progress"])
                continue
            if f["fault"] in ("eof", "eio", "eintr", "eagain"):
                return str(f["fault"])
            if f["fault"] == "partial" and place is not None:
                limit = min(limit, place[1] - pos)
            elif f["fault"] == "partial" and 0 <= f["arg"] < limit:
                limit = int(f["arg"])
        return limit

    def _nowait(self, want: int, shard: str, pos: int) -> int | str:
        """The loader's page-cache copy of a buffered piece (``pread_nowait``
        through the modelled injectors, xc_fault.c): the bytes it copies, or
        ``"eagain"``, ``"eio"`` or ``"unsupported"``.

        The first injector with a ``nowait_*`` fault armed answers: the call
        that meets it (its nth, or any after it if persistent) copies at
        most ``arg`` bytes, fails EAGAIN or EIO, or copies nothing (EOF);
        every other copy is whole up to the real end of file.  With none
        armed the injectors cannot tell.
        """
        for f in self.faults:
            if f is None or not f["fault"].startswith("nowait_"):
                continue
            f["reads"] += 1
            limit = want
            if f["reads"] == f["nth"] or (f["persistent"] and
                                          f["reads"] > f["nth"]):
                f["fired"] = f.get("fired", 0) + 1
                kind = f["fault"][len("nowait_"):]
                if kind in ("eagain", "eio"):
                    return kind
                limit = 0 if kind == "eof" else min(want, int(f["arg"]))
            size = os.fstat(self.fds[shard][0]).st_size
            return max(0, min(limit, size - pos))
        return "unsupported"

    def _nowait_armed(self) -> bool:
        """Whether a page-cache fault is armed (then every copy is modelled)."""
        return any(f is not None and f["fault"].startswith("nowait_")
                   for f in self.faults)

    def _steady_limit(self) -> int | None:
        """The limit every further pread has, when only a persistent partial
        fault can still act (others have fired or only delay); else None.

        Then :meth:`_read_full` reads the rest at once and counts the preads
        the C loop makes (a 44 MB expert at 7 bytes a pread is 6.3 M of them).
        """
        limit = None
        for f in self.faults:
            if f is None or f["fault"] in ("delay", "stall") or \
                    f["fault"].startswith("nowait_"):
                continue
            if f["fault"] in _BURSTS and (f["persistent"] or
                                          f["reads"] <= f["nth"] + f["arg"]):
                return None  # interrupts still to come
            if f.get("place") is not None and (f["persistent"] or
                                                f["reads"] < f["nth"]):
                return None  # meets only the preads over its byte
            if f["persistent"] and f["reads"] >= f["nth"]:
                if f["fault"] != "partial":
                    return None
                if f["arg"] >= 0:
                    limit = f["arg"] if limit is None else min(limit, f["arg"])
            elif f["reads"] < f["nth"]:
                return None  # still to fire
        return limit

    def _inert(self) -> bool:
        """Whether no armed fault can act on a further pread (none is armed,
        or each is a delay, or has fired once and is not persistent)."""
        return all(f is None or f["fault"] == "delay" or
                   (not f["persistent"] and not f["fault"].startswith("nowait_")
                    and f["reads"] >= f["nth"] + (f["arg"] if f["fault"]
                                                  in _BURSTS else 0))
                   for f in self.faults)

    def _read_runs(self, reads: list[tuple[str, int, int]], key: Key
                   ) -> tuple[list[bytes] | None, str | None, str]:
        """The reads of one load when no fault can act: (parts, failure, shard).

        Each pread of the C loop then returns all it is asked up to end of
        file, so the reads back to back in one shard (a chunked run: 10,755
        reads of 4 KiB for a 44 MB expert) are one real read, cut as the
        chunks; the first read that meets end of file is the short one, and
        ``asked`` adds every read up to it, as read one at a time.
        Returns the shard of the failed read (or of the last one).
        """
        parts: list[bytes] = []
        i = 0
        while i < len(reads):
            shard, at, _ = reads[i]
            j, end = i, at
            while j < len(reads) and reads[j][0] == shard and reads[j][1] == end:
                end += reads[j][2]
                j += 1
            fd = self.fds[shard][0]
            data = os.pread(fd, end - at, at)
            while len(data) < end - at:  # a pread returns at most 2 GiB
                more = os.pread(fd, end - at - len(data), at + len(data))
                if not more:
                    break
                data += more
            arrived = at + len(data)
            preads = 0
            for _, offset, nbytes in reads[i:j]:
                self.asked[key] += nbytes
                preads += 1
                if offset + nbytes > arrived:  # a part, then a pread of 0 bytes
                    self._count_preads(preads + (arrived > offset))
                    return None, "short", shard
            self._count_preads(preads)
            parts.append(data)
            i = j
        return parts, None, reads[-1][0] if reads else ""

    def _count_preads(self, n: int) -> None:
        """Count ``n`` preads at every armed fault (as :meth:`_pread` does)."""
        for f in self.faults:
            if f is not None:
                f["reads"] += n

    def _read_full(self, fd: int, offset: int, n: int, shard: str = ""
                   ) -> tuple[bytes | None, str | None]:
        """The read loop (docs/CACHE.md "How the bytes are read") over modelled preads.

        Interrupted preads are retried (the ``IO_MAX_RETRIES``-th in a row
        is an I/O error), partial ones continue where they stopped, end of
        file before ``n`` bytes is a short read.
        """
        buf = bytearray()
        retries = 0
        while len(buf) < n:
            step = self._steady_limit()
            if step:  # every further pread returns at most step bytes: at once
                rest = n - len(buf)
                data = os.pread(fd, rest, offset + len(buf))
                calls = -(-len(data) // step) + (len(data) < rest)
                for f in self.faults:
                    if f is not None:
                        f["reads"] += calls
                if len(data) < rest:
                    return None, "short"
                return bytes(buf + data), None
            r = self._pread(n - len(buf), shard, offset + len(buf))
            if r in ("eintr", "eagain"):
                retries += 1
                if retries < IO_MAX_RETRIES:
                    continue
                return None, "io"
            if r == "eio":
                return None, "io"
            if r == "eof":
                return None, "short"
            assert isinstance(r, int)
            data = os.pread(fd, r, offset + len(buf))
            if not data:
                return None, "short"
            if not buf and len(data) == n:  # whole at once: no copies
                return data, None
            buf += data
            retries = 0
        return bytes(buf), None

    def _load(self, layer: int, expert: int, may_stall: bool = False
              ) -> tuple[bytes | None, str | None]:
        """Read an expert as the engine would: (bytes, None) or (None, failure).

        A read that meets a stall is :class:`NotModelled` unless
        ``may_stall`` (the caller holds it under way: a background get, a
        read-ahead): the engine's call would wait for the release.
        """
        self._stalled_now = False
        got = self._load_now(layer, expert)
        if self._stalled_now and not may_stall:
            raise NotModelled(f"a read of layer {layer} expert {expert} met a "
                            "stall in a call that waits for it (only a "
                            "background_get or a read-ahead may be held)")
        return got

    def _load_now(self, layer: int, expert: int
                  ) -> tuple[bytes | None, str | None]:
        """:meth:`_load`'s reads and end (the stall aside).

        A load makes the reads :func:`oracle.layout.expert_reads` lists (one
        per chunk of a contiguous expert or of a fused slice, one per
        per-expert tensor of a scattered expert), each through
        the C read loop's model (:meth:`_read_full`), and stops at the first
        that fails; armed faults meet the preads in that order.  When no
        armed fault can act (:meth:`_inert`), :meth:`_read_runs` reads the
        reads that lie back to back at once, with the same outcome.  Then, as
        the engine ends a load (faults/README.md "What the engine
        guarantees"): a failed read of a shard replaced or removed since
        open is ``"changed"`` (one resized in place keeps the read's own
        failure); with ``verify`` a load whose reads all succeeded is
        ``"changed"`` when any shard it read from changed in any way.  The
        bytes asked (``io_bytes``) are those of every read made either way.
        """
        lay = self.layout
        pieces = expert_pieces(self.reader, lay["expert_template"],
                               lay["tensors"], lay["n_experts"], layer, expert)
        direct = _direct_load(self, pieces)
        if direct is not None:
            self.asked[(layer, expert)] = direct[2]
            return self._end_load([pieces[0].shard], *direct[:2])
        parts = []
        self.asked[(layer, expert)] = 0
        reads = expert_reads(pieces, self.chunk_bytes)
        if self._inert():
            got, failure, shard = self._read_runs(reads, (layer, expert))
            if got is None:
                return self._end_load([shard], None, failure)
            return self._end_load(list(dict.fromkeys(p.shard for p in pieces)),
                                  b"".join(got), None)
        for shard, offset, nbytes in reads:
            fd, _ = self.fds[shard]
            self.asked[(layer, expert)] += nbytes
            # the page-cache copy first (xc_load.c read_piece): whole, the
            # piece is read; else all of it again through the read loop
            if nbytes and self._nowait(nbytes, shard, offset) == nbytes:
                parts.append(os.pread(fd, nbytes, offset))
                continue
            data, failure = self._read_full(fd, offset, nbytes, shard)
            if failure is not None:
                return self._end_load([shard], None, failure)
            parts.append(data)
        return self._end_load(list(dict.fromkeys(p.shard for p in pieces)),
                              b"".join(parts), None)  # type: ignore[arg-type]

    def _end_load(self, shards: list[str], data: bytes | None,
                  failure: str | None) -> tuple[bytes | None, str | None]:
        """The load's outcome after the engine's file check (xc_load.c ``end_load``).

        ``shards`` are the shard of the failed read, or every shard a
        successful load read from.
        """
        if failure is None and not self.verify:
            return data, None
        for shard in shards:
            change = _shard_change(shard, self.opened[shard], self.fds[shard][0])
            if failure is None and change is not None:
                return None, "changed"
            if failure is not None and change == "identity":
                return None, "changed"
        return data, failure


def _direct_shards(backend: ReadPath, want: bool) -> dict[str, bool]:
    """Which shards of ``backend`` read with O_DIRECT (probed as in C)."""
    return {s: want and probe_direct(s) for s in backend.fds}


def _direct_load(backend: ReadPath, pieces: list[Any]
                 ) -> tuple[bytes | None, str | None, int] | None:
    """An O_DIRECT load of ``pieces``: (bytes or None, failure, bytes asked).

    None when the expert's shard does not read with O_DIRECT (the caller
    reads it buffered).  The widened pieces are read in order through the
    modelled injectors, each through the modelled C read loop that lets end
    of file end a piece quietly, whole only if the payload inside it
    arrived; the first failed one ends the load.
    """
    shard = pieces[0].shard
    if not backend.direct.get(shard):
        return None
    if not is_contiguous(pieces):
        raise NotModelled("the oracle models O_DIRECT reads of contiguous "
                        "experts only")
    offset, nbytes = pieces[0].offset, sum(p.nbytes for p in pieces)
    fd = backend.fds[shard][0]
    buf = bytearray()
    asked = 0
    for w in direct_reads(offset, nbytes, backend.chunk_bytes):
        asked += w.nbytes
        data, failure = _read_window(backend, fd, w.offset, w.nbytes,
                                     shard)
        if failure is not None:
            return None, failure, asked
        if not window_ok(w, len(data)):
            return None, "short", asked
        buf += data
    lo = offset - offset % DIRECT_ALIGN
    return bytes(buf[offset - lo:offset - lo + nbytes]), None, asked


#: The logical block an O_DIRECT read's length must be a multiple of (the
#: smallest one devices have; the gate's partial faults cut to 1, 7 or 100).
_LOGICAL_BLOCK = 512


def _read_window(backend: ReadPath, fd: int, offset: int, n: int,
                 shard: str = "") -> tuple[bytes, str | None]:
    """The read loop, end of file allowed (docs/CACHE.md "O_DIRECT and end of file").

    Returns the bytes that arrived before end of file, or a failure.  The
    descriptor is O_DIRECT: a pread that a ``partial`` fault cut to a length
    that is not a multiple of the logical block (:data:`_LOGICAL_BLOCK`) is
    refused by the kernel (EINVAL: an I/O error) -- unless it starts at or
    past end of file: such a read returns no bytes whatever its length (the
    kernel checks end of file first), and the piece ends there, whole if
    its payload arrived (:func:`oracle.reads.window_ok`).
    """
    buf = bytearray()
    retries = 0
    size = os.fstat(fd).st_size
    while len(buf) < n:
        r = backend._pread(n - len(buf), shard, offset + len(buf))
        if r in ("eintr", "eagain"):
            retries += 1
            if retries < IO_MAX_RETRIES:
                continue
            return bytes(buf), "io"
        if r == "eio":
            return bytes(buf), "io"
        if r == "eof":
            break
        if offset + len(buf) >= size:  # at end of file: nothing, no refusal
            break
        if isinstance(r, int) and r < n - len(buf) and r % _LOGICAL_BLOCK:
            return bytes(buf), "io"
        data = os.pread(fd, int(r), offset + len(buf))
        if not data:
            break
        buf += data
        retries = 0
    return bytes(buf), None


def _identity(st: os.stat_result) -> tuple[int, int, int]:
    """What tells one file from its replacement: inode, size, mtime."""
    return (st.st_ino, st.st_size, st.st_mtime_ns)


def _shard_change(path: str, opened: os.stat_result, fd: int) -> str | None:
    """How the file at ``path`` changed since it was opened (``xc_st_shard_changed``).

    ``"identity"`` when the path names another file or none, ``"size"``,
    ``"mtime"`` or ``"ctime"`` for the same file changed in place (the size
    as the path and as the open descriptor see it), None when unchanged.
    """
    try:
        now = os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        return "identity"
    if (now.st_dev, now.st_ino) != (opened.st_dev, opened.st_ino):
        return "identity"
    if now.st_size != opened.st_size or os.fstat(fd).st_size != opened.st_size:
        return "size"
    if now.st_mtime_ns != opened.st_mtime_ns:
        return "mtime"
    if now.st_ctime_ns != opened.st_ctime_ns:
        return "ctime"
    return None
