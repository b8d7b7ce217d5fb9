"""A Zarr that sits in an S3 bucket, as the source of an upload (``zarrchive upload
s3://BUCKET/PREFIX``): its files' names, sizes and md5s from one listing, and a way to read
each file's bytes, never to disk.

The twin of the local walk and hashing (:mod:`zarrchive.client.local`) for
:mod:`zarrchive.client.s3_import`: a file is an object ``{prefix}/{path}``; its md5 is its
ETag when the object was not uploaded in parts (an ETag of ``<hex>-<parts>`` is not an md5:
such an object is read once to hash it, streamed, unless the archive hashed it: see
:meth:`S3Source.entries`).  Every read names the ETag the listing
gave (``If-Match``): an object that changed since it was listed is refused by S3 (412), and
:class:`SourceChanged` says so; it is never sent, or recorded, with the md5 of another
content.

Credentials: boto3's usual chain (``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``,
``AWS_PROFILE``, the config files, an instance role), or a named *profile*; *endpoint_url*
for an S3 other than AWS (``--source-endpoint-url``).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from zarrchive.checksum import ZarrEntry
from zarrchive.client.selection import Selection
from zarrchive.errors import InvalidInput, InvalidPath, NetworkError, TransferError
from zarrchive.paths import validate_path

#: The read block of a streamed object (bounded memory: one block per transfer).
BLOCK = 1 << 20
_MD5 = re.compile(r"[0-9a-f]{32}")
_BUCKET = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")


class SourceChanged(TransferError):
    """A source object is no longer the one listed (its ETag changed, or it is gone)."""


@dataclass(frozen=True)
class S3Location:
    """``s3://bucket/prefix``: *prefix* without surrounding ``/`` ("" for the bucket)."""

    bucket: str
    prefix: str

    @classmethod
    def parse(cls, url: str) -> S3Location:
        """Refuses (:class:`InvalidInput`) anything but ``s3://bucket[/prefix]`` with a
        valid bucket name and no empty, ``.`` or ``..`` segment in the prefix."""
        if not url.startswith("s3://"):
            raise InvalidInput(f"{url!r} is not an S3 address (s3://BUCKET/PREFIX)")
        bucket, _, prefix = url[len("s3://") :].partition("/")
        prefix = prefix.strip("/")
        if not _BUCKET.fullmatch(bucket):
            raise InvalidInput(f"{url!r}: {bucket!r} is not an S3 bucket name")
        if prefix and any(part in ("", ".", "..") for part in prefix.split("/")):
            raise InvalidInput(f"{url!r}: the prefix has an empty, '.' or '..' segment")
        return cls(bucket, prefix)

    @property
    def name(self) -> str:
        """The Zarr's default asset path: the prefix's last segment (else the bucket)."""
        return self.prefix.rpartition("/")[2] or self.bucket

    def key(self, path: str) -> str:
        return f"{self.prefix}/{path}" if self.prefix else path

    def __str__(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}"


@dataclass(frozen=True)
class SourceObject:
    """A file of the source Zarr: its path, size and the ETag it was listed with."""

    path: str
    size: int
    etag: str

    @property
    def md5(self) -> str | None:
        """Its md5, when its ETag is one (not uploaded in parts)."""
        return plain_md5(self.etag)


def plain_md5(etag: str) -> str | None:
    """The md5 an ETag is (quotes dropped), or None (``<hex>-<parts>``, or not hex)."""
    value = etag.strip().strip('"').lower()
    return value if _MD5.fullmatch(value) else None


def s3_client(endpoint_url: str | None = None, profile: str | None = None) -> Any:
    """A boto3 S3 client from the usual credentials (or *profile*) at *endpoint_url*."""
    import boto3
    from botocore.config import Config

    session = boto3.Session(profile_name=profile) if profile else boto3.Session()
    config = Config(
        signature_version="s3v4",
        s3={"addressing_style": "path"},
        retries={"total_max_attempts": 4, "mode": "standard"},
        max_pool_connections=64,
    )
    return session.client("s3", endpoint_url=endpoint_url, config=config)


class S3Source:
    """The Zarr at *location*, read with *client* (a boto3 S3 client)."""

    def __init__(self, location: S3Location, client: Any) -> None:
        self.location = location
        self.client = client

    def listing(self, selection: Selection | None = None) -> list[SourceObject]:
        """Every object below the prefix (those *selection* selects), in path order: one
        listing.  Refuses (:class:`InvalidInput`) names the archive can't hold, at once."""
        from botocore.exceptions import BotoCoreError, ClientError

        prefix = f"{self.location.prefix}/" if self.location.prefix else ""
        start = len(prefix)
        found: list[SourceObject] = []
        bad: list[str] = []
        paginator = self.client.get_paginator("list_objects_v2")
        try:
            for page in paginator.paginate(Bucket=self.location.bucket, Prefix=prefix):
                for item in page.get("Contents", []):
                    key = str(item["Key"])
                    if key.endswith("/"):
                        continue  # a "directory" marker some tools write: no file
                    path = key[start:]
                    try:
                        validate_path(path)
                    except InvalidPath as exc:
                        bad.append(f"{key!r}: {exc}")
                        continue
                    if selection is not None and not selection.selects(path):
                        continue
                    found.append(SourceObject(path, int(item["Size"]), str(item["ETag"])))
        except ClientError as exc:
            raise TransferError(f"cannot list {self.location}: {_said(exc)}") from None
        except BotoCoreError as exc:
            raise NetworkError(f"cannot list {self.location}: {exc}") from None
        if bad:
            raise InvalidInput(
                f"{len(bad)} objects of {self.location} have names the archive can't hold: "
                + "; ".join(bad[:5])
            )
        found.sort(key=lambda o: o.path)
        return found

    def stream(self, obj: SourceObject) -> Iterator[bytes]:
        """The bytes of *obj* in blocks of :data:`BLOCK`, if it is still the object listed
        (else :class:`SourceChanged`)."""
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            response = self.client.get_object(
                Bucket=self.location.bucket, Key=self.location.key(obj.path), IfMatch=obj.etag
            )
        except ClientError as exc:
            raise self._refusal(exc, obj) from None
        except BotoCoreError as exc:
            raise NetworkError(f"cannot read {self.location.key(obj.path)!r}: {exc}") from None
        body = response["Body"]
        try:
            while block := body.read(BLOCK):
                yield block
        finally:
            body.close()

    def md5(self, obj: SourceObject) -> str:
        """The md5 of *obj*: its ETag, or (uploaded in parts) its bytes hashed as they
        stream (nothing stored)."""
        known = obj.md5
        if known is not None:
            return known
        digest = hashlib.md5(usedforsecurity=False)
        for block in self.stream(obj):
            digest.update(block)
        return digest.hexdigest()

    def entries(
        self,
        objects: list[SourceObject],
        *,
        jobs: int = 8,
        known: Mapping[str, str] | None = None,
    ) -> list[ZarrEntry]:
        """``(path, size, md5)`` of *objects* (in their order); those uploaded in parts are
        hashed (streamed, *jobs* at a time) unless *known* gives their md5 (``path -> md5``:
        the archive's, for a server-side import)."""
        known = known or {}

        def md5(obj: SourceObject) -> str:
            return known.get(obj.path) or self.md5(obj)

        with ThreadPoolExecutor(max(1, jobs), thread_name_prefix="zarrchive-s3-md5") as pool:
            md5s = list(pool.map(md5, objects))
        return [ZarrEntry(o.path, o.size, m) for o, m in zip(objects, md5s, strict=True)]

    def _refusal(self, exc: Any, obj: SourceObject) -> TransferError:
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        code = str(exc.response.get("Error", {}).get("Code", ""))
        key = self.location.key(obj.path)
        if status in (404, 412) or code in ("PreconditionFailed", "NoSuchKey"):
            return SourceChanged(
                f"s3://{self.location.bucket}/{key} changed since it was listed (its ETag is no "
                f"longer {obj.etag}, or it is gone): run the upload again"
            )
        return TransferError(f"cannot read s3://{self.location.bucket}/{key}: {_said(exc)}")


def _said(exc: Any) -> str:
    error = exc.response.get("Error", {})
    return f"{error.get('Code', '')} {error.get('Message', '')}".strip() or str(exc)


__all__ = ["BLOCK", "S3Location", "S3Source", "SourceChanged", "SourceObject", "s3_client"]
