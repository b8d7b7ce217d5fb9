"""What feeds the batch pipeline of a new (or empty) Zarr: every local file goes up, so the
files are hashed by a producer thread running ahead of the sends, and batches start while
the rest is still being hashed (in chunks that ramp up:
:data:`~zarrchive.client.local.FIRST_UPLOAD_CHUNK`)."""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator

from zarrchive.checksum import ZarrEntry
from zarrchive.client.local import FIRST_UPLOAD_CHUNK, default_cache, iter_local_entries


def hashed_ahead(root: str, *, jobs: int, sink: list[ZarrEntry]) -> Iterator[ZarrEntry]:
    """The entries of the local directory *root* (in path order), hashed on *jobs* threads by
    a producer running ahead of the consumer; each is also appended to *sink*."""
    blocks: queue.Queue[list[ZarrEntry] | BaseException | None] = queue.Queue(maxsize=64)
    stop = threading.Event()

    def put(item: list[ZarrEntry] | BaseException | None) -> None:
        while not stop.is_set():
            try:
                blocks.put(item, timeout=0.2)
                return
            except queue.Full:
                continue

    def produce() -> None:
        try:
            entries = iter_local_entries(
                root,
                jobs=jobs,
                cache=default_cache(),
                part_md5s=True,
                first_chunk=FIRST_UPLOAD_CHUNK,
            )
            block: list[ZarrEntry] = []
            try:
                for entry in entries:
                    block.append(entry)
                    if len(block) >= 64:
                        put(block)
                        block = []
                    if stop.is_set():
                        return
            finally:
                entries.close()  # type: ignore[attr-defined]
            put(block)
            put(None)
        except BaseException as exc:
            put(exc)

    thread = threading.Thread(target=produce, name="zarrchive-hash-ahead", daemon=True)
    thread.start()
    try:
        while True:
            item = blocks.get()
            if item is None:
                return
            if isinstance(item, BaseException):
                raise item
            sink.extend(item)
            yield from item
    finally:
        stop.set()
        thread.join(10)


__all__ = ["hashed_ahead"]
