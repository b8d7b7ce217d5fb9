"""What an upload plans and what it did: :class:`UploadPlan` (the planner's answer),
:class:`UploadResult` (the engine's report, filled in as it goes) and :class:`LeftOpen` (what
an interrupted run left for the next one)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from zarrchive.checksum import ZarrEntry
from zarrchive.client.patch import PatchPlan

#: A dry run names at most this many of the files it would upload, and of those it would
#: delete.
DRY_RUN_PATHS = 20


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

    def record_plan(self, plan: UploadPlan) -> None:
        """Record what a whole upload's *plan* sends, deletes and skips."""
        self.skipped = plan.skipped
        self.plan_upload(plan.upload)
        self.planned_deletes = len(plan.delete)
        self.planned_delete_bytes = plan.delete_bytes
        self.planned_delete_paths = plan.delete_sizes

    def record_patch(self, plan: PatchPlan) -> None:
        """Record what a patch's *plan* sends and skips, and the checksums it predicts."""
        self.listed = plan.listed
        self.skipped = plan.skipped
        self.new = plan.new
        self.base_checksum = plan.base_checksum
        self.expected_checksum = plan.expected_checksum
        self.plan_upload(plan.upload)


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


__all__ = ["DRY_RUN_PATHS", "LeftOpen", "UploadPlan", "UploadResult"]
