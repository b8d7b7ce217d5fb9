"""The upload sync engine: make a Zarr in the archive equal to a local directory.

1. Find the Zarr (or create it): :func:`find_or_create_zarr`, the one place that
   knows how a local Zarr maps to an archive object (the draft's asset at its path;
   the asset is created once the upload is complete).
2. Walk the local tree and md5 every file in parallel; compute each directory's
   digest.
3. If the server's root checksum equals the local one, stop: nothing to do.
   Otherwise list the remote tree, skipping every subtree whose digest equals the
   local one (:func:`zarrchive.client.remote.walk_remote`).
4. Delete the remote files that are gone locally, then upload new and changed
   files in batches of at most the server's ``max_batch_files``: open a batch,
   PUT its files in parallel to their presigned URLs (``Content-MD5`` signed),
   complete it.  Files are taken in path order, so a batch touches few
   directories of the tree hash.  ``complete`` answers once the batch is queued;
   the server copies it into place while the next batch is PUT (pipelining: the
   server applies completed batches strictly in order).  The next batch is opened
   *ahead* (``after`` the open one) while the open one is still being sent, and its
   files follow at once: no PUT waits on a batch's ``complete`` or the next ``open``.
5. Wait until the Zarr is at rest (no completed batch left to apply), then compare
   the server's checksum with the local one.

Resumability: every step is idempotent; a rerun recomputes the difference and
does only what is missing.  An upload batch left open by an interrupted run is
recognised by a record in the client's state directory
(:mod:`zarrchive.client.records`: written before the batch is opened, removed when it
is closed): such a batch is completed if all its files reached S3, else left open and
taken up by the run's first batch if that has the same files (the server answers its URLs
again; big files' parts already in S3 are not sent again), else cancelled.  An
open batch without such a record (another machine, another client) is cancelled too,
with a message: the server allows one batch per Zarr, and a batch nobody completes
blocks every upload.

Patch uploads (``patch=True``, ``zarrchive upload --patch``): for a partial local copy.
Only the selected local files (``selection``: ``--include``/``--exclude`` globs,
:mod:`zarrchive.client.selection`) are walked and hashed
(:mod:`zarrchive.client.local_selected`), compared with the archive through the whole nodes
of the directories that hold them and their ancestors, read as one state of the Zarr
(:func:`~zarrchive.client.remote.read_affected`), and the new and changed ones are sent;
nothing is deleted.  The final check compares the archive's checksum with the one predicted
from that state plus the patch (:func:`~zarrchive.client.patch.plan_patch`): a change by
anyone else meanwhile, to any file, fails it.  A checksum of the local directory would need
the whole Zarr here.

Ctrl-C (``KeyboardInterrupt``) while a batch is being sent: no file or part is started
after it, those under way are finished, and the batch (and the one opened ahead of it) is
left open with what S3 holds, for the next run to take up (:attr:`Uploader.left_open` says
what was left); it is cancelled only when asked (:meth:`Uploader.cancel`, ``zarrchive
upload --cancel``), or its multipart uploads aborted by ``admin gc`` once abandoned.  The
network's failure (:class:`NetworkError`, after the retries) leaves it open the same way;
other failures (a file changed while it was sent, S3 refusing a file) cancel it (best
effort).

Expired URLs: S3 answers 403 to a PUT with an expired presigned URL.  The server
allows one open batch and has no way to re-sign the URLs of an open batch, so
the engine cancels the batch (which removes what it uploaded, and cancels the batch
opened ahead of it too) and opens it again with half as many files (and makes later
batches no larger), so a slow link converges to batches it can finish before their
URLs expire.
"""

from __future__ import annotations

import base64
import contextlib
import math
import os
import queue
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence, Sized
from concurrent.futures import FIRST_EXCEPTION, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import httpx

from zarrchive.checksum import EMPTY_CHECKSUM, ZarrEntry
from zarrchive.client.api import ApiClient, UploadState, ZarrInfo
from zarrchive.client.local import (
    FIRST_UPLOAD_CHUNK,
    default_jobs,
    hash_local,
    iter_local_entries,
    transfer_jobs,
    walk_local,
)
from zarrchive.client.multipart import PartSender, Target, declared, start_upload
from zarrchive.client.progress import NullProgress, Progress
from zarrchive.client.records import BatchRecords
from zarrchive.client.remote import (
    SubtreeFilter,
    local_digests,
    os_path,
    walk_remote,
)
from zarrchive.client.selection import Selection
from zarrchive.content_types import zarr_content_type
from zarrchive.errors import (
    ApiError,
    InvalidInput,
    LocalFileError,
    NetworkError,
    TransferError,
)
from zarrchive.transport import (
    RETRY_EXCEPTIONS,
    RetryHook,
    RetryPolicy,
    call,
    http_client,
    transport_message,
)

if TYPE_CHECKING:
    from zarrchive.client.local.tree import Survey

#: S3's limit for a single PUT.
#: S3's largest object (5 TiB): bigger files are refused before anything is sent; files
#: above the archive's multipart threshold go up in parts.
MAX_FILE_BYTES = 5 * 1024**4
#: Files up to this size are read into memory for the PUT; larger ones are streamed.
IN_MEMORY_BYTES = 16 * 1024**2
#: A batch holds at most this many bytes (unless one file is larger), so that it
#: finishes well before its URLs expire on an ordinary link.
MAX_BATCH_BYTES = 2 * 1024**3
#: Batches re-opened in a row because S3 refused their URLs before giving up.
MAX_REFUSALS = 8
#: The last batches of an upload shrink to this share of the files left (see _Batcher) ...
TAIL_SHARE = 0.5
#: ... down to this many files.
TAIL_FILES = 100
#: The first batches of an upload of more than four full batches: these shares of the limit.
HEAD_SHARES = (0.25, 0.5)

S3_TIMEOUT = httpx.Timeout(120.0, connect=10.0)
#: For cleaning up after a failure or Ctrl-C: do not keep the user waiting.
QUICK_RETRY = RetryPolicy(attempts=2, base_delay=0.2, max_retry_after=1.0)
#: How long to wait, at the end, for the archive to apply the completed batches.
APPLY_TIMEOUT = 1800.0
#: The files at a Zarr's root that say it is one: Zarr v2's group and array metadata, v3's.
ZARR_METADATA_FILES = (".zgroup", ".zarray", "zarr.json")
#: A dry run names at most this many of the files it would upload, and of those it would
#: delete.
DRY_RUN_PATHS = 20


def md5_to_content_md5(md5_hex: str) -> str:
    """The ``Content-MD5`` header value (base64 of the digest bytes) of an md5 in hex."""
    return base64.b64encode(bytes.fromhex(md5_hex)).decode("ascii")


# -- results ----------------------------------------------------------------------------
@dataclass
class UploadPlan:
    """What an upload will do."""

    upload: list[ZarrEntry]
    delete: list[str]
    skipped: int
    #: The bytes of the files to delete (their sizes in the archive).
    delete_bytes: int = 0
    #: The first :data:`DRY_RUN_PATHS` files to delete, with their sizes.
    delete_sizes: list[tuple[str, int]] = field(default_factory=list)

    @property
    def upload_bytes(self) -> int:
        return sum(e.size for e in self.upload)


@dataclass
class UploadResult:
    zarr_id: str | None
    name: str
    created: bool
    dry_run: bool
    local_files: int
    local_bytes: int
    local_checksum: str
    remote_checksum: str | None
    uploaded: int = 0
    uploaded_bytes: int = 0
    deleted: int = 0
    skipped: int = 0
    batches: int = 0
    #: Batches cancelled and re-opened because S3 refused their (expired) URLs.
    reopened: int = 0
    #: The draft's asset at the Zarr's path (None: uploaded by Zarr id).
    asset_id: str | None = None
    #: True when this upload created that asset: the Zarr just became part of the dandiset.
    asset_created: bool = False
    #: What was done with a batch found open at the start: None, "completed", "resumed"
    #: (left open for this run's first batch to take up) or "cancelled".
    stale_batch: str | None = None
    planned_uploads: int = 0
    planned_deletes: int = 0
    planned_upload_bytes: int = 0
    planned_delete_bytes: int = 0
    #: The first :data:`DRY_RUN_PATHS` files to upload and to delete, with their sizes.
    planned_upload_paths: list[tuple[str, int]] = field(default_factory=list)
    planned_delete_paths: list[tuple[str, int]] = field(default_factory=list)
    #: A patch upload (``--patch``): nothing deleted, only the selected files compared.
    patch: bool = False
    #: A patch's files not in the archive before it (the others replaced a different file).
    new: int = 0
    #: A patch's final check: the checksum the archive must have after it (the Zarr as read,
    #: :attr:`base_checksum`, the affected directories' nodes whole, plus the patch's files).
    expected_checksum: str | None = None
    #: A patch's base: the Zarr's checksum when the affected directories were read.
    base_checksum: str | None = None
    #: Directory listings read to compare (a patch: the affected directories' nodes only).
    listed: int = 0
    notes: list[str] = field(default_factory=list)
    #: Seconds spent per phase: hash, plan, open (batches), put, complete.
    timings: dict[str, float] = field(default_factory=dict)

    def add_time(self, phase: str, since: float) -> None:
        self.timings[phase] = self.timings.get(phase, 0.0) + time.perf_counter() - since

    @property
    def ok(self) -> bool:
        """The archive's checksum equals the local one, or for a patch the one expected
        after it (always True for a dry run)."""
        if self.dry_run:
            return True
        if self.patch:
            return self.remote_checksum == self.expected_checksum
        return self.remote_checksum == self.local_checksum

    def plan_upload(self, entries: Sequence[ZarrEntry]) -> None:
        """Record the files to upload (a dry run names the first ones)."""
        self.planned_uploads = len(entries)
        self.planned_upload_bytes = sum(e.size for e in entries)
        self.planned_upload_paths = [(e.path, e.size) for e in entries[:DRY_RUN_PATHS]]


# -- finding the Zarr -------------------------------------------------------------------
def find_or_create_zarr(
    client: ApiClient, dandiset: str, path: str, *, create: bool = True
) -> tuple[ZarrInfo | None, bool]:
    """The Zarr at *path* in *dandiset*'s draft and whether it was just created.

    The Zarr of the draft's asset at *path*; else (no asset yet: a first upload,
    perhaps interrupted) the dandiset's Zarr named *path*; else a new Zarr named *path*.  The asset itself is created once the
    upload is complete (:func:`ensure_asset`).
    """
    asset = client.find_asset(dandiset, path)
    if asset is not None:
        zarr_id = asset.get("zarr_id")
        if not zarr_id:
            raise InvalidInput(
                f"the asset {path!r} of dandiset {dandiset} is a file, not a Zarr: "
                "choose another --path"
            )
        return client.get_zarr(str(zarr_id)), False
    found = client.find_zarr(dandiset, path)
    if found is not None or not create:
        return found, False
    try:
        return client.create_zarr(path, dandiset), True
    except ApiError as exc:
        # Someone (or our own retried request) created it meanwhile.
        if exc.status_code in (400, 409):
            found = client.find_zarr(dandiset, path)
            if found is not None:
                return found, False
        raise


def ensure_asset(client: ApiClient, dandiset: str, path: str, zarr_id: str) -> str:
    """The id of the draft's asset at *path* for the Zarr, created if absent."""
    return _ensure_asset(client, dandiset, path, zarr_id)[0]


def _ensure_asset(client: ApiClient, dandiset: str, path: str, zarr_id: str) -> tuple[str, bool]:
    """:func:`ensure_asset`, and whether it created the asset."""
    asset = client.find_asset(dandiset, path)
    created = asset is None
    if asset is None:
        asset = client.create_asset(dandiset, path, zarr_id=zarr_id)
    return str(asset["asset_id"]), created


# -- the engine -------------------------------------------------------------------------
_Outcome = Literal["done", "refused"]


@dataclass
class _Sending:
    """A batch opened by the uploader: its files, their targets, its uid (if the archive
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

    def halt(self) -> None:
        """Send no more of its files; wait for those being sent."""
        self.stop.set()
        for f in self.futures:
            f.cancel()
        for f in self.futures:
            if not f.cancelled():
                with contextlib.suppress(Exception):  # (its failure is not the one raised)
                    f.result()


@dataclass(frozen=True)
class LeftOpen:
    """The upload batch an interrupted run left open on a Zarr, for the next run to take
    up: how many files it holds, how many of them S3 holds whole, and how many parts of its
    big files S3 holds (with their bytes)."""

    zarr_id: str
    files: int
    files_in_s3: int
    big_files: int
    parts_in_s3: int


class Uploader:
    """Uploads local directories to the archive of *client*.

    *jobs*: parallel PUTs (and md5 threads); *batch_files*: the largest batch
    (default and maximum: the server's limit); *records*: where open batches are
    recorded; *on_batch_open*: called with each batch's size after it is opened,
    before its files are sent (a hook for displays and tests); *retry* and *on_retry*:
    the PUTs' retry policy and hook (default: the client's).
    """

    def __init__(
        self,
        client: ApiClient,
        *,
        jobs: int | None = None,
        progress: Progress | None = None,
        batch_files: int | None = None,
        records: BatchRecords | None = None,
        retry: RetryPolicy | None = None,
        on_retry: RetryHook | None = None,
        on_batch_open: Callable[[int], None] | None = None,
    ) -> None:
        self.client = client
        self.jobs = transfer_jobs(jobs)
        self.progress: Progress = progress or NullProgress()
        if batch_files is not None and batch_files < 1:
            raise InvalidInput(f"the batch size must be at least 1, got {batch_files}")
        self.batch_files = batch_files
        self.records = records or BatchRecords()
        self.retry = retry or client.retry
        self.on_retry = on_retry or client.on_retry
        self.on_batch_open = on_batch_open
        #: S3's explanation of its last 403 to a PUT.
        self._refusal = ""
        #: False once the archive did not open a batch ahead (see :meth:`_open_ahead`).
        self._ahead = True
        #: The batch the last :meth:`upload`, interrupted (Ctrl-C), left open.
        self.left_open: LeftOpen | None = None

    # -- public -------------------------------------------------------------------------
    def upload(
        self,
        local: str | os.PathLike[str],
        *,
        dandiset: str | None = None,
        name: str | None = None,
        zarr_id: str | None = None,
        dry_run: bool = False,
        require_zarr: bool = False,
        patch: bool = False,
        selection: Selection | None = None,
    ) -> UploadResult:
        """Make the archive's Zarr equal to the directory *local*.

        The Zarr is *zarr_id*, or the one at the asset path *name* (default: the
        directory's name) in *dandiset*'s draft, created if absent
        (:func:`find_or_create_zarr`).  With *require_zarr*, a directory that is empty or
        has no Zarr metadata at its root is refused before anything is sent
        (:func:`require_zarr_root`).

        With *patch*: send the new and changed files among those *selection* selects (default:
        every file) and delete nothing (see the module); *require_zarr* is ignored (a partial
        copy may lack the root's metadata).  A *selection* needs *patch*: a full upload
        deletes what is not here, so a filter would delete everything outside it.
        """
        if selection is not None and not selection.is_everything and not patch:
            raise InvalidInput(
                "--include/--exclude need --patch: without it, upload makes the archive's Zarr "
                "equal to this directory and deletes every file that is not here, so a filter "
                "would delete everything outside it. Add --patch (sends the new and changed "
                "files the filter selects, deletes nothing)"
            )
        self.left_open = None
        root = os.fspath(local)
        if not os.path.isdir(root):
            if os.path.lexists(root):
                raise LocalFileError(f"{root!r} is not a directory")
            raise LocalFileError(f"{root!r}: no such file or directory")
        if name is None:
            name = Path(root).resolve().name
        survey: Survey | None = None
        if patch:
            count = nbytes = 0  # the walk of the selected files counts them
        else:
            # bad input fails here, before anything is sent: with the digest cache, by the
            # first half of the cached tree's walk (every file stat-ed, nothing read yet; the
            # sync below finishes it, no second walk), else by a walk that stats every file
            survey = self._survey(root)
            if survey is None:
                count, nbytes = scan_local(root)
            else:
                count, nbytes = survey.files, survey.size
        try:
            if survey is not None:
                _refuse_sizes(survey.too_big)
            if require_zarr and not patch:
                require_zarr_root(root, count)
            return self._upload_checked(
                root, survey, count, nbytes, dandiset, name, zarr_id, dry_run, patch, selection
            )
        finally:
            if survey is not None:
                survey.close()

    def _upload_checked(
        self,
        root: str,
        survey: Survey | None,
        count: int,
        nbytes: int,
        dandiset: str | None,
        name: str,
        zarr_id: str | None,
        dry_run: bool,
        patch: bool,
        selection: Selection | None,
    ) -> UploadResult:
        """:meth:`upload` once the local directory is checked (*survey*: its walk so far,
        with a usable digest cache)."""
        server = self.client.info()
        limit = server.max_batch_files
        batch_files = min(self.batch_files or limit, limit)

        created = False
        if zarr_id is not None:
            zarr: ZarrInfo | None = self.client.get_zarr(zarr_id)
        else:
            if dandiset is None:
                raise InvalidInput("give the dandiset (--dandiset) or the Zarr id")
            # a patch creates a missing Zarr once it knows it has files to send
            create = not dry_run and not patch
            zarr, created = find_or_create_zarr(self.client, dandiset, name, create=create)
        assert zarr is not None or dry_run or patch

        result = UploadResult(
            zarr_id=zarr.zarr_id if zarr else None,
            name=name,
            created=created,
            dry_run=dry_run,
            local_files=count,
            local_bytes=nbytes,
            local_checksum="",
            remote_checksum=zarr.checksum if zarr else None,
            patch=patch,
        )
        if zarr is not None and zarr.upload_in_progress and not dry_run:
            result.stale_batch = self._resolve_stale_batch(zarr.zarr_id, result)
            zarr = self.client.get_zarr(zarr.zarr_id)
        elif zarr is not None and not dry_run:
            # A record without an open batch: we were killed before the batch opened.
            self.records.clear(zarr.zarr_id)

        if zarr is not None and zarr.upload_state == UploadState.APPLYING:
            # batches completed earlier are still being applied: compare with their result
            zarr = self._wait_at_rest(zarr.zarr_id, result)

        if patch:
            zarr = self._patch(
                root, zarr, selection or Selection(), result, batch_files, dry_run, dandiset, name
            )
            if zarr is None or dry_run:
                return result
        elif zarr is not None and zarr.file_count == 0 and not dry_run:
            # A new (or empty) Zarr: every file goes up, so batches start while the
            # rest is still being hashed.
            if survey is not None:
                survey.close()  # its files are hashed as they are sent, not before
            entries: list[ZarrEntry] = []
            self.progress.start("uploading", count, nbytes)
            self._upload_entries(
                root, zarr.zarr_id, self._hashed_ahead(root, entries), batch_files, result
            )
            self._set_local(result, entries, local_digests(entries))
        else:
            self._sync(root, zarr, result, count, nbytes, limit, batch_files, dry_run, survey)
            if zarr is None or dry_run:
                return result
        self.progress.stop()
        # complete answers before its batch is applied (the server applies while we PUT the
        # next one): the checksum to compare is the one at rest
        result.remote_checksum = self._wait_at_rest(zarr.zarr_id, result).checksum
        if patch and not result.ok:
            result.notes.append(
                f"the archive's checksum {result.remote_checksum} is not the one expected "
                f"after this patch, {result.expected_checksum} (its checksum "
                f"{result.base_checksum} as read, plus the patch's files): another upload or "
                "deletion changed the Zarr meanwhile"
            )
        if dandiset is not None and zarr_id is None and result.ok:
            try:
                result.asset_id, result.asset_created = _ensure_asset(
                    self.client, dandiset, name, zarr.zarr_id
                )
            except ApiError as exc:
                message = f"uploaded, but the asset {name!r} could not be created: {exc.message}"
                result.notes.append(message)
                self.progress.note(message)
        return result

    @staticmethod
    def _set_local(result: UploadResult, entries: list[ZarrEntry], digests: dict[str, str]) -> None:
        result.local_files = len(entries)
        result.local_bytes = sum(e.size for e in entries)
        result.local_checksum = digests.get("", EMPTY_CHECKSUM)

    def _sync(
        self,
        root: str,
        zarr: ZarrInfo | None,
        result: UploadResult,
        count: int,
        nbytes: int,
        limit: int,
        batch_files: int,
        dry_run: bool,
        survey: Survey | None = None,
    ) -> None:
        """Hash everything, compare with the remote tree, delete and upload the difference."""
        started = time.perf_counter()
        if zarr is not None and self._unchanged(root, zarr, result, survey):
            result.timings["hash"] = time.perf_counter() - started
            return
        entries = self._hash_local(root, count, nbytes)
        result.timings["hash"] = time.perf_counter() - started
        digests = local_digests(entries)
        self._set_local(result, entries, digests)
        if zarr is None:  # dry run of a new Zarr
            result.plan_upload(entries)
            return
        started = time.perf_counter()
        plan = self.plan(zarr, entries, digests)
        result.timings["plan"] = time.perf_counter() - started
        result.skipped = plan.skipped
        result.plan_upload(plan.upload)
        result.planned_deletes = len(plan.delete)
        result.planned_delete_bytes = plan.delete_bytes
        result.planned_delete_paths = plan.delete_sizes
        if dry_run:
            return
        zid = zarr.zarr_id
        if plan.delete:
            self.progress.start("deleting", len(plan.delete), None)
            for start in range(0, len(plan.delete), limit):
                chunk = plan.delete[start : start + limit]
                self._delete(zid, chunk)
                result.deleted += len(chunk)
                self.progress.advance(len(chunk), 0)
        if plan.upload:
            self.progress.start("uploading", len(plan.upload), plan.upload_bytes)
            self._upload_entries(root, zid, plan.upload, batch_files, result)

    def _patch(
        self,
        root: str,
        zarr: ZarrInfo | None,
        selection: Selection,
        result: UploadResult,
        batch_files: int,
        dry_run: bool,
        dandiset: str | None,
        name: str,
    ) -> ZarrInfo | None:
        """Hash the selected files, compare them with the archive's nodes of the directories
        that hold them (and their ancestors), predict the Zarr's checksum after the patch,
        upload the new and changed ones; delete nothing.  A missing *zarr* is created (in
        *dandiset*, named *name*) if there is a file to send.  Returns the Zarr."""
        from zarrchive.checksum import compute_checksum
        from zarrchive.client.local.digest_cache import default_cache
        from zarrchive.client.local.selected import hash_selected
        from zarrchive.client.patch import plan_patch
        from zarrchive.client.remote import read_affected

        started = time.perf_counter()
        self.progress.start("hashing", None, None)
        entries = hash_selected(
            root,
            selection,
            jobs=min(self.jobs, default_jobs()),
            progress=self.progress.advance,
            cache=default_cache(),
        )
        result.timings["hash"] = time.perf_counter() - started
        result.local_files = len(entries)
        result.local_bytes = sum(e.size for e in entries)
        _refuse_too_big(entries)
        if not entries:
            message = (
                f"nothing to upload: no local file is selected ({selection.describe()})"
                if not selection.is_everything
                else "nothing to upload: the directory has no file"
            )
            result.notes.append(message)
            self.progress.note(message)
        if zarr is None and (dry_run or not entries):
            # a new Zarr: every selected file is new (and with none, no Zarr is created)
            result.plan_upload(entries)
            result.new = len(entries)
            result.base_checksum = EMPTY_CHECKSUM
            result.expected_checksum = compute_checksum(entries, grouped=True)
            if not dry_run:
                raise InvalidInput(
                    f"nothing to upload, and dandiset {dandiset} has no Zarr {name!r} yet: no "
                    f"local file is selected ({selection.describe()}); no Zarr was created"
                )
            return None
        if zarr is None:
            assert dandiset is not None
            zarr, result.created = find_or_create_zarr(self.client, dandiset, name)
            assert zarr is not None
            result.zarr_id = zarr.zarr_id
        started = time.perf_counter()
        self.progress.start("comparing", None, None)
        nodes = read_affected(self.client, zarr.zarr_id, [e.path for e in entries], jobs=self.jobs)
        plan = plan_patch(entries, nodes)
        result.timings["plan"] = time.perf_counter() - started
        result.listed = plan.listed
        result.skipped = plan.skipped
        result.new = plan.new
        result.base_checksum = plan.base_checksum
        result.expected_checksum = plan.expected_checksum
        result.plan_upload(plan.upload)
        if dry_run or not plan.upload:
            return zarr
        self.progress.start("uploading", len(plan.upload), plan.upload_bytes)
        self._upload_entries(root, zarr.zarr_id, plan.upload, batch_files, result)
        return zarr

    def _survey(self, root: str) -> Survey | None:
        """The first half of the walk of the directory's tree from the digest cache's
        directory digests (see :meth:`_unchanged`): every file stat-ed (the upload's checks:
        names, links, sizes), the directories the cache knows compared with their rows,
        nothing read yet.  None without a usable cache."""
        from zarrchive.client.local.digest_cache import default_cache
        from zarrchive.client.local.tree import survey_tree

        cache = default_cache()
        if cache is None or not cache.usable:
            return None
        jobs = min(self.jobs, default_jobs())
        return survey_tree(root, cache=cache, jobs=jobs, limit=MAX_FILE_BYTES)

    def _unchanged(
        self, root: str, zarr: ZarrInfo, result: UploadResult, survey: Survey | None = None
    ) -> bool:
        """True (with *result* filled in) when the directory equals the Zarr: its tree from
        the digest cache's directory digests (an unchanged directory costs its entries' stats,
        never a stale digest: :mod:`~zarrchive.client.local_tree`) has the Zarr's checksum.
        Without a usable cache, or when they differ, the full comparison follows (its files'
        md5s are cached by then).  *survey*: the walk :meth:`_survey` began, finished here
        (its other files read, the cache's rows written)."""
        from zarrchive.client.local.digest_cache import default_cache
        from zarrchive.client.local.tree import scan_tree

        if zarr.file_count == 0:
            return False
        if survey is not None:
            tree = survey.tree()
        else:
            cache = default_cache()
            if cache is None:
                return False
            tree = scan_tree(root, cache=cache, jobs=min(self.jobs, default_jobs()))
        if tree.checksum != zarr.checksum:
            return False
        result.local_files, result.local_bytes = tree.files, tree.size
        result.local_checksum = tree.checksum
        result.skipped = tree.files
        return True

    def _hashed_ahead(self, root: str, sink: list[ZarrEntry]) -> Iterator[ZarrEntry]:
        """The local entries, hashed by a producer thread running ahead of the consumer;
        each is also appended to *sink*."""
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
                from zarrchive.client.local.digest_cache import default_cache

                jobs = min(self.jobs, default_jobs())
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

    def plan(
        self, zarr: ZarrInfo, entries: Sequence[ZarrEntry], digests: dict[str, str]
    ) -> UploadPlan:
        """The files to upload and delete so that *zarr* equals the local *entries*."""
        local_root = digests.get("", EMPTY_CHECKSUM)
        if zarr.checksum == local_root:
            return UploadPlan([], [], len(entries))
        remote = walk_remote(
            self.client, zarr.zarr_id, digests, root_digest=zarr.checksum, jobs=self.jobs
        )
        same = SubtreeFilter(remote.identical)
        upload: list[ZarrEntry] = []
        skipped = 0
        local_paths: set[str] = set()
        for entry in entries:
            if same(entry.path):
                skipped += 1
                continue
            local_paths.add(entry.path)
            found = remote.files.get(entry.path)
            if found is not None and found[0] == entry.md5:
                skipped += 1
            else:
                upload.append(entry)
        delete = sorted(p for p in remote.files if p not in local_paths)
        sizes = [(p, remote.files[p][1]) for p in delete]
        return UploadPlan(upload, delete, skipped, sum(n for _, n in sizes), sizes[:DRY_RUN_PATHS])

    # -- local ----------------------------------------------------------------------------
    def _hash_local(self, root: str, count: int, nbytes: int) -> list[ZarrEntry]:
        self.progress.start("hashing", count, nbytes)
        # an upload's walk: big files' part md5s in the same read (client/parts.py)
        return hash_local(root, jobs=self.jobs, progress=self.progress.advance, part_md5s=True)

    def _wait_at_rest(self, zarr_id: str, result: UploadResult) -> ZarrInfo:
        """Poll the Zarr until no completed batch of it waits to be applied."""
        started = time.perf_counter()
        deadline = time.monotonic() + APPLY_TIMEOUT
        pause = 0.02
        while True:
            zarr = self.client.get_zarr(zarr_id)
            if zarr.upload_state != UploadState.APPLYING:
                result.add_time("apply", started)
                return zarr
            if time.monotonic() > deadline:
                raise TransferError(
                    f"the archive is still applying the completed batches of Zarr {zarr_id} "
                    f"after {APPLY_TIMEOUT:.0f} s (they will be applied): check later with "
                    "`zarrchive verify`"
                )
            time.sleep(pause)
            pause = min(pause * 1.5, 0.2)  # the upload ends when this answers: poll briskly

    # -- stale batches ----------------------------------------------------------------------
    def _resolve_stale_batch(self, zarr_id: str, result: UploadResult) -> str | None:
        ours = self.records.get(self.client.url, zarr_id) is not None
        outcome: str | None
        if ours:
            try:
                self.client.complete_upload(zarr_id)
                outcome = "completed"
                message = (
                    "completed the upload batch left open by an interrupted earlier run "
                    "(all its files had reached S3)"
                )
            except ApiError as exc:
                if exc.status_code == 404:
                    outcome, message = None, ""
                elif exc.status_code == 400:
                    # some files never reached S3: leave the batch open, the first batch of
                    # this run takes it up if it is the same (files sent, and big files'
                    # parts sent, are not sent again), else cancels it
                    outcome = "resumed"
                    message = (
                        "taking up the upload batch left open by an interrupted earlier run "
                        "(what reached S3 is not sent again)"
                    )
                else:
                    raise
        else:
            self._cancel(zarr_id)
            outcome = "cancelled"
            message = (
                "cancelled an upload batch that was already open on this Zarr (left by an "
                "interrupted run elsewhere or by another client; only one batch can be open)"
            )
        self.records.clear(zarr_id)
        if message:
            result.notes.append(message)
            self.progress.note(message)
        return outcome

    def _cancel(self, zarr_id: str, retry: RetryPolicy | None = None) -> None:
        try:
            self.client.cancel_upload(zarr_id, retry=retry)
        except ApiError as exc:
            if exc.status_code != 404:  # already closed: fine
                raise

    # -- deletions ------------------------------------------------------------------------
    def _delete(self, zarr_id: str, paths: list[str]) -> None:
        try:
            self.client.delete_files(zarr_id, paths)
        except ApiError as exc:
            detail = exc.detail if isinstance(exc.detail, dict) else {}
            missing = detail.get("missing") if exc.status_code in (400, 404) else None
            if isinstance(missing, list) and missing:
                # Already gone: deleted by our own first attempt (its answer lost) or by
                # another client meanwhile.  Delete the rest.
                rest = [p for p in paths if p not in set(missing)]
                if rest:
                    self.client.delete_files(zarr_id, rest)
                return
            if exc.status_code == 409:
                # A batch was opened meanwhile (our own, interrupted): cancel and retry once.
                self._cancel(zarr_id)
                self.client.delete_files(zarr_id, paths)
                return
            raise

    # -- uploads --------------------------------------------------------------------------
    def _upload_entries(
        self,
        root: str,
        zarr_id: str,
        entries: Iterable[ZarrEntry],
        batch_files: int,
        result: UploadResult,
    ) -> None:
        """Send *entries* in batches.  Each batch is completed with ``verify=apply`` (queued
        at once, its files checked by the archive's apply): the next batch opens without
        waiting for a listing of S3.  The next batch is opened *ahead* (``after`` the open
        one) as soon as the open one's files are all handed to the senders, and its files
        follow them at once: no sender waits on a batch boundary (the ``complete`` of one
        batch and the ``open`` of the next).  At the end, once the Zarr is at rest, a batch
        the apply refused (a file missing in S3: nothing of the batch became visible) is
        sent again, verified before its ``complete`` answers."""
        total = len(entries) if isinstance(entries, Sized) else result.local_files
        batcher = _Batcher(entries, batch_files, MAX_BATCH_BYTES, total=total)
        retry: deque[tuple[list[ZarrEntry], int]] = deque()
        #: the batches queued unverified, by uid (until the Zarr is at rest)
        queued: dict[str, list[ZarrEntry]] = {}
        s3 = http_client(timeout=S3_TIMEOUT, max_connections=2 * self.jobs)
        pool = ThreadPoolExecutor(self.jobs, thread_name_prefix="zarrchive-put")
        # big files' parts (hashed and PUT) on their own threads: a file's sender waits on them
        parts_pool = ThreadPoolExecutor(self.jobs, thread_name_prefix="zarrchive-part")
        self._parts = PartSender(
            self.client,
            s3,
            parts_pool,
            retry=self.retry,
            on_retry=self.on_retry,
            on_bytes=lambda n: self.progress.advance(0, n),
        )
        self._ahead = True  # until the archive refuses to open a batch ahead

        def take() -> tuple[list[ZarrEntry], int]:
            return retry.popleft() if retry else (batcher.next(), 0)

        current: _Sending | None = None
        ahead: _Sending | None = None
        try:
            while True:
                if current is None:
                    chunk, refusals = take()
                    if not chunk:
                        break
                    current = self._open(zarr_id, chunk, refusals, result)
                    self._submit(s3, pool, root, zarr_id, current)
                chunk, refusals = take() if self._ahead else ([], 0)
                ahead = self._open_ahead(zarr_id, chunk, refusals, current, result)
                if ahead is not None and not ahead.in_parts:
                    self._submit(s3, pool, root, zarr_id, ahead)
                elif ahead is None and chunk:
                    retry.appendleft((chunk, refusals))  # opened once this one is completed
                try:
                    outcome = self._finish(zarr_id, current, result, queued)
                except Exception:
                    if ahead is not None:
                        ahead.halt()
                    raise
                if outcome == "done":
                    if ahead is None:
                        self.records.clear(zarr_id)
                    elif ahead.in_parts:  # its parts' URLs are given once it is open
                        self._submit(s3, pool, root, zarr_id, ahead)
                    current = ahead
                    continue
                # S3 refused the URLs of *current*: cancel it (and the batch opened ahead of
                # it, with it), send both again, *current* in halves.
                again = [current] if ahead is None else [current, ahead]
                for sending in again:
                    sending.halt()
                self._cancel(zarr_id)
                self.records.clear(zarr_id)
                for sending in again:
                    self.progress.advance(-sending.sent[0], -sending.sent[1])
                current = ahead = None
                refusals = again[0].refusals + 1
                if refusals >= MAX_REFUSALS:
                    raise TransferError(
                        f"S3 refused the upload URLs of a batch {refusals} times in a row "
                        f"(403: {self._refusal}): the server's clock, its presigned URLs or "
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
                redo = [(c, refusals) for c in _Batcher(failed, half, MAX_BATCH_BYTES)]
                redo.extend(
                    (c, a.refusals)
                    for a in again[1:]
                    for c in _Batcher(a.chunk, half, MAX_BATCH_BYTES)
                )
                retry.extendleft(reversed(redo))
            if queued:
                self._send_refused(s3, pool, root, zarr_id, queued, result)
        except (KeyboardInterrupt, NetworkError) as exc:
            interrupted = isinstance(exc, KeyboardInterrupt)
            self._leave_open(zarr_id, interrupted, current, ahead if ahead is not current else None)
            raise
        finally:
            pool.shutdown(wait=True, cancel_futures=True)
            parts_pool.shutdown(wait=True, cancel_futures=True)
            s3.close()

    def _send_refused(
        self,
        s3: httpx.Client,
        pool: ThreadPoolExecutor,
        root: str,
        zarr_id: str,
        queued: dict[str, list[ZarrEntry]],
        result: UploadResult,
    ) -> None:
        """Wait until the batches *queued* unverified are applied; send those the apply
        refused again, each verified before its ``complete`` answers (a file still missing
        then is an error that names it)."""
        self._wait_at_rest(zarr_id, result)
        refused = self.client.refused_batches(zarr_id, list(queued))
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
            if self._run_batch(s3, pool, root, zarr_id, chunk, result, None) != "done":
                raise TransferError(
                    f"S3 refused the upload URLs of a batch sent again (403: {self._refusal}): "
                    "run the upload again"
                )

    def _open_batch(
        self, zarr_id: str, chunk: list[ZarrEntry]
    ) -> tuple[dict[str, Target], str | None]:
        """Open a batch of *chunk* (sizes declared: big files go in parts): its files' targets
        and its uid (if the server names it).  An open batch of exactly these files of ours
        (a retried request that went through, or the batch of an interrupted run) is taken up
        again: what reached S3 stays."""
        files = declared(chunk)
        self.records.mark(self.client.url, zarr_id, len(files))
        try:
            return start_upload(self.client, zarr_id, files, resume=True), self.client.opened_batch
        except ApiError as exc:
            if exc.status_code != 409:
                self.records.clear(zarr_id)
                raise
        # Another batch is open (opened meanwhile, or of other files).  Cancel it, open ours.
        self.progress.note("an upload batch was already open on this Zarr: cancelled it")
        self._cancel(zarr_id)
        return start_upload(self.client, zarr_id, files, resume=False), self.client.opened_batch

    def _open(
        self, zarr_id: str, chunk: list[ZarrEntry], refusals: int, result: UploadResult
    ) -> _Sending:
        """Open a batch of *chunk* (the Zarr's open batch from now on)."""
        started = time.perf_counter()
        urls, uid = self._open_batch(zarr_id, chunk)
        result.add_time("open", started)
        return self._opened(zarr_id, chunk, refusals, urls, uid)

    def _open_ahead(
        self,
        zarr_id: str,
        chunk: list[ZarrEntry],
        refusals: int,
        current: _Sending,
        result: UploadResult,
    ) -> _Sending | None:
        """Open a batch of *chunk* ahead, as the next one of *current* (still being sent);
        None if there is no *chunk*, or the archive did not (it knows no ``after`` or
        *current* is no longer its open batch: 409; the batch is refused: 4xx; or it can't
        be reached): the batch is then opened the plain way once *current* is completed
        (which reports a refusal as it would have), and none is opened ahead for the rest of
        the upload."""
        if not chunk or current.uid is None or not self._ahead:
            return None
        files = declared(chunk)
        started = time.perf_counter()
        self.records.mark(self.client.url, zarr_id, len(files))
        try:
            urls = start_upload(self.client, zarr_id, files, resume=True, after=current.uid)
        except (ApiError, NetworkError):
            self._ahead = False
            return None
        uid = self.client.opened_batch
        result.add_time("open", started)
        try:
            return self._opened(zarr_id, chunk, refusals, urls, uid)
        except BaseException:
            current.halt()
            raise

    def _opened(
        self,
        zarr_id: str,
        chunk: list[ZarrEntry],
        refusals: int,
        urls: dict[str, Target],
        uid: str | None,
    ) -> _Sending:
        missing = [e.path for e in chunk if e.path not in urls]
        if missing:
            self._abort(zarr_id)
            raise TransferError(f"the archive returned no upload URL for {missing[0]!r}")
        if self.on_batch_open is not None:
            self.on_batch_open(len(chunk))
        return _Sending(chunk, urls, uid, refusals)

    def _submit(
        self,
        s3: httpx.Client,
        pool: ThreadPoolExecutor,
        root: str,
        zarr_id: str,
        sending: _Sending,
    ) -> None:
        """Hand the files of *sending* to the senders (PUTs, or parts for big files)."""

        def put(entry: ZarrEntry) -> bool:
            if sending.stop.is_set():
                return False
            target = sending.urls[entry.path]
            if target.url is None:
                assert target.part_size is not None and target.part_count is not None
                if not self._parts.send(
                    zarr_id,
                    entry.path,
                    os_path(root, entry.path),
                    entry.size,
                    target.part_size,
                    target.part_count,
                    sending.stop,
                ):
                    return False  # halted: the parts left are sent by the next run
                sending.count(0)
                self.progress.advance(1, 0)  # its bytes were counted part by part
                return True
            ok = self._put(s3, target.url, entry, os_path(root, entry.path))
            if ok:
                sending.count(entry.size)
                self.progress.advance(1, entry.size)
            else:
                sending.stop.set()  # the URLs have expired: no point sending the others
            return ok

        sending.futures = [pool.submit(put, e) for e in sending.chunk]

    def _finish(
        self,
        zarr_id: str,
        sending: _Sending,
        result: UploadResult,
        queued: dict[str, list[ZarrEntry]] | None,
    ) -> _Outcome:
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
                self._abort(zarr_id)
            raise
        if not all(f.result() for f in sending.futures):
            return "refused"
        started = time.perf_counter()
        # (the uid the open named, if complete's answer was lost and its retry found the
        # batch queued already: a refusal of it is then still seen and the batch sent again)
        uid = self._complete(zarr_id, queue=queued is not None) or sending.uid
        if uid is not None and queued is not None:
            queued[uid] = sending.chunk
        result.add_time("complete", started)
        result.batches += 1
        result.uploaded += len(sending.chunk)
        result.uploaded_bytes += sum(e.size for e in sending.chunk)
        return "done"

    def _leave_open(self, zarr_id: str, interrupted: bool, *sendings: _Sending | None) -> None:
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
        self.left_open = self._left(zarr_id, halted[0])

    def _left(self, zarr_id: str, sending: _Sending) -> LeftOpen:
        """What S3 holds of the batch *sending*, left open."""
        big = [e.path for e in sending.chunk if sending.urls[e.path].in_parts]
        with sending._lock:
            files = sending.sent[0]
        return LeftOpen(
            zarr_id,
            files=len(sending.chunk),
            files_in_s3=files,
            big_files=len(big),
            parts_in_s3=sum(self._parts.held.get(p, 0) for p in big),
        )

    def cancel(
        self,
        local: str | os.PathLike[str],
        *,
        dandiset: str | None = None,
        name: str | None = None,
        zarr_id: str | None = None,
    ) -> str | None:
        """Cancel the upload batch open on the Zarr of *local* (found as :meth:`upload`
        finds it; never created), and the batch opened ahead of it: what they sent is
        dropped (multipart uploads aborted).  The Zarr's id, or None when it had no batch
        open (or no Zarr exists)."""
        if zarr_id is None:
            if dandiset is None:
                raise InvalidInput("give the dandiset (--dandiset) or the Zarr id")
            if name is None:
                name = Path(os.fspath(local)).resolve().name
            zarr, _created = find_or_create_zarr(self.client, dandiset, name, create=False)
            if zarr is None:
                return None
            zarr_id = zarr.zarr_id
        try:
            self.client.cancel_upload(zarr_id)
        except ApiError as exc:
            if exc.status_code != 404:
                raise
            self.records.clear(zarr_id)
            return None
        self.records.clear(zarr_id)
        return zarr_id

    def _run_batch(
        self,
        s3: httpx.Client,
        pool: ThreadPoolExecutor,
        root: str,
        zarr_id: str,
        chunk: list[ZarrEntry],
        result: UploadResult,
        queued: dict[str, list[ZarrEntry]] | None,
    ) -> _Outcome:
        """Open a batch of *chunk*, PUT its files and complete it, alone (nothing opened
        ahead): with *queued*, queued at once, else verified first."""
        sending = self._open(zarr_id, chunk, 0, result)
        self._submit(s3, pool, root, zarr_id, sending)
        outcome = self._finish(zarr_id, sending, result, queued)
        if outcome == "refused":
            self._cancel(zarr_id)
            self.progress.advance(-sending.sent[0], -sending.sent[1])
        self.records.clear(zarr_id)
        return outcome

    def _complete(self, zarr_id: str, *, queue: bool = False) -> str | None:
        """Complete the open batch (with *queue*, ``verify=apply``: the uid of the batch
        queued, None if unknown)."""
        try:
            if queue:
                return self.client.queue_upload(zarr_id)
            self.client.complete_upload(zarr_id)
            return None
        except ApiError as exc:
            if exc.status_code == 404 and self.client.last_retried:
                return None  # the first attempt completed it; its answer was lost
            if exc.status_code == 404:
                raise TransferError(
                    "the upload batch was cancelled by someone else while it was being sent; "
                    "run the upload again"
                ) from None
            if exc.status_code == 400:
                self._abort(zarr_id)
            raise

    def _abort(self, zarr_id: str) -> None:
        """Cancel the open batch after a failure (best effort and quick: a rerun cancels
        it anyway)."""
        try:
            self._cancel(zarr_id, QUICK_RETRY)
        except (ApiError, NetworkError):
            return
        self.records.clear(zarr_id)

    def _put(self, s3: httpx.Client, url: str, entry: ZarrEntry, path: str) -> bool:
        """PUT one file; False if S3 refused the URL (403: expired)."""
        headers = {
            "Content-MD5": md5_to_content_md5(entry.md5),
            "Content-Type": zarr_content_type(entry.path),  # signed by the URL, as the md5
        }
        if entry.size > IN_MEMORY_BYTES:
            headers["Content-Length"] = str(entry.size)

        def request() -> httpx.Response:  # the body is read again for each attempt
            if entry.size <= IN_MEMORY_BYTES:
                return s3.put(url, content=_read(path), headers=headers)
            return s3.put(url, content=_stream(path), headers=headers)

        try:
            response = call(self.retry, request, what=f"PUT {entry.path!r}", on_retry=self.on_retry)
        except RETRY_EXCEPTIONS as exc:
            raise NetworkError(
                f"cannot upload {entry.path!r} to S3: {transport_message(exc)}"
            ) from None
        status = response.status_code
        if status == 200:
            return True
        if status == 403:
            self._refusal = _s3_message(response.text)
            return False
        if status == 400 and b"BadDigest" in response.content:
            raise LocalFileError(
                f"{path!r} changed while it was being uploaded (its md5 is no longer "
                f"{entry.md5}): run the upload again"
            )
        raise TransferError(f"S3 refused {entry.path!r} ({status}): {_s3_message(response.text)}")


def require_zarr_root(root: str, files: int) -> None:
    """Refuse (:class:`InvalidInput`) a directory that is not a Zarr: one holding no file
    (*files* is how many it holds), or without Zarr metadata at its root
    (:data:`ZARR_METADATA_FILES`).  What ``zarrchive upload`` checks unless ``--force``."""
    if files == 0:
        raise InvalidInput(
            f"{root!r} is empty: there is nothing to upload (pass --force to upload it anyway, "
            "which leaves the archive's Zarr empty too)"
        )
    if not any(os.path.isfile(os.path.join(root, name)) for name in ZARR_METADATA_FILES):
        raise InvalidInput(
            f"{root!r} is not a Zarr: it has no Zarr metadata (.zgroup, .zarray or zarr.json) "
            "at its root; upload the Zarr's own directory, or pass --force to upload this one "
            "anyway"
        )


def _refuse_too_big(entries: Iterable[ZarrEntry]) -> None:
    _refuse_sizes([(e.path, e.size) for e in entries if e.size > MAX_FILE_BYTES])


def _refuse_sizes(too_big: list[tuple[str, int]]) -> None:
    """Refuse (:class:`InvalidInput`) the files *too_big* ``(path, size)`` (in path order), if
    any: larger than S3's largest object."""
    if too_big:
        listed = ", ".join(f"{p} ({n} bytes)" for p, n in too_big[:5])
        raise InvalidInput(
            f"{len(too_big)} file(s) larger than 5 TiB, the largest object S3 can hold: {listed}"
        )


def scan_local(root: str) -> tuple[int, int]:
    """Files and bytes below *root*, checked before anything is hashed or sent.

    Raises at once (not after hours of hashing) for what the archive would refuse:
    bad names, symbolic link loops, unreadable entries, files over 5 TiB.  (With a digest
    cache, :meth:`Uploader.upload` checks the same by the first half of its walk,
    :func:`~zarrchive.client.local_tree.survey_tree`.)
    """
    count = nbytes = 0
    too_big: list[tuple[str, int]] = []
    for found in walk_local(root):
        try:
            size = os.stat(found.os_path).st_size
        except OSError as exc:
            raise LocalFileError(f"cannot access {found.os_path!r}: {exc.strerror}") from None
        count += 1
        nbytes += size
        if size > MAX_FILE_BYTES:
            too_big.append((found.path, size))
    _refuse_sizes(too_big)
    return count, nbytes


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


def _s3_message(text: str) -> str:
    for tag in ("Message", "Code"):
        start = text.find(f"<{tag}>")
        end = text.find(f"</{tag}>")
        if 0 <= start < end:
            return text[start + len(tag) + 2 : end]
    return text[:200]


class _Batcher:
    """Takes batches of at most :attr:`files` files and :attr:`nbytes` bytes (unless one file
    is larger) from *entries*, in order: :meth:`next` one at a time (the limit may be lowered
    between two), or all by iterating.

    Given the *total* of files, the last batches shrink (:data:`TAIL_SHARE` of what is left
    each, down to :data:`TAIL_FILES`, the rest together under twice that): the uploader waits at the end for the apply of what it
    sent last, so what it sends last is small (the apply of the batches before it overlaps
    with the PUTs of the small ones).  The first batches of a larger upload are a quarter and
    a half of the limit (no fewer than :data:`TAIL_FILES`): the archive's apply, idle until
    the first batch is complete, starts sooner."""

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
                return max(TAIL_FILES, math.ceil(self.files * HEAD_SHARES[self._batches]))
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


def upload(
    client: ApiClient,
    local: str | os.PathLike[str],
    *,
    dandiset: str | None = None,
    name: str | None = None,
    zarr_id: str | None = None,
    jobs: int | None = None,
    dry_run: bool = False,
    progress: Progress | None = None,
    batch_files: int | None = None,
    patch: bool = False,
    selection: Selection | None = None,
) -> UploadResult:
    """Upload *local* to the archive: see :class:`Uploader`."""
    uploader = Uploader(client, jobs=jobs, progress=progress, batch_files=batch_files)
    return uploader.upload(
        local,
        dandiset=dandiset,
        name=name,
        zarr_id=zarr_id,
        dry_run=dry_run,
        patch=patch,
        selection=selection,
    )


__all__ = [
    "DRY_RUN_PATHS",
    "MAX_FILE_BYTES",
    "ZARR_METADATA_FILES",
    "BatchRecords",
    "Selection",
    "UploadPlan",
    "UploadResult",
    "Uploader",
    "ensure_asset",
    "find_or_create_zarr",
    "md5_to_content_md5",
    "require_zarr_root",
    "upload",
]
