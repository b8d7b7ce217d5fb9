"""Zarr manifest files (pure: no S3, no database).

A manifest lists every entry of a Zarr at one checksum, with its S3 version ID,
``LastModified``, size and ETag, as a nested tree, plus statistics; it lives at
:func:`manifest_key` (``zarr-manifest/{zarr_id}/{checksum}.json``).

- :func:`generate_manifest`: stream a listing (:class:`ManifestEntry`, grouped
  by directory as S3 lists it) into a body sink while computing the statistics
  and the tree hash; the result streams ``header + body + footer``.
- :func:`write_manifest` / :func:`manifest_bytes`: the same into a file / bytes.
- :func:`read_manifest`: statistics first, then the entries as an iterator.
"""

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
from zarrchive.manifest.reader import ParsedManifest, iter_manifest_entries, read_manifest
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
    "GeneratedManifest",
    "ManifestEntry",
    "ManifestStatistics",
    "ManifestWriter",
    "ParsedManifest",
    "format_timestamp",
    "generate_manifest",
    "iter_manifest_entries",
    "manifest_bytes",
    "manifest_key",
    "parse_timestamp",
    "read_manifest",
    "render_header",
    "write_manifest",
]
