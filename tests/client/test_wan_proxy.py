"""``bench/wan_proxy.py``, the WAN model of the download bench's ``--wan`` mode: it forwards
bytes exactly both ways, a round trip costs twice its delay (and a new connection one more,
its handshake), and a connection's throughput is held at its rate in each direction."""

from __future__ import annotations

import hashlib
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
RATE, DELAY = 8.0, 0.05  # MiB/s, s
UP, DOWN = 1 << 20, 2 << 20


def _recv_exactly(sock: socket.socket, size: int) -> bytes:
    chunks, left = [], size
    while left:
        chunk = sock.recv(min(left, 1 << 20))
        assert chunk, "connection closed early"
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def _serve_once(listener: socket.socket, down: bytes, got: list[bytes]) -> None:
    """One connection: a 1-byte ping answered, then UP bytes read, then *down* sent."""
    conn, _ = listener.accept()
    with conn:
        conn.sendall(_recv_exactly(conn, 1))
        got.append(_recv_exactly(conn, UP))
        conn.sendall(down)


def test_the_wan_proxy_forwards_exactly_at_its_rate_and_delay() -> None:
    listener = socket.create_server(("127.0.0.1", 0))
    up, down = os.urandom(UP), os.urandom(DOWN)
    got: list[bytes] = []
    server = threading.Thread(target=_serve_once, args=(listener, down, got), daemon=True)
    server.start()
    proxy = subprocess.Popen(
        [
            sys.executable,
            str(REPO / "bench" / "wan_proxy.py"),
            f"127.0.0.1:{listener.getsockname()[1]}",
            f"--rate={RATE}",
            f"--delay={DELAY * 1000}",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proxy.stdout is not None
        port = int(proxy.stdout.readline())
        with socket.create_connection(("127.0.0.1", port)) as sock:
            started = time.perf_counter()
            sock.sendall(b"x")
            assert _recv_exactly(sock, 1) == b"x"
            first = time.perf_counter() - started  # handshake + round trip
            started = time.perf_counter()
            sock.sendall(up)
            received = _recv_exactly(sock, DOWN)
            bulk = time.perf_counter() - started
        server.join(5)
        assert got and hashlib.sha256(got[0]).digest() == hashlib.sha256(up).digest()
        assert hashlib.sha256(received).digest() == hashlib.sha256(down).digest()
        assert 4 * DELAY * 0.9 < first < 4 * DELAY + 0.3, first
        # UP then DOWN at RATE, one after the other, plus a round trip
        expected = (UP + DOWN) / (RATE * 2**20) + 2 * DELAY
        assert expected * 0.9 < bulk < expected * 1.5 + 0.2, (bulk, expected)
    finally:
        proxy.terminate()
        proxy.wait(10)
        listener.close()
