"""Big files of an upload batch, sent in parts (the archive's side:
:mod:`zarrchive.services.zarr_engine.uploads.multipart`).

Opening a batch declares every file's size; for a file above the archive's multipart
threshold the answer is a part size and count instead of a URL.  :class:`PartSender` then
takes the parts' md5s computed when the file was hashed (:mod:`zarrchive.client.local.parts`:
the same read as the whole file's md5), or, if the file was not read then (its md5 came from
the digest cache) or the part size is not the one expected, hashes them (each read once, in
parallel); it asks the archive for their URLs in windows of :data:`WINDOW` parts (each URL
signs its part's ``Content-MD5``) and PUTs them in parallel, each streamed from its place in
the file (bounded memory: one block per PUT).
Parts the archive reports ``done`` (S3 holds them with that md5, from an interrupted earlier
run) are not sent again.  ``complete`` assembles the parts; the archive checks the whole
file's md5 when it applies the batch.

Stopped (its batch halted: Ctrl-C, or S3 refused another file's URL), a sender starts no
further part: the parts being sent are finished, and every part S3 then holds stays there
for the next run (the batch is left open; :attr:`PartSender.held` counts them).
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import httpx

from zarrchive.client.api import ApiClient
from zarrchive.client.local.parts import recall, start_uploading
from zarrchive.errors import LocalFileError, NetworkError, TransferError
from zarrchive.s3_http import md5_to_content_md5, s3_error_message
from zarrchive.transport import RETRY_EXCEPTIONS, RetryHook, RetryPolicy, call, transport_message

#: Parts whose URLs one request asks for (the archive answers at most 1,000).
WINDOW = 64
#: The read block of hashing and of the streamed PUT body.
BLOCK = 1 << 20


def _range(path: str, first: int, length: int) -> Iterator[bytes]:
    try:
        with open(path, "rb") as f:
            f.seek(first)
            left = length
            while left > 0:
                block = f.read(min(BLOCK, left))
                if not block:
                    raise LocalFileError(f"{path!r} became shorter while it was being uploaded")
                left -= len(block)
                yield block
    except OSError as exc:
        raise LocalFileError(f"cannot read {path!r}: {exc.strerror}") from None


def _md5_of(path: str, first: int, length: int) -> str:
    md5 = hashlib.md5()
    for block in _range(path, first, length):
        md5.update(block)
    return md5.hexdigest()


class PartSender:
    """Sends one big file of the open batch in parts (see the module)."""

    def __init__(
        self,
        client: ApiClient,
        s3: httpx.Client,
        pool: ThreadPoolExecutor,
        *,
        retry: RetryPolicy,
        on_retry: RetryHook | None,
        on_bytes: Callable[[int], None],
    ) -> None:
        self.client = client
        self.s3 = s3
        self.pool = pool
        self.retry = retry
        self.on_retry = on_retry
        self.on_bytes = on_bytes
        #: Parts sent and parts skipped (already in S3) by this sender, over its files.
        self.sent = 0
        self.skipped = 0
        #: Parts whose md5 was computed in the file's first read (not read again to hash).
        self.recalled = 0
        #: Parts S3 holds (sent now, or ``done`` before), by file path.
        self.held: dict[str, int] = {}
        self._lock = threading.Lock()
        # the walks of this upload (that start after this) hash big files' parts as they go
        start_uploading()

    def send(
        self,
        zarr_id: str,
        path: str,
        local: str,
        size: int,
        part_size: int,
        count: int,
        stop: threading.Event | None = None,
    ) -> bool:
        """Send the parts of *local* that S3 does not hold; False if *stop* was set first
        (no part started after it; those under way finished)."""
        halted = stop if stop is not None else threading.Event()
        if os.path.getsize(local) != size:
            raise LocalFileError(f"{local!r} changed size while it was being uploaded")

        def length(n: int) -> int:
            return min(part_size, size - (n - 1) * part_size)

        # the parts' md5s computed when the file was hashed (the same read), if unchanged since
        known = recall(local, size, part_size)
        if known is not None and len(known) != count:
            known = None
        puts: list[Future[bool]] = []
        complete = True
        try:
            for start in range(1, count + 1, WINDOW):
                if halted.is_set():
                    complete = False
                    break
                numbers = list(range(start, min(start + WINDOW, count + 1)))
                if known is not None:
                    md5s = {n: known[n - 1] for n in numbers}
                    self.recalled += len(numbers)
                else:
                    hashes = [
                        self.pool.submit(_md5_of, local, (n - 1) * part_size, length(n))
                        for n in numbers
                    ]
                    md5s = {n: h.result() for n, h in zip(numbers, hashes, strict=True)}
                urls = self.client.part_urls(zarr_id, path, list(md5s.items()))
                for n in numbers:
                    url = urls.get(n)
                    if url is None:
                        self.skipped += 1
                        self._hold(path)
                        self.on_bytes(length(n))
                        continue
                    puts.append(
                        self.pool.submit(
                            self._put,
                            zarr_id,
                            path,
                            local,
                            n,
                            (n - 1) * part_size,
                            length(n),
                            md5s[n],
                            url,
                            halted,
                        )
                    )
                # at most two windows in flight: the next is hashed while this one is sent
                while sum(1 for f in puts if not f.done()) > 2 * WINDOW:
                    next(f for f in puts if not f.done()).result()
            complete = all([f.result() for f in puts]) and complete
        except BaseException:
            for f in puts:
                f.cancel()
            raise
        return complete

    def _hold(self, path: str) -> None:
        with self._lock:
            self.held[path] = self.held.get(path, 0) + 1

    def _put(
        self,
        zarr_id: str,
        path: str,
        local: str,
        number: int,
        first: int,
        length: int,
        md5: str,
        url: str,
        halted: threading.Event,
    ) -> bool:
        """PUT one part; False if *halted* was set before it started (left for the next
        run)."""
        if halted.is_set():
            return False
        headers = {"Content-MD5": md5_to_content_md5(md5), "Content-Length": str(length)}
        for attempt in range(2):
            try:

                def request(target: str = url) -> httpx.Response:
                    return self.s3.put(
                        target, content=_range(local, first, length), headers=headers
                    )

                response = call(
                    self.retry,
                    request,
                    what=f"PUT part {number} of {path!r}",
                    on_retry=self.on_retry,
                )
            except RETRY_EXCEPTIONS as exc:
                raise NetworkError(
                    f"cannot upload part {number} of {path!r} to S3: {transport_message(exc)}"
                ) from None
            if response.status_code == 200:
                self.sent += 1
                self._hold(path)
                self.on_bytes(length)
                return True
            if response.status_code == 403 and attempt == 0:  # expired: sign it again
                fresh = self.client.part_urls(zarr_id, path, [(number, md5)]).get(number)
                if fresh is None:
                    self._hold(path)
                    return True  # S3 has it after all
                url = fresh
                continue
            if response.status_code == 400 and b"BadDigest" in response.content:
                raise LocalFileError(
                    f"{local!r} changed while it was being uploaded (part {number} is no "
                    "longer what was hashed): run the upload again"
                )
            raise TransferError(
                f"S3 refused part {number} of {path!r} ({response.status_code}): "
                f"{s3_error_message(response.text)}"
            )
        raise AssertionError("unreachable: the second attempt returns or raises")


def declared(entries: Sequence[Any]) -> list[tuple[str, str, int]]:
    """``(path, md5, size)`` of :class:`~zarrchive.checksum.ZarrEntry` items."""
    return [(e.path, e.md5, e.size) for e in entries]
