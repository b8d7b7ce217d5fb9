"""The manifest's record types, constants, key layout and timestamp format (pure)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, NamedTuple

from zarrchive.errors import InvalidManifest

#: The value of the top-level ``schemaVersion`` key (the proof of concept's format).
SCHEMA_VERSION = 2

#: The names of the fields of each entry array, in order.
FIELDS: tuple[str, ...] = ("versionId", "lastModified", "size", "ETag")

#: The S3 key prefix of every manifest file.
MANIFEST_PREFIX = "zarr-manifest/"


def manifest_key(zarr_id: str, checksum: str) -> str:
    """The S3 key of a Zarr's manifest for *checksum*: ``zarr-manifest/{zarr_id}/{checksum}.json``."""
    if not zarr_id or "/" in zarr_id:
        raise InvalidManifest(f"{zarr_id!r} is not a Zarr ID: give the Zarr's ID, without '/'")
    if not checksum or "/" in checksum:
        raise InvalidManifest(
            f"{checksum!r} is not a Zarr checksum: give '{{md5}}-{{count}}--{{size}}'"
        )
    return f"{MANIFEST_PREFIX}{zarr_id}/{checksum}.json"


class ManifestEntry(NamedTuple):
    """One entry (file) of a Zarr as the manifest lists it.

    ``path`` is relative to the Zarr root (``/``-separated); ``last_modified``
    is timezone-aware (S3 gives UTC); ``etag`` is the md5, quotes are stripped
    when written.
    """

    path: str
    version_id: str
    last_modified: datetime
    size: int
    etag: str

    @classmethod
    def from_s3_version(cls, version: Mapping[str, Any], prefix: str) -> ManifestEntry:
        """An entry from one item of ``list_object_versions()["Versions"]``.

        *prefix* is the Zarr's key prefix (``zarr/{zarr_id}/``).  Keep only the
        items with ``IsLatest`` (a key whose latest version is a delete marker
        has none and is not part of the Zarr).
        """
        key = version["Key"]
        if not isinstance(key, str) or not key.startswith(prefix) or len(key) == len(prefix):
            raise InvalidManifest(f"S3 key {key!r} is not an entry below {prefix!r}")
        return cls(
            key[len(prefix) :],
            str(version["VersionId"]),
            version["LastModified"],
            int(version["Size"]),
            str(version["ETag"]).strip('"'),
        )


@dataclass(frozen=True, slots=True)
class ManifestStatistics:
    """The ``statistics`` object of a manifest.

    ``zarr_checksum`` is the tree hash of the listed entries.
    ``zarr_checksum_mismatch`` is ``None``, or the checksum the database held
    when it disagreed with the listing.  ``has_mismatch_field`` is False only
    for files of the proof of concept that omit the key (kept so they can be
    rewritten byte for byte); the archive always writes it.
    """

    entries: int
    depth: int
    total_size: int
    last_modified: datetime | None
    zarr_checksum: str
    zarr_checksum_mismatch: str | None = None
    has_mismatch_field: bool = True

    @property
    def mismatch(self) -> bool:
        """True when the database's checksum disagreed with the listing."""
        return self.zarr_checksum_mismatch is not None


_UTC_SUFFIX = "+00:00"


def format_timestamp(value: datetime) -> str:
    """``YYYY-MM-DDTHH:MM:SS+00:00``: converted to UTC, sub-seconds dropped."""
    if value.tzinfo is None or value.utcoffset() is None:
        raise InvalidManifest(
            f"timestamp {value.isoformat()} has no timezone: give S3's timezone-aware "
            "LastModified (UTC)"
        )
    utc = value.astimezone(UTC)
    return (
        f"{utc.year:04d}-{utc.month:02d}-{utc.day:02d}T"
        f"{utc.hour:02d}:{utc.minute:02d}:{utc.second:02d}{_UTC_SUFFIX}"
    )


def parse_timestamp(value: object, where: str = "timestamp") -> datetime:
    """Parse ``YYYY-MM-DDTHH:MM:SS±HH:MM`` into an aware datetime (offset kept)."""
    if not isinstance(value, str):
        raise InvalidManifest(f"{where}: expected a timestamp string, got {value!r}")
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        parsed = None
    if parsed is None or parsed.tzinfo is None:
        raise InvalidManifest(
            f"{where}: {value!r} is not a timestamp of the form 'YYYY-MM-DDTHH:MM:SS+00:00'"
        )
    return parsed
