"""The client's local sync engine: walk a local Zarr, md5 its files, know what is unchanged.

The modules, each below the ones after it (no module imports one listed after it):

- :mod:`~zarrchive.client.local.walk`: the walk of a local Zarr (links followed, empty
  directories ignored, paths validated) and the checks every walk shares;
- :mod:`~zarrchive.client.local.digest_cache`: the SQLite cache of md5s and directory
  digests by stat record, so an unchanged file is not read again;
- :mod:`~zarrchive.client.local.parts`: the md5s of a big file's parts, computed in the
  same read as its md5, kept for the upload's multipart PUTs;
- :mod:`~zarrchive.client.local.hashing`: the md5 of every file on a thread pool (the one
  md5 read loop and buffer pool), the entries of upload, download and verify;
- :mod:`~zarrchive.client.local.tree`: every directory's checksum, from the digest cache's
  directory rows (a no-op run is a ``stat`` per file), and the upload's survey;
- :mod:`~zarrchive.client.local.selected`: the walk and hashing of the files an
  ``--include``/``--exclude`` selection keeps.

Below are the names the rest of the client uses.  Importing this package imports no HTTP
client and no zarr-python.
"""

from zarrchive.client.local.digest_cache import (
    DigestCache,
    WrittenFile,
    default_cache,
    disable_default_cache,
    store_written,
)
from zarrchive.client.local.hashing import (
    BLOCK_SIZE,
    FIRST_UPLOAD_CHUNK,
    ProgressCallback,
    default_jobs,
    hash_local,
    iter_local_entries,
    local_entries,
    md5_file,
    transfer_jobs,
)
from zarrchive.client.local.parts import recall, start_uploading
from zarrchive.client.local.selected import hash_selected, walk_selected
from zarrchive.client.local.tree import (
    LocalTree,
    Survey,
    local_checksum,
    local_directory_digests,
    scan_tree,
    survey_tree,
)
from zarrchive.client.local.walk import LocalFile, walk_local

__all__ = [
    "BLOCK_SIZE",
    "FIRST_UPLOAD_CHUNK",
    "DigestCache",
    "LocalFile",
    "LocalTree",
    "ProgressCallback",
    "Survey",
    "WrittenFile",
    "default_cache",
    "default_jobs",
    "disable_default_cache",
    "hash_local",
    "hash_selected",
    "iter_local_entries",
    "local_checksum",
    "local_directory_digests",
    "local_entries",
    "md5_file",
    "recall",
    "scan_tree",
    "start_uploading",
    "store_written",
    "survey_tree",
    "transfer_jobs",
    "walk_local",
    "walk_selected",
]
