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
from collections.abc import Iterator

from tests.helpers.http_proxy import RecordingProxy, proxy_server


class CountingProxy(RecordingProxy):
    """Started with :func:`counting_proxy`; :attr:`seen` lists ``(method, path and query)``."""


@contextlib.contextmanager
def counting_proxy(upstream: str) -> Iterator[CountingProxy]:
    proxy = CountingProxy()
    with proxy_server(upstream, on_request=proxy.record) as url:
        proxy.url = url
        yield proxy
