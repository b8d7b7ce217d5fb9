"""Upload a Zarr that sits in an S3 bucket (``zarrchive upload s3://BUCKET/PREFIX``): the
same batches, verification, tree and resumption as a local upload
(:mod:`zarrchive.client.upload`), and no byte of the data on the client's disk.

1. List the source (:class:`~zarrchive.client.s3_source.S3Source`): names, sizes, ETags.  An
   object's md5 is its ETag unless it was uploaded in parts; those the archive hashes when
   it copies server-side (``POST .../upload/import/hash/``: the client reads no byte of the
   source), else they are hashed as they stream.  The source's tree hash follows, as a
   local directory's would.
2. Compare with the archive exactly as a local upload does (the whole tree, or with
   ``patch`` the affected directories' nodes only: :func:`~zarrchive.client.patch.plan_patch`)
   and delete (not with ``patch``) what the source no longer has.
3. Per batch (paths and md5s, as any batch): the files reach the batch's staging keys
   either *server-side* (``POST .../upload/import/``: the archive copies them from the
   source bucket with its own credentials; the client sends names only), when the source is
   on the archive's S3 and the archive is allowed to read it (``ZARRCHIVE_IMPORT_BUCKETS``),
   or *streamed* by the client from the source to each presigned URL (one block in memory per
   transfer), otherwise: ``mode`` ``auto`` tries the first and falls back to the second when
   the archive refuses (403) or the source is on another endpoint.
4. ``complete`` verifies the batch (every staged object's md5: the archive's listing), the
   apply copies it into place; at the end the archive's checksum must equal the source's.

A source object that changed since it was listed is refused by its read or copy (``If-Match``
its listed ETag), or, if S3 ignored that, by ``complete``'s md5 check: the batch is cancelled
and the import fails (:class:`~zarrchive.client.s3_source.SourceChanged`); nothing of it is
recorded.  Interrupted (Ctrl-C, the network), a batch stays open: the next run lists and
compares again, and its first batch, if it holds the same files, takes the open batch up
(``resume``); else the open batch is cancelled.
"""

from __future__ import annotations

import time
import urllib.parse
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Literal

import httpx

from zarrchive.checksum import EMPTY_CHECKSUM, ZarrEntry
from zarrchive.client.api import ApiClient, UploadState, ZarrInfo
from zarrchive.client.local import transfer_jobs
from zarrchive.client.progress import NullProgress, Progress
from zarrchive.client.remote import local_digests
from zarrchive.client.s3_source import S3Source, SourceChanged, SourceObject
from zarrchive.client.selection import Selection
from zarrchive.client.upload import planner
from zarrchive.client.upload.batches import wait_at_rest
from zarrchive.client.upload.checks import ZARR_METADATA_FILES, require_patch_for_filter
from zarrchive.client.upload.destination import ensure_asset, find_or_create_zarr
from zarrchive.client.upload.results import UploadResult
from zarrchive.content_types import zarr_content_type
from zarrchive.errors import ApiError, InvalidInput, NetworkError, TransferError
from zarrchive.s3_http import md5_to_content_md5
from zarrchive.transport import RETRY_EXCEPTIONS, call, http_client, transport_message

#: How files reach a batch: ``server`` (the archive copies), ``client`` (streamed by us),
#: ``auto`` (server-side when the archive can, else streamed).
CopyMode = Literal["auto", "server", "client"]
#: Sizes declared when a batch is opened: up to the smallest multipart threshold an archive
#: may have (so no file goes in parts; a batch whose every size is declared is queued at once
#: and checked by the apply, ``verify=apply``).
DECLARED_BYTES = 5 * 1024**2
#: S3's largest single PUT: a bigger source object is not streamed (yet); the archive's
#: server-side copies take it (in parts).
MAX_IMPORT_BYTES = 5 * 1024**3
S3_TIMEOUT = httpx.Timeout(300.0, connect=10.0)
#: The bounds of the archive's hashing of sources (``POST .../upload/import/hash/``): objects
#: and bytes per request (an object above HASH_BYTES alone), and requests at once.
HASH_FILES = 1000
HASH_BYTES = 2 * 1024**3
HASH_REQUESTS = 4
#: A hashing request's read timeout: HASH_TIMEOUT seconds plus the time to read its bytes at
#: HASH_RATE bytes a second (the archive answers once it has read them all).
HASH_TIMEOUT = 60.0
HASH_RATE = 10 * 1024**2


class S3Importer:
    """Imports the Zarr of *source* into the archive of *client*.

    *mode*: see :data:`CopyMode`; *jobs*: parallel transfers; *batch_files*: the largest
    batch (default and maximum: the server's limit); *on_batch_sent*: called with a batch's
    uid once its files are staged, before it is completed (a hook for tests)."""

    def __init__(
        self,
        client: ApiClient,
        source: S3Source,
        *,
        source_endpoint_url: str | None = None,
        mode: CopyMode = "auto",
        jobs: int | None = None,
        progress: Progress | None = None,
        batch_files: int | None = None,
        on_batch_sent: Callable[[str], None] | None = None,
    ) -> None:
        if batch_files is not None and batch_files < 1:
            raise InvalidInput(f"the batch size must be at least 1, got {batch_files}")
        self.client = client
        self.source = source
        self.source_endpoint_url = source_endpoint_url
        self.mode: CopyMode = mode
        self.jobs = transfer_jobs(jobs)
        self.progress: Progress = progress or NullProgress()
        self.batch_files = batch_files
        self.on_batch_sent = on_batch_sent
        #: Batches whose files the archive copied, and files we streamed.
        self.server_copied = 0
        self.streamed = 0
        #: Objects uploaded in parts whose md5 the archive read for us.
        self.server_hashed = 0
        #: The batches queued (their apply may refuse them).
        self._queued: list[str] = []

    # -- public -------------------------------------------------------------------------
    def run(
        self,
        *,
        dandiset: str | None = None,
        name: str | None = None,
        zarr_id: str | None = None,
        dry_run: bool = False,
        patch: bool = False,
        selection: Selection | None = None,
        require_zarr: bool = False,
        objects: Sequence[SourceObject] | None = None,
    ) -> UploadResult:
        """Make the archive's Zarr (*zarr_id*, or *name* in *dandiset*, default the prefix's
        last segment) equal to the source (with *patch*: send the new and changed files
        *selection* selects, delete nothing).  *objects*: the source's listing, if already
        made."""
        filtered = selection is not None and not selection.is_everything
        require_patch_for_filter(filtered, patch, source=True)
        name = name or self.source.location.name
        started = time.perf_counter()
        self.progress.start("listing", None, None)
        listed = list(objects) if objects is not None else self.source.listing(selection)
        if objects is not None and selection is not None:
            listed = [o for o in listed if selection.selects(o.path)]
        if not self._server_side():  # (the archive copies any size in parts)
            _refuse_too_big(listed)
        if require_zarr and not patch:
            _require_zarr_source(self.source, listed)
        by_path = {o.path: o for o in listed}
        server = self.client.info()
        limit = min(self.batch_files or server.max_batch_files, server.max_batch_files)
        if zarr_id is not None:
            zarr: ZarrInfo | None = self.client.get_zarr(zarr_id)
            created = False
        else:
            if dandiset is None:
                raise InvalidInput("give the dandiset (--dandiset) or the Zarr id")
            zarr, created = find_or_create_zarr(
                self.client, dandiset, name, create=not dry_run and bool(listed or not patch)
            )
        # the md5s of objects uploaded in parts: the archive's when it copies (we read
        # nothing), else hashed as they stream (and for a dry run of a new Zarr: no Zarr yet)
        known = self._hash_on_server(zarr.zarr_id, listed) if zarr is not None else {}
        entries = self.source.entries(listed, jobs=self.jobs, known=known)
        result = UploadResult(
            zarr_id=zarr.zarr_id if zarr else None,
            name=name,
            created=created,
            dry_run=dry_run,
            local_files=len(entries),
            local_bytes=sum(e.size for e in entries),
            local_checksum=local_digests(entries).get("", EMPTY_CHECKSUM),
            remote_checksum=zarr.checksum if zarr else None,
            patch=patch,
        )
        result.timings["hash"] = time.perf_counter() - started
        if zarr is not None and zarr.upload_state == UploadState.APPLYING:
            zarr = wait_at_rest(self.client, zarr.zarr_id)
        upload, delete = self._plan(zarr, entries, result, patch)
        if dry_run or zarr is None:
            return result
        zid = zarr.zarr_id
        for start in range(0, len(delete), limit):
            chunk = delete[start : start + limit]
            self.client.delete_files(zid, chunk)
            result.deleted += len(chunk)
        if upload:
            self.progress.start("uploading", len(upload), sum(e.size for e in upload))
            self._send(zid, upload, by_path, limit, result)
        self.progress.stop()
        result.remote_checksum = wait_at_rest(self.client, zid, result).checksum
        if self._queued:
            refused = self.client.refused_batches(zid, self._queued)
            if refused:
                paths = sorted(p for batch in refused.values() for p in batch)
                raise SourceChanged(
                    f"the archive refused {len(refused)} batches when it applied them ("
                    f"{len(paths)} files differ from their listed md5, e.g. {paths[0]!r}: a "
                    "source object changed during the import); nothing of them was recorded: "
                    "run the upload again"
                )
        if dandiset is not None and zarr_id is None and result.ok:
            result.asset_id, result.asset_created = ensure_asset(self.client, dandiset, name, zid)
        return result

    # -- hashing --------------------------------------------------------------------------
    def _hash_on_server(self, zarr_id: str, objects: Sequence[SourceObject]) -> dict[str, str]:
        """The md5s of *objects* uploaded in parts (their ETag is no md5), read by the archive
        (``POST .../upload/import/hash/``) when it copies server-side: ``{path: md5}``, in
        requests within the archive's bounds (:data:`HASH_FILES`, :data:`HASH_BYTES`; an
        object above the latter alone), a few at once.  ``{}`` (we hash them as they are
        read) when the archive does not copy (403 in ``auto``: the files will be streamed) or
        has no such route (404, 405: an older archive, which still copies)."""
        pending = [o for o in objects if o.md5 is None]
        if not pending or not self._server_side():
            return {}
        requests: list[list[SourceObject]] = []
        for obj in sorted(pending, key=lambda o: o.size):
            last = requests[-1] if requests else None
            if (
                last is None
                or len(last) >= HASH_FILES
                or sum(o.size for o in last) + obj.size > HASH_BYTES
            ):
                requests.append([obj])
            else:
                last.append(obj)
        location = self.source.location

        def ask(group: list[SourceObject]) -> dict[str, str]:
            size = sum(o.size for o in group)
            timeout = httpx.Timeout(HASH_TIMEOUT + size / HASH_RATE, connect=10.0)
            return self.client.hash_sources(
                zarr_id,
                location.bucket,
                location.prefix,
                [(o.path, o.size, o.etag) for o in group],
                timeout=timeout,
            )

        found: dict[str, str] = {}
        try:
            with ThreadPoolExecutor(HASH_REQUESTS, thread_name_prefix="zarrchive-hash") as pool:
                for answer in pool.map(ask, requests):
                    found.update(answer)
        except ApiError as exc:
            if exc.status_code == 409:
                paths = exc.detail.get("paths", []) if isinstance(exc.detail, dict) else []
                raise SourceChanged(
                    f"{len(paths) or 'some'} source objects changed since they were listed"
                    + (f", e.g. {location.key(str(paths[0]))!r}" if paths else "")
                    + " (the archive found it when it hashed them): run the upload again"
                ) from None
            if exc.status_code in (404, 405):  # an archive without the route: it still copies
                self.progress.note(
                    "the archive does not hash source objects (an older version): hashing "
                    f"the {len(pending)} objects uploaded in parts here"
                )
                return {}
            if exc.status_code != 403 or self.mode == "server":
                raise
            self.mode = "client"
            self.progress.note(
                f"the archive does not read {location} itself ({exc.message}): streaming "
                "the files from the source instead"
            )
            return {}
        self.server_hashed += len(found)
        return found

    # -- planning -------------------------------------------------------------------------
    def _plan(
        self, zarr: ZarrInfo | None, entries: list[ZarrEntry], result: UploadResult, patch: bool
    ) -> tuple[list[ZarrEntry], list[str]]:
        """The files to send and the paths to delete (recorded in *result*)."""
        started = time.perf_counter()
        if zarr is None:  # a dry run of a new Zarr: everything is new
            result.record_patch(planner.plan_new_zarr(entries))
            return entries, []
        if patch:
            patched = planner.plan_patch(self.client, zarr.zarr_id, entries)
            result.record_patch(patched)
            result.timings["plan"] = time.perf_counter() - started
            return list(patched.upload), []
        plan = planner.plan(self.client, zarr, entries, local_digests(entries), jobs=self.jobs)
        result.record_plan(plan)
        result.timings["plan"] = time.perf_counter() - started
        return plan.upload, plan.delete

    # -- sending --------------------------------------------------------------------------
    def _send(
        self,
        zarr_id: str,
        upload: list[ZarrEntry],
        by_path: dict[str, SourceObject],
        limit: int,
        result: UploadResult,
    ) -> None:
        s3 = http_client(timeout=S3_TIMEOUT, max_connections=2 * self.jobs)
        try:
            with ThreadPoolExecutor(self.jobs, thread_name_prefix="zarrchive-import") as pool:
                for start in range(0, len(upload), limit):
                    chunk = upload[start : start + limit]
                    started = time.perf_counter()
                    uid, urls = self._open(zarr_id, chunk)
                    result.add_time("open", started)
                    try:
                        started = time.perf_counter()
                        self._stage(s3, pool, zarr_id, uid, chunk, urls, by_path)
                        result.add_time("put", started)
                        if self.on_batch_sent is not None:
                            self.on_batch_sent(uid)
                        started = time.perf_counter()
                        self._complete(zarr_id)
                        result.add_time("complete", started)
                    except (SourceChanged, ApiError, TransferError) as exc:
                        if not isinstance(exc, NetworkError):
                            self._cancel(zarr_id)
                        raise
                    result.batches += 1
                    result.uploaded += len(chunk)
                    result.uploaded_bytes += sum(e.size for e in chunk)
        finally:
            s3.close()

    def _open(self, zarr_id: str, chunk: list[ZarrEntry]) -> tuple[str, dict[str, str]]:
        """Open a batch of *chunk* (``path, md5``, and the sizes up to
        :data:`DECLARED_BYTES`, so that nothing goes in parts): its uid and URLs.  Our own open batch of exactly these files (an interrupted
        run's) is taken up; any other open batch is cancelled first."""
        files = [(e.path, e.md5, e.size if e.size <= DECLARED_BYTES else None) for e in chunk]
        try:
            opened = self.client.open_upload(zarr_id, files, resume=True)
        except ApiError as exc:
            if exc.status_code != 409:
                raise
            self.progress.note("an upload batch was already open on this Zarr: cancelled it")
            self._cancel(zarr_id)
            opened = self.client.open_upload(zarr_id, files)
        if not opened.uid:
            raise TransferError("the archive did not name the upload batch it opened")
        urls: dict[str, str] = {}
        for path, target in opened.targets.items():
            if target.url is None:  # (no size above DECLARED_BYTES was declared)
                raise TransferError(f"the archive asked for {path!r} in parts")
            urls[path] = target.url
        return opened.uid, urls

    def _stage(
        self,
        s3: httpx.Client,
        pool: ThreadPoolExecutor,
        zarr_id: str,
        uid: str,
        chunk: list[ZarrEntry],
        urls: dict[str, str],
        by_path: dict[str, SourceObject],
    ) -> None:
        """Bring the files of batch *uid* to its staging keys: server-side if we may, the
        rest streamed."""
        streamed = chunk
        if self._server_side():
            location = self.source.location
            try:
                declined = set(
                    self.client.import_files(
                        zarr_id,
                        uid,
                        location.bucket,
                        location.prefix,
                        [(e.path, by_path[e.path].etag, None) for e in chunk],
                    )
                )
            except ApiError as exc:
                if exc.status_code == 409:
                    raise SourceChanged(f"{exc.message}: run the upload again") from None
                if exc.status_code not in (403, 404, 405) or self.mode == "server":
                    raise
                self.mode = "client"
                message = (
                    f"the archive does not copy from {location} itself ({exc.message}): "
                    "streaming the files from the source instead"
                )
                self.progress.note(message)
            else:
                self.server_copied += len(chunk) - len(declined)
                self.progress.advance(
                    len(chunk) - len(declined),
                    sum(e.size for e in chunk if e.path not in declined),
                )
                streamed = [e for e in chunk if e.path in declined]
        if streamed:
            _refuse_too_big([by_path[e.path] for e in streamed])
            futures = [
                pool.submit(self._put, s3, urls[e.path], e, by_path[e.path]) for e in streamed
            ]
            for future in futures:
                future.result()
            self.streamed += len(streamed)

    def _server_side(self) -> bool:
        """Whether to ask the archive to copy (``auto``: unless the source is on another
        endpoint than the archive's S3)."""
        if self.mode != "auto":
            return self.mode == "server"
        archive_endpoint = self.client.info().s3_endpoint_url
        return _netloc(self.source_endpoint_url) == _netloc(archive_endpoint)

    def _put(self, s3: httpx.Client, url: str, entry: ZarrEntry, obj: SourceObject) -> None:
        """Stream one object from the source to its URL (the md5 signed: S3 refuses another
        body, so a source that changed meanwhile is never staged)."""
        headers = {
            "Content-MD5": md5_to_content_md5(entry.md5),
            "Content-Type": zarr_content_type(entry.path),
            "Content-Length": str(entry.size),
        }

        def request() -> httpx.Response:  # the source is read again for each attempt
            return s3.put(url, content=self.source.stream(obj), headers=headers)

        try:
            response = call(
                self.client.retry,
                request,
                what=f"PUT {entry.path!r}",
                on_retry=self.client.on_retry,
            )
        except RETRY_EXCEPTIONS as exc:
            raise NetworkError(
                f"cannot upload {entry.path!r} to S3: {transport_message(exc)}"
            ) from None
        if response.status_code == 200:
            self.progress.advance(1, entry.size)
            return
        if response.status_code == 400 and b"BadDigest" in response.content:
            raise SourceChanged(
                f"{self.source.location.key(entry.path)!r} changed while it was sent (its md5 "
                f"is no longer {entry.md5}): run the upload again"
            )
        raise TransferError(
            f"S3 refused {entry.path!r} ({response.status_code}): {response.text[:200]}"
        )

    def _complete(self, zarr_id: str) -> None:
        """Queue the open batch (``verify=apply`` when every size was declared: the apply
        checks it, else verified now): a staged object without its listed md5 (a source
        changed under an S3 that ignored ``If-Match``) refuses it, now (400) or when applied
        (:meth:`run` asks at the end)."""
        try:
            uid = self.client.queue_upload(zarr_id)
            if uid is not None:
                self._queued.append(uid)
        except ApiError as exc:
            if exc.status_code == 404 and exc.retried:
                return  # our first attempt completed it; its answer was lost
            if exc.status_code == 400:
                raise SourceChanged(
                    f"the archive refused the batch: {exc.message} (a source object changed "
                    "while it was imported?): run the upload again"
                ) from None
            raise

    def _cancel(self, zarr_id: str) -> None:
        try:
            self.client.cancel_upload(zarr_id)
        except (ApiError, NetworkError):
            return


def _refuse_too_big(objects: Sequence[SourceObject]) -> None:
    """Objects we would stream must fit one PUT (S3's limit: 5 GiB); the archive's own copies
    take any size."""
    too_big = [o for o in objects if o.size > MAX_IMPORT_BYTES]
    if too_big:
        raise InvalidInput(
            f"{len(too_big)} source objects are larger than 5 GiB, which a streamed import "
            f"can't send yet (a server-side import can): {too_big[0].path!r} "
            f"({too_big[0].size} bytes)"
        )


def _netloc(url: str | None) -> str | None:
    """``host:port`` of an endpoint (None: AWS)."""
    if not url:
        return None
    parts = urllib.parse.urlsplit(url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    return f"{parts.hostname}:{port}"


def _require_zarr_source(source: S3Source, objects: Sequence[SourceObject]) -> None:
    """What ``zarrchive upload`` checks of a local directory, of the source (unless
    ``--force``): files, and Zarr metadata at its root."""
    if not objects:
        raise InvalidInput(f"{source.location} holds no object: there is nothing to upload")
    if not any(o.path in ZARR_METADATA_FILES for o in objects):
        raise InvalidInput(
            f"{source.location} is not a Zarr: it has no Zarr metadata (.zgroup, .zarray or "
            "zarr.json) at its root; name the Zarr's own prefix, or pass --force"
        )


def import_zarr(client: ApiClient, source: S3Source, **kwargs: Any) -> UploadResult:
    """Import with the defaults: see :class:`S3Importer`."""
    return S3Importer(client, source).run(**kwargs)


__all__ = ["MAX_IMPORT_BYTES", "CopyMode", "S3Importer", "import_zarr"]
