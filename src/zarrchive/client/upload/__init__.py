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
(:mod:`zarrchive.client.local.selected`), compared with the archive through the whole nodes
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

The package, by concept (each module testable alone):

- :mod:`~zarrchive.client.upload.checks`: what is refused before anything is sent (files over
  5 TiB, a directory that is not a Zarr, a filter without ``--patch``).
- :mod:`~zarrchive.client.upload.destination`: the Zarr a directory maps to, and its asset.
- :mod:`~zarrchive.client.upload.planner`: what to send, delete and skip (pure given what was
  read from the archive); it returns its plan, which the engine passes on.
- :mod:`~zarrchive.client.upload.pipeline`: the batch pipeline (open ahead, PUT, complete,
  the apply's refusals and S3's expired URLs, Ctrl-C).
- :mod:`~zarrchive.client.upload.feed`: a new Zarr's files, hashed ahead of the pipeline.
- :mod:`~zarrchive.client.upload.batches`: the calls outside the pipeline's own (cancel a batch,
  deal with one left open, delete files, wait until the Zarr is at rest).
- :mod:`~zarrchive.client.upload.results`: the plan, the result, what was left open.
- :mod:`~zarrchive.client.upload.uploader`: :class:`Uploader`, the thin orchestration of them.
"""

from zarrchive.client.records import BatchRecords
from zarrchive.client.selection import Selection
from zarrchive.client.upload.checks import (
    MAX_FILE_BYTES,
    ZARR_METADATA_FILES,
    require_patch_for_filter,
    require_zarr_root,
    scan_local,
)
from zarrchive.client.upload.destination import EnsuredAsset, ensure_asset, find_or_create_zarr
from zarrchive.client.upload.results import DRY_RUN_PATHS, LeftOpen, UploadPlan, UploadResult
from zarrchive.client.upload.uploader import Uploader, upload

__all__ = [
    "DRY_RUN_PATHS",
    "MAX_FILE_BYTES",
    "ZARR_METADATA_FILES",
    "BatchRecords",
    "EnsuredAsset",
    "LeftOpen",
    "Selection",
    "UploadPlan",
    "UploadResult",
    "Uploader",
    "ensure_asset",
    "find_or_create_zarr",
    "require_patch_for_filter",
    "require_zarr_root",
    "scan_local",
    "upload",
]
