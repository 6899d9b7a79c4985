"""An independent safetensors reader, written from docs/DESIGN.md §3.

A file is an 8-byte little-endian u64 ``N``, ``N`` bytes of UTF-8 JSON, then
the data buffer. The checks run in the fixed order below and the first that
fails raises :class:`~oracle.errors.OracleFormatError` with its ``kind``:

 1. ``too_short``         the file has fewer than 8 bytes (offset: file length)
 2. ``header_too_large``  ``N`` > 100,000,000 (offset 0)
 3. ``header_past_end``   ``8 + N`` is past the end of the file (offset 0)
 4. ``not_utf8``          the header is not UTF-8 (offset: first bad byte)
 5. ``json``              the header is not strict JSON (offset: where the
                          parser stopped, else 8). Python's ``json`` accepts
                          ``NaN``/``Infinity`` and lone surrogate escapes; this
                          reader does not, because JSON does not. Nor does it
                          accept nesting past level 127 (offset: the first
                          bracket at level 128), as the official reader's
                          serde_json does not.
 6. entries in document order, and in each what the engine's one pass
    meets first (docs/DESIGN.md §3, step 5): the name (``duplicate``: seen
    before, ``__metadata__`` included; ``schema``: it holds U+0000), then
    the value: ``__metadata__`` pair by pair (``schema``: a key or a value
    holding U+0000, a value not a string, the whole not null or an object;
    ``duplicate``: a key given twice), an entry field by field (``schema``:
    not an object, a field given twice, a ``dtype`` not a string, a
    ``shape`` that is not a list of at most 8 unsigned ints, ``data_offsets``
    not two ints below 2**48; ``dtype``: an unknown dtype name), then a
    field missing (``schema``).  (A top level that is not an object is
    ``schema``.)  An unsigned int is a JSON integer without a sign: ``-0``
    is not one (serde_json reads it as the float -0.0).
    Unknown extra keys in an entry are ignored, as the official reader does.
    Offset 8 (the header start): the JSON is not located further.
 7. tensors sorted by ``(begin, end)``, each checked for
    ``offsets`` (begin is not the previous end, first begin is not 0, or
    end < begin; offset: data start + expected begin), ``overflow`` (a
    dimension of 2**48 or more, or the element count multiplied left to
    right passes 2**64 - 1 at some dimension, as the official reader's
    checked multiplication does -- ``[2**40, 2**40, 0]`` overflows,
    ``[0, 2**40, 2**40]`` does not -- or element count x bits does),
    ``bits`` (element count x bits not a multiple of 8), ``size`` (end -
    begin is not the computed size); the last three at data start + begin.
    Tensor by tensor, where the engine is check-major (docs/DESIGN.md §5):
    with problems in two tensors the kinds may differ.
 8. ``length``            data start + last end differs from the file length
                          (offset: the smaller of the two).

A folder is read through ``model.safetensors.index.json`` (or is a single
``*.safetensors`` file). An index file is UTF-8 (``not_utf8``, offset: the
first bad byte of the index) and strict JSON (``json``, offset: where the
parser stopped); then it is checked with kind ``index`` (offset ``None``;
0 for an index file above 100,000,000 bytes, refused before it is read): an
object with ``weight_map`` (name -> shard file name) and ``metadata`` null or
an object whose ``total_size``, if present, is an unsigned int; every named
shard exists in the folder; each shard
is valid; every mapped tensor is in the shard the map names and every tensor
of a shard is mapped to that shard; ``total_size``, if given, is the sum of
tensor bytes.  A shard name is a plain file name in the index's folder: not
empty, ``.`` or ``..``, no ``/`` (a path elsewhere, absolute or ``../``)
and no U+0000;
any other character, a backslash included, is part of the name, and a
symlink by that name is followed wherever it leads.  A sharded container's
metadata is its first shard's ``__metadata__`` (shards in name order), as
the engine's ``xc_st_metadata`` gives it (``engine/csrc/xc.h``).
Stray files in the folder are ignored; several shards and no index is an error,
no shard and no index :class:`~oracle.errors.NotFound`.
"""

from __future__ import annotations

import errno
import os
import struct
from dataclasses import dataclass
from pathlib import Path

from xcache.oracle.bounds import HEADER_MAX_BYTES, MAX_DIMS
from xcache.oracle.errors import NotFound, OracleFormatError
from xcache.oracle.kept import Kept
from xcache.oracle.regular import open_regular, read_regular
from xcache.oracle.strict_json import (  # noqa: F401 - re-exported for tests and hunt
    MAX_LEVEL,
    _JsonError,
    _number_in_range,
    _strict_json,
    _too_deep,
)

__all__ = [
    "DTYPE_BITS", "MAX_HEADER_BYTES", "INDEX_NAME", "TensorInfo", "Container",
    "open_container", "parse_buffer", "OracleFormatError",
]

#: Bit size of every dtype of DESIGN §3.
DTYPE_BITS: dict[str, int] = {
    "F4": 4, "F6_E2M3": 6, "F6_E3M2": 6,
    "BOOL": 8, "U8": 8, "I8": 8, "F8_E5M2": 8, "F8_E4M3": 8, "F8_E8M0": 8,
    "F8_E4M3FNUZ": 8, "F8_E5M2FNUZ": 8,
    "I16": 16, "U16": 16, "F16": 16, "BF16": 16,
    "I32": 32, "U32": 32, "F32": 32,
    "I64": 64, "U64": 64, "F64": 64, "C64": 64,
}
MAX_HEADER_BYTES = HEADER_MAX_BYTES
INDEX_NAME = "model.safetensors.index.json"
_U64_MAX = 2**64 - 1
_LIMIT_48 = 2**48
_MAX_DIMS = MAX_DIMS
_NAME_MAX = 255  # the longest file name, in bytes (Linux)
_HEADER_START = 8


@dataclass(frozen=True)
class TensorInfo:
    """One tensor of a container: where its bytes are and what they mean."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    shard: str  # path of the shard file holding it
    offset: int  # absolute byte offset in the shard
    nbytes: int


def _is_uint(value: object) -> bool:
    return type(value) is int and 0 <= value <= _U64_MAX


def _uint_list(value: object) -> bool:
    return isinstance(value, list) and all(_is_uint(v) for v in value)


def _str_map(value: object) -> bool:
    if not (isinstance(value, dict) and "\0pairs" in value):
        return False
    return all(isinstance(v, str) for _, v in value["\0pairs"])


def _metadata(value: object, path: str) -> dict[str, str]:
    """``__metadata__``'s map, its pairs checked in document order: a key or a
    value holding U+0000, a value not a string (``schema``), a key given twice
    (``duplicate``), each when met (docs/DESIGN.md §3, step 5)."""
    if value is None:
        return {}
    if not (isinstance(value, dict) and "\0pairs" in value):
        raise OracleFormatError("schema", _HEADER_START, path,
                                "__metadata__ is not a map of strings")
    out: dict[str, str] = {}
    for key, v in value["\0pairs"]:
        if "\0" in key:
            raise OracleFormatError("schema", _HEADER_START, path,
                                    f"__metadata__ key {key!r} holds U+0000")
        if not isinstance(v, str):
            raise OracleFormatError("schema", _HEADER_START, path,
                                    "__metadata__ is not a map of strings")
        if "\0" in v:
            raise OracleFormatError("schema", _HEADER_START, path,
                                    f"__metadata__ value of {key!r} holds U+0000")
        if key in out:
            raise OracleFormatError("duplicate", _HEADER_START, path,
                                    "a __metadata__ key is given twice")
        out[key] = v
    return out


def _entry(name: str, entry: object, path: str
           ) -> tuple[str, str, tuple[int, ...], int, int]:
    """One tensor entry checked field by field in document order (docs/DESIGN.md
    §3, step 5: the first problem met wins): a field given twice, a ``dtype``
    that is no string (``schema``) or no known dtype (``dtype``), a ``shape``
    that is no list of at most 8 unsigned integers, ``data_offsets`` that are
    not two integers below 2**48; a field missing after the last."""
    def malformed(why: str) -> OracleFormatError:
        return OracleFormatError("schema", _HEADER_START, path,
                                 f"entry {name!r} is malformed: {why}")

    pairs = entry.get("\0pairs") if isinstance(entry, dict) else None
    if pairs is not None and len(pairs) == 3:  # as the writers write it: at
        (f0, dtype), (f1, shape), (f2, offsets) = pairs  # once, if valid
        if (f0 == "dtype" and f1 == "shape" and f2 == "data_offsets"
                and type(dtype) is str and dtype in DTYPE_BITS
                and type(shape) is list and len(shape) <= _MAX_DIMS
                and all(type(v) is int and 0 <= v <= _U64_MAX for v in shape)
                and type(offsets) is list and len(offsets) == 2
                and all(type(v) is int and 0 <= v < _LIMIT_48 for v in offsets)):
            return (name, dtype, tuple(shape), offsets[0], offsets[1])
    if not (isinstance(entry, dict) and "\0pairs" in entry):
        raise malformed("not an object")
    fields: dict[str, object] = {}
    for field, value in entry["\0pairs"]:
        if field in fields and field in ("dtype", "shape", "data_offsets"):
            raise malformed(f"{field} is given twice")
        if field == "dtype":
            if not isinstance(value, str):
                raise malformed("dtype is not a string")
            if value not in DTYPE_BITS:
                raise OracleFormatError("dtype", _HEADER_START, path,
                                        f"{name!r}: {value!r}")
        elif field == "shape":
            if not _uint_list(value) or len(value) > _MAX_DIMS:
                raise malformed(f"shape is not a list of at most {_MAX_DIMS} "
                                "unsigned integers")
        elif field == "data_offsets":
            if (not _uint_list(value) or len(value) != 2
                    or any(v >= _LIMIT_48 for v in value)):
                raise malformed("data_offsets are not two integers below 2**48")
        fields.setdefault(field, value)
    for field in ("dtype", "shape", "data_offsets"):
        if field not in fields:
            raise malformed(f"no {field}")
    begin, end = fields["data_offsets"]
    return (name, fields["dtype"], tuple(fields["shape"]), begin, end)


def _element_count(shape: tuple[int, ...]) -> int | None:
    """The element count multiplied left to right, as the official reader's
    checked multiplication does; None once a partial product passes 64 bits
    (so ``[2**40, 2**40, 0]`` overflows where ``[0, 2**40, 2**40]`` does not)."""
    n = 1
    for dim in shape:
        n *= dim
        if n > _U64_MAX:
            return None
    return n


def parse_buffer(prefix: bytes, file_bytes: int, path: str = "<bytes>"
                 ) -> tuple[list[TensorInfo], dict[str, str]]:
    """Validate a safetensors file from its first bytes and its total length.

    ``prefix`` holds at least the first ``8 + N`` bytes of the file (or all of
    it); ``file_bytes`` is the file's length. Returns the tensors in header
    order and the ``__metadata__`` map; raises ``OracleFormatError``.
    """
    tensors, metadata, _ = _judged(prefix, file_bytes, path)
    return list(tensors), dict(metadata)


def _judged(prefix: bytes, file_bytes: int, path: str
            ) -> tuple[tuple[TensorInfo, ...], dict[str, str], tuple]:
    """:func:`parse_buffer`'s verdict as kept (not to be changed), and its key."""
    # 1-3: the length prefix and the header's extent.
    if file_bytes < 8 or len(prefix) < 8:
        raise OracleFormatError("too_short", file_bytes, path)
    (n_header,) = struct.unpack_from("<Q", prefix, 0)
    if n_header > MAX_HEADER_BYTES:
        raise OracleFormatError("header_too_large", 0, path, f"N = {n_header}")
    data_start = _HEADER_START + n_header
    if data_start > file_bytes or data_start > len(prefix):
        raise OracleFormatError("header_past_end", 0, path,
                                f"8 + N = {data_start} > {file_bytes} bytes")
    raw = bytes(prefix[_HEADER_START:data_start])
    key = (raw, file_bytes)
    kept = _AT_PATH.get(path)  # the bytes last judged there: compared, not hashed
    if kept is None or kept[3] != key:
        kept = _PARSED.get(key)
    if kept is None:  # the same header bytes judged before: the same verdict
        tensors, metadata = _parse_header(raw, data_start, file_bytes, path)
        kept = (tuple((ti.name, ti.dtype, ti.shape, ti.offset, ti.nbytes)
                      for ti in tensors), metadata, Kept(4), key)
        kept[2].put(path, tuple(tensors))
        _PARSED.put(key, kept, len(raw))
    _AT_PATH.put(path, kept, len(key[0]))
    entries, metadata, built, key = kept
    shared = built.get(path)
    if shared is None:
        shared = tuple(TensorInfo(name, dtype, shape, path, offset, nbytes)
                       for name, dtype, shape, offset, nbytes in entries)
        built.put(path, shared)
    return shared, metadata, (path, *key)


#: Valid headers parsed so far, by (header bytes, file length): a replay
#: opens copies of the same containers hundreds of times.  The verdict does
#: not depend on the path, which only names the shard in the result (and in
#: errors: only successes are kept, a refusal is judged again); the tensors
#: of the last few paths are kept too (a frozen TensorInfo costs 3 us to
#: make: 0.3 s a DeepSeek-V3 twin).  Each value holds its own key, so that
#: the keys of :data:`_FOLDERS` share its bytes.  :data:`_AT_PATH` holds the
#: value last found for each path: comparing a header with the one kept
#: there costs less than hashing it (an 18 MB twin's headers, 100 times).
_PARSED = Kept(256, 256 << 20)
_AT_PATH = Kept(1024, 512 << 20)  # weighed as if no bytes were shared


def _parse_header(raw: bytes, data_start: int, file_bytes: int, path: str
                  ) -> tuple[list[TensorInfo], dict[str, str]]:
    """Steps 4-8 of :func:`parse_buffer` on the header bytes ``raw``."""
    # 4: UTF-8.
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise OracleFormatError("not_utf8", _HEADER_START + exc.start, path) from None
    # 5: strict JSON.
    try:
        doc = _strict_json(text)
    except _JsonError as exc:
        pos = exc.args[1] if len(exc.args) > 1 else -1
        offset = (_HEADER_START + len(text[:pos].encode("utf-8"))
                  if pos >= 0 else _HEADER_START)
        raise OracleFormatError("json", offset, path, str(exc.args[0])) from None
    # 6: entries in document order, each name, field and value as met.
    if not (isinstance(doc, dict) and "\0pairs" in doc):
        raise OracleFormatError("schema", _HEADER_START, path,
                                "top level is not an object")
    seen: set[str] = set()
    metadata: dict[str, str] = {}
    entries: list[tuple[str, str, tuple[int, ...], int, int]] = []
    for name, entry in doc["\0pairs"]:
        if name in seen:
            raise OracleFormatError("duplicate", _HEADER_START, path, repr(name))
        seen.add(name)
        if "\0" in name:
            raise OracleFormatError("schema", _HEADER_START, path,
                                    f"name {name!r} holds U+0000")
        if name == "__metadata__":
            metadata = _metadata(entry, path)
            continue
        entries.append(_entry(name, entry, path))
    # 7: the buffer, tensors in offset order.
    order = sorted(range(len(entries)), key=lambda i: (entries[i][3], entries[i][4], i))
    expected = 0
    for i in order:
        name, dtype, shape, begin, end = entries[i]
        if begin != expected or end < begin:
            raise OracleFormatError("offsets", data_start + expected, path,
                                    f"{name!r}: [{begin}, {end}) after {expected}")
        n_elements = _element_count(shape)
        n_bits = 0 if n_elements is None else n_elements * DTYPE_BITS[dtype]
        if (any(dim >= _LIMIT_48 for dim in shape) or n_elements is None
                or n_bits > _U64_MAX):
            raise OracleFormatError("overflow", data_start + begin, path, repr(name))
        if n_bits % 8:
            raise OracleFormatError("bits", data_start + begin, path,
                                    f"{name!r}: {n_bits} bits")
        if end - begin != n_bits // 8:
            raise OracleFormatError("size", data_start + begin, path,
                                    f"{name!r}: {end - begin} != {n_bits // 8}")
        expected = end
    # 8: the buffer ends exactly at the end of the file.
    if data_start + expected != file_bytes:
        raise OracleFormatError("length", min(data_start + expected, file_bytes), path,
                                f"data ends at {data_start + expected}, "
                                f"file has {file_bytes} bytes")
    tensors = [TensorInfo(name, dtype, shape, path, data_start + begin, end - begin)
               for name, dtype, shape, begin, end in entries]
    return tensors, metadata


def _parse_file(path: Path) -> tuple[tuple[TensorInfo, ...], dict[str, str], tuple]:
    """Validate one safetensors file, reading only its header (:func:`_judged`)."""
    with open_regular(path) as f:
        file_bytes = os.fstat(f.fileno()).st_size
        prefix = f.read(8)
        if len(prefix) == 8:
            (n_header,) = struct.unpack("<Q", prefix)
            if n_header <= MAX_HEADER_BYTES and 8 + n_header <= file_bytes:
                prefix += f.read(n_header)
    return _judged(prefix, file_bytes, str(path))


def _index_error(path: Path, detail: str) -> OracleFormatError:
    return OracleFormatError("index", None, str(path), detail)


def _index_fields(index: Path, text: str) -> tuple[list, dict, list[str]]:
    """An index's weight_map pairs, metadata fields and shard names, checked."""
    try:
        doc = _strict_json(text)
    except _JsonError as exc:
        pos = exc.args[1] if len(exc.args) > 1 else -1
        offset = len(text[:pos].encode("utf-8")) if pos >= 0 else 0
        raise OracleFormatError("json", offset, str(index), str(exc.args[0])) from None
    top = dict(doc["\0pairs"]) if isinstance(doc, dict) else {}
    wmap, meta = top.get("weight_map"), top.get("metadata")
    if not _str_map(wmap):
        raise _index_error(index, "weight_map is not a map of strings")
    pairs = wmap["\0pairs"]
    if len({name for name, _ in pairs}) != len(pairs):
        raise _index_error(index, "a tensor is named twice in weight_map")
    if meta is not None and not isinstance(meta, dict):
        raise _index_error(index, "metadata is neither null nor an object")
    meta_fields = dict(meta["\0pairs"]) if isinstance(meta, dict) else {}
    if "total_size" in meta_fields and not _is_uint(meta_fields["total_size"]):
        raise _index_error(index, "metadata.total_size is not an unsigned integer")
    return pairs, meta_fields, sorted({shard for _, shard in pairs})


def _parse_index(index: Path) -> tuple[tuple[TensorInfo, ...], dict[str, str],
                                       dict, dict[str, TensorInfo]]:
    """Validate an index and its shards: tensors, shard and index metadata, and
    the tensors by name, as kept (not to be changed)."""
    size = os.stat(index).st_size
    if size > MAX_HEADER_BYTES:  # before a byte is read (docs/DESIGN.md §3)
        raise OracleFormatError("index", 0, str(index), f"the index is {size} "
                                f"bytes, above the limit of {MAX_HEADER_BYTES}")
    raw = read_regular(index)
    fields = _INDEX_AT.get(str(index))  # as _AT_PATH: compared, not hashed
    if fields is None or fields[3] != raw:
        fields = _INDEXES.get(raw)
    if fields is None:
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise OracleFormatError("not_utf8", exc.start, str(index),
                                    "the index is not UTF-8") from None
        fields = (*_index_fields(index, text), raw)
        _INDEXES.put(raw, fields, len(raw))
    _INDEX_AT.put(str(index), fields, len(fields[3]))
    pairs, meta_fields, shard_names, raw = fields
    folder = index.parent
    for shard in shard_names:
        if shard in ("", ".", "..") or "/" in shard or "\0" in shard:
            raise _index_error(index, f"shard {shard!r} is not a file name")
        if len(shard.encode("utf-8")) > _NAME_MAX:
            raise _index_error(index, f"shard {shard[:40]!r}... does not exist: its "
                               f"name is longer than a file name can be")
        try:  # anything there: a FIFO or a folder is refused when opened
            os.stat(folder / shard)
        except (FileNotFoundError, NotADirectoryError):  # a dangling link too
            raise _index_error(index, f"shard {shard!r} does not exist") from None
        except OSError as exc:  # e.g. a name too long for the file system
            # Path.exists() says False for a loop: it is there, name it
            raise _index_error(index, f"shard {shard!r} " + (
                f"is a symlink loop: {exc.strerror} (errno {exc.errno})"
                if exc.errno == errno.ELOOP
                else f"cannot be looked up: {exc.strerror}")) from None
    parsed = [(shard, *_parse_file(folder / shard)) for shard in shard_names]
    key = (str(index), raw, tuple(k for *_, k in parsed))
    whole = _FOLDERS.get(key)
    if whole is None:
        whole = _cross_check(index, pairs, meta_fields, parsed)
        _FOLDERS.put(key, whole)
    return whole


#: Indexes checked so far (:func:`_index_fields`, and their bytes), by their
#: bytes and by the path they were last found at; whole folders read
#: through their index, by (index path, bytes, every shard's key in
#: :data:`_PARSED`): successes only, as there.
_INDEXES = Kept(4, 256 << 20)
_INDEX_AT = Kept(64, 512 << 20)
_FOLDERS = Kept(8)


def _cross_check(index: Path, pairs: list, meta_fields: dict, parsed: list
                 ) -> tuple[tuple[TensorInfo, ...], dict[str, str], dict,
                            dict[str, TensorInfo]]:
    """The index's map against its shards' tensors, ``parsed`` in name order."""
    tensors: list[TensorInfo] = []
    metadata: dict[str, str] = {}
    found: dict[str, str] = {}
    if parsed:  # the first shard's (name order), as the engine's
        metadata = dict(parsed[0][2])
    for shard, shard_tensors, _, _ in parsed:
        for t in shard_tensors:
            if t.name in found:
                raise _index_error(index, f"{t.name!r} is in {found[t.name]!r} "
                                   f"and {shard!r}")
            found[t.name] = shard
        tensors.extend(shard_tensors)
    for name, shard in pairs:
        if found.get(name) != shard:
            raise _index_error(index, f"{name!r} is mapped to {shard!r} but "
                               f"found in {found.get(name)!r}")
    if len(found) != len(pairs):
        stray = sorted(set(found) - {name for name, _ in pairs})
        raise _index_error(index, f"tensors not in weight_map: {stray[:3]}")
    total = sum(t.nbytes for t in tensors)
    if "total_size" in meta_fields and meta_fields["total_size"] != total:
        raise _index_error(index, f"total_size {meta_fields['total_size']} != {total}")
    index_meta = {k: v for k, v in meta_fields.items()}
    return tuple(tensors), metadata, index_meta, {t.name: t for t in tensors}


class Container:
    """A validated safetensors container: one file, a folder, or an index.

    Opening validates everything (docs/DESIGN.md §3) and raises ``OracleFormatError``
    on the first failed check; afterwards the tensor table is fixed.
    """

    def __init__(self, path: str | os.PathLike) -> None:
        p = Path(path)
        self.path = str(p)
        self.index_metadata: dict = {}
        if p.is_dir():
            # as the C reader: an index (anything but a folder) if there is
            # one, else the one *.safetensors name; each is opened regular
            if (p / INDEX_NAME).exists() and not (p / INDEX_NAME).is_dir():
                p = p / INDEX_NAME
            else:
                files = sorted(p.glob("*.safetensors"))
                if not files:  # docs/DESIGN.md §3: none is NOT_FOUND
                    raise NotFound(f"{p}: the folder holds no .safetensors file "
                                   f"and no {INDEX_NAME}")
                if len(files) != 1:
                    raise _index_error(p, f"{len(files)} safetensors files and no "
                                       f"{INDEX_NAME}")
                p = files[0]
        # the tables are shared with other Containers of the same bytes
        if p.name.endswith(".json"):
            self._tensors, meta, index_meta, self._by_name = _parse_index(p)
            self.index_metadata = dict(index_meta)
        else:
            self._tensors, meta, _ = _parse_file(p)
            self._by_name = {t.name: t for t in self._tensors}
        self.metadata = dict(meta)

    def tensors(self) -> list[TensorInfo]:
        """Every tensor: header order within a shard, shards in name order."""
        return list(self._tensors)

    def names(self) -> list[str]:
        """Every tensor name, in :meth:`tensors` order."""
        return [t.name for t in self._tensors]

    def tensor(self, name: str) -> TensorInfo:
        """The entry of one tensor; ``NotFound`` if there is none."""
        try:
            return self._by_name[name]
        except KeyError:
            raise NotFound(f"no tensor {name!r} in {self.path}") from None

    def shards(self) -> list[str]:
        """The shard files, in name order."""
        return sorted({t.shard for t in self._tensors})

    def read_bytes(self, name: str) -> bytes:
        """The raw bytes of one tensor, read from its shard."""
        info = self.tensor(name)
        with open_regular(info.shard) as f:
            f.seek(info.offset)
            data = f.read(info.nbytes)
        if len(data) != info.nbytes:
            raise OSError(f"{info.shard}: short read of {name!r} "
                          f"({len(data)} of {info.nbytes} bytes)")
        return data


def open_container(path: str | os.PathLike) -> Container:
    """Open and validate a safetensors file, a folder, or an index file."""
    return Container(path)
