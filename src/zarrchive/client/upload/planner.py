"""The planner: what an upload sends, deletes and skips.

Pure where it can be: :func:`plan_sync` (a whole upload: the local files against the remote
files walked, :class:`~zarrchive.client.remote.RemoteState`) and :func:`plan_new_zarr` (a
patch of a Zarr that does not exist yet) only compute; :func:`plan` and :func:`plan_patch`
first read what they compare with from the archive (:func:`~zarrchive.client.remote.walk_remote`,
the subtrees whose digest equals the local one skipped; or the affected directories' whole
nodes, :func:`~zarrchive.client.remote.read_affected`), then compute
(:func:`~zarrchive.client.patch.plan_patch` for a patch).  Each returns its plan; the engine
passes it on to the batch pipeline (:mod:`zarrchive.client.upload.pipeline`).
"""

from __future__ import annotations

from collections.abc import Sequence

from zarrchive.checksum import EMPTY_CHECKSUM, ZarrEntry, compute_checksum
from zarrchive.client import patch as patches
from zarrchive.client import remote
from zarrchive.client.api import ApiClient, ZarrInfo
from zarrchive.client.patch import PatchPlan
from zarrchive.client.remote import RemoteState, SubtreeFilter
from zarrchive.client.upload.results import DRY_RUN_PATHS, UploadPlan


def plan_sync(entries: Sequence[ZarrEntry], state: RemoteState) -> UploadPlan:
    """The files to upload and delete so that the Zarr whose walk is *state* equals the local
    *entries* (in path order): a file outside the identical subtrees is sent unless the
    archive has it with the same md5; a remote file with no local one is deleted."""
    same = SubtreeFilter(state.identical)
    upload: list[ZarrEntry] = []
    skipped = 0
    local_paths: set[str] = set()
    for entry in entries:
        if same(entry.path):
            skipped += 1
            continue
        local_paths.add(entry.path)
        found = state.files.get(entry.path)
        if found is not None and found[0] == entry.md5:
            skipped += 1
        else:
            upload.append(entry)
    delete = sorted(p for p in state.files if p not in local_paths)
    sizes = [(p, state.files[p][1]) for p in delete]
    return UploadPlan(upload, delete, skipped, sum(n for _, n in sizes), sizes[:DRY_RUN_PATHS])


def plan(
    client: ApiClient,
    zarr: ZarrInfo,
    entries: Sequence[ZarrEntry],
    digests: dict[str, str],
    *,
    jobs: int = 8,
) -> UploadPlan:
    """The files to upload and delete so that *zarr* equals the local *entries* (*digests*:
    their directories' checksums, :func:`~zarrchive.client.remote.local_digests`)."""
    local_root = digests.get("", EMPTY_CHECKSUM)
    if zarr.checksum == local_root:
        return UploadPlan([], [], len(entries))
    state = remote.walk_remote(client, zarr.zarr_id, digests, root_digest=zarr.checksum, jobs=jobs)
    return plan_sync(entries, state)


def plan_new_zarr(entries: Sequence[ZarrEntry]) -> PatchPlan:
    """A patch of a Zarr that does not exist yet: every file is new (pure)."""
    return PatchPlan(
        upload=list(entries),
        new=len(entries),
        skipped=0,
        base_checksum=EMPTY_CHECKSUM,
        expected_checksum=compute_checksum(entries, grouped=True),
    )


def plan_patch(
    client: ApiClient, zarr_id: str, entries: Sequence[ZarrEntry], *, jobs: int = 8
) -> PatchPlan:
    """A patch of the selected *entries*: compared with the archive's nodes of the
    directories that hold them (and their ancestors), read as one state of the Zarr; the
    checksum the Zarr will have after it predicted."""
    nodes = remote.read_affected(client, zarr_id, [e.path for e in entries], jobs=jobs)
    return patches.plan_patch(entries, nodes)


__all__ = ["UploadPlan", "plan", "plan_new_zarr", "plan_patch", "plan_sync"]
