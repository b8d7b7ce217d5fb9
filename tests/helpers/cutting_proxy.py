"""A reverse proxy in front of S3 whose first answer to chosen GETs stops halfway through its
body (the connection closed: the network failing mid-transfer), for the download's retry
tests.

:class:`CuttingProxy` listens on 127.0.0.1 (a thread) in front of *upstream*; the first
*cuts* GETs that *cut* selects (by path and ``Range`` header) get the upstream's status
line and headers (its ``Content-Length``) and half the body, then the connection is closed;
every other request is forwarded whole.  Each GET is logged in :attr:`hits`:
``(path, range or None, cut)``.
"""

from __future__ import annotations

import http.client
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit, urlunsplit

_HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "te", "upgrade", "host"}


class CuttingProxy:
    def __init__(
        self,
        upstream: str,
        *,
        cut: Callable[[str, str | None], bool],
        cuts: int = 1,
    ) -> None:
        self.upstream_netloc = urlsplit(upstream).netloc
        self.hits: list[tuple[str, str | None, bool]] = []
        self._lock = threading.Lock()
        self._left = cuts
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: object) -> None:
                return None

            def do_GET(self) -> None:
                path = self.path.partition("?")[0]
                wanted = self.headers.get("Range")
                with outer._lock:
                    cutting = outer._left > 0 and cut(path, wanted)
                    if cutting:
                        outer._left -= 1
                    outer.hits.append((path, wanted, cutting))
                headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP_BY_HOP}
                conn = http.client.HTTPConnection(outer.upstream_netloc, timeout=60)
                try:
                    conn.request("GET", self.path, headers=headers)
                    answer = conn.getresponse()
                    data = answer.read()
                finally:
                    conn.close()
                self.send_response(answer.status)
                for name, value in answer.getheaders():
                    if name.lower() not in _HOP_BY_HOP | {"content-length"}:
                        self.send_header(name, value)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if cutting:
                    self.wfile.write(data[: len(data) // 2])
                    self.wfile.flush()
                    self.close_connection = True  # the rest never comes
                    return
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def rewrite(self, url: str) -> str:
        """*url* (of the upstream) through the proxy."""
        parts = urlsplit(url)
        return urlunsplit(("http", urlsplit(self.url).netloc, parts.path, parts.query, ""))

    def cut_hits(self) -> list[tuple[str, str | None]]:
        with self._lock:
            return [(path, wanted) for path, wanted, cutting in self.hits if cutting]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
