"""Read the objects of a Zarr of the archive from S3 over HTTP (synchronously).

The readers behind the zarr-python stores (:mod:`zarrchive.client.store`) and the snapshot's
readers of pinned versions (:mod:`zarrchive.client.snapshot`): an :class:`ObjectReader`
reads a file whole or a ``Range`` of it, and tells whether it exists.

- :class:`HttpObjectReader`: plain GETs of a public bucket's URLs (no credentials);
- :class:`PresignedObjectReader`: an embargoed Zarr's objects through presigned URLs the
  API hands out.

Every reader reads a GET's answer the same way (:meth:`HttpObjectReader._content`): the
body of the object or of the range, ``None`` for an absent object, ``b""`` for a range past
the end.  No zarr-python here: a download imports this, not zarr.
"""

from __future__ import annotations

import time
from typing import Protocol
from urllib.parse import quote

import httpx

from zarrchive.client.api import ApiClient
from zarrchive.errors import NetworkError, TransferError
from zarrchive.transport import (
    RETRY_EXCEPTIONS,
    RetryHook,
    RetryPolicy,
    http_client,
    send,
    transport_message,
)

S3_TIMEOUT = httpx.Timeout(60.0, connect=10.0)


class ObjectReader(Protocol):
    """Reads the objects of one Zarr (synchronously; called from worker threads)."""

    def read(self, path: str, range_header: str | None = None) -> bytes | None:
        """The bytes of the file *path* (``Range``-style slice if given), or None if absent."""

    def exists(self, path: str) -> bool:
        """Whether the file *path* exists."""

    def close(self) -> None:
        """Release connections."""


class HttpObjectReader:
    """Plain HTTP GETs of ``base_url + path`` (a public bucket: no credentials).

    Absent objects answer 404, or 403 from a bucket that does not allow anonymous
    listing (S3 hides whether a key exists then): both read as "absent".
    *headers* are sent with every request (never the archive token: S3 is another host).
    """

    def __init__(
        self,
        base_url: str,
        *,
        headers: dict[str, str] | None = None,
        max_connections: int = 32,
        retry: RetryPolicy | None = None,
        on_retry: RetryHook | None = None,
    ) -> None:
        self.base_url = base_url if base_url.endswith("/") else base_url + "/"
        self.retry = retry or RetryPolicy(attempts=4)
        self.on_retry = on_retry
        self.http = http_client(
            timeout=S3_TIMEOUT,
            max_connections=max_connections,
            headers=headers,
            follow_redirects=True,
        )

    def url(self, path: str) -> str:
        return self.base_url + quote(path, safe="/~")

    def _request(self, method: str, path: str, headers: dict[str, str]) -> httpx.Response:
        url = self.url(path)
        try:
            return send(
                self.http, method, url, policy=self.retry, on_retry=self.on_retry, headers=headers
            )
        except RETRY_EXCEPTIONS as exc:
            raise NetworkError(f"cannot read {url}: {transport_message(exc)}") from None
        except (httpx.HTTPError, httpx.InvalidURL) as exc:  # not the network: the request
            raise TransferError(f"cannot read {url}: {transport_message(exc)}") from None

    def read(self, path: str, range_header: str | None = None) -> bytes | None:
        response = self._get(path, range_header)
        if response.status_code == 403:  # a bucket that hides whether the key exists
            return None
        return self._content(response)

    def _get(self, path: str, range_header: str | None) -> httpx.Response:
        """The GET of *path*, of the ``Range`` *range_header* if given."""
        return self._request("GET", path, {"Range": range_header} if range_header else {})

    @staticmethod
    def _content(response: httpx.Response) -> bytes | None:
        """What a GET read, the one reading of its answer for every reader: the body of a
        whole object (200) or of a range (206); ``None`` for 404 (absent); ``b""`` for 416
        (a range past the end); otherwise :class:`TransferError`."""
        if response.status_code in (200, 206):
            return response.content
        if response.status_code == 404:
            return None
        if response.status_code == 416:
            return b""
        raise TransferError(f"S3 answered {response.status_code} to GET {response.request.url}")

    def exists(self, path: str) -> bool:
        response = self._request("HEAD", path, {})
        return response.status_code == 200

    def close(self) -> None:
        self.http.close()


class PresignedObjectReader(HttpObjectReader):
    """Reads an embargoed Zarr's objects through presigned URLs the API hands out.

    URLs are asked for one path at a time and kept until shortly before they expire;
    existence is asked of the API (a presigned GET URL cannot answer a HEAD).
    """

    def __init__(self, api: ApiClient, zarr_id: str, *, max_connections: int = 32) -> None:
        super().__init__("presigned://", max_connections=max_connections)
        self.api, self.zarr_id = api, zarr_id
        self._urls: dict[str, tuple[str, float]] = {}
        self._lifetime = 300.0  # re-ask well before any server's presign expiry

    def url(self, path: str) -> str:
        cached = self._urls.get(path)
        if cached is None or cached[1] < time.monotonic():
            cached = (self._presign(path), time.monotonic() + self._lifetime)
            self._urls[path] = cached
        return cached[0]

    def _presign(self, path: str) -> str:
        """A fresh presigned GET URL of *path*, asked of the API."""
        return self.api.download_urls(self.zarr_id, [path])[path]

    def read(self, path: str, range_header: str | None = None) -> bytes | None:
        """A presigned URL answers 403 when it expired (or was revoked): that is never
        "absent".  The URL is asked for again once; a second refusal is an error, so zarr
        never fills a chunk it was not allowed to read."""
        response = self._get(path, range_header)
        if response.status_code == 403:
            self._urls.pop(path, None)
            response = self._get(path, range_header)
            if response.status_code == 403:
                raise TransferError(
                    f"S3 refused to read {path!r} of Zarr {self.zarr_id} even through a fresh "
                    "presigned URL (403): check the token's access to the dandiset"
                )
        return self._content(response)

    def exists(self, path: str) -> bool:
        return self.api.get_file(self.zarr_id, path) is not None


__all__ = ["S3_TIMEOUT", "HttpObjectReader", "ObjectReader", "PresignedObjectReader"]
