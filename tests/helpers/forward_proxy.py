"""A forward HTTP proxy on loopback (what ``HTTP_PROXY`` points at in an institution), which
forwards every request it is given and records its method and host."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

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


class ForwardProxy:
    """Started with :func:`forward_proxy`; :attr:`seen` lists ``(method, host:port)``."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str]] = []
        self.lock = threading.Lock()
        self.url = ""


@contextlib.contextmanager
def forward_proxy() -> Iterator[ForwardProxy]:
    proxy = ForwardProxy()
    upstream = httpx.Client(trust_env=False, timeout=120, follow_redirects=False)

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def _forward(self) -> None:
            target = urlsplit(self.path)
            if not target.scheme:  # not a proxy request
                self.send_error(400, "absolute URI expected")
                return
            with proxy.lock:
                proxy.seen.append((self.command, target.netloc))
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP_BY_HOP}
            answer = upstream.request(self.command, self.path, headers=headers, content=body)
            self.send_response(answer.status_code)
            for key, value in answer.headers.multi_items():
                if key.lower() not in _HOP_BY_HOP | {"content-length", "content-encoding"}:
                    self.send_header(key, value)
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
    proxy.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield proxy
    finally:
        server.shutdown()
        server.server_close()
        upstream.close()
