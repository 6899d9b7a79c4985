"""Byte-level corruptors: from a valid safetensors file, each DESIGN §3 error.

Every ``make_<kind>(src, dst)`` function writes a corrupted copy of the valid
file ``src`` to ``dst`` and returns a :class:`Corruption`: the
``FormatError.kind`` the engine must raise and the absolute byte ``offset``
its error record must carry, by the engine's convention (``xc_st.c``): the
file's length for ``too_short`` and ``header_past_end``, 0 (the N field) for
``header_too_large``, the offending byte for ``not_utf8``, ``json``,
``schema`` and ``dtype`` (for the last two, the start of the bad value), the
entry's name (its opening quote) for ``duplicate`` (the second one),
``offsets``, ``overflow``, ``bits`` and ``size``, and the first byte where
data and file disagree for ``length``.  The oracle (``oracle.safetensors``)
must agree on the kind; its offsets follow its own documented convention.

None reads a file's data buffer into memory or fills its holes: the header
is read alone and the data copied extent by extent (:func:`_write`), so a
sparse shard of huge-sparse (20 GB, nearly all holes) costs its few MB, as
it does for ``gate.containers.copy_sparse``.

The others act on a file in place: :func:`truncate_at`, :func:`flip_byte`,
:func:`append_trailing`, and for files open in a container
:func:`shrink_in_place` (ftruncate: the open descriptor sees it) and
:func:`replace_same_size` (a new file renamed over the path: the open
descriptor keeps the old inode).  :func:`drop_from_index` removes a tensor
from a sharded container's index.
"""

from __future__ import annotations

import errno
import json
import os
import struct
from collections.abc import Callable
from json.decoder import scanstring
from pathlib import Path
from typing import Any, NamedTuple

from xcache.oracle.bounds import HEADER_MAX_BYTES

HEADER_START = 8
#: the largest header length N a reader accepts (DESIGN §3; xc.h's bound)
HEADER_CAP = HEADER_MAX_BYTES


class Corruption(NamedTuple):
    """What the engine must report for a corrupted file."""

    kind: str
    offset: int | None


def _split(raw: bytes) -> tuple[int, str, bytes]:
    """(N, header text, data) of a valid safetensors file's bytes."""
    (n,) = struct.unpack_from("<Q", raw, 0)
    return n, raw[HEADER_START:HEADER_START + n].decode(), raw[HEADER_START + n:]


def read_head(src: Path) -> tuple[bytes, int]:
    """(the first 8 + N bytes, the file's length) of a valid safetensors file."""
    with open(src, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        (n,) = struct.unpack("<Q", f.read(HEADER_START))
        return struct.pack("<Q", n) + f.read(n), size


def data_extents(fd: int, start: int, end: int) -> list[tuple[int, int]]:
    """The (begin, end) byte runs of ``[start, end)`` that hold data, not holes."""
    out = []
    at = start
    while at < end:
        try:
            at = os.lseek(fd, at, os.SEEK_DATA)
        except OSError as e:
            if e.errno == errno.ENXIO:  # only a hole remains
                break
            raise
        if at >= end:
            break
        stop = min(os.lseek(fd, at, os.SEEK_HOLE), end)
        out.append((at, stop))
        at = stop
    return out


def _write(dst: Path, head: bytes, src: Path, start: int, end: int,
           tail: bytes = b"", data: Callable[[bytes], bytes] | None = None
           ) -> None:
    """Write ``head``, then ``src``'s bytes ``[start, end)``, then ``tail``, to dst.

    The middle is copied extent by extent, a hole of ``src`` staying a hole
    (it reads as zeros either way); ``data``, if given, maps each copied
    block (a hole is never handed to it).
    """
    with open(src, "rb") as fi, open(dst, "wb") as fo:
        fd, out = fi.fileno(), fo.fileno()
        os.pwrite(out, head, 0)
        shift = len(head) - start
        for begin, stop in data_extents(fd, start, end):
            while begin < stop:
                block = os.pread(fd, min(stop - begin, 1 << 20), begin)
                if not block:
                    raise OSError(f"{src}: ends at byte {begin}")
                os.pwrite(out, data(block) if data else block, begin + shift)
                begin += len(block)
        os.ftruncate(out, len(head) + max(0, end - start))
        if tail:
            os.pwrite(out, tail, len(head) + max(0, end - start))


def _header_of(head: bytes) -> tuple[int, str]:
    """(N, header text) of the first 8 + N bytes of a safetensors file."""
    (n,) = struct.unpack_from("<Q", head, 0)
    return n, head[HEADER_START:HEADER_START + n].decode()


def write_with_header(src: Path, dst: Path, text: str, pad: bool = True) -> None:
    """dst: src with its header replaced by ``text`` (padded unless not ``pad``)."""
    head, size = read_head(src)
    h = text.encode()
    if pad:
        h += b" " * (-len(h) % 8)
    _write(dst, struct.pack("<Q", len(h)) + h, src, len(head), size)


def _dump(doc: dict[str, Any]) -> str:
    """The header's JSON in the writers' style (DESIGN §3 separators)."""
    return json.dumps(doc, separators=(", ", ": "))


def _members(text: str, at: int) -> list[tuple[str, int, int, int]]:
    """The members of the JSON object whose ``{`` is at ``at`` in ``text``,
    in the text's order (a repeated key each time): (key, its opening
    quote, its value's first character, the value's end).

    Whatever the writer's spacing and escapes (the official writer's
    compact JSON, this project's spaced one)."""
    end = json.JSONDecoder().raw_decode(text, at)[1]  # a valid object, or raise
    ws = " \t\n\r"
    out, i = [], at + 1
    while True:
        while text[i] in ws:
            i += 1
        if i >= end - 1:  # its closing brace
            return out
        if text[i] == ",":
            i += 1
            continue
        quote = i
        key, i = scanstring(text, i + 1)
        while text[i] in ws + ":":
            i += 1
        value_end = json.JSONDecoder().raw_decode(text, i)[1]
        out.append((key, quote, i, value_end))
        i = value_end


def _entry(header: str, name: str, nth: int = 0) -> tuple[int, int]:
    """(opening quote of entry ``name``'s key, its value's ``{``): its
    ``nth`` occurrence in the header."""
    found = [(q, v) for k, q, v, _ in _members(header, header.index("{"))
             if k == name]
    return found[nth]


def _name_at(header: str, name: str, nth: int = 0) -> int:
    """Absolute file offset of the opening quote of entry ``name`` (nth occurrence)."""
    at = _entry(header, name, nth)[0]
    return HEADER_START + len(header[:at].encode())


def _value_at(header: str, name: str, field: str) -> int:
    """Absolute file offset of the value of ``field`` in entry ``name``."""
    at = next(v for k, _, v, _ in _members(header, _entry(header, name)[1])
              if k == field)
    return HEADER_START + len(header[:at].encode())


def _names(header: str) -> list[str]:
    return [k for k in json.loads(header) if k != "__metadata__"]


def _rewrite(src: Path, dst: Path,
             edit: Callable[[dict[str, Any], list[str]], str]) -> str:
    """Rewrite src's header as a dict; ``edit`` mutates it and names an entry.

    Returns the new header text; the data buffer is copied unchanged.
    """
    _, header = _header_of(read_head(src)[0])
    doc = json.loads(header)
    edit(doc, _names(header))
    text = _dump(doc)
    write_with_header(src, dst, text)
    return text


# -- one function per DESIGN §3 kind ----------------------------------------

def make_too_short(src: Path, dst: Path) -> Corruption:
    """Five bytes: shorter than the 8-byte length field."""
    with open(src, "rb") as f:
        Path(dst).write_bytes(f.read(5))
    return Corruption("too_short", 5)


def make_header_too_large(src: Path, dst: Path) -> Corruption:
    """N = 100,000,001: above the cap, whatever follows."""
    size = os.path.getsize(src)
    _write(dst, struct.pack("<Q", 100_000_001), src, HEADER_START, size)
    return Corruption("header_too_large", 0)


def make_header_past_end(src: Path, dst: Path) -> Corruption:
    """N = the file's length, so 8 + N passes the end.

    A file longer than the header cap (N at most 100,000,000, DESIGN §3)
    would then break the cap first: its copy is cut one byte into its
    header instead, the same check broken at the copy's length.
    """
    size = os.path.getsize(src)
    if size <= HEADER_CAP:
        _write(dst, struct.pack("<Q", size), src, HEADER_START, size)
        return Corruption("header_past_end", size)
    head, _ = read_head(src)
    Path(dst).write_bytes(head[:-1])
    return Corruption("header_past_end", len(head) - 1)


def make_not_utf8(src: Path, dst: Path) -> Corruption:
    """Byte 0xFF inside the first tensor name."""
    head, size = read_head(src)
    _, header = _header_of(head)
    raw = bytearray(head)
    at = _name_at(header, _names(header)[0]) + 2
    raw[at] = 0xFF
    _write(dst, bytes(raw), src, len(head), size)
    return Corruption("not_utf8", at)


def make_json(src: Path, dst: Path) -> Corruption:
    """The first entry's ':' becomes ';' (same length): not JSON there."""
    head, size = read_head(src)
    _, header = _header_of(head)
    raw = bytearray(head)
    name = _names(header)[0]
    at = _name_at(header, name) + len(json.dumps(name).encode())
    assert raw[at] == ord(":")
    raw[at] = ord(";")
    _write(dst, bytes(raw), src, len(head), size)
    return Corruption("json", at)


def make_schema(src: Path, dst: Path) -> Corruption:
    """The second entry's dtype is a number, not a string."""
    def edit(doc: dict[str, Any], names: list[str]) -> None:
        doc[names[1]]["dtype"] = 8
    text = _rewrite(src, dst, edit)
    return Corruption("schema", _value_at(text, _names(text)[1], "dtype"))


def make_dtype(src: Path, dst: Path) -> Corruption:
    """The second entry's dtype is "U9", which no reader knows."""
    def edit(doc: dict[str, Any], names: list[str]) -> None:
        doc[names[1]]["dtype"] = "U9"
    text = _rewrite(src, dst, edit)
    return Corruption("dtype", _value_at(text, _names(text)[1], "dtype"))


def make_duplicate(src: Path, dst: Path) -> Corruption:
    """The second entry renamed to the first's name (same text, same length)."""
    _, header = _header_of(read_head(src)[0])
    first, second = _names(header)[:2]
    at = _entry(header, second)[0]
    text = header[:at] + json.dumps(first) + header[scanstring(header, at + 1)[1]:]
    write_with_header(src, dst, text, pad=False)
    return Corruption("duplicate", _name_at(text, first, nth=1))


def make_offsets(src: Path, dst: Path) -> Corruption:
    """The second tensor starts one byte late: a gap after the first."""
    def edit(doc: dict[str, Any], names: list[str]) -> None:
        doc[names[1]]["data_offsets"][0] += 1
    text = _rewrite(src, dst, edit)
    return Corruption("offsets", _name_at(text, _names(text)[1]))


def make_overflow(src: Path, dst: Path) -> Corruption:
    """The second tensor claims 2**40 x 2**40 elements (past 64 bits)."""
    def edit(doc: dict[str, Any], names: list[str]) -> None:
        doc[names[1]]["shape"] = [2**40, 2**40]
    text = _rewrite(src, dst, edit)
    return Corruption("overflow", _name_at(text, _names(text)[1]))


def make_bits(src: Path, dst: Path) -> Corruption:
    """The second tensor becomes one F4 element: 4 bits, not whole bytes."""
    def edit(doc: dict[str, Any], names: list[str]) -> None:
        doc[names[1]]["dtype"] = "F4"
        doc[names[1]]["shape"] = [1, 1]
    text = _rewrite(src, dst, edit)
    return Corruption("bits", _name_at(text, _names(text)[1]))


def make_size(src: Path, dst: Path) -> Corruption:
    """The second tensor's shape loses one column: its range is too long."""
    def edit(doc: dict[str, Any], names: list[str]) -> None:
        shape = doc[names[1]]["shape"]
        shape[-1] -= 1
    text = _rewrite(src, dst, edit)
    return Corruption("size", _name_at(text, _names(text)[1]))


def make_length(src: Path, dst: Path) -> Corruption:
    """The last 100 data bytes are gone: data ends past the file."""
    size = os.path.getsize(src)
    _write(dst, b"", src, 0, size - 100)
    return Corruption("length", size - 100)


def make_trailing(src: Path, dst: Path) -> Corruption:
    """Three stray bytes after the data buffer."""
    size = os.path.getsize(src)
    _write(dst, b"", src, 0, size, tail=b"\0\0\0")
    return Corruption("length", size)


#: Every single-file corruptor by the kind it produces (``length`` twice).
MAKERS: dict[str, Callable[[Path, Path], Corruption]] = {
    "too_short": make_too_short,
    "header_too_large": make_header_too_large,
    "header_past_end": make_header_past_end,
    "not_utf8": make_not_utf8,
    "json": make_json,
    "schema": make_schema,
    "dtype": make_dtype,
    "duplicate": make_duplicate,
    "offsets": make_offsets,
    "overflow": make_overflow,
    "bits": make_bits,
    "size": make_size,
    "length": make_length,
    "trailing": make_trailing,
}


# -- in place ---------------------------------------------------------------

def truncate_at(path: Path, offset: int) -> None:
    """Cut the file to ``offset`` bytes in place (an open descriptor sees it)."""
    os.truncate(path, offset)


def shrink_in_place(path: Path, new_size: int) -> None:
    """Shrink a file that a container holds open (same inode, fewer bytes)."""
    with open(path, "r+b") as f:
        f.truncate(new_size)


def flip_byte(path: Path, offset: int, mask: int = 0xFF) -> int:
    """XOR the byte at ``offset`` with ``mask`` in place; return its new value."""
    with open(path, "r+b") as f:
        f.seek(offset)
        b = f.read(1)[0] ^ mask
        f.seek(offset)
        f.write(bytes([b]))
    return b


def append_trailing(path: Path, extra: bytes = b"\0\0\0") -> int:
    """Append bytes after the data buffer; return the old length (the error offset)."""
    size = os.path.getsize(path)
    with open(path, "ab") as f:
        f.write(extra)
    return size


#: every byte inverted (``bytes.translate``)
_INVERT = bytes(b ^ 0xFF for b in range(256))


def replace_same_size(path: Path, content: bytes | None = None) -> None:
    """Atomically rename a new file of the same size over ``path``.

    Without ``content`` the new file is the old one with every stored data
    byte inverted (the header kept, so it is still valid and the same size;
    a sparse file's holes stay holes, reading as zeros): a reader that
    silently followed the path would serve different bytes.
    """
    p = Path(path)
    tmp = p.with_name(p.name + ".replacing")
    size = os.path.getsize(p)
    if content is not None:
        if len(content) != size:
            raise ValueError(f"replacement is {len(content)} bytes, not {size}")
        tmp.write_bytes(content)
    else:
        head, _ = read_head(p)
        _write(tmp, head, p, len(head), size,
               data=lambda block: block.translate(_INVERT))
    os.replace(tmp, p)


def drop_from_index(folder: Path, name: str | None = None) -> str:
    """Remove one tensor (the last, by default) from the folder's index weight_map.

    Returns the name removed; the shard still holds it, so the index no longer
    agrees with the shard (kind ``index``).
    """
    index = Path(folder) / "model.safetensors.index.json"
    doc = json.loads(index.read_text())
    wm = doc["weight_map"]
    if name is None:
        name = list(wm)[-1]
    del wm[name]
    index.write_text(json.dumps(doc, indent=2))
    return name
