"""Hold many slow connections to a server from one client address, in a process of its
own (so that its work does not slow a test's own measurements):

    python -m tests.helpers.slow_connections HOST PORT COUNT SECONDS SOURCE

opens COUNT connections to HOST:PORT from SOURCE (another loopback address, e.g.
``127.0.0.9``, so that the server tells this client from the test's own); half of them
send half a request head, the other half nothing.  Prints ``ready`` once every connection
attempt has ended, then holds the connections until the server has closed each one or
SECONDS have passed, and prints one JSON line, :class:`Held`: how each ended by what the
server sent before closing (``408``, ``503``, a reset or a bare close) and how many were
still open.  Every connection is closed when it exits.  :func:`slow_connections` starts it.
"""

from __future__ import annotations

import contextlib
import errno
import json
import resource
import selectors
import socket
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
#: Half a request head: a request line and one header, without the blank line that ends it.
HALF_HEAD = b"GET /server-info HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: "
#: The longest the connection attempts may take together, seconds.
CONNECT_SECONDS = 60.0


@dataclass
class Held:
    """How the connections of one run ended."""

    attempted: int = 0
    connected: int = 0
    connect_failed: int = 0
    #: answered ``408`` and closed: the server's header timeout
    timed_out: int = 0
    #: answered ``503`` and closed: over a connection cap
    refused: int = 0
    #: reset, or closed without an answer
    reset: int = 0
    closed: int = 0
    #: answered something else
    other: int = 0
    #: the first bytes of a few of those
    other_answers: list[str] = field(default_factory=list)
    still_open: int = 0
    #: seconds from the end of the connection attempts to the last connection's end
    last_closed_after: float = 0.0

    @property
    def ended_by_server(self) -> int:
        return self.timed_out + self.refused + self.reset + self.closed + self.other

    def ended(self, answer: bytes, *, reset: bool) -> None:
        """Count a connection the server ended after sending *answer*."""
        if answer.startswith(b"HTTP/1.1 408"):
            self.timed_out += 1
        elif answer.startswith(b"HTTP/1.1 503"):
            self.refused += 1
        elif not answer:
            if reset:
                self.reset += 1
            else:
                self.closed += 1
        else:
            self.other += 1
            if len(self.other_answers) < 5:
                self.other_answers.append(answer[:80].decode(errors="replace"))


def slow_connections(
    host: str, port: int, count: int, seconds: float, source: str
) -> subprocess.Popen[str]:
    """The holder's process, started; read its ``ready`` line, then :func:`read_held` of
    the rest of its output once it has exited."""
    command = [sys.executable, "-m", "tests.helpers.slow_connections", host, str(port)]
    command += [str(count), str(seconds), source]
    return subprocess.Popen(command, cwd=REPO, stdout=subprocess.PIPE, text=True)


def read_held(output: str) -> Held:
    return Held(**json.loads(output))


def _raise_open_files_limit(needed: int) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < needed:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def main(host: str, port: str, count: str, seconds: str, source: str) -> None:
    _raise_open_files_limit(int(count) + 64)
    held = Held(attempted=int(count))
    selector = selectors.DefaultSelector()
    pending: dict[socket.socket, int] = {}
    for index in range(held.attempted):
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setblocking(False)
        sock.bind((source, 0))
        code = sock.connect_ex((host, int(port)))
        if code not in (0, errno.EINPROGRESS):
            held.connect_failed += 1
            sock.close()
            continue
        pending[sock] = index
        selector.register(sock, selectors.EVENT_WRITE)
    open_: dict[socket.socket, bytes] = {}
    deadline = time.monotonic() + CONNECT_SECONDS
    while pending and time.monotonic() < deadline:
        for key, _ in selector.select(timeout=1.0):
            sock = _socket_of(key)
            found = pending.pop(sock, None)
            if found is None:  # connected already: the server answered it (read below)
                continue
            selector.unregister(sock)
            if sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) != 0:
                held.connect_failed += 1
                sock.close()
                continue
            held.connected += 1
            if found % 2 == 0:
                with contextlib.suppress(OSError):  # closed already: its end is read below
                    sock.send(HALF_HEAD)
            open_[sock] = b""
            selector.register(sock, selectors.EVENT_READ)
    for sock in pending:  # never connected within the deadline
        held.connect_failed += 1
        selector.unregister(sock)
        sock.close()
    print("ready", flush=True)

    began = time.monotonic()
    deadline = began + float(seconds)
    while open_ and time.monotonic() < deadline:
        for key, _ in selector.select(timeout=0.5):
            sock = _socket_of(key)
            try:
                data = sock.recv(4096)
                reset = False
            except BlockingIOError:
                continue
            except OSError:
                data, reset = b"", True
            if data:
                open_[sock] += data
                continue
            held.ended(open_[sock], reset=reset)
            _forget(selector, open_, sock)
            held.last_closed_after = time.monotonic() - began
    held.still_open = len(open_)
    for sock in list(open_):
        _forget(selector, open_, sock)
    print(json.dumps(asdict(held)), flush=True)


def _socket_of(key: selectors.SelectorKey) -> socket.socket:
    sock = key.fileobj
    assert isinstance(sock, socket.socket)
    return sock


def _forget(
    selector: selectors.BaseSelector, open_: dict[socket.socket, bytes], sock: socket.socket
) -> None:
    selector.unregister(sock)
    del open_[sock]
    sock.close()


if __name__ == "__main__":
    main(*sys.argv[1:])
