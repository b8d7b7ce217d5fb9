"""The core the tests' HTTP proxies share: a threaded server on 127.0.0.1 that forwards every
request it is given (as a forward proxy: absolute URIs, what ``HTTP_PROXY`` points at; or as
a reverse proxy in front of one *upstream*) and answers with what it got back.

:func:`proxy_server` takes two hooks: *on_request* sees each request (its body read) before
it is forwarded and says whether to forward it (False: not forwarded, its connection closed
without an answer, the network failing); *on_answer* sees each request with the status it
was answered.  :mod:`tests.helpers.forward_proxy`, :mod:`tests.helpers.counting_proxy` and
:mod:`tests.helpers.part_gate` are its users.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

import httpx

_HOP_BY_HOP = frozenset(
    {"connection", "keep-alive", "te", "trailer", "transfer-encoding", "upgrade"}
)
#: a forward proxy also drops what was for it, and the ``Host`` (the absolute URI says it);
#: a reverse proxy keeps ``Host`` (signatures made for the proxy's address stay valid:
#: SeaweedFS checks them against the ``Host`` it receives)
_FOR_THE_PROXY = frozenset({"proxy-connection", "proxy-authorization", "host"})


@dataclass(frozen=True)
class ProxiedRequest:
    """A request the proxy was given."""

    method: str
    #: as received: the absolute URI (forward proxy) or the path and query (reverse proxy)
    path: str
    body: bytes


class RecordingProxy:
    """A proxy that records each request's ``(method, what)`` in :attr:`seen` (*what* as
    :meth:`what` says); its :meth:`record` is the *on_request* hook of :func:`proxy_server`."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str]] = []
        self.lock = threading.Lock()
        self.url = ""

    def what(self, request: ProxiedRequest) -> str:
        return request.path

    def record(self, request: ProxiedRequest) -> bool:
        with self.lock:
            self.seen.append((request.method, self.what(request)))
        return True

    def reset(self) -> None:
        with self.lock:
            self.seen.clear()

    def requests(self) -> list[tuple[str, str]]:
        with self.lock:
            return list(self.seen)


@contextlib.contextmanager
def proxy_server(
    upstream: str | None = None,
    *,
    on_request: Callable[[ProxiedRequest], bool] | None = None,
    on_answer: Callable[[ProxiedRequest, int], None] | None = None,
    timeout: float = 120,
) -> Iterator[str]:
    """Run the proxy (a forward proxy without *upstream*, else a reverse proxy in front of
    it) while the block runs; yields its URL."""
    target = urlsplit(upstream) if upstream is not None else None
    dropped = _HOP_BY_HOP if target is not None else _HOP_BY_HOP | _FOR_THE_PROXY
    client = httpx.Client(trust_env=False, timeout=timeout, follow_redirects=False)

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def _forward(self) -> None:
            if target is None:
                if not urlsplit(self.path).scheme:  # not a proxy request
                    self.send_error(400, "absolute URI expected")
                    return
                url = self.path
            else:
                url = f"{target.scheme}://{target.netloc}{self.path}"
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            request = ProxiedRequest(self.command, self.path, body)
            if on_request is not None and not on_request(request):
                self.close_connection = True  # no answer: the network failed
                return
            headers = [(k, v) for k, v in self.headers.items() if k.lower() not in dropped]
            answer = client.request(self.command, url, headers=headers, content=body)
            if on_answer is not None:
                on_answer(request, answer.status_code)
            self.send_response(answer.status_code)
            for key, value in answer.headers.multi_items():
                if key.lower() not in dropped | {"content-length", "content-encoding"}:
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
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        client.close()
