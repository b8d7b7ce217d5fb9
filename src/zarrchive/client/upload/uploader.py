"""The engine's orchestration: :class:`Uploader` checks the local directory, finds the Zarr,
deals with a batch left open, asks the planner (:mod:`~zarrchive.client.upload.planner`) what
to send and delete, deletes, hands the files to the batch pipeline
(:mod:`~zarrchive.client.upload.pipeline`), waits until the Zarr is at rest and compares
checksums (see :mod:`zarrchive.client.upload`)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from zarrchive.checksum import EMPTY_CHECKSUM, ZarrEntry
from zarrchive.client.api import ApiClient, UploadState, ZarrInfo
from zarrchive.client.local import (
    default_jobs,
    hash_local,
    transfer_jobs,
)
from zarrchive.client.progress import NullProgress, Progress
from zarrchive.client.records import BatchRecords
from zarrchive.client.remote import local_digests
from zarrchive.client.selection import Selection
from zarrchive.client.upload import checks, planner
from zarrchive.client.upload.batches import delete_files, resolve_stale_batch, wait_at_rest
from zarrchive.client.upload.destination import ensure_asset, find_or_create_zarr
from zarrchive.client.upload.feed import hashed_ahead
from zarrchive.client.upload.pipeline import BatchPipeline
from zarrchive.client.upload.results import LeftOpen, UploadPlan, UploadResult
from zarrchive.errors import ApiError, InvalidInput, LocalFileError
from zarrchive.transport import RetryHook, RetryPolicy

if TYPE_CHECKING:
    from zarrchive.client.local.tree import Survey


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
        #: The batch pipeline of the last :meth:`upload` that sent files (its counters).
        self.pipeline: BatchPipeline | None = None

    @property
    def left_open(self) -> LeftOpen | None:
        """The batch the last :meth:`upload`, interrupted (Ctrl-C), left open."""
        return self.pipeline.left_open if self.pipeline is not None else None

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
        (:func:`~zarrchive.client.upload.destination.find_or_create_zarr`).  With
        *require_zarr*, a directory that is empty or has no Zarr metadata at its root is
        refused before anything is sent (:func:`~zarrchive.client.upload.checks.require_zarr_root`).

        With *patch*: send the new and changed files among those *selection* selects (default:
        every file) and delete nothing (see the module); *require_zarr* is ignored (a partial
        copy may lack the root's metadata).  A *selection* needs *patch*: a full upload
        deletes what is not here, so a filter would delete everything outside it.
        """
        filtered = selection is not None and not selection.is_everything
        checks.require_patch_for_filter(filtered, patch)
        self.pipeline = None
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
                count, nbytes = checks.scan_local(root)
            else:
                count, nbytes = survey.files, survey.size
        try:
            if survey is not None:
                checks.refuse_sizes(survey.too_big)
            if require_zarr and not patch:
                checks.require_zarr_root(root, count)
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
            result.stale_batch, message = resolve_stale_batch(
                self.client, self.records, zarr.zarr_id
            )
            if message:
                result.notes.append(message)
                self.progress.note(message)
            zarr = self.client.get_zarr(zarr.zarr_id)
        elif zarr is not None and not dry_run:
            # A record without an open batch: we were killed before the batch opened.
            self.records.clear(zarr.zarr_id)

        if zarr is not None and zarr.upload_state == UploadState.APPLYING:
            # batches completed earlier are still being applied: compare with their result
            zarr = wait_at_rest(self.client, zarr.zarr_id, result)

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
            feed = hashed_ahead(root, jobs=min(self.jobs, default_jobs()), sink=entries)
            self._send(root, zarr.zarr_id, feed, batch_files, result)
            self._set_local(result, entries, local_digests(entries))
        else:
            self._sync(root, zarr, result, count, nbytes, limit, batch_files, dry_run, survey)
            if zarr is None or dry_run:
                return result
        self.progress.stop()
        # complete answers before its batch is applied (the server applies while we PUT the
        # next one): the checksum to compare is the one at rest
        result.remote_checksum = wait_at_rest(self.client, zarr.zarr_id, result).checksum
        if patch and not result.ok:
            result.notes.append(
                f"the archive's checksum {result.remote_checksum} is not the one expected "
                f"after this patch, {result.expected_checksum} (its checksum "
                f"{result.base_checksum} as read, plus the patch's files): another upload or "
                "deletion changed the Zarr meanwhile"
            )
        if dandiset is not None and zarr_id is None and result.ok:
            try:
                result.asset_id, result.asset_created = ensure_asset(
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
        result.record_plan(plan)
        if dry_run:
            return
        zid = zarr.zarr_id
        if plan.delete:
            self.progress.start("deleting", len(plan.delete), None)
            for start in range(0, len(plan.delete), limit):
                chunk = plan.delete[start : start + limit]
                delete_files(self.client, zid, chunk)
                result.deleted += len(chunk)
                self.progress.advance(len(chunk), 0)
        if plan.upload:
            self.progress.start("uploading", len(plan.upload), plan.upload_bytes)
            self._send(root, zid, plan.upload, batch_files, result)

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
        from zarrchive.client.local.digest_cache import default_cache
        from zarrchive.client.local.selected import hash_selected

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
        checks.refuse_too_big(entries)
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
            result.record_patch(planner.plan_new_zarr(entries))
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
        plan = planner.plan_patch(self.client, zarr.zarr_id, entries, jobs=self.jobs)
        result.timings["plan"] = time.perf_counter() - started
        result.record_patch(plan)
        if dry_run or not plan.upload:
            return zarr
        self.progress.start("uploading", len(plan.upload), plan.upload_bytes)
        self._send(root, zarr.zarr_id, plan.upload, batch_files, result)
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
        return survey_tree(root, cache=cache, jobs=jobs, limit=checks.MAX_FILE_BYTES)

    def _unchanged(
        self, root: str, zarr: ZarrInfo, result: UploadResult, survey: Survey | None = None
    ) -> bool:
        """True (with *result* filled in) when the directory equals the Zarr: its tree from
        the digest cache's directory digests (an unchanged directory costs its entries' stats,
        never a stale digest: :mod:`~zarrchive.client.local.tree`) has the Zarr's checksum.
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

    def plan(self, zarr: ZarrInfo, entries: list[ZarrEntry], digests: dict[str, str]) -> UploadPlan:
        """The files to upload and delete so that *zarr* equals the local *entries*
        (:func:`~zarrchive.client.upload.planner.plan`)."""
        return planner.plan(self.client, zarr, entries, digests, jobs=self.jobs)

    # -- local ----------------------------------------------------------------------------
    def _hash_local(self, root: str, count: int, nbytes: int) -> list[ZarrEntry]:
        self.progress.start("hashing", count, nbytes)
        # an upload's walk: big files' part md5s in the same read (client/local/parts.py)
        return hash_local(root, jobs=self.jobs, progress=self.progress.advance, part_md5s=True)

    # -- uploads --------------------------------------------------------------------------
    def _send(
        self,
        root: str,
        zarr_id: str,
        entries: Iterable[ZarrEntry],
        batch_files: int,
        result: UploadResult,
    ) -> None:
        """Send *entries* through a new batch pipeline (:attr:`pipeline` from now on)."""
        self.pipeline = BatchPipeline(
            self.client,
            zarr_id,
            root,
            jobs=self.jobs,
            records=self.records,
            progress=self.progress,
            retry=self.retry,
            on_retry=self.on_retry,
            on_batch_open=self.on_batch_open,
        )
        self.pipeline.run(entries, batch_files, result)

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


__all__ = ["Uploader", "upload"]
