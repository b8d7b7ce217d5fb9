"""The server's connection guard (:mod:`zarrchive.connection_guard`): its bookkeeping
(property tests), its limits, and its protocol on a real uvicorn server in a thread: the
header timeout (also of a kept-alive connection's next request), the head size bound and the
per-client cap.  The 5,000-connection case against ``zarrchive serve`` is in
``tests/reliability/test_review_slow_clients.py``."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import pytest
import uvicorn
from hypothesis import given
from hypothesis import strategies as st

from zarrchive import connection_guard
from zarrchive.config import Settings
from zarrchive.connection_guard import (
    MAX_HEAD_BYTES,
    RESERVED_FILES,
    Admission,
    ConnectionGuard,
    ConnectionLimits,
    GuardedHttpToolsProtocol,
    client_of,
    install_connection_guard,
)
from zarrchive.errors import ConfigurationError
from zarrchive.storage.seaweedfs import free_port

CLIENTS = ["10.0.0.1", "10.0.0.2", "::1"]


@given(
    st.integers(1, 6),
    st.integers(1, 6),
    st.lists(st.tuples(st.booleans(), st.sampled_from(CLIENTS)), max_size=60),
)
def test_guard_keeps_both_caps_and_counts_exactly(
    total: int, per_client: int, steps: list[tuple[bool, str]]
) -> None:
    guard = ConnectionGuard(ConnectionLimits(1.0, total, per_client))
    admitted: dict[str, int] = dict.fromkeys(CLIENTS, 0)
    for opening, client in steps:
        if opening:
            answer = guard.admit(client)
            if sum(admitted.values()) >= total:
                assert answer is Admission.SERVER_FULL
            elif admitted[client] >= per_client:
                assert answer is Admission.CLIENT_FULL
            else:
                assert answer is Admission.ADMITTED
                admitted[client] += 1
        elif admitted[client]:
            guard.release(client)
            admitted[client] -= 1
        assert guard.total == sum(admitted.values()) <= total
        assert all(guard.held_by(c) == n <= per_client for c, n in admitted.items())
        assert guard.clients == sum(1 for n in admitted.values() if n)


@pytest.mark.parametrize(
    ("address", "client"),
    [
        ("192.0.2.7", "192.0.2.7"),
        ("::ffff:192.0.2.7", "192.0.2.7"),
        ("2001:db8:1:2:aaaa::1", "2001:db8:1:2::/64"),
        ("2001:db8:1:2:ffff:ffff:ffff:ffff", "2001:db8:1:2::/64"),
        ("fe80::1%eth0", "fe80::/64"),
        ("", ""),
    ],
)
def test_an_ipv6_client_counts_by_its_64(address: str, client: str) -> None:
    assert client_of(address) == client


def test_limits_stay_below_the_open_files_limit() -> None:
    settings = Settings.from_env({"ZARRCHIVE_MAX_CONNECTIONS_PER_CLIENT": "5000"})
    limits = ConnectionLimits.for_process(settings, 1024)
    assert limits.max_connections == 1024 - RESERVED_FILES
    assert limits.max_per_client == limits.max_connections
    roomy = ConnectionLimits.for_process(Settings.from_env({}), 1_000_000)
    assert (roomy.max_connections, roomy.max_per_client, roomy.header_timeout) == (4096, 256, 20)
    with pytest.raises(ConfigurationError, match="ulimit"):
        ConnectionLimits.for_process(settings, RESERVED_FILES)


@pytest.mark.parametrize("name", ["HEADER_TIMEOUT", "MAX_CONNECTIONS_PER_CLIENT"])
@pytest.mark.parametrize("value", ["0", "-1", "x", "nan"])
def test_settings_refuse_a_bound_that_is_not_positive(name: str, value: str) -> None:
    with pytest.raises(ConfigurationError, match=f"ZARRCHIVE_{name}"):
        Settings.from_env({f"ZARRCHIVE_{name}": value})


async def _app(scope: dict[str, object], receive: object, send: object) -> None:
    assert scope["type"] == "http"
    headers = [(b"content-length", b"2")]
    await send({"type": "http.response.start", "status": 200, "headers": headers})  # type: ignore[operator]
    await send({"type": "http.response.body", "body": b"ok"})  # type: ignore[operator]


PER_CLIENT = 2
#: Short, so that the test waits little; every wait below is for the event itself.
HEADER_TIMEOUT = 0.5
#: The longest any answer is waited for (a loaded machine).
DEADLINE = 30.0


@pytest.fixture
def guarded(monkeypatch: pytest.MonkeyPatch) -> Iterator[int]:
    """A uvicorn server in a thread with the guarded protocol; its port."""
    monkeypatch.setattr(connection_guard, "_guard", None)
    install_connection_guard(ConnectionLimits(HEADER_TIMEOUT, 100, PER_CLIENT))
    port = free_port()
    config = uvicorn.Config(
        _app, host="127.0.0.1", port=port, log_level="warning", http=GuardedHttpToolsProtocol
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + DEADLINE
    while not server.started:
        assert time.monotonic() < deadline, "the guarded server did not start"
        time.sleep(0.02)
    try:
        yield port
    finally:
        server.should_exit = True
        thread.join(DEADLINE)


def connect(port: int) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=DEADLINE)


def read_until_closed(sock: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection (or the deadline)."""
    received = b""
    while chunk := sock.recv(65536):
        received += chunk
    return received


def test_a_half_sent_head_is_answered_408_and_closed(guarded: int) -> None:
    with connect(guarded) as sock:
        sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n")
        assert read_until_closed(sock).startswith(b"HTTP/1.1 408 ")


def test_an_idle_connection_is_closed(guarded: int) -> None:
    with connect(guarded) as sock:
        assert read_until_closed(sock).startswith(b"HTTP/1.1 408 ")


def test_the_next_head_of_a_kept_alive_connection_is_timed_too(guarded: int) -> None:
    with connect(guarded) as sock:
        sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        first = b""
        while not first.endswith(b"\r\n\r\nok"):
            chunk = sock.recv(65536)
            assert chunk, f"closed after {first!r}"
            first += chunk
        assert first.startswith(b"HTTP/1.1 200 ")
        sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nX-Slow: ")  # before the keep-alive timeout
        assert read_until_closed(sock).startswith(b"HTTP/1.1 408 ")


def test_an_endless_head_is_answered_431(guarded: int) -> None:
    with connect(guarded) as sock:
        sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * (MAX_HEAD_BYTES + 1))
        assert read_until_closed(sock).startswith(b"HTTP/1.1 431 ")


def test_connections_over_the_per_client_cap_are_refused(guarded: int) -> None:
    held = [connect(guarded) for _ in range(PER_CLIENT)]
    try:
        with connect(guarded) as refused:
            answer = read_until_closed(refused)
        assert answer.startswith(b"HTTP/1.1 503 ") and b"retry-after: 5" in answer
        for sock in held:  # the admitted ones were served until their header timeout
            assert read_until_closed(sock).startswith(b"HTTP/1.1 408 ")
        with connect(guarded) as again:  # their places are free again
            again.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            assert read_until_closed(again).startswith(b"HTTP/1.1 200 ")
    finally:
        for sock in held:
            sock.close()


def test_the_module_path_names_the_protocol() -> None:
    module, name = connection_guard.PROTOCOL.split(":")
    assert module == connection_guard.__name__ and getattr(connection_guard, name) is (
        GuardedHttpToolsProtocol
    )
