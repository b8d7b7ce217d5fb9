"""PURE: which S3 sources a server-side import may read, and the key of each file.

The archive copies from a source bucket with its own credentials, which read every object of
its own buckets too: an import must never name them (an embargoed dandiset's objects,
another Zarr's keys, staging areas), nor any bucket the operator did not list in
``ZARRCHIVE_IMPORT_BUCKETS`` (``bucket`` or ``bucket/prefix`` entries; empty: server-side
import is off).  A file's source key is always ``{prefix}/{path}`` with *path* a checked Zarr
path (no ``..``, no leading ``/``): a client can't name a key outside the prefix it gave.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from zarrchive.config import Settings
from zarrchive.errors import InvalidInput, PermissionDenied

#: S3's bucket names (lowercase, digits, dots, hyphens; 3 to 63 characters).
_BUCKET = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")
#: An md5 in hex: what the ETag of an object not uploaded in parts is.
_MD5 = re.compile(r"[0-9a-f]{32}")


class ImportRefused(Exception):
    """The source may not be imported from: *forbidden* (403) or a malformed request (400)."""

    def __init__(self, message: str, *, forbidden: bool) -> None:
        super().__init__(message)
        self.message = message
        self.forbidden = forbidden


def normalize_prefix(prefix: str) -> str:
    """*prefix* without its surrounding ``/`` ("" for the whole bucket); refuses (400) an
    empty, ``.`` or ``..`` segment or a backslash."""
    stripped = prefix.strip("/")
    if stripped and (
        "\\" in stripped
        or "\x00" in stripped
        or any(part in ("", ".", "..") for part in stripped.split("/"))
    ):
        raise ImportRefused(
            f"the source prefix {prefix!r} has an empty, '.' or '..' segment or a backslash",
            forbidden=False,
        )
    return stripped


def source_key(prefix: str, path: str) -> str:
    """The key of the Zarr file *path* (a checked path) under the normalised *prefix*."""
    return f"{prefix}/{path}" if prefix else path


def within(prefix: str, allowed_prefix: str) -> bool:
    """True if *prefix* is *allowed_prefix* or below it (segment-wise: ``data`` does not
    contain ``database``)."""
    return not allowed_prefix or prefix == allowed_prefix or prefix.startswith(allowed_prefix + "/")


def archive_may_import(settings: Settings, bucket: str, prefix: str) -> str:
    """:func:`check_source` with this archive's settings (``ZARRCHIVE_IMPORT_BUCKETS``, its own
    two buckets), its refusal as the archive's errors: :class:`PermissionDenied` (403) or
    :class:`InvalidInput` (400)."""
    try:
        return check_source(
            bucket,
            prefix,
            settings.import_buckets,
            (settings.s3_bucket, settings.s3_embargo_bucket),
        )
    except ImportRefused as refused:
        if refused.forbidden:
            raise PermissionDenied(refused.message) from None
        raise InvalidInput(refused.message) from None


def check_source(
    bucket: str, prefix: str, allowed: Iterable[str], own_buckets: Iterable[str]
) -> str:
    """The normalised prefix of an import from *bucket*/*prefix*, if *allowed* (the
    ``ZARRCHIVE_IMPORT_BUCKETS`` entries) lets it and it is not one of *own_buckets*;
    else :class:`ImportRefused`."""
    entries = list(allowed)
    if not entries:
        raise ImportRefused(
            "server-side import is off on this archive (ZARRCHIVE_IMPORT_BUCKETS is empty): "
            "send the files yourself",
            forbidden=True,
        )
    if not _BUCKET.fullmatch(bucket):
        raise ImportRefused(f"{bucket!r} is not an S3 bucket name", forbidden=False)
    if bucket in set(own_buckets):
        raise ImportRefused(
            f"bucket {bucket!r} is one of the archive's own: nothing is imported from it",
            forbidden=True,
        )
    normalized = normalize_prefix(prefix)
    for entry in entries:
        entry_bucket, _, entry_prefix = entry.partition("/")
        if entry_bucket == bucket and within(normalized, entry_prefix.strip("/")):
            return normalized
    raise ImportRefused(
        f"the archive does not import from s3://{bucket}/{normalized} (not in "
        "ZARRCHIVE_IMPORT_BUCKETS): send the files yourself",
        forbidden=True,
    )


def plain_md5(etag: str) -> str | None:
    """The md5 an ETag is (quotes dropped), or None when it is not one (an object uploaded
    in parts: ``<hex>-<parts>``, or encrypted)."""
    value = etag.strip().strip('"').lower()
    return value if _MD5.fullmatch(value) else None
