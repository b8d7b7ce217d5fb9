"""How many batches the uploader cuts files into (its last batches shrink: see
:class:`zarrchive.client.upload.pipeline.Batcher`)."""

from __future__ import annotations

from zarrchive.checksum import ZarrEntry
from zarrchive.client.upload.pipeline import Batcher


def batch_count(total: int, files: int) -> int:
    """Batches of an upload of *total* small files in batches of at most *files*."""
    dummies = [ZarrEntry(str(i), 1, "0" * 32) for i in range(total)]
    return len(list(Batcher(dummies, files, 10**9, total=total)))
