"""Batched uploads, their verification, their (deferred) apply, cancellation and deletion.

The life of a batch (rows of ``upload_batches``; see :class:`~zarrchive.db.models.BatchState`):

1. ``start_batch``: under the Zarr's row lock, record the batch (state ``open``, a ``uid``
   unique forever; at most one ``open`` batch per Zarr, enforced by a partial unique index)
   and answer presigned PUT URLs for its **staging keys**
   ``zarr-staging/{zarr_id}/{uid}/{path}`` (signing ``Content-MD5``).  No URL ever names a
   key of the Zarr itself, so no URL, late or replayed, can change what a Zarr shows.
   ``start_batch`` with *after* (``open`` with ``after=<uid of the open batch>``) opens the
   uploader's *next* batch ahead: recorded now (``follows`` the open batch's id; at most
   one, by a second partial unique index), its file/directory clash check run against the
   tree, the queued batches and the files of the batch it follows, its URLs signed for its
   own staging keys, so its files are PUT while the batch before drains.  It is not the
   open batch: ``complete`` and ``cancel`` act on the one it follows; queueing that one
   clears ``follows`` in the same transaction (it is then the open batch), cancelling it
   cancels both.
2. ``complete_batch``: list the batch's staging prefix (one listing, no lock) and check every
   file is there with its md5 (any problem: 400, nothing changes); then, under the lock and
   only if the open batch is still the one verified (same uid), record each staging object's
   version and size and mark the batch ``queued`` with the next apply order number ``seq``.
   From here on the batch *will* be applied, and the Zarr can take its next batch at once.
   ``complete`` answers right away (``wait=False``; the Zarr's ``upload_state`` says
   ``applying``) after queueing the apply job (key ``apply:{zarr_id}``: jobs coalesce), or
   applies before answering (``wait=True``, or when the archive has no job queue).
   With ``verify_on_apply`` (``?verify=apply``, what ``zarrchive upload`` asks: a batch of
   files with declared sizes, none in parts) nothing is listed here: the batch is queued at
   once, marked ``verify_on_apply``, and the applier does that same listing and check before
   any copy (step 3); a batch that fails it is refused whole (``RefusedUpload`` rows, by batch
   uid: :func:`refusals`) and nothing of it becomes visible.  The Content-MD5 every URL
   signs already made S3 refuse any other body; what the check adds is that every file came.
3. ``apply_pending`` applies the Zarr's queued batches **in seq order**, one at a time.  For
   each, under the lock, it claims the lowest one (state ``applying``, ``claimed_by`` a token
   of this call, ``claimed_until`` a lease of :data:`CLAIM_SECONDS`); a batch claimed by
   another live applier is left to it (the caller waits, or returns).  Then, outside the
   lock, it copies each staged version to ``zarr/{zarr_id}/{path}`` (renewing the claim every
   :data:`COPY_CHUNK` copies and stopping if it was lost), and under the lock, if it still
   holds the claim, rewrites the affected ``.checksum`` nodes, stores the root and deletes the
   batch row; after the commit it drops the staging objects (best effort: leftovers are
   garbage that :func:`purge_stale_staging` removes).  Readers see a batch's effect (objects,
   nodes, root) only once it is applied, exactly as before: the copies overwrite only keys
   the batch changes, and the tree and root change in the commit.  While a batch's tree
   update commits, the applier copies the next queued batch ahead, if it was queued
   ``verify_on_apply``, its check found every file and it writes none of the paths of the
   batch being committed; it takes those copies' answers once it claims that batch
   (:class:`~.apply._Ahead`).  Every step is idempotent:
   a crash anywhere leaves the claim to expire, and the batch is finished by the job's retry,
   by the next write to the Zarr (which queues the job again), by
   :func:`sweep_pending` when a server or worker starts, or by ``admin fsck``.  The database
   decides order (``seq``) and ownership (the claim): nothing process-local is needed.
4. ``cancel_batch`` cancels only the ``open`` batch (and the batch opened ahead to follow
   it): delete their rows under the lock, then their staging objects; queued batches stay
   queued and are applied.
5. ``delete_files`` is allowed while a batch is open (the open batch has not touched the
   Zarr): it first applies every queued batch (waiting for an applier that holds one), then,
   under the lock with nothing queued, checks each path is a file or a directory (its parent's
   node says; a directory is stored as one row ending in ``/``, never expanded in the
   request), records a batch of kind ``delete`` (queued, next ``seq``) and applies it at once
   when it holds at most ``INLINE_DELETE_FILES`` files, else answers at once and lets the
   background apply do it: delete markers (object versions are kept) in chunks of 1,000 keys
   under the claim, then the tree update, which drops a directory from its parent without
   visiting below it (:mod:`.directory_delete`).

Anything that needs the Zarr at rest (publish, ``fsck --repair``, manifests, unembargo)
treats a queued or applying batch like an open one: :func:`open_batch` answers any batch.

For callers (routers, DANDI's ``files/`` + ``finalize/`` flow):

- ``start_batch(archive, user, zarr_id, [(path, md5), ...], after=None) -> OpenedBatch``
  (uid, URLs; with *after*, the next batch opened ahead)
- ``complete_batch(archive, user, zarr_id, *, wait=False, verify_on_apply=False) -> uid``
  (raises :class:`~zarrchive.errors.UploadVerificationFailed` with every bad file)
- ``cancel_batch(archive, user, zarr_id)``; ``delete_files(archive, user, zarr_id, paths)``
- ``upload_status(session, zarr_id) -> UploadStatus``: ``.state`` is an
  :class:`UploadState` (``at_rest`` | ``open`` | ``applying``): DANDI's Complete | Pending |
  Ingesting.
- ``finish_interrupted(archive, zarr_id)`` / ``apply_pending(archive, zarr_id, wait=True)``:
  apply what is queued now; ``sweep_pending(archive)``: queue the apply of every Zarr with
  pending batches (server and worker start).

The package, by concept (import from here: these names are its interface):

- :mod:`.records`: the Zarr's batch rows (status, lookups, checks shared by the rest);
- :mod:`.batches`: the batch lifecycle (open, complete, cancel) and deleting files;
- :mod:`.apply`: the apply engine (claims, copies into place, tree update, the jobs);
- :mod:`.dandi`: DANDI's ``files/`` + ``finalize/`` flow;
- :mod:`.staging`: the batches' staging area;
- :mod:`.multipart` (with the pure :mod:`.parts`): big files uploaded in parts, their
  verified copy into place, and stray uploads.

Job import strings name this package (``zarrchive.services.zarr_engine.uploads:apply_pending_job``): jobs
queued in Redis by an earlier release keep resolving.
"""

from __future__ import annotations

from zarrchive.services.zarr_engine.uploads.apply import (
    APPLY_JOB,
    CLAIM_SECONDS,
    COPY_CHUNK,
    WAIT_SECONDS,
    apply_pending,
    apply_pending_job,
    finish_interrupted,
    queue_manifest,
    sweep_pending,
)
from zarrchive.services.zarr_engine.uploads.batches import (
    cancel_batch,
    complete_batch,
    delete_files,
    start_batch,
    upload_in_progress,
)
from zarrchive.services.zarr_engine.uploads.dandi import (
    DANDI_BATCH_FACTOR,
    FINALIZE_ROUNDS,
    DroppedFile,
    FinalizeReport,
    dandi_batch_limit,
    extend_batch,
    finalize,
    md5_from_base64,
)
from zarrchive.services.zarr_engine.uploads.multipart import (
    PartUrl,
    PartUrls,
    Refusal,
    part_urls,
    refusals,
)
from zarrchive.services.zarr_engine.uploads.records import (
    OpenedBatch,
    UploadStatus,
    UploadUrl,
    open_batch,
    upload_status,
)
from zarrchive.services.zarr_engine.uploads.staging import purge_stale_staging
from zarrchive.wire.zarrs import UploadState

__all__ = [
    "APPLY_JOB",
    "CLAIM_SECONDS",
    "COPY_CHUNK",
    "DANDI_BATCH_FACTOR",
    "FINALIZE_ROUNDS",
    "WAIT_SECONDS",
    "DroppedFile",
    "FinalizeReport",
    "OpenedBatch",
    "PartUrl",
    "PartUrls",
    "Refusal",
    "UploadState",
    "UploadStatus",
    "UploadUrl",
    "apply_pending",
    "apply_pending_job",
    "cancel_batch",
    "complete_batch",
    "dandi_batch_limit",
    "delete_files",
    "extend_batch",
    "finalize",
    "finish_interrupted",
    "md5_from_base64",
    "open_batch",
    "part_urls",
    "purge_stale_staging",
    "queue_manifest",
    "refusals",
    "start_batch",
    "sweep_pending",
    "upload_in_progress",
    "upload_status",
]
