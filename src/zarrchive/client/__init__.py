"""The zarrchive client: a typed API client, the sync engine and zarr-python access.

- :class:`ApiClient`: the archive's HTTP API (pooled, timeouts, retries);
  ``ApiClient.from_env()`` reads ``ZARRCHIVE_URL`` / ``ZARRCHIVE_TOKEN``.
- :mod:`zarrchive.transport`: the one HTTP layer every request goes through
  (:class:`RetryPolicy`: backoff with jitter, ``Retry-After``; the retryable statuses
  and errors; the user agent; a retry hook receiving :class:`RetryEvent`).
- :func:`upload` / :class:`Uploader`: make a Zarr in the archive equal to a local
  directory (only new and changed files; resumable; exact).
- :class:`Downloader`: download (md5-checked, resumable, optional sync) and verify.
- :func:`open_store`: a read-only zarr-python 3 store of a Zarr in the archive.
- :mod:`zarrchive.client.local`: local walk and parallel md5.
"""

from typing import TYPE_CHECKING, Any

from zarrchive.client.api import ApiClient, ServerInfo, ZarrInfo
from zarrchive.client.download import (
    Downloader,
    DownloadResult,
    Fetcher,
    HttpFetcher,
    RemoteFile,
    VerifyResult,
    resolve_zarr,
)
from zarrchive.client.progress import NullProgress, PlainProgress, Progress, RichProgress
from zarrchive.client.upload import BatchRecords, Uploader, UploadResult, upload
from zarrchive.transport import RetryEvent, RetryPolicy

if TYPE_CHECKING:
    from zarrchive.client.store import HttpObjectReader, ObjectReader, ZarrchiveStore, open_store

#: Imported on first use: zarr-python takes a while to import, and the CLI never needs it.
_LAZY = {"HttpObjectReader", "ObjectReader", "ZarrchiveStore", "open_store"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        from zarrchive.client import store

        return getattr(store, name)
    raise AttributeError(f"module 'zarrchive.client' has no attribute {name!r}")


__all__ = [
    "ApiClient",
    "BatchRecords",
    "DownloadResult",
    "Downloader",
    "Fetcher",
    "HttpFetcher",
    "HttpObjectReader",
    "NullProgress",
    "ObjectReader",
    "PlainProgress",
    "Progress",
    "RemoteFile",
    "RetryEvent",
    "RetryPolicy",
    "RichProgress",
    "ServerInfo",
    "UploadResult",
    "Uploader",
    "VerifyResult",
    "ZarrInfo",
    "ZarrchiveStore",
    "open_store",
    "resolve_zarr",
    "upload",
]
