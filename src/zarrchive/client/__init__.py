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
- :mod:`zarrchive.client.local`: the local sync engine (the walk, the parallel md5, the
  digest cache of unchanged files).
"""

import sys
from importlib import import_module
from types import ModuleType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from zarrchive.client.api import ApiClient, ServerInfo, ZarrInfo
    from zarrchive.client.download import (
        Downloader,
        DownloadResult,
        Fetcher,
        HttpFetcher,
        VerifyResult,
        resolve_zarr,
    )
    from zarrchive.client.progress import NullProgress, PlainProgress, Progress, RichProgress
    from zarrchive.client.readers import HttpObjectReader, ObjectReader
    from zarrchive.client.remote import RemoteFile
    from zarrchive.client.store import ZarrchiveStore, open_store
    from zarrchive.client.upload import BatchRecords, Uploader, UploadResult, upload
    from zarrchive.transport import RetryEvent, RetryPolicy

#: Every name, imported on first use from its module: importing one submodule (say
#: ``zarrchive.client.local`` for ``zarrchive checksum``) must not pull in httpx, nor
#: zarr-python (the store), which take far longer to import than a command needs to run.
_LAZY = {
    "ApiClient": "zarrchive.client.api",
    "ServerInfo": "zarrchive.client.api",
    "ZarrInfo": "zarrchive.client.api",
    "Downloader": "zarrchive.client.download",
    "DownloadResult": "zarrchive.client.download",
    "Fetcher": "zarrchive.client.download",
    "HttpFetcher": "zarrchive.client.download",
    "RemoteFile": "zarrchive.client.remote",
    "VerifyResult": "zarrchive.client.download",
    "resolve_zarr": "zarrchive.client.download",
    "NullProgress": "zarrchive.client.progress",
    "PlainProgress": "zarrchive.client.progress",
    "Progress": "zarrchive.client.progress",
    "RichProgress": "zarrchive.client.progress",
    "HttpObjectReader": "zarrchive.client.readers",
    "ObjectReader": "zarrchive.client.readers",
    "ZarrchiveStore": "zarrchive.client.store",
    "open_store": "zarrchive.client.store",
    "BatchRecords": "zarrchive.client.upload",
    "Uploader": "zarrchive.client.upload",
    "UploadResult": "zarrchive.client.upload",
    "upload": "zarrchive.client.upload",
    "RetryEvent": "zarrchive.transport",
    "RetryPolicy": "zarrchive.transport",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'zarrchive.client' has no attribute {name!r}")
    return getattr(import_module(module), name)


class _ClientPackage(ModuleType):
    """This package, where ``upload`` stays the function even once the submodule
    ``zarrchive.client.upload`` is imported (the import system binds a submodule to its
    package's attribute of the same name)."""

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "upload" and isinstance(value, ModuleType):
            value = value.upload
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _ClientPackage


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
