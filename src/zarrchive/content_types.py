"""The ``Content-Type`` of every object an uploader sends: the archive's choice, never theirs.

The public bucket serves its objects to browsers with the type they were stored with, on
the S3 endpoint's own origin.  An uploader free to store ``text/html`` (or to send no type,
which SeaweedFS then sniffs from the bytes) would have S3 serve their script as a page.  So
every presigned PUT of the archive's own flows signs the type below (S3 refuses any other),
and every copy into a Zarr writes it again (DANDI's routes, whose client sends its own).

- Zarr metadata documents (``.zarray``, ``.zgroup``, ``.zattrs``, ``.zmetadata``,
  ``zarr.json``: :data:`zarrchive.references.METADATA_NAMES`) are ``application/json``, as
  DANDI's client labels them;
- everything else (chunks, shards, blobs) is ``application/octet-stream``.

Pure (no I/O): the client imports it to send exactly the type the server signed.
"""

from __future__ import annotations

from zarrchive.references import is_metadata

#: What a chunk, shard, blob or any other uploaded object is served as.
BINARY = "application/octet-stream"
#: What a Zarr metadata document is served as.
JSON = "application/json"


def zarr_content_type(path: str) -> str:
    """The type of the Zarr entry *path* (or of any key ending with it)."""
    return JSON if is_metadata(path) else BINARY
