"""A real HTTP reverse proxy that says "later" first: for the client's retry tests.

:class:`FlakyProxy` listens on 127.0.0.1 (a thread) in front of *upstream* (the live API,
SeaweedFS's S3, the range server).  The first *failures* requests of every
``(method, path)`` that *fails* selects are answered *status* with ``Retry-After``
(their body drained first); every other request is forwarded with its method, path,
query, headers and body (``Host`` becomes the upstream's, so presigned URLs stay valid),
and the upstream's answer is passed back.  Every request is logged in :attr:`hits`.
"""

from __future__ import annotations

import contextlib
import http.client
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit, urlunsplit

_HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "te", "upgrade", "host"}


@dataclass(frozen=True)
class Hit:
    method: str
    #: Path and query, as received.
    target: str
    status: int
    time: float
    user_agent: str

    @property
    def path(self) -> str:
        return self.target.partition("?")[0]


class FlakyProxy:
    def __init__(
        self,
        upstream: str,
        *,
        fails: Callable[[str, str], bool] = lambda method, path: True,
        failures: int = 1,
        status: int = 503,
        retry_after: str | None = "1",
    ) -> None:
        parts = urlsplit(upstream)
        self.upstream_netloc = parts.netloc
        self.upstream_prefix = parts.path.rstrip("/")
        self.hits: list[Hit] = []
        self._failed: dict[tuple[str, str], int] = {}
        self._lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: object) -> None:
                return None

            def handle(self) -> None:
                with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                    super().handle()

            def _body(self) -> bytes:
                length = int(self.headers.get("Content-Length") or 0)
                return self.rfile.read(length) if length else b""

            def _serve(self) -> None:
                body = self._body()
                method, target = self.command, self.path
                path = target.partition("?")[0]
                with outer._lock:
                    count = outer._failed.get((method, path), 0)
                    fail = count < failures and fails(method, path)
                    if fail:
                        outer._failed[(method, path)] = count + 1
                if fail:
                    outer._hit(method, target, status, self.headers.get("User-Agent", ""))
                    self._answer(status, {"Retry-After": retry_after} if retry_after else {}, b"")
                    return
                headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP_BY_HOP}
                conn = http.client.HTTPConnection(outer.upstream_netloc, timeout=60)
                try:
                    conn.request(method, outer.upstream_prefix + target, body=body, headers=headers)
                    answer = conn.getresponse()
                    data = answer.read()
                    head = method == "HEAD"  # keeps the upstream's Content-Length
                    kept = {
                        k: v
                        for k, v in answer.getheaders()
                        if k.lower() not in _HOP_BY_HOP and (head or k.lower() != "content-length")
                    }
                    # logged before the answer leaves: the client (and the test) may look at
                    # the hits as soon as it has the answer
                    outer._hit(method, target, answer.status, self.headers.get("User-Agent", ""))
                    self._answer(answer.status, kept, data, head=head)
                finally:
                    conn.close()

            def _answer(
                self, code: int, headers: dict[str, str], data: bytes, *, head: bool = False
            ) -> None:
                self.send_response(code)
                for name, value in headers.items():
                    self.send_header(name, value)
                if not head:
                    self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if not head and data:
                    self.wfile.write(data)

            def do_GET(self) -> None:
                self._serve()

            def do_HEAD(self) -> None:
                self._serve()

            def do_PUT(self) -> None:
                self._serve()

            def do_POST(self) -> None:
                self._serve()

            def do_DELETE(self) -> None:
                self._serve()

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def _hit(self, method: str, target: str, status: int, user_agent: str) -> None:
        with self._lock:
            self.hits.append(Hit(method, target, status, time.monotonic(), user_agent))

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def rewrite(self, url: str) -> str:
        """*url* (of the upstream) through the proxy."""
        parts = urlsplit(url)
        path = parts.path
        if self.upstream_prefix and path.startswith(self.upstream_prefix):
            path = path[len(self.upstream_prefix) :]
        return urlunsplit(("http", urlsplit(self.url).netloc, path, parts.query, ""))

    def hits_of(self, method: str, path: str) -> list[Hit]:
        with self._lock:
            return [h for h in self.hits if h.method == method and h.path == path]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
