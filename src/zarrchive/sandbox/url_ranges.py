"""Ranged GETs of one (presigned) URL from inside the sandbox.

Everything that reads a file or resolves a name happens when the reader is made, before the
wall goes up: the host is resolved to an address once, the TLS context loads its CA
certificates once; afterwards each request connects to that address and names the host in
``Host`` (and TLS's SNI), as the signature of a presigned URL expects.
"""

from __future__ import annotations

import socket
import ssl
import urllib.parse

import urllib3

from zarrchive.errors import InvalidInput, RemoteReadError

#: Ranges tried again on a connection failure or a 5xx, with a short backoff.
RETRIES = urllib3.Retry(
    total=3, backoff_factor=0.5, status_forcelist=(500, 502, 503, 504), allowed_methods=None
)


class UrlRanges:
    """``read_range(offset, size)`` over one http(s) URL; :attr:`failure` is the last read
    that failed (h5py turns it into an ``OSError``: this tells S3's failure from a bad file)."""

    def __init__(self, url: str, *, timeout: float = 60.0) -> None:
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise InvalidInput(f"not an http(s) URL: {url[:100]!r}")
        self.port = parts.port or (443 if parts.scheme == "https" else 80)
        host = parts.hostname
        try:
            found = socket.getaddrinfo(host, self.port, type=socket.SOCK_STREAM)
        except OSError as exc:
            raise RemoteReadError(f"the blob's host {host} did not resolve: {exc}") from exc
        address = str(found[0][4][0])
        self.target = urllib.parse.urlunsplit(("", "", parts.path or "/", parts.query, ""))
        self.headers = {"Host": parts.netloc.rpartition("@")[2]}
        self.failure: RemoteReadError | None = None
        #: what the reader still needs to read once walled in (the CA certificates' trees)
        self.read_only: list[str] = []
        pool_timeout = urllib3.Timeout(connect=10.0, read=timeout)
        self.pool: urllib3.HTTPConnectionPool
        if parts.scheme == "https":
            context = ssl.create_default_context()
            paths = ssl.get_default_verify_paths()
            self.read_only = [p for p in (paths.capath, paths.cafile) if p]
            self.pool = urllib3.HTTPSConnectionPool(
                address,
                self.port,
                server_hostname=host,
                assert_hostname=host,
                ssl_context=context,
                timeout=pool_timeout,
                retries=RETRIES,
                maxsize=1,
            )
        else:
            self.pool = urllib3.HTTPConnectionPool(
                address, self.port, timeout=pool_timeout, retries=RETRIES, maxsize=1
            )

    def __call__(self, offset: int, size: int) -> bytes:
        if size <= 0:
            return b""
        where = f"bytes {offset}-{offset + size - 1}"
        try:
            response = self.pool.request(
                "GET",
                self.target,
                headers={**self.headers, "Range": f"bytes={offset}-{offset + size - 1}"},
                preload_content=False,
            )
        except urllib3.exceptions.HTTPError as exc:
            self.failure = RemoteReadError(f"reading {where} of the blob failed: {exc}")
            raise self.failure from exc
        try:
            if response.status not in (200, 206):
                self.failure = RemoteReadError(
                    f"reading {where} of the blob failed: HTTP {response.status}"
                )
                raise self.failure
            if response.status == 200 and offset > 0:
                self.failure = RemoteReadError(f"the blob's server ignored the range ({where})")
                raise self.failure
            data = bytes(response.read(size + 1))
            if len(data) > size:
                response.close()  # more than asked (the whole object): drop the connection
            return data[:size]
        finally:
            response.release_conn()
