"""Zarr manifest files (pure: no S3, no database).

A manifest lists every entry of a Zarr at one checksum, with its S3 version ID,
``LastModified``, size and ETag, as a nested tree, plus statistics; it lives at
:func:`manifest_key` (``zarr-manifest/{zarr_id}/{checksum}.json``).

- :func:`generate_manifest`: stream a listing (:class:`ManifestEntry`, grouped
  by directory as S3 lists it) into a body sink while computing the statistics
  and the tree hash; the result streams ``header + body + footer``.
- :func:`write_manifest` / :func:`manifest_bytes`: the same into a file / bytes.
- :func:`read_manifest`: statistics first, then the entries as an iterator.
- :func:`merge_changes`: a manifest's entries with recorded changes applied (sorted merge);
  :func:`diff_manifests`: every difference between two sorted entry streams (the audit).

Decisions (see the spec's note on the proof of concept's extra fields):

- ``schemaVersion: 2`` comes first and ``statistics.zarrChecksumMismatch`` is
  always written: ``null`` when the checksum the database holds (the
  ``database_checksum`` argument) equals the tree hash of the listing, else the
  database's checksum.  ``zarrChecksum`` is always the listing's tree hash: the
  file describes what it lists.  (The proof of concept omits the key when they
  agree; the reader accepts both and the writer can reproduce either, so its
  files round-trip byte for byte.)
- Layout: the proof of concept's (one-space indent, one line per entry array,
  ASCII with escapes, no trailing newline); entries in listing order.
- Timestamps are written in UTC, ``YYYY-MM-DDTHH:MM:SS+00:00``, sub-seconds dropped.
"""

from zarrchive.manifest.merge import (
    DifferenceKind,
    ManifestChange,
    ManifestDifference,
    diff_manifests,
    merge_changes,
    merge_manifest,
)
from zarrchive.manifest.model import (
    FIELDS,
    MANIFEST_PREFIX,
    SCHEMA_VERSION,
    ManifestEntry,
    ManifestStatistics,
    format_timestamp,
    manifest_key,
    parse_timestamp,
)
from zarrchive.manifest.reader import (
    ParsedManifest,
    iter_manifest_entries,
    read_manifest,
    stream_manifest_entries,
)
from zarrchive.manifest.writer import (
    GeneratedManifest,
    ManifestWriter,
    generate_manifest,
    manifest_bytes,
    render_header,
    write_manifest,
)

__all__ = [
    "FIELDS",
    "MANIFEST_PREFIX",
    "SCHEMA_VERSION",
    "DifferenceKind",
    "GeneratedManifest",
    "ManifestChange",
    "ManifestDifference",
    "ManifestEntry",
    "ManifestStatistics",
    "ManifestWriter",
    "ParsedManifest",
    "diff_manifests",
    "format_timestamp",
    "generate_manifest",
    "iter_manifest_entries",
    "manifest_bytes",
    "manifest_key",
    "merge_changes",
    "merge_manifest",
    "parse_timestamp",
    "read_manifest",
    "render_header",
    "stream_manifest_entries",
    "write_manifest",
]
