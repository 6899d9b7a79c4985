"""A ``--scheduler`` endpoint is trusted for nothing: a peer that accepts and stays
silent, or answers bytes that are not dask's, is exit 2 with one line within the
connect limit, for ``lab`` and ``predict`` alike (docs/LABS.md, "Hostile input in
the labs")."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack

import pytest

import xcache.lab.cluster as cluster_mod
from tests.helpers import synthetic
from xcache.oracle.traces import write_csv
from xcache.replay import main

#: What the HTTP peer answers to anything: a well-formed HTTP reply.
HTTP_REPLY = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello"
#: How long a test waits for main() to return before calling it a hang: far
#: past the 1 s connect limit the tests set, far short of "forever".
HANG_S = 120.0


def _serve(listener: socket.socket, reply: bytes | None,
           stop: threading.Event) -> None:
    """Accept every connection; send ``reply`` (or nothing) and keep it open."""
    held = []
    listener.settimeout(0.2)
    while not stop.is_set():
        try:
            conn, _ = listener.accept()
        except TimeoutError:
            continue
        except OSError:
            break
        held.append(conn)
        if reply is not None:
            conn.sendall(reply)
    for conn in held:
        conn.close()


def _peer(reply: bytes | None) -> Iterator[str]:
    """A real local TCP server in a thread; yields its tcp:// address."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    stop = threading.Event()
    thread = threading.Thread(target=_serve, args=(listener, reply, stop),
                              daemon=True)
    thread.start()
    try:
        yield f"tcp://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        stop.set()
        thread.join(10)
        listener.close()


@pytest.fixture
def silent_peer() -> Iterator[str]:
    """A peer that accepts every connection and never sends a byte."""
    yield from _peer(None)


@pytest.fixture
def http_peer() -> Iterator[str]:
    """A peer that answers every connection with an HTTP reply."""
    yield from _peer(HTTP_REPLY)


def _run_bounded(argv: list[str]) -> int:
    """main(argv) in a thread; fail the test if it has not returned after HANG_S."""
    box: dict[str, int] = {}
    thread = threading.Thread(target=lambda: box.update(rc=main(argv)), daemon=True)
    thread.start()
    thread.join(HANG_S)
    assert not thread.is_alive(), f"{argv[0]} still running after {HANG_S:g} s"
    return box["rc"]


@pytest.mark.parametrize("command", ["lab", "predict"])
@pytest.mark.parametrize("kind", [
    "silent",
    # dask reads an HTTP reply as a frame length of 3 EiB and asks numpy for
    # it: AddressSanitizer aborts on such a request instead of failing it
    pytest.param("http", marks=pytest.mark.nosan)])
def test_a_peer_that_is_not_a_scheduler_is_exit_2(command, kind, tmp_path, capsys,
                                                  monkeypatch, request):
    """Silent or HTTP peer: exit 2, one line naming the address and why."""
    pytest.importorskip("distributed")
    monkeypatch.setattr(cluster_mod, "CONNECT_TIMEOUT", 1.0)
    address = request.getfixturevalue(f"{kind}_peer")
    src = tmp_path / "s.csv"
    write_csv(synthetic(n_tokens=20), src)
    rc = _run_bounded([command, str(src), str(tmp_path / "o"), "--quiet",
                       "--scheduler", address])
    err = capsys.readouterr().err
    assert rc == 2, err
    why = {"silent": "(the connection was accepted but the dask handshake did "
                     "not finish)",
           "http": "(what answers there is not a dask scheduler: "}[kind]
    assert err.startswith(f"replay.py {command}: --scheduler {address}: no dask "
                          f"scheduler answers there within 1 s {why}"), err
    assert err.count("\n") == 1 and "Traceback" not in err
    if command == "predict":  # the OUT it made is removed again
        assert not (tmp_path / "o").exists()


def test_connect_itself_is_bounded_and_leaves_nothing_open(silent_peer):
    """connect() raises OSError within its limit and registers nothing to close."""
    pytest.importorskip("distributed")
    with ExitStack() as stack:
        with pytest.raises(OSError, match="handshake did not finish"):
            cluster_mod.connect(silent_peer, stack, timeout=0.5)
        assert stack._exit_callbacks == type(stack._exit_callbacks)()


def test_a_dask_peer_that_is_not_a_scheduler_is_refused():
    """A dask server that says it is a worker is not taken for the scheduler."""
    pytest.importorskip("distributed")
    import asyncio

    from distributed.core import Server

    async def check() -> str:
        server = Server({"identity": lambda comm=None, **kw: {"type": "Worker"}})
        await server.listen("tcp://127.0.0.1:0")
        try:
            await cluster_mod._probe(server.address, 5.0)
        except ValueError as exc:
            return str(exc)
        finally:
            server.stop()
        return "accepted"

    assert asyncio.run(check()) == "it answered as Worker, not as a dask scheduler"


def test_the_bound_reports_what_the_work_raised():
    """_within names an OSError's reason and hands late results to abandon."""
    with pytest.raises(OSError, match=r"^F \(refused\)$"):
        cluster_mod._within(lambda: (_ for _ in ()).throw(OSError("refused")),
                            time.monotonic() + 30, "F")
    gate, made = threading.Event(), []

    def slow() -> str:
        gate.wait(10)
        return "client"


    with pytest.raises(OSError, match="did not finish"):
        cluster_mod._within(slow, time.monotonic() + 0.05, "F",
                            abandon=made.append)
    gate.set()
    for _ in range(200):
        if made:
            break
        time.sleep(0.05)
    assert made == ["client"]


def test_the_fixture_peer_answers(http_peer: str) -> None:
    """The HTTP peer really answers HTTP bytes on a live socket."""
    host, port = http_peer.removeprefix("tcp://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as s:
        assert s.recv(len(HTTP_REPLY), socket.MSG_WAITALL) == HTTP_REPLY




def test_nothing_listening_is_said_at_once():
    """A port nothing listens on is refused as such within a second, not
    after the whole bound as a peer that accepted and stayed silent."""
    pytest.importorskip("distributed")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    t0 = time.monotonic()
    with ExitStack() as stack:
        with pytest.raises(OSError) as info:
            cluster_mod.connect(f"tcp://127.0.0.1:{port}", stack, timeout=5.0)
    assert time.monotonic() - t0 < 2.0
    assert str(info.value) == (
        f"--scheduler tcp://127.0.0.1:{port}: no dask scheduler answers there "
        "within 5 s (nothing listens there: the connection was refused)")
