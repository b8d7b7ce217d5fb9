"""Readers through boto3 with credentials, injected into the client's store and downloader
(the embargo hooks) in tests."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from zarrchive.client.remote import RemoteFile


class Boto3Reader:
    """The embargo hook: reads objects with credentials instead of anonymous GETs."""

    def __init__(self, s3: Any, bucket: str, prefix: str) -> None:
        self.s3, self.bucket, self.prefix = s3, bucket, prefix
        self.reads = 0

    def read(self, path: str, range_header: str | None = None) -> bytes | None:
        kwargs = {"Range": range_header} if range_header else {}
        try:
            response = self.s3.get_object(Bucket=self.bucket, Key=self.prefix + path, **kwargs)
        except self.s3.exceptions.NoSuchKey:
            return None
        self.reads += 1
        return bytes(response["Body"].read())

    def exists(self, path: str) -> bool:
        return self.read(path, "bytes=0-0") is not None

    def close(self) -> None:
        return None


class Boto3Fetcher:
    """Reads objects through boto3 with credentials (e.g. a private or embargoed bucket)."""

    def __init__(self, s3: Any, bucket: str, key_of: Callable[[RemoteFile], str]) -> None:
        self.s3, self.bucket, self.key_of = s3, bucket, key_of
        self.fetched = 0

    def fetch(self, file: RemoteFile, write: Callable[[bytes], None]) -> None:
        body = self.s3.get_object(Bucket=self.bucket, Key=self.key_of(file))["Body"]
        for block in body.iter_chunks(1 << 20):
            write(block)
        self.fetched += 1

    def close(self) -> None:
        return None
