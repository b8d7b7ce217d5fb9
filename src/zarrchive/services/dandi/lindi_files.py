"""LINDI files of HDF5 blobs: one JSON reference file system per blob content.

When a blob becomes the content of an asset (:func:`request_lindi`, called in the
transaction that gives an asset its blob), a background job (:func:`convert_blob_job`)
tells HDF5 by its signature (not its name) and has the blob converted in a sandboxed child
process (:mod:`zarrchive.sandbox`, task :mod:`zarrchive.lindi.blob_task`): it reads the
blob through a short-lived presigned URL by ranged reads, holds no credentials, can't read
the data directory, and is killed past :func:`convert_limits` (time from
``ZARRCHIVE_LINDI_TIMEOUT``, memory, output).  The conversion refuses what points outside
the file and stays within the bounds of :data:`CONVERT_OPTIONS`; the job streams the answer
(at most :data:`MAX_LINDI_BYTES`, spooled to a temporary file) to
``lindi/{id[0:3]}/{id[3:6]}/{id}.lindi.json`` in the blob's bucket.  Its chunk references
name:

- a public blob: the blob's plain S3 URL (world-readable, stable);
- an embargoed blob: the API route ``/api/lindi/blobs/{blob_id}/data/``, which answers those
  who may read the blob with a 302 to a presigned URL.  The stored JSON holds a
  placeholder (:data:`API_PLACEHOLDER`) for the API's address, filled in when the API
  serves the file (the job does not know where the API is reached from).

A failure is recorded with its reason (``failed``) and never retried by itself: the job
counts its attempts before it works (a crash counts too), so a file that kills the
worker fails after :data:`MAX_ATTEMPTS`, and only a transient S3 failure is retried.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from zarrchive.db.models import Asset, Blob, LindiFile, LindiState, Version, utcnow
from zarrchive.errors import (
    ArchiveBusy,
    NotFound,
    StorageError,
)
from zarrchive.jobs.lanes import JobLane
from zarrchive.lindi.blob_task import failure_reason
from zarrchive.lindi.convert import ConvertOptions
from zarrchive.sandbox import Limits, Status, TaskResult, run_task
from zarrchive.services.dandi.asset_views import get_asset_by_id, parse_asset_id
from zarrchive.services.dandi.blobs import blob_url, may_read_blob
from zarrchive.services.identity.auth import Caller
from zarrchive.services.runtime import Archive, current_archive, queue_after_commit
from zarrchive.storage.protocol import ObjectStoreProtocol

log = logging.getLogger(__name__)

LINDI_JOB = "zarrchive.services.dandi.lindi_files:convert_blob_job"
#: Conversions started for one request of a blob's LINDI file before it is ``failed``.
MAX_ATTEMPTS = 3
#: The bounds of a conversion (the blob is hostile input): past one, ``failed`` says so.
#: Per file: objects, attributes, object references, entries and bytes stored inline (16 MiB:
#: a real NWB file inlines kilobytes; its large data are references to the blob's bytes).
CONVERT_OPTIONS = ConvertOptions(
    max_objects=200_000,
    max_depth=64,
    max_refs=2_000_000,
    max_decoded_bytes=16 * 1024 * 1024,
    max_attributes=1_000_000,
    max_object_references=1_000_000,
    max_inline_bytes=16 * 1024 * 1024,
)
#: The largest LINDI file written (and read back from the converting child).
MAX_LINDI_BYTES = 64 * 1024 * 1024
#: The converting child's address space.
CONVERT_MEMORY = 1024 * 1024 * 1024
#: The sandbox task that converts a blob.
CONVERT_TASK = "zarrchive.lindi.blob_task"
#: The 8-byte HDF5 format signature (at offset 0, 512, 1024, 2048, ...: after a user block).
HDF5_SIGNATURE = b"\x89HDF\r\n\x1a\n"
#: The largest user block looked past for the signature.
MAX_USER_BLOCK = 64 * 1024 * 1024
#: What the stored JSON of an embargoed blob holds where the API's address goes.
API_PLACEHOLDER = "https://zarrchive-api.invalid"
CONTENT_TYPE = "application/json"


def lindi_key(blob_id: str) -> str:
    """Where a blob's LINDI file lives (in the blob's bucket)."""
    return f"lindi/{blob_id[0:3]}/{blob_id[3:6]}/{blob_id}.lindi.json"


def data_route(api_base: str, blob_id: str) -> str:
    """The API route that redirects those who may read a blob to its bytes."""
    return f"{api_base.rstrip('/')}/api/lindi/blobs/{blob_id}/data/"


def asset_lindi_route(api_base: str, asset_id: str) -> str:
    """The API route that serves an asset's LINDI file."""
    return f"{api_base.rstrip('/')}/api/assets/{asset_id}/lindi.json"


# -- pure: the signature and the state shown ---------------------------------------------------
def signature_offsets(size: int, *, limit: int = MAX_USER_BLOCK) -> list[int]:
    """Where an HDF5 file of *size* bytes may have its signature: 0, 512, 1024, 2048, ..."""
    offsets = [0] if size >= len(HDF5_SIGNATURE) else []
    offset = 512
    while offset + len(HDF5_SIGNATURE) <= size and offset <= limit:
        offsets.append(offset)
        offset *= 2
    return offsets


def is_hdf5(read_range: Callable[[int, int], bytes], size: int) -> bool:
    """Whether the *size* bytes that *read_range* reads start (after a user block) with the
    HDF5 signature.  The first 8 KiB are read at once; farther offsets 8 bytes each."""
    head = read_range(0, min(size, 8192 + len(HDF5_SIGNATURE))) if size else b""
    for offset in signature_offsets(size):
        if offset + len(HDF5_SIGNATURE) <= len(head):
            found = head[offset : offset + len(HDF5_SIGNATURE)]
        else:
            found = read_range(offset, len(HDF5_SIGNATURE))
        if found == HDF5_SIGNATURE:
            return True
    return False


@dataclass(frozen=True)
class LindiStatus:
    """A blob's LINDI file as the API and pages show it."""

    state: LindiState
    reason: str | None = None

    @property
    def text(self) -> str:
        """``pending``, ``ready`` or ``failed: reason``."""
        if self.state == LindiState.FAILED:
            return f"failed: {self.reason or 'unknown reason'}"
        return self.state.value

    @property
    def has_file(self) -> bool:
        """Whether the asset has (or will have) a LINDI file: HDF5 blobs only."""
        return self.state != LindiState.NOT_HDF5


def status_of(row: LindiFile | None, blob: Blob | None) -> LindiStatus | None:
    """The shown status of *blob*'s LINDI file (``None``: no row: not asked for yet)."""
    if row is None or blob is None:
        return None
    state = LindiState(row.state)
    if state == LindiState.READY and row.embargoed != blob.embargoed:
        return LindiStatus(LindiState.PENDING)  # unembargoed: rewritten for the public URL
    return LindiStatus(state, row.reason)


# -- the hook: an asset got a blob ---------------------------------------------------------
def request_lindi(session: Session, blob_id: str) -> None:
    """*blob_id* became an asset's content (in the caller's transaction): record its LINDI
    file ``pending`` if it has none, and queue its conversion when the transaction commits
    (in the serving archive: elsewhere ``zarrchive lindi backfill`` converts it)."""
    if session.get(LindiFile, blob_id) is not None:
        return  # one per blob content: written, failed, or queued already
    try:
        with session.begin_nested():
            session.add(LindiFile(blob_id=blob_id, state=LindiState.PENDING.value))
            session.flush()
    except IntegrityError:  # a concurrent request recorded it
        return
    queue_after_commit(session, "lindi", blob_id, queue_conversions)


def queue_conversions(archive: Archive, blob_ids: list[str]) -> None:
    """Queue the conversion of each blob (see :func:`queue_conversion`)."""
    for blob_id in sorted(blob_ids):
        queue_conversion(archive, blob_id)


def queue_conversion(archive: Archive, blob_id: str) -> None:
    """Queue the conversion of a blob (coalesced per blob; never fails the caller)."""
    if archive.jobs is None:
        return
    try:
        archive.jobs.enqueue(
            LINDI_JOB, {"blob_id": blob_id}, key=f"lindi:{blob_id}", lane=JobLane.CONTENT
        )
    except Exception:
        log.exception("could not queue the LINDI file of blob %s", blob_id)


# -- the job -------------------------------------------------------------------------------
def convert_blob_job(blob_id: str) -> None:
    """The background job (see :mod:`zarrchive.jobs`)."""
    convert_blob(current_archive(), blob_id)


@dataclass(frozen=True)
class _Work:
    key: str
    size: int
    embargoed: bool


def _claim(archive: Archive, blob_id: str, *, force: bool) -> _Work | LindiStatus | None:
    """Count an attempt (before the work: a crash counts), or say why there is nothing to do."""
    with archive.db.write_session() as session:
        blob = session.get(Blob, blob_id)
        if blob is None:
            return None
        row = session.get(LindiFile, blob_id)
        if row is None:
            row = LindiFile(blob_id=blob_id, state=LindiState.PENDING.value, attempts=0)
            session.add(row)
        stale = row.state == LindiState.READY and row.embargoed != blob.embargoed
        if not force and not stale and row.state != LindiState.PENDING:
            return LindiStatus(LindiState(row.state), row.reason)
        if force or stale:
            row.attempts = 0
        if row.attempts >= MAX_ATTEMPTS:
            row.state = LindiState.FAILED.value
            row.reason = (
                f"gave up after {row.attempts} attempts (each ended without a result: the "
                "worker crashed or S3 failed); run `zarrchive lindi backfill` to try again"
            )
            row.modified_at = utcnow()
            return LindiStatus(LindiState.FAILED, row.reason)
        row.attempts += 1
        row.state = LindiState.PENDING.value
        row.modified_at = utcnow()
        return _Work(blob.key, blob.size, blob.embargoed)


def _record(archive: Archive, blob_id: str, work: _Work, status: LindiStatus, size: int) -> None:
    with archive.db.write_session() as session:
        blob = session.get(Blob, blob_id)
        row = session.get(LindiFile, blob_id)
        if blob is None or row is None:
            return
        if blob.embargoed != work.embargoed:
            return  # unembargoed meanwhile: its own job writes the public one
        row.state = status.state.value
        row.reason = status.reason
        row.embargoed = work.embargoed
        row.size = size if status.state == LindiState.READY else None
        row.modified_at = utcnow()


class _S3Reader:
    """Ranged GETs of one object, remembering the last S3 failure (for the signature)."""

    def __init__(self, store: ObjectStoreProtocol, key: str) -> None:
        self.store = store
        self.key = key
        self.failure: StorageError | None = None
        self.requests = 0

    def __call__(self, offset: int, size: int) -> bytes:
        if size <= 0:
            return b""
        self.requests += 1
        try:
            data = self.store.get_range(self.key, offset, size)
            if data is None:
                raise StorageError(f"S3 GET {self.key!r} failed: the blob is gone (NoSuchKey)")
            return data
        except StorageError as exc:
            self.failure = exc
            raise


def convert_blob(archive: Archive, blob_id: str, *, force: bool = False) -> LindiStatus | None:
    """Write the LINDI file of *blob_id* if it is HDF5 and has none (or a stale one); with
    *force*, try a ``failed`` one again.  Returns its status (``None``: no such blob).

    Raises only on a transient S3 failure with attempts left (the queue retries it)."""
    claimed = _claim(archive, blob_id, force=force)
    if not isinstance(claimed, _Work):
        return claimed
    work = claimed
    store = archive.store_for(work.embargoed)
    reader = _S3Reader(store, work.key)
    size = 0
    try:
        if not is_hdf5(reader, work.size):
            status = LindiStatus(LindiState.NOT_HDF5)
        else:
            with _convert(archive, store, blob_id, work) as result:
                if result.status == Status.STORAGE:
                    raise StorageError(f"reading the blob failed: {result.reason}")
                if result.status != Status.OK or result.output is None:
                    status = LindiStatus(LindiState.FAILED, _reason(result))
                else:
                    store.upload_fileobj(lindi_key(blob_id), result.output, CONTENT_TYPE)
                    size = result.size
                    status = LindiStatus(LindiState.READY)
    except Exception as exc:
        if reader.failure is not None or isinstance(exc, StorageError):
            if _attempts(archive, blob_id) < MAX_ATTEMPTS:
                log.warning("LINDI file of blob %s: S3 failed, the queue retries: %s", blob_id, exc)
                raise
            status = LindiStatus(LindiState.FAILED, f"S3 failed {MAX_ATTEMPTS} times: {exc}")
        else:
            status = LindiStatus(LindiState.FAILED, failure_reason(exc))
    if status.state == LindiState.FAILED:
        log.info("LINDI file of blob %s failed: %s", blob_id, status.reason)
    _record(archive, blob_id, work, status, size)
    return status


def _reason(result: TaskResult) -> str:
    """What a conversion that ended without a LINDI file says."""
    if result.status == Status.LIMIT:
        return f"the conversion {result.reason}"[:500]
    if result.status == Status.CRASHED:
        return f"the conversion {result.reason or 'crashed'}"[:500]
    return (result.reason or "the conversion failed")[:500]


def convert_limits(archive: Archive) -> Limits:
    """The limits of one conversion's child."""
    return Limits(
        seconds=archive.settings.lindi_timeout,
        memory_bytes=CONVERT_MEMORY,
        output_bytes=MAX_LINDI_BYTES,
    )


def _attempts(archive: Archive, blob_id: str) -> int:
    with archive.db.session() as session:
        row = session.get(LindiFile, blob_id)
        return MAX_ATTEMPTS if row is None else row.attempts


def _convert(archive: Archive, store: ObjectStoreProtocol, blob_id: str, work: _Work) -> TaskResult:
    """The blob converted in a sandboxed child: its LINDI file spooled, or why not."""
    from zarrchive.version import package_version

    url = data_route(API_PLACEHOLDER, blob_id) if work.embargoed else store.public_url(work.key)
    limits = convert_limits(archive)
    args = {
        # the child reads the blob by this URL only: no S3 keys reach it
        "source": store.presign_get(work.key, expires_in=int(limits.seconds) + 300),
        "size": work.size,
        "url": url,
        "metadata": {
            "generatedBy": "zarrchive",
            "generatedByVersion": package_version(),
            "blob": blob_id,
        },
        "options": dataclasses.asdict(CONVERT_OPTIONS),
        "max_bytes": MAX_LINDI_BYTES,
    }
    return run_task(CONVERT_TASK, args, limits, forbidden=[archive.settings.data_dir])


# -- reading: statuses, the file, the data route ---------------------------------------------
def statuses(session: Session, blob_ids: Iterable[str | None]) -> dict[str, LindiStatus]:
    """The status of each blob's LINDI file that has one (non-HDF5 blobs included)."""
    wanted = sorted({b for b in blob_ids if b is not None})
    if not wanted:
        return {}
    rows = session.execute(
        select(LindiFile, Blob)
        .join(Blob, Blob.id == LindiFile.blob_id)
        .where(LindiFile.blob_id.in_(wanted))
    ).all()
    out: dict[str, LindiStatus] = {}
    for row, blob in rows:
        status = status_of(row, blob)
        if status is not None:
            out[row.blob_id] = status
    return out


@dataclass(frozen=True)
class LindiDocument:
    """An asset's LINDI file as the API gives it: a redirect to the public object, or the
    bytes of a private one."""

    redirect: str | None
    content: bytes | None


def asset_lindi(
    archive: Archive, user: Caller | None, asset_id: str, api_base: str
) -> LindiDocument:
    """The LINDI file of an asset *user* may read (404 for others and for assets without one;
    503 while it is being written)."""
    with archive.db.session() as session:
        asset = get_asset_by_id(session, user, asset_id)
        blob = asset.blob
        if blob is None:
            raise NotFound(f"asset {asset_id} is a Zarr: it has no LINDI file")
        status = status_of(session.get(LindiFile, blob.id), blob)
        blob_id, embargoed = blob.id, blob.embargoed
    if status is None or status.state == LindiState.PENDING:
        raise ArchiveBusy(f"the LINDI file of asset {asset_id} is being written: retry in a minute")
    if status.state == LindiState.NOT_HDF5:
        raise NotFound(f"asset {asset_id} is not an HDF5 file: it has no LINDI file")
    if status.state == LindiState.FAILED:
        raise NotFound(f"asset {asset_id} has no LINDI file: its conversion {status.text}")
    store = archive.store_for(embargoed)
    if not embargoed:
        return LindiDocument(store.public_url(lindi_key(blob_id)), None)
    data = store.get(lindi_key(blob_id))
    if data is None:
        raise StorageError(
            f"the LINDI file of blob {blob_id} is missing in S3: run `zarrchive lindi backfill "
            f"{asset_id}`"
        )
    placeholder = data_route(API_PLACEHOLDER, blob_id).encode()
    return LindiDocument(None, data.replace(placeholder, data_route(api_base, blob_id).encode()))


def blob_data_url(archive: Archive, user: Caller | None, blob_id: str) -> str:
    """Where *user* reads a blob's bytes (a presigned URL if embargoed); 404 for those who
    may not read it."""
    with archive.db.session() as session:
        blob = session.get(Blob, blob_id) if len(blob_id) <= 36 else None
        if blob is None or not may_read_blob(session, user, blob):
            raise NotFound(f"no blob {blob_id!r}")
        key, embargoed = blob.key, blob.embargoed
    return blob_url(archive, key, embargoed=embargoed)


# -- backfill and unembargo ---------------------------------------------------------------
def blobs_of(archive: Archive, asset_ids: list[str] | None) -> list[str]:
    """The blobs of the given assets (``None``: of every asset), without repeats."""
    with archive.db.session() as session:
        query = select(Asset.blob_id).where(Asset.blob_id.is_not(None)).distinct()
        if asset_ids is not None:
            ids = [parse_asset_id(a) for a in asset_ids]
            found = set(session.scalars(select(Asset.id).where(Asset.id.in_(ids))))
            missing = [a for a in ids if a not in found]
            if missing:
                raise NotFound(f"no asset {missing[0]}")
            query = query.where(Asset.id.in_(ids))
        return sorted(b for b in session.scalars(query) if b is not None)


def blob_sizes(archive: Archive, blob_ids: list[str]) -> dict[str, int]:
    """The size of each blob (for progress)."""
    with archive.db.session() as session:
        return {
            b: int(n)
            for b, n in session.execute(select(Blob.id, Blob.size).where(Blob.id.in_(blob_ids)))
        }


def after_unembargo(archive: Archive, dandiset_id: int, moved_blob_ids: Iterable[str]) -> None:
    """The dandiset's blobs moved to the public bucket: drop their private LINDI files and
    rewrite each public blob's file for its public URL (never fails the unembargo)."""
    try:
        for blob_id in moved_blob_ids:
            archive.embargo_store.delete_all_versions(lindi_key(blob_id))
        with archive.db.write_session() as session:
            blob_ids = sorted(
                {
                    b
                    for b in session.scalars(
                        select(Asset.blob_id)
                        .join(Version, Version.id == Asset.version_id)
                        .where(Version.dandiset_id == dandiset_id, Asset.blob_id.is_not(None))
                    )
                    if b is not None
                }
            )
            todo = []
            for blob_id in blob_ids:
                row = session.get(LindiFile, blob_id)
                if row is None:
                    session.add(LindiFile(blob_id=blob_id, state=LindiState.PENDING.value))
                elif row.embargoed and row.state != LindiState.NOT_HDF5:
                    row.state = LindiState.PENDING.value
                    row.attempts = 0
                    row.reason = None
                    row.modified_at = utcnow()
                else:
                    continue
                todo.append(blob_id)
        for blob_id in todo:
            queue_conversion(archive, blob_id)
    except Exception:
        log.exception("could not rewrite the LINDI files of dandiset %s", dandiset_id)
