"""The zarrchive client: a typed API client and the sync engine.

- :class:`ApiClient`: the archive's HTTP API (pooled, timeouts, retries with backoff).
- :func:`upload` / :class:`Uploader`: make a Zarr in the archive equal to a local directory.
"""

from zarrchive.client.api import ApiClient, RetryPolicy, ServerInfo, ZarrInfo
from zarrchive.client.progress import NullProgress, PlainProgress, Progress, RichProgress
from zarrchive.client.upload import Uploader, UploadResult, upload

__all__ = [
    "ApiClient",
    "NullProgress",
    "PlainProgress",
    "Progress",
    "RetryPolicy",
    "RichProgress",
    "ServerInfo",
    "UploadResult",
    "Uploader",
    "ZarrInfo",
    "upload",
]
