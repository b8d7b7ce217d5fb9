"""A forward HTTP proxy on loopback (what ``HTTP_PROXY`` points at in an institution), which
forwards every request it is given and records its method and host."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from urllib.parse import urlsplit

from tests.helpers.http_proxy import ProxiedRequest, proxy_server


class ForwardProxy:
    """Started with :func:`forward_proxy`; :attr:`seen` lists ``(method, host:port)``."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str]] = []
        self.lock = threading.Lock()
        self.url = ""

    def record(self, request: ProxiedRequest) -> bool:
        with self.lock:
            self.seen.append((request.method, urlsplit(request.path).netloc))
        return True


@contextlib.contextmanager
def forward_proxy() -> Iterator[ForwardProxy]:
    proxy = ForwardProxy()
    with proxy_server(on_request=proxy.record) as url:
        proxy.url = url
        yield proxy
