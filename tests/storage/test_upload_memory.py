"""The memory of a streamed upload (issue #23 item 5): a 10^6-entry manifest (over 100 MiB)
is uploaded with at most a few parts read ahead of what S3 has stored, whatever its size."""

from __future__ import annotations

import hashlib
import io
import threading
from typing import Any

from tests.helpers.s3 import object_store
from zarrchive.storage.objects import (
    UPLOAD_CONCURRENCY,
    UPLOAD_PART_SIZE,
    UPLOAD_PARTS_IN_MEMORY,
    upload_transfer_config,
)
from zarrchive.storage.seaweedfs import SeaweedFS

MiB = 1024 * 1024


def test_the_upload_settings_bound_the_parts_in_memory() -> None:
    config = upload_transfer_config()
    assert (8 * MiB, 4, 4) == (UPLOAD_PART_SIZE, UPLOAD_CONCURRENCY, UPLOAD_PARTS_IN_MEMORY)
    assert config.multipart_chunksize == 8 * MiB
    assert config.multipart_threshold == 8 * MiB
    assert config.max_request_concurrency == 4
    # boto3's default is 10 parts (80 MiB); the parts held at once, the one read included
    assert config.max_in_memory_upload_chunks == 4
    assert (config.max_in_memory_upload_chunks + 1) * config.multipart_chunksize == 40 * MiB


class _Source(io.RawIOBase):
    """*size* deterministic bytes, not seekable (as a generated manifest's stream); counts
    the bytes read and, at each read, how far the reading is ahead of the parts S3 stored."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.read_bytes = 0
        self.stored_parts = 0
        self.most_ahead = 0
        self.digest = hashlib.md5()
        self._lock = threading.Lock()

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        n = min(len(view), self.size - self.read_bytes, 1 * MiB)
        data = bytes([(self.read_bytes // MiB) % 251]) * n
        view[:n] = data
        self.digest.update(data)
        with self._lock:
            self.read_bytes += n
            ahead = self.read_bytes - self.stored_parts * UPLOAD_PART_SIZE
            self.most_ahead = max(self.most_ahead, ahead)
        return n

    def part_stored(self, **_kwargs: Any) -> None:
        with self._lock:
            self.stored_parts += 1


def test_a_large_stream_is_uploaded_with_a_bounded_read_ahead(
    seaweedfs: SeaweedFS, bucket: str
) -> None:
    """8 parts: boto3's default would read all of them (64 MiB) before S3 stored the
    first; the archive's settings never more than 4 + 1 (UPLOAD_PARTS_IN_MEMORY, and a part
    read waiting for a free place)."""
    store = object_store(seaweedfs, bucket)
    try:
        parts = 8
        source = _Source(parts * UPLOAD_PART_SIZE)
        store.client.meta.events.register("after-call.s3.UploadPart", source.part_stored)
        store.upload_fileobj(
            "upload-memory/big.json", io.BufferedReader(source, 1 * MiB), "application/json"
        )
        assert source.read_bytes == parts * UPLOAD_PART_SIZE
        assert source.stored_parts == parts
        assert source.most_ahead <= (4 + 1) * 8 * MiB  # UPLOAD_PARTS_IN_MEMORY + the one read
        content = hashlib.md5()
        for chunk in store.iter_content("upload-memory/big.json", chunk_size=4 * MiB):
            content.update(chunk)
        assert content.hexdigest() == source.digest.hexdigest()
    finally:
        store.close()
