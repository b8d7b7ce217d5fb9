"""A forward HTTP proxy on loopback (what ``HTTP_PROXY`` points at in an institution), which
forwards every request it is given and records its method and host."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from urllib.parse import urlsplit

from tests.helpers.http_proxy import ProxiedRequest, RecordingProxy, proxy_server


class ForwardProxy(RecordingProxy):
    """Started with :func:`forward_proxy`; :attr:`seen` lists ``(method, host:port)``."""

    def what(self, request: ProxiedRequest) -> str:
        return urlsplit(request.path).netloc


@contextlib.contextmanager
def forward_proxy() -> Iterator[ForwardProxy]:
    proxy = ForwardProxy()
    with proxy_server(on_request=proxy.record) as url:
        proxy.url = url
        yield proxy
