"""A counting reverse proxy in front of an S3 server: how many requests an archive really
sends to its S3, and which.

:func:`counting_proxy` listens on 127.0.0.1 (a thread) and forwards every request to
*upstream* unchanged, ``Host`` included (so signatures made for the proxy's address stay
valid: SeaweedFS checks them against the ``Host`` it receives), and logs ``(method, path
and query)`` in :attr:`CountingProxy.seen`.  An archive whose ``s3_endpoint_url`` is the
proxy's :attr:`~CountingProxy.url` sends it all its S3 traffic.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

import httpx

_HOP_BY_HOP = {"connection", "keep-alive", "te", "trailer", "transfer-encoding", "upgrade"}


class CountingProxy:
    """Started with :func:`counting_proxy`."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str]] = []
        self.lock = threading.Lock()
        self.url = ""

    def reset(self) -> None:
        with self.lock:
            self.seen.clear()

    def requests(self) -> list[tuple[str, str]]:
        with self.lock:
            return list(self.seen)


@contextlib.contextmanager
def counting_proxy(upstream: str) -> Iterator[CountingProxy]:
    proxy = CountingProxy()
    target = urlsplit(upstream)
    client = httpx.Client(trust_env=False, timeout=120, follow_redirects=False)

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def _forward(self) -> None:
            with proxy.lock:
                proxy.seen.append((self.command, self.path))
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            headers = [(k, v) for k, v in self.headers.items() if k.lower() not in _HOP_BY_HOP]
            answer = client.request(
                self.command,
                f"{target.scheme}://{target.netloc}{self.path}",
                headers=headers,
                content=body,
            )
            self.send_response(answer.status_code)
            for key, value in answer.headers.multi_items():
                if key.lower() not in _HOP_BY_HOP | {"content-length", "content-encoding"}:
                    self.send_header(key, value)
            size = answer.headers.get("content-length", "0") if self.command == "HEAD" else None
            self.send_header("Content-Length", size or str(len(answer.content)))
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
    proxy.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield proxy
    finally:
        server.shutdown()
        server.server_close()
        client.close()
