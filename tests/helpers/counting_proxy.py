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

from tests.helpers.http_proxy import ProxiedRequest, proxy_server


class CountingProxy:
    """Started with :func:`counting_proxy`."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str]] = []
        self.lock = threading.Lock()
        self.url = ""

    def record(self, request: ProxiedRequest) -> bool:
        with self.lock:
            self.seen.append((request.method, request.path))
        return True

    def reset(self) -> None:
        with self.lock:
            self.seen.clear()

    def requests(self) -> list[tuple[str, str]]:
        with self.lock:
            return list(self.seen)


@contextlib.contextmanager
def counting_proxy(upstream: str) -> Iterator[CountingProxy]:
    proxy = CountingProxy()
    with proxy_server(upstream, on_request=proxy.record) as url:
        proxy.url = url
        yield proxy
