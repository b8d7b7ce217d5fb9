"""Fetchers for download tests: the real :class:`HttpFetcher` (plain GETs of the public
bucket), counting the ranged GETs it makes, and failing one of them on request."""

from __future__ import annotations

import threading

from zarrchive.client.download import HttpFetcher, Write
from zarrchive.client.remote import RemoteFile
from zarrchive.errors import TransferError


class CountingFetcher(HttpFetcher):
    """:class:`HttpFetcher` that counts its GETs and ranged GETs; ``fail_at``: the start
    offset of a range refused (a non-retryable error, before any byte)."""

    def __init__(self, fail_at: int | None = None) -> None:
        super().__init__(max_connections=4)
        self.fail_at = fail_at
        self.whole = 0
        self.ranges: list[tuple[str, int, int]] = []
        self._lock = threading.Lock()

    def fetch(self, file: RemoteFile, write: Write) -> None:
        with self._lock:
            self.whole += 1
        super().fetch(file, write)

    def fetch_range(self, file: RemoteFile, start: int, end: int, write: Write) -> None:
        if start == self.fail_at:
            raise TransferError(f"refused range at {start} (test)")
        with self._lock:
            self.ranges.append((file.path, start, end))
        super().fetch_range(file, start, end, write)
