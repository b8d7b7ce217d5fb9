"""The Dandi Zarr checksum: pure functions, no I/O.

- :func:`compute_checksum` / :func:`iter_directory_digests` / :class:`TreeHasher`:
  the tree hash over ``(path, size, md5)`` entries;
- :class:`ChecksumNode`: one directory's ``.checksum`` node, with incremental
  operations and the exact byte codec;
- :class:`ZarrDigest`, :func:`validate_md5`: digest parsing and validation.
"""

from zarrchive.checksum.digest import (
    EMPTY_CHECKSUM,
    ZarrDigest,
    is_md5,
    is_zarr_checksum,
    md5_hex,
    validate_md5,
)
from zarrchive.checksum.node import ChecksumNode, ChildDigest, directory_digest, listing_json
from zarrchive.checksum.tree import (
    DirectoryDigest,
    TreeHasher,
    ZarrEntry,
    compute_checksum,
    iter_directory_digests,
)

__all__ = [
    "EMPTY_CHECKSUM",
    "ChecksumNode",
    "ChildDigest",
    "DirectoryDigest",
    "TreeHasher",
    "ZarrDigest",
    "ZarrEntry",
    "compute_checksum",
    "directory_digest",
    "is_md5",
    "is_zarr_checksum",
    "iter_directory_digests",
    "listing_json",
    "md5_hex",
    "validate_md5",
]
