"""The files of upload tests: how many batches the uploader cuts them into (its last batches
shrink: see :class:`zarrchive.client.upload.pipeline.Batcher`), their entries."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping

from zarrchive.checksum import ZarrEntry
from zarrchive.client.upload.pipeline import Batcher


def batch_count(total: int, files: int) -> int:
    """Batches of an upload of *total* small files in batches of at most *files*."""
    dummies = [ZarrEntry(str(i), 1, "0" * 32) for i in range(total)]
    return len(list(Batcher(dummies, files, 10**9, total=total)))


def entry(path: str, body: bytes) -> ZarrEntry:
    """The entry of a file *path* holding *body* (as the walk of a local Zarr gives it)."""
    return ZarrEntry(path, len(body), hashlib.md5(body).hexdigest())


def entries(files: Mapping[str, bytes]) -> list[ZarrEntry]:
    """The entries of *files* ``{path: body}``, in path order."""
    return [entry(path, files[path]) for path in sorted(files)]
