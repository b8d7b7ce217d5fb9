"""A forward HTTP proxy (what ``HTTP_PROXY`` points the client at) that counts what an upload
sends to S3 and can stop it between two parts of a big file.

Every request is forwarded.  The S3 multipart parts PUT through it and answered 200 are
recorded (:attr:`PartGate.parts`: key, upload id, part number, bytes), as are the bytes of
every presigned PUT answered 200 (:attr:`PartGate.put_bytes`: files and parts).  With
*let_through*, the part PUTs after the first *let_through* are held (not forwarded, not
answered) until :meth:`PartGate.release`: a test waits for one to be held
(:meth:`PartGate.wait_held`), interrupts the client, then releases them (forwarded as they
are).  With *drop* instead, those part PUTs are not forwarded and
their connections closed without an answer (the network failing between client and S3).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

import httpx

_HOP_BY_HOP = {
    "connection",
    "keep-alive",
    "proxy-connection",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "host",
}


@dataclass(frozen=True)
class SentPart:
    """A part PUT through the gate that S3 answered 200."""

    #: the object's key (the URL's path after the bucket)
    key: str
    #: the S3 multipart upload's id
    upload_id: str
    number: int
    size: int


class PartGate:
    """Started with :func:`part_gate`."""

    def __init__(self, let_through: int | None, drop: bool = False) -> None:
        self.url = ""
        self.let_through = let_through
        self.drop = drop
        #: part PUTs dropped (closed unanswered)
        self.dropped = 0
        self.parts: list[SentPart] = []
        self.put_bytes = 0
        #: part PUTs held now
        self.held = 0
        self._admitted = 0
        self._released = let_through is None
        self._cond = threading.Condition()

    def admit(self) -> bool:
        """Called for each part PUT before it is forwarded: hold it if the gate says so;
        False if it is to be dropped."""
        with self._cond:
            if self._released or self._admitted < (self.let_through or 0):
                self._admitted += 1
                return True
            if self.drop:
                self.dropped += 1
                return False
            self.held += 1
            self._cond.notify_all()
            self._cond.wait_for(lambda: self._released, timeout=300)
            self.held -= 1
            return True

    def wait_held(self, ended: Callable[[], str | None], timeout: float = 120) -> None:
        """Wait until a part PUT is held (the client is stopped between parts); fail if
        *ended* says (with what it returns) that the client ended first."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while self.held == 0:
                if time.monotonic() > deadline:
                    raise AssertionError(
                        f"waited {timeout:.0f} s for a part PUT past the first "
                        f"{self.let_through} (parts answered so far: {len(self.parts)})"
                    )
                why = ended()
                if why is not None:
                    raise AssertionError(f"the client ended before a part was held: {why}")
                self._cond.wait(timeout=0.1)

    def release(self) -> None:
        """Forward the held part PUTs, and every later one."""
        with self._cond:
            self._released = True
            self._cond.notify_all()

    def sent(self, part: SentPart, status: int, to_s3: bool) -> None:
        with self._cond:
            if status == 200 and to_s3:
                self.put_bytes += part.size
                if part.number:
                    self.parts.append(part)

    def part_numbers(self, key: str | None = None) -> list[int]:
        """The numbers of the parts answered 200 (of *key*, if given), in the order sent."""
        with self._cond:
            return [p.number for p in self.parts if key is None or p.key == key]

    def part_bytes(self) -> int:
        with self._cond:
            return sum(p.size for p in self.parts)


@contextlib.contextmanager
def part_gate(let_through: int | None = None, *, drop: bool = False) -> Iterator[PartGate]:
    gate = PartGate(let_through, drop)
    upstream = httpx.Client(trust_env=False, timeout=300, follow_redirects=False)

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def _forward(self) -> None:
            target = urlsplit(self.path)
            if not target.scheme:  # not a proxy request
                self.send_error(400, "absolute URI expected")
                return
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            query = parse_qs(target.query)
            number = int(query["partNumber"][0]) if "partNumber" in query else 0
            if number and self.command == "PUT" and not gate.admit():
                self.close_connection = True  # no answer: the network failed
                return
            headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP_BY_HOP}
            answer = upstream.request(self.command, self.path, headers=headers, content=body)
            key = unquote(target.path).lstrip("/").partition("/")[2]
            upload_id = query.get("uploadId", [""])[0]
            to_s3 = self.command == "PUT" and "X-Amz-Signature" in query  # a presigned PUT
            gate.sent(SentPart(key, upload_id, number, len(body)), answer.status_code, to_s3)
            self.send_response(answer.status_code)
            for name, value in answer.headers.multi_items():
                if name.lower() not in _HOP_BY_HOP | {"content-length", "content-encoding"}:
                    self.send_header(name, value)
            self.send_header("Content-Length", str(len(answer.content)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(answer.content)

        def do_GET(self) -> None:
            self._forward()

        def do_HEAD(self) -> None:
            self._forward()

        def do_PUT(self) -> None:
            self._forward()

        def do_POST(self) -> None:
            self._forward()

        def do_DELETE(self) -> None:
            self._forward()

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    gate.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield gate
    finally:
        gate.release()
        server.shutdown()
        server.server_close()
        upstream.close()


def wait_for(condition: Any, what: str, timeout: float = 120) -> None:
    """Poll *condition* until it is true; after *timeout* seconds fail saying *what*."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"waited {timeout:.0f} s for {what}")
        time.sleep(0.02)
