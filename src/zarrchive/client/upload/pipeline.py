"""The batch pipeline: send files to one Zarr in batches (open, PUT, complete), each batch
opened *ahead* while the one before is still being sent.

:class:`BatchPipeline` takes the files to send (any iterable of
:class:`~zarrchive.checksum.ZarrEntry`, in path order: the planner's list, or the files of a
new Zarr as they are hashed) and cuts them into batches (:class:`Batcher`).  A batch is
opened (sizes declared: big files go in parts, :mod:`zarrchive.client.multipart`), its files
are PUT in parallel to their presigned URLs (``Content-MD5`` signed), and it is completed
with ``verify=apply`` (queued at once, checked by the archive's apply).  The next batch is
opened ``after`` the open one as soon as the open one's files are all handed to the senders,
and its files follow at once: no PUT waits on a batch's ``complete`` or the next ``open``.

At the end, once the Zarr is at rest, a batch the apply refused (a file missing in S3) is
sent again, verified before its ``complete`` answers.  S3 refusing a batch's URLs (403:
expired) cancels it and the batch opened ahead, and sends them again in halves (later
batches no larger).  Ctrl-C or the network's failure leaves both open for the next run
(:attr:`BatchPipeline.left_open`); other failures cancel them (best effort).

One pipeline sends one run's files: what it learns (S3's last refusal, whether the archive
opens batches ahead, what it left open, its parts' counters) is of that run only.
"""

from __future__ import annotations

import contextlib
import math
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence, Sized
from concurrent.futures import FIRST_EXCEPTION, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Any, Literal

import httpx

from zarrchive.checksum import ZarrEntry
from zarrchive.client.api import ApiClient, Target
from zarrchive.client.multipart import PartSender, declared
from zarrchive.client.progress import NullProgress, Progress
from zarrchive.client.records import BatchRecords
from zarrchive.client.remote import os_path
from zarrchive.client.upload.batches import cancel_batch, wait_at_rest
from zarrchive.client.upload.results import LeftOpen, UploadResult
from zarrchive.content_types import zarr_content_type
from zarrchive.errors import ApiError, LocalFileError, NetworkError, TransferError
from zarrchive.s3_http import md5_to_content_md5, s3_error_message
from zarrchive.transport import (
    RETRY_EXCEPTIONS,
    RetryHook,
    RetryPolicy,
    call,
    http_client,
    transport_message,
)

#: Files up to this size are read into memory for the PUT; larger ones are streamed.
IN_MEMORY_BYTES = 16 * 1024**2
#: A batch holds at most this many bytes (unless one file is larger), so that it
#: finishes well before its URLs expire on an ordinary link.
MAX_BATCH_BYTES = 2 * 1024**3
#: Batches re-opened in a row because S3 refused their URLs before giving up.
MAX_REFUSALS = 8
#: The last batches of an upload shrink to this share of the files left (see Batcher) ...
TAIL_SHARE = 0.5
#: ... down to this many files.
TAIL_FILES = 100
#: The first batches of an upload of more than four full batches: these shares of the limit.
HEAD_SHARES = (0.25, 0.5)

S3_TIMEOUT = httpx.Timeout(120.0, connect=10.0)
#: For cleaning up after a failure or Ctrl-C: do not keep the user waiting.
QUICK_RETRY = RetryPolicy(attempts=2, base_delay=0.2, max_retry_after=1.0)

Outcome = Literal["done", "refused"]


class Batcher:
    """Takes batches of at most :attr:`files` files and :attr:`nbytes` bytes (unless one file
    is larger) from *entries*, in order: :meth:`next` one at a time (the limit may be lowered
    between two), or all by iterating.

    Given the *total* of files, the last batches shrink (:data:`TAIL_SHARE` of what is left
    each, down to :data:`TAIL_FILES`, the rest together under twice that): the uploader waits
    at the end for the apply of what it sent last, so what it sends last is small (the apply
    of the batches before it overlaps with the PUTs of the small ones).  The first batches of
    a larger upload are a quarter and a half of the limit (no fewer than :data:`TAIL_FILES`, no
    more than the limit): the archive's apply, idle until the first batch is complete, starts
    sooner."""

    def __init__(
        self, entries: Iterable[ZarrEntry], files: int, nbytes: int, *, total: int | None = None
    ) -> None:
        self.entries = iter(entries)
        self.files = files
        self.nbytes = nbytes
        self.total = total
        self._taken = 0
        self._batches = 0
        self._held: ZarrEntry | None = None

    def _limit(self) -> int:
        if self.total is None:
            return self.files
        left = self.total - self._taken
        if left > 2 * self.files:
            if self.total > 4 * self.files and self._batches < len(HEAD_SHARES):
                head = max(TAIL_FILES, math.ceil(self.files * HEAD_SHARES[self._batches]))
                return min(self.files, head)  # (never above the limit: the archive's too)
            return self.files
        if left <= 2 * TAIL_FILES:
            return self.files
        return min(self.files, max(TAIL_FILES, math.ceil(left * TAIL_SHARE)))

    def next(self) -> list[ZarrEntry]:
        chunk: list[ZarrEntry] = []
        size = 0
        limit = self._limit()
        while len(chunk) < limit:
            entry = self._held
            self._held = None
            if entry is None:
                entry = next(self.entries, None)
                if entry is None:
                    break
            if chunk and size + entry.size > self.nbytes:
                self._held = entry
                break
            chunk.append(entry)
            size += entry.size
        self._taken += len(chunk)
        self._batches += 1
        return chunk

    def __iter__(self) -> Iterator[list[ZarrEntry]]:
        while chunk := self.next():
            yield chunk


@dataclass
class Sending:
    """A batch opened by the pipeline: its files, their targets, its uid (if the archive
    names it) and, once handed to the senders, their futures and what they sent."""

    chunk: list[ZarrEntry]
    urls: dict[str, Target]
    uid: str | None
    #: how many times in a row S3 refused the URLs of these files
    refusals: int = 0
    stop: threading.Event = field(default_factory=threading.Event)
    futures: list[Future[bool]] = field(default_factory=list)
    #: files and bytes sent
    sent: list[int] = field(default_factory=lambda: [0, 0])
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def in_parts(self) -> bool:
        """True if a file goes in parts (their URLs are given only while it is open)."""
        return any(t.in_parts for t in self.urls.values())

    def count(self, nbytes: int) -> None:
        with self._lock:
            self.sent[0] += 1
            self.sent[1] += nbytes

    def files_sent(self) -> int:
        with self._lock:
            return self.sent[0]

    def halt(self) -> None:
        """Send no more of its files; wait for those being sent."""
        self.stop.set()
        for f in self.futures:
            f.cancel()
        for f in self.futures:
            if not f.cancelled():
                with contextlib.suppress(Exception):  # (its failure is not the one raised)
                    f.result()


class BatchPipeline:
    """Sends files of the local directory *root* to the Zarr *zarr_id* in batches (see the
    module).

    *jobs*: parallel PUTs; *records*: where open batches are recorded; *on_batch_open*:
    called with each batch's size after it is opened, before its files are sent; *retry* and
    *on_retry*: the PUTs' retry policy and hook (default: the client's)."""

    def __init__(
        self,
        client: ApiClient,
        zarr_id: str,
        root: str,
        *,
        jobs: int,
        records: BatchRecords,
        progress: Progress | None = None,
        retry: RetryPolicy | None = None,
        on_retry: RetryHook | None = None,
        on_batch_open: Callable[[int], None] | None = None,
    ) -> None:
        self.client = client
        self.zarr_id = zarr_id
        self.root = root
        self.jobs = jobs
        self.records = records
        self.progress: Progress = progress or NullProgress()
        self.retry = retry or client.retry
        self.on_retry = on_retry or client.on_retry
        self.on_batch_open = on_batch_open
        #: S3's explanation of its last 403 to a PUT.
        self.refusal = ""
        #: False once the archive did not open a batch ahead (see :meth:`_open_ahead`).
        self.ahead = True
        #: The batch this run, interrupted (Ctrl-C, the network), left open.
        self.left_open: LeftOpen | None = None
        #: The big files' sender of the last :meth:`run` (its counters: parts sent, skipped).
        self.parts: PartSender | None = None

    def run(self, entries: Iterable[ZarrEntry], batch_files: int, result: UploadResult) -> None:
        """Send *entries* in batches of at most *batch_files* files; count what was sent in
        *result*.  Each batch is completed with ``verify=apply``: the next batch opens
        without waiting for a listing of S3.  At the end, once the Zarr is at rest, a batch
        the apply refused is sent again (:meth:`_send_refused`)."""
        total = len(entries) if isinstance(entries, Sized) else result.local_files
        batcher = Batcher(entries, batch_files, MAX_BATCH_BYTES, total=total)
        retry: deque[tuple[list[ZarrEntry], int]] = deque()
        #: the batches queued unverified, by uid (until the Zarr is at rest)
        queued: dict[str, list[ZarrEntry]] = {}
        self.left_open = None
        self.ahead = True  # until the archive refuses to open a batch ahead
        s3 = http_client(timeout=S3_TIMEOUT, max_connections=2 * self.jobs)
        pool = ThreadPoolExecutor(self.jobs, thread_name_prefix="zarrchive-put")
        # big files' parts (hashed and PUT) on their own threads: a file's sender waits on them
        parts_pool = ThreadPoolExecutor(self.jobs, thread_name_prefix="zarrchive-part")
        parts = PartSender(
            self.client,
            s3,
            parts_pool,
            retry=self.retry,
            on_retry=self.on_retry,
            on_bytes=lambda n: self.progress.advance(0, n),
        )
        self.parts = parts
        send = _Senders(self, s3, pool, parts)

        def take() -> tuple[list[ZarrEntry], int]:
            return retry.popleft() if retry else (batcher.next(), 0)

        current: Sending | None = None
        ahead: Sending | None = None
        try:
            while True:
                if current is None:
                    chunk, refusals = take()
                    if not chunk:
                        break
                    current = self._open(chunk, refusals, result)
                    send.submit(current)
                chunk, refusals = take() if self.ahead else ([], 0)
                ahead = self._open_ahead(chunk, refusals, current, result)
                if ahead is not None and not ahead.in_parts:
                    send.submit(ahead)
                elif ahead is None and chunk:
                    retry.appendleft((chunk, refusals))  # opened once this one is completed
                try:
                    outcome = self._finish(current, result, queued)
                except Exception:
                    if ahead is not None:
                        ahead.halt()
                    raise
                if outcome == "done":
                    if ahead is None:
                        self.records.clear(self.zarr_id)
                    elif ahead.in_parts:  # its parts' URLs are given once it is open
                        send.submit(ahead)
                    current = ahead
                    continue
                # S3 refused the URLs of *current*: cancel it (and the batch opened ahead of
                # it, with it), send both again, *current* in halves.
                again = [current] if ahead is None else [current, ahead]
                for sending in again:
                    sending.halt()
                cancel_batch(self.client, self.zarr_id)
                self.records.clear(self.zarr_id)
                for sending in again:
                    self.progress.advance(-sending.sent[0], -sending.sent[1])
                current = ahead = None
                refusals = again[0].refusals + 1
                if refusals >= MAX_REFUSALS:
                    raise TransferError(
                        f"S3 refused the upload URLs of a batch {refusals} times in a row "
                        f"(403: {self.refusal}): the server's clock, its presigned URLs or "
                        "this network path may be broken"
                    )
                result.reopened += 1
                failed = again[0].chunk
                half = max(1, len(failed) // 2)
                message = (
                    f"S3 refused expired upload URLs: cancelled the batch and re-requesting "
                    f"URLs in batches of {half} files"
                )
                result.notes.append(message)
                self.progress.note(message)
                # This batch again in halves (and the one opened ahead); later ones no larger.
                batcher.files = min(batcher.files, half)
                redo = [(c, refusals) for c in Batcher(failed, half, MAX_BATCH_BYTES)]
                redo.extend(
                    (c, a.refusals)
                    for a in again[1:]
                    for c in Batcher(a.chunk, half, MAX_BATCH_BYTES)
                )
                retry.extendleft(reversed(redo))
            if queued:
                self._send_refused(send, queued, result)
        except (KeyboardInterrupt, NetworkError) as exc:
            interrupted = isinstance(exc, KeyboardInterrupt)
            self._leave_open(interrupted, current, ahead if ahead is not current else None)
            raise
        finally:
            pool.shutdown(wait=True, cancel_futures=True)
            parts_pool.shutdown(wait=True, cancel_futures=True)
            s3.close()

    def _send_refused(
        self, send: _Senders, queued: dict[str, list[ZarrEntry]], result: UploadResult
    ) -> None:
        """Wait until the batches *queued* unverified are applied; send those the apply
        refused again, each verified before its ``complete`` answers (a file still missing
        then is an error that names it)."""
        wait_at_rest(self.client, self.zarr_id, result)
        refused = self.client.refused_batches(self.zarr_id, list(queued))
        for uid, chunk in queued.items():
            paths = refused.get(uid)
            if not paths:
                continue
            message = (
                f"the archive refused a batch of {len(chunk)} files when it applied it "
                f"({len(paths)} missing in S3 or different, e.g. {paths[0]!r}): sending it again"
            )
            result.notes.append(message)
            self.progress.note(message)
            nbytes = sum(e.size for e in chunk)
            result.batches -= 1
            result.uploaded -= len(chunk)
            result.uploaded_bytes -= nbytes
            self.progress.advance(-len(chunk), -nbytes)
            if self._run_batch(send, chunk, result) != "done":
                raise TransferError(
                    f"S3 refused the upload URLs of a batch sent again (403: {self.refusal}): "
                    "run the upload again"
                )

    def _run_batch(self, send: _Senders, chunk: list[ZarrEntry], result: UploadResult) -> Outcome:
        """Open a batch of *chunk*, PUT its files and complete it, alone (nothing opened
        ahead), verified before its ``complete`` answers."""
        sending = self._open(chunk, 0, result)
        send.submit(sending)
        outcome = self._finish(sending, result, None)
        if outcome == "refused":
            cancel_batch(self.client, self.zarr_id)
            self.progress.advance(-sending.sent[0], -sending.sent[1])
        self.records.clear(self.zarr_id)
        return outcome

    # -- opening ----------------------------------------------------------------------------
    def _open_batch(self, chunk: list[ZarrEntry]) -> tuple[dict[str, Target], str | None]:
        """Open a batch of *chunk* (sizes declared: big files go in parts): its files' targets
        and its uid (if the server names it).  An open batch of exactly these files of ours
        (a retried request that went through, or the batch of an interrupted run) is taken up
        again: what reached S3 stays."""
        files = declared(chunk)
        self.records.mark(self.client.url, self.zarr_id, len(files))
        try:
            opened = self.client.open_upload(self.zarr_id, files, resume=True)
            return opened.targets, opened.uid
        except ApiError as exc:
            if exc.status_code != 409:
                self.records.clear(self.zarr_id)
                raise
        # Another batch is open (opened meanwhile, or of other files).  Cancel it, open ours.
        self.progress.note("an upload batch was already open on this Zarr: cancelled it")
        cancel_batch(self.client, self.zarr_id)
        opened = self.client.open_upload(self.zarr_id, files, resume=False)
        return opened.targets, opened.uid

    def _open(self, chunk: list[ZarrEntry], refusals: int, result: UploadResult) -> Sending:
        """Open a batch of *chunk* (the Zarr's open batch from now on)."""
        started = time.perf_counter()
        urls, uid = self._open_batch(chunk)
        result.add_time("open", started)
        return self._opened(chunk, refusals, urls, uid)

    def _open_ahead(
        self, chunk: list[ZarrEntry], refusals: int, current: Sending, result: UploadResult
    ) -> Sending | None:
        """Open a batch of *chunk* ahead, as the next one of *current* (still being sent);
        None if there is no *chunk*, or the archive did not (it knows no ``after`` or
        *current* is no longer its open batch: 409; the batch is refused: 4xx; or it can't
        be reached): the batch is then opened the plain way once *current* is completed
        (which reports a refusal as it would have), and none is opened ahead for the rest of
        the run."""
        if not chunk or current.uid is None or not self.ahead:
            return None
        files = declared(chunk)
        started = time.perf_counter()
        self.records.mark(self.client.url, self.zarr_id, len(files))
        try:
            opened = self.client.open_upload(self.zarr_id, files, resume=True, after=current.uid)
        except (ApiError, NetworkError):
            self.ahead = False
            return None
        result.add_time("open", started)
        try:
            return self._opened(chunk, refusals, opened.targets, opened.uid)
        except BaseException:
            current.halt()
            raise

    def _opened(
        self, chunk: list[ZarrEntry], refusals: int, urls: dict[str, Target], uid: str | None
    ) -> Sending:
        missing = [e.path for e in chunk if e.path not in urls]
        if missing:
            self._abort()
            raise TransferError(f"the archive returned no upload URL for {missing[0]!r}")
        if self.on_batch_open is not None:
            self.on_batch_open(len(chunk))
        return Sending(chunk, urls, uid, refusals)

    # -- completing -------------------------------------------------------------------------
    def _finish(
        self, sending: Sending, result: UploadResult, queued: dict[str, list[ZarrEntry]] | None
    ) -> Outcome:
        """Wait for the files of *sending* (the open batch) and complete it: with *queued*,
        queued at once (checked by the apply; recorded in *queued* by uid), else verified
        first.  ``refused``: S3 refused its URLs (expired); the batch is still open.  A
        failure cancels the batch, except an interrupt (Ctrl-C) or the network's failure
        (after its retries), which leave it open (see :meth:`_leave_open`)."""
        try:
            started = time.perf_counter()
            _wait_all(sending.futures)
            result.add_time("put", started)
        except Exception as exc:
            sending.halt()
            if not isinstance(exc, NetworkError):  # (the network's failure leaves it open)
                self._abort()
            raise
        if not all(f.result() for f in sending.futures):
            return "refused"
        started = time.perf_counter()
        # (the uid the open named, if complete's answer was lost and its retry found the
        # batch queued already: a refusal of it is then still seen and the batch sent again)
        uid = self._complete(queue=queued is not None) or sending.uid
        if uid is not None and queued is not None:
            queued[uid] = sending.chunk
        result.add_time("complete", started)
        result.batches += 1
        result.uploaded += len(sending.chunk)
        result.uploaded_bytes += sum(e.size for e in sending.chunk)
        return "done"

    def _complete(self, *, queue: bool = False) -> str | None:
        """Complete the open batch (with *queue*, ``verify=apply``: the uid of the batch
        queued, None if unknown)."""
        try:
            if queue:
                return self.client.queue_upload(self.zarr_id)
            self.client.complete_upload(self.zarr_id)
            return None
        except ApiError as exc:
            if exc.status_code == 404 and exc.retried:
                return None  # the first attempt completed it; its answer was lost
            if exc.status_code == 404:
                raise TransferError(
                    "the upload batch was cancelled by someone else while it was being sent; "
                    "run the upload again"
                ) from None
            if exc.status_code == 400:
                self._abort()
            raise

    def _abort(self) -> None:
        """Cancel the open batch after a failure (best effort and quick: a rerun cancels
        it anyway)."""
        try:
            cancel_batch(self.client, self.zarr_id, QUICK_RETRY)
        except (ApiError, NetworkError):
            return
        self.records.clear(self.zarr_id)

    # -- interrupted ------------------------------------------------------------------------
    def _leave_open(self, interrupted: bool, *sendings: Sending | None) -> None:
        """After Ctrl-C (*interrupted*) or the network's failure: start no further file or
        part of the batches *sendings* (the open one, and the one opened ahead of it), wait
        for those under way, and leave both open for the next run to take up
        (:attr:`left_open` says what S3 holds of the first)."""
        halted = [s for s in sendings if s is not None]
        for sending in halted:
            sending.stop.set()
        if not halted:
            return
        if interrupted:
            self.progress.note(
                "interrupted: finishing the transfers under way, then leaving the upload "
                "batch open for the next run (Ctrl-C again stops at once)"
            )
        for sending in halted:
            sending.halt()
        self.left_open = self._left(halted[0])

    def _left(self, sending: Sending) -> LeftOpen:
        """What S3 holds of the batch *sending*, left open."""
        big = [e.path for e in sending.chunk if sending.urls[e.path].in_parts]
        held = self.parts.held if self.parts is not None else {}
        return LeftOpen(
            self.zarr_id,
            files=len(sending.chunk),
            files_in_s3=sending.files_sent(),
            big_files=len(big),
            parts_in_s3=sum(held.get(p, 0) for p in big),
        )


class _Senders:
    """The PUTs of one :meth:`BatchPipeline.run`: its S3 connections, its pool of senders,
    its big files' sender."""

    def __init__(
        self, pipeline: BatchPipeline, s3: httpx.Client, pool: ThreadPoolExecutor, parts: PartSender
    ) -> None:
        self.pipeline = pipeline
        self.s3 = s3
        self.pool = pool
        self.parts = parts

    def submit(self, sending: Sending) -> None:
        """Hand the files of *sending* to the senders (PUTs, or parts for big files)."""
        pipeline = self.pipeline
        progress = pipeline.progress

        def put(entry: ZarrEntry) -> bool:
            if sending.stop.is_set():
                return False
            target = sending.urls[entry.path]
            local = os_path(pipeline.root, entry.path)
            if target.url is None:
                assert target.part_size is not None and target.part_count is not None
                if not self.parts.send(
                    pipeline.zarr_id,
                    entry.path,
                    local,
                    entry.size,
                    target.part_size,
                    target.part_count,
                    sending.stop,
                ):
                    return False  # halted: the parts left are sent by the next run
                sending.count(0)
                progress.advance(1, 0)  # its bytes were counted part by part
                return True
            ok = self.put(target.url, entry, local)
            if ok:
                sending.count(entry.size)
                progress.advance(1, entry.size)
            else:
                sending.stop.set()  # the URLs have expired: no point sending the others
            return ok

        sending.futures = [self.pool.submit(put, e) for e in sending.chunk]

    def put(self, url: str, entry: ZarrEntry, path: str) -> bool:
        """PUT one file; False if S3 refused the URL (403: expired)."""
        headers = {
            "Content-MD5": md5_to_content_md5(entry.md5),
            "Content-Type": zarr_content_type(entry.path),  # signed by the URL, as the md5
        }
        if entry.size > IN_MEMORY_BYTES:
            headers["Content-Length"] = str(entry.size)

        def request() -> httpx.Response:  # the body is read again for each attempt
            if entry.size <= IN_MEMORY_BYTES:
                return self.s3.put(url, content=_read(path), headers=headers)
            return self.s3.put(url, content=_stream(path), headers=headers)

        pipeline = self.pipeline
        try:
            response = call(
                pipeline.retry, request, what=f"PUT {entry.path!r}", on_retry=pipeline.on_retry
            )
        except RETRY_EXCEPTIONS as exc:
            raise NetworkError(
                f"cannot upload {entry.path!r} to S3: {transport_message(exc)}"
            ) from None
        status = response.status_code
        if status == 200:
            return True
        if status == 403:
            pipeline.refusal = s3_error_message(response.text)
            return False
        if status == 400 and b"BadDigest" in response.content:
            raise LocalFileError(
                f"{path!r} changed while it was being uploaded (its md5 is no longer "
                f"{entry.md5}): run the upload again"
            )
        raise TransferError(
            f"S3 refused {entry.path!r} ({status}): {s3_error_message(response.text)}"
        )


def _wait_all(futures: Sequence[Future[Any]]) -> None:
    """Wait for every future; raise the first exception as soon as it happens."""
    pending: set[Future[Any]] = set(futures)
    while pending:
        done, pending = wait(pending, timeout=0.5, return_when=FIRST_EXCEPTION)
        for f in done:
            exc = f.exception()
            if exc is not None:
                raise exc


def _read(path: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as exc:
        raise LocalFileError(f"cannot read {path!r}: {exc.strerror}") from None


def _stream(path: str) -> Iterator[bytes]:
    try:
        with open(path, "rb") as f:
            while block := f.read(1 << 20):
                yield block
    except OSError as exc:
        raise LocalFileError(f"cannot read {path!r}: {exc.strerror}") from None


__all__ = [
    "HEAD_SHARES",
    "IN_MEMORY_BYTES",
    "MAX_BATCH_BYTES",
    "MAX_REFUSALS",
    "TAIL_FILES",
    "TAIL_SHARE",
    "BatchPipeline",
    "Batcher",
    "Outcome",
    "Sending",
]
