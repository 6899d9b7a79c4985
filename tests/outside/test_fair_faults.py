"""The read injectors are fair to any way of reading (gate/outside/xcs_faults.c).

A partial read performs the cache's request untouched (an O_DIRECT read
stays aligned) and returns fewer bytes; only reads that return bytes are
counted, so the extra read at end of file a cache reading aligned windows
makes does not move "EIO at the nth read" onto another expert.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import shutil
from pathlib import Path
from typing import Any

import cffi
import pytest

from xcache.gate.containers import make_target
from xcache.gate.outside import HERE, conformance
from xcache.gate.outside.backend import ShimError, capabilities_of, outside_factory
from xcache.gate.outside.build import WRAPPED, compile_module, load_manifest
from xcache.gate.outside.host import Host

ROOT = Path(__file__).resolve().parents[2]
ADAPTER = ROOT / "examples" / "tinycache"

#: a test driver linked behind the injectors: one pread of the caller's
#: request, its count or -errno
DRIVER = r"""
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>
long t_open(const char *path, int direct)
{
    return open(path, O_RDONLY | (direct ? O_DIRECT : 0));
}
long t_pread(int fd, size_t n, long off, unsigned char *first)
{
    void *buf = NULL;
    if (posix_memalign(&buf, 4096, n ? n : 1))
        return -ENOMEM;
    ssize_t got = pread(fd, buf, n, (off_t)off);
    long rc = got < 0 ? -errno : (long)got;
    if (got > 0)
        *first = *(unsigned char *)buf;
    free(buf);
    return rc;
}
long t_read(int fd, size_t n)
{
    char buf[8192];
    ssize_t got = read(fd, buf, n);
    return got < 0 ? -errno : (long)got;
}
long t_tell(int fd) { return (long)lseek(fd, 0, SEEK_CUR); }
int t_close(int fd) { return close(fd); }
"""

CDEF = """
long t_open(const char *path, int direct);
long t_pread(int fd, size_t n, long off, unsigned char *first);
long t_read(int fd, size_t n);
long t_tell(int fd);
int t_close(int fd);
int xcs_fault_arm(int which, int kind, uint64_t nth, int persistent,
                  int64_t arg);
int xcs_fault_place(int which, const char *path, uint64_t at);
void xcs_fault_disarm(void);
uint64_t xcs_fault_fired(void);
"""


@pytest.fixture(scope="module")
def lib(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """The injectors and the driver, built as one module."""
    out = tmp_path_factory.mktemp("fair")
    (out / "driver.c").write_text(DRIVER)
    ffi = cffi.FFI()
    ffi.cdef(CDEF)
    ffi.set_source("_xcs_fair_driver", '#include "xcs_shim.h"\n',
                   sources=[str(out / "driver.c"), str(HERE / "xcs_faults.c")],
                   include_dirs=[str(HERE)],
                   extra_compile_args=["-Wall", "-Wextra"],
                   extra_link_args=["-Wl," + ",".join(
                       f"--wrap={f}" for f in WRAPPED)])
    import importlib.util  # noqa: PLC0415

    so = ffi.compile(tmpdir=str(out), verbose=False)
    spec = importlib.util.spec_from_file_location("_xcs_fair_driver", so)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture()
def data(tmp_path: Path) -> Path:
    """A file of 3 pages and 100 bytes, byte i being i % 251."""
    p = tmp_path / "data.bin"
    p.write_bytes(bytes(i % 251 for i in range(3 * 4096 + 100)))
    return p


def _direct_ok(path: Path) -> bool:
    try:
        os.close(os.open(path, os.O_RDONLY | os.O_DIRECT))
    except OSError:
        return False
    return True


def test_partial_under_o_direct_keeps_the_request(lib: Any, data: Path) -> None:
    """An aligned O_DIRECT pread under a partial fault of 100 bytes succeeds
    with 100 (no EINVAL of a shrunk request), and the next read is whole."""
    if not _direct_ok(data):
        pytest.skip("this filesystem refuses O_DIRECT")
    fd = lib.lib.t_open(str(data).encode(), 1)
    assert fd >= 0
    first = lib.ffi.new("unsigned char *")
    try:
        assert lib.lib.xcs_fault_arm(0, 1, 1, 0, 100) == 0
        assert lib.lib.t_pread(fd, 4096, 4096, first) == 100
        assert first[0] == 4096 % 251
        assert lib.lib.t_pread(fd, 4096, 8192, first) == 4096
        assert lib.lib.xcs_fault_fired() == 1
    finally:
        lib.lib.xcs_fault_disarm()
        lib.lib.t_close(fd)


def test_reads_at_end_of_file_are_not_counted(lib: Any, data: Path) -> None:
    """EIO at the 2nd read: a window read past the end (100 bytes), then the
    read at the end (0 bytes, not counted), then the next read fails."""
    fd = lib.lib.t_open(str(data).encode(), 0)
    first = lib.ffi.new("unsigned char *")
    try:
        assert lib.lib.xcs_fault_arm(0, 3, 2, 0, 0) == 0
        assert lib.lib.t_pread(fd, 4096, 3 * 4096, first) == 100
        assert lib.lib.t_pread(fd, 4096, 3 * 4096 + 100, first) == 0
        assert lib.lib.t_pread(fd, 0, 0, first) == 0  # length 0: not counted
        assert lib.lib.t_pread(fd, 4096, 0, first) == -5  # EIO
        assert lib.lib.t_pread(fd, 4096, 0, first) == 4096
        assert lib.lib.xcs_fault_fired() == 1
    finally:
        lib.lib.xcs_fault_disarm()
        lib.lib.t_close(fd)


def test_plain_read_position_moves_by_what_is_returned(lib: Any, data: Path
                                                      ) -> None:
    """A read() cut to 10 bytes leaves the file position at 10; one broken
    by EIO leaves it where it was."""
    fd = lib.lib.t_open(str(data).encode(), 0)
    try:
        assert lib.lib.xcs_fault_arm(0, 1, 1, 0, 10) == 0
        assert lib.lib.t_read(fd, 4096) == 10
        assert lib.lib.t_tell(fd) == 10
        assert lib.lib.xcs_fault_arm(0, 3, 1, 0, 0) == 0
        assert lib.lib.t_read(fd, 4096) == -5
        assert lib.lib.t_tell(fd) == 10
        lib.lib.xcs_fault_disarm()
        assert lib.lib.t_read(fd, 4096) == 4096
        assert lib.lib.t_tell(fd) == 4106
    finally:
        lib.lib.xcs_fault_disarm()
        lib.lib.t_close(fd)


def test_a_placed_fault_meets_only_the_reads_over_its_byte(
        lib: Any, data: Path, tmp_path: Path) -> None:
    """EIO placed at byte 5000 of data.bin: a read of another file over the
    same range, and reads of data.bin not covering it, pass uncounted; the
    window over it fails, every time (persistent); a read() over it too."""
    other = tmp_path / "other.bin"
    other.write_bytes(data.read_bytes())
    fd, fo = (lib.lib.t_open(str(p).encode(), 0) for p in (data, other))
    first = lib.ffi.new("unsigned char *")
    try:
        assert lib.lib.xcs_fault_arm(0, 3, 1, 1, 0) == 0
        assert lib.lib.xcs_fault_place(0, str(data).encode(), 5000) == 0
        assert lib.lib.t_pread(fo, 8192, 0, first) == 8192
        assert lib.lib.t_pread(fd, 4096, 0, first) == 4096
        assert lib.lib.t_pread(fd, 4096, 5001, first) == 4096
        assert lib.lib.t_pread(fd, 4096, 4096, first) == -5
        assert lib.lib.t_pread(fd, 8192, 0, first) == -5
        assert lib.lib.t_read(fd, 8192) == -5
        assert lib.lib.t_tell(fd) == 0
        assert lib.lib.xcs_fault_fired() == 3
    finally:
        lib.lib.xcs_fault_disarm()
        lib.lib.t_close(fd)
        lib.lib.t_close(fo)


def test_a_placed_partial_returns_the_bytes_before_its_byte(
        lib: Any, data: Path) -> None:
    """A partial placed at byte 5000: the aligned window [4096, 8192)
    returns 904 bytes (the request untouched), the read resumed at 5000 is
    whole; once fired, a later window is whole too."""
    fd = lib.lib.t_open(str(data).encode(), 0)
    first = lib.ffi.new("unsigned char *")
    try:
        assert lib.lib.xcs_fault_arm(0, 1, 1, 0, 0) == 0
        assert lib.lib.xcs_fault_place(0, str(data).encode(), 5000) == 0
        assert lib.lib.t_pread(fd, 4096, 4096, first) == 904
        assert first[0] == 4096 % 251
        assert lib.lib.t_pread(fd, 3192, 5000, first) == 3192
        assert lib.lib.t_pread(fd, 4096, 4096, first) == 4096
        assert lib.lib.xcs_fault_fired() == 1
    finally:
        lib.lib.xcs_fault_disarm()
        lib.lib.t_close(fd)


def test_placing_is_refused_without_an_armed_injector_or_a_file(
        lib: Any, data: Path, tmp_path: Path) -> None:
    """xcs_fault_place: XCS_EMISUSE (-2) with nothing armed, for a file
    that cannot be stat'ed, and for the open injector."""
    lib.lib.xcs_fault_disarm()
    assert lib.lib.xcs_fault_place(0, str(data).encode(), 1) == -2
    assert lib.lib.xcs_fault_arm(0, 3, 1, 0, 0) == 0
    try:
        assert lib.lib.xcs_fault_place(
            0, str(tmp_path / "none").encode(), 1) == -2
        assert lib.lib.xcs_fault_place(2, str(data).encode(), 1) == -2
    finally:
        lib.lib.xcs_fault_disarm()


#: tinycache's read_all replaced by one reading the 4096-aligned window
#: round the expert until it is full or a read returns 0 (end of file)
ALIGNED = r"""static int read_all(int fd, unsigned char *buf, uint64_t len,
                    uint64_t off)
{
    uint64_t lo = off / 4096 * 4096, hi = (off + len + 4095) / 4096 * 4096;
    unsigned char *win = malloc(hi - lo);
    if (!win)
        return TC_ENOMEM;
    uint64_t done = 0;
    unsigned tries = 0;
    int rc = TC_OK;
    while (done < hi - lo) {
        ssize_t got = pread(fd, win + done, hi - lo - done, (off_t)(lo + done));
        if (got < 0) {
            if (errno == EINTR && ++tries < TC_MAX_RETRIES)
                continue;
            rc = TC_EIO;
            break;
        }
        tries = 0;
        if (got == 0)
            break;
        done += (uint64_t)got;
    }
    if (rc == TC_OK && done < off - lo + len)
        rc = TC_EIO;
    if (rc == TC_OK)
        memcpy(buf, win + (off - lo), len);
    free(win);
    return rc;
}
"""


def aligned_adapter(tmp: Path) -> Path:
    """tinycache's adapter with its reads made aligned windows (digests renewed)."""
    dest = tmp / "aligned"
    shutil.copytree(ADAPTER, dest)
    src = (dest / "tinycache.c").read_text()
    start = src.index("static int read_all(")
    end = src.index("int tc_open(")
    src = src[:start] + ALIGNED + "\n" + src[end:]
    (dest / "tinycache.c").write_text(src)
    toml = (dest / "xcs.toml").read_text()
    old = hashlib.sha256((ADAPTER / "tinycache.c").read_bytes()).hexdigest()
    new = hashlib.sha256(src.encode()).hexdigest()
    (dest / "xcs.toml").write_text(toml.replace(old, new))
    return dest


def test_aligned_window_cache_meets_faults_where_the_engine_does(
        tmp_path: Path) -> None:
    """A cache reading aligned windows (an extra read at end of file) passes
    the read-fault scenarios: every fault lands on the expert it is for."""
    (tmp_path / "out").mkdir()
    with contextlib.redirect_stdout(io.StringIO()):
        rows, _ = conformance.run(aligned_adapter(tmp_path), tmp_path / "out",
                                  tmp_path / "work",
                                  ["faults-io", "partial-reads"], 60.0)
    got = {r["contract"]: (r["verdict"], r["passed"], r["failed"])
           for r in rows if r["passed"] or r["failed"]}
    assert got == {"short-read": ("PASS", 6, 0), "eintr": ("PASS", 1, 0),
                   "io-errors": ("PASS", 2, 0), "relations": ("PASS", 9, 0)}


def test_eio_after_a_read_at_end_of_file_lands_on_the_next_expert(
        tmp_path: Path) -> None:
    """EIO at the 2nd read: the expert ending its file is read whole (its
    window's extra read at end of file not counted) and the next expert's
    read fails, as on the engine."""
    m = load_manifest(aligned_adapter(tmp_path))
    caps = capabilities_of(m)
    with contextlib.redirect_stdout(io.StringIO()):
        so, modname = compile_module(m, tmp_path / "build")
    host = Host(so, modname, tmp_path / "cache.log")
    target = make_target("k3-mini", tmp_path)
    folder = tmp_path / "copy"
    target.populate(folder)
    last = [k for k in target.keys
            if (lambda p: p.offset + p.nbytes == Path(p.shard).stat().st_size)(
                target.pieces(*k)[-1])]
    assert last == [target.keys[-1]]
    make = outside_factory(host, caps, m.name, target,
                           {"n_slots": 4, "policy": "lru"})
    try:
        backend = make(folder)
        backend.inject({"fault": "eio", "nth": 2})
        assert target.serves(*last[0], backend.get(*last[0]))
        with pytest.raises(ShimError, match="get: shim code -3"):
            backend.get(*target.keys[0])
        assert target.serves(*target.keys[0], backend.get(*target.keys[0]))
        backend.close()
    finally:
        host.close()
