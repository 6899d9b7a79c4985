"""The Python face of the C safetensors reader: :class:`Container`.

A container is one ``.safetensors`` file, a folder holding
``model.safetensors.index.json`` (or exactly one ``.safetensors`` file), or
the index file itself.  Opening it validates every header completely in C
(DESIGN §3) and indexes the names; a problem raises
:class:`engine.errors.FormatError` whose ``kind`` names the failed check and
whose ``offset`` is the absolute byte offset in the file named by the
message.  Reads go through the C io seam, with the GIL released.
"""

from __future__ import annotations

import os
import weakref
from collections.abc import Iterator
from typing import Any, NamedTuple

import numpy as np

from xcache.engine import _lib
from xcache.engine import args as _args
from xcache.engine._lib import misuse

#: numpy dtypes of the safetensors dtypes numpy can hold (little-endian, as
#: the format stores them).  The others (BF16, F8_*, F4, F6_*) are read as
#: raw uint8 bytes.
NUMPY_DTYPES: dict[str, np.dtype] = {
    "BOOL": np.dtype("?"),
    "U8": np.dtype("u1"),
    "I8": np.dtype("i1"),
    "I16": np.dtype("<i2"),
    "U16": np.dtype("<u2"),
    "F16": np.dtype("<f2"),
    "I32": np.dtype("<i4"),
    "U32": np.dtype("<u4"),
    "F32": np.dtype("<f4"),
    "I64": np.dtype("<i8"),
    "U64": np.dtype("<u8"),
    "F64": np.dtype("<f8"),
    "C64": np.dtype("<c8"),
}


class TensorInfo(NamedTuple):
    """Where one tensor lives: absolute ``offset`` in shard ``shard``."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    shard: int
    offset: int
    nbytes: int


class Container:
    """A validated safetensors container; a context manager.

    The C object (``_ptr``, an ``xc_st *``) lives until :meth:`close` or
    garbage collection; other engine modules (the cache) take it from here.
    A cache opened over the container registers itself (a weak reference),
    so :meth:`close` can refuse while one is still open.

    With ``verify=True``, every expert load and every :meth:`read` /
    :meth:`read_bytes` compares the shard with what was recorded at open
    (device, inode, size, mtime, ctime); any difference raises
    ``FileChangedError`` and nothing is published or returned.  Hits and the
    header are not re-checked (faults/README.md, "Files changed while open").
    """

    def __init__(self, path: str | os.PathLike[str], *,
                 direct: bool = False, io: Any = None,
                 verify: bool = False) -> None:
        ffi, lib = _lib.ffi(), _lib.lib()
        raw = _args.check_path("path", path)  # a NUL would cut it in C
        self._path = os.fsdecode(raw)
        # The io vtable is copied by C but its ctx (a fault injector) is
        # not: keep whatever provides it alive as long as this container.
        self._io_owner: Any = io
        # ExpertCaches open over this container (they borrow the C object)
        self._caches: weakref.WeakSet[Any] = weakref.WeakSet()
        opts = ffi.new("xc_st_opts *")
        opts.io = ffi.NULL if io is None else getattr(io, "io", io)
        opts.direct = int(_args.check_flag("direct", direct))
        opts.verify = int(_args.check_flag("verify", verify))
        out = ffi.new("xc_st **")
        _lib.check(lib.xc_st_open(raw, opts, out))
        self._ptr: Any = ffi.gc(out[0], lib.xc_st_close)
        self._names: list[str] | None = None
        n_shards = lib.xc_st_n_shards(self._ptr)
        self.shards: list[str] = [
            os.fsdecode(ffi.string(lib.xc_st_shard_path(self._ptr, i)))
            for i in range(n_shards)
        ]
        self.metadata: dict[str, str] = {}
        key, value = ffi.new("const char **"), ffi.new("const char **")
        for i in range(lib.xc_st_n_metadata(self._ptr)):
            _lib.check(lib.xc_st_metadata(self._ptr, i, key, value))
            self.metadata[ffi.string(key[0]).decode()] = (
                ffi.string(value[0]).decode())
        self.direct_active: bool = bool(lib.xc_st_direct_active(self._ptr))
        self.direct_note: str = ffi.string(
            lib.xc_st_direct_note(self._ptr)).decode("utf-8", "replace")

    # -- lifetime ---------------------------------------------------------

    def close(self) -> None:
        """Close every shard and free the C object; idempotent.

        Refused with MisuseError, nothing changed, while an ExpertCache over
        this container is still open (the cache reads through it): close the
        caches first.  A cache that was garbage-collected no longer counts.
        """
        n_open = len(self._caches)
        if n_open and "_ptr" in self.__dict__:
            raise misuse(
                f"{self._path}: cannot close the container while {n_open} "
                f"cache(s) over it are still open; close them first")
        ptr = self.__dict__.pop("_ptr", None)
        if ptr is not None:
            _lib.ffi().release(ptr)

    def __enter__(self) -> Container:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _handle(self) -> Any:
        try:
            return self._ptr
        except AttributeError:
            raise misuse(f"{self._path}: the container is closed") from None

    def verify_unchanged(self) -> None:
        """Raise FileChangedError if a shard was replaced, removed or resized."""
        _lib.check(_lib.lib().xc_st_check_files(self._handle()))

    # -- names ------------------------------------------------------------

    def names(self) -> list[str]:
        """Every tensor name in container order (shard by shard, by offset)."""
        return list(self._name_list())

    def _name_list(self) -> list[str]:
        """The cached name list (built on first use); not to be mutated."""
        if self._names is None:
            ffi, lib = _lib.ffi(), _lib.lib()
            ptr = self._handle()
            needed = ffi.new("size_t *")
            # One decode and one split of a NUL-joined blob: far cheaper
            # than one C call and one ffi.string per name at 200k names.
            # Read in place when the container holds the blob whole (one
            # shard, header in offset order); else have C copy it out.
            block = lib.xc_st_names_block(ptr, needed)
            if block != ffi.NULL:
                text = str(ffi.buffer(block, int(needed[0])), "utf-8")
            else:
                buf = ffi.new("char[]", max(int(needed[0]), 1))
                _lib.check(lib.xc_st_names(ptr, buf, len(buf), needed))
                text = str(ffi.buffer(buf, int(needed[0])), "utf-8")
            names = text.split("\0")
            names.pop()  # the empty string after the last NUL
            self._names = names
        return self._names

    def __len__(self) -> int:
        return int(_lib.lib().xc_st_n_tensors(self._handle()))

    def __iter__(self) -> Iterator[str]:
        return iter(self._name_list())

    def __contains__(self, name: object) -> bool:
        if not isinstance(name, str) or "\0" in name:
            return False  # as os.path.exists: no such name can be there
        idx = _lib.ffi().new("size_t *")
        return _lib.lib().xc_st_find(self._handle(), name.encode(), idx) == 0

    def _index(self, name: str) -> int:
        idx = _lib.ffi().new("size_t *")
        raw = _args.check_text("name", name)
        _lib.check(_lib.lib().xc_st_find(self._handle(), raw, idx))
        return int(idx[0])

    # -- tensors ----------------------------------------------------------

    def _info_at(self, i: int, ti: Any = None) -> TensorInfo:
        ffi, lib = _lib.ffi(), _lib.lib()
        if ti is None:
            ti = ffi.new("xc_tensor_info *")
        _lib.check(lib.xc_st_tensor(self._handle(), i, ti))
        return TensorInfo(
            name=ffi.string(ti.name).decode(),
            dtype=ffi.string(lib.xc_dtype_name(ti.dtype)).decode(),
            shape=tuple(int(ti.shape[k]) for k in range(ti.ndim)),
            shard=int(ti.shard),
            offset=int(ti.offset),
            nbytes=int(ti.nbytes),
        )

    def tensors(self) -> list[TensorInfo]:
        """Every tensor's :class:`TensorInfo`, in container order."""
        ti = _lib.ffi().new("xc_tensor_info *")
        return [self._info_at(i, ti) for i in range(len(self))]

    def info(self, name: str) -> TensorInfo:
        """The tensor called ``name``; NotFoundError (a LookupError) if absent."""
        return self._info_at(self._index(name))

    def _read_into(self, name: str) -> tuple[TensorInfo, np.ndarray]:
        i = self._index(name)
        info = self._info_at(i)
        out = np.empty(info.nbytes, dtype=np.uint8)
        ffi = _lib.ffi()
        _lib.check(_lib.lib().xc_st_read_tensor(
            self._handle(), i, ffi.from_buffer(out), info.nbytes))
        return info, out

    def read(self, name: str) -> np.ndarray:
        """The tensor's data with its dtype and shape.

        Dtypes numpy lacks (BF16, F8_*, F4, F6_*) come back as a flat uint8
        array of the tensor's bytes; ``info(name).dtype`` names the real one.
        """
        info, raw = self._read_into(name)
        dt = NUMPY_DTYPES.get(info.dtype)
        if dt is None:
            return raw
        return raw.view(dt).reshape(info.shape)

    def read_bytes(self, name: str) -> bytes:
        """The tensor's bytes exactly as stored."""
        return self._read_into(name)[1].tobytes()

    def __repr__(self) -> str:
        state = "closed" if "_ptr" not in self.__dict__ else (
            f"{len(self)} tensors, {len(self.shards)} shard(s)")
        return f"Container({self._path!r}: {state})"
