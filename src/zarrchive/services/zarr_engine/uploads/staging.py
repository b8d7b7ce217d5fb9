"""The staging area of batches: ``zarr-staging/{zarr_id}/{uid}/``, dropped once a batch ends."""

from __future__ import annotations

import logging
from collections.abc import Mapping

from sqlalchemy import select

from zarrchive.db.models import (
    UploadBatch,
)
from zarrchive.errors import (
    StorageError,
)
from zarrchive.services.runtime import Archive
from zarrchive.services.zarr_engine.uploads.import_copy import (
    SOURCES_DIR,
    ImportedSource,
    read_sources,
)
from zarrchive.services.zarr_engine.zarrs import get_zarr
from zarrchive.storage.keys import (
    staging_prefix,
    staging_zarr_prefix,
)
from zarrchive.storage.objects import ObjectVersion
from zarrchive.storage.protocol import ObjectStoreProtocol

log = logging.getLogger(__name__)


def drop_staging(store: ObjectStoreProtocol, zarr_id: str, uid: str) -> None:
    """Remove a finished batch's staging objects for good (best effort: garbage if it fails)."""
    try:
        store.purge(staging_prefix(zarr_id, uid))
    except StorageError:
        log.warning("Zarr %s: could not remove the staging objects of batch %s", zarr_id, uid)


def purge_stale_staging(archive: Archive, zarr_id: str) -> int:
    """Remove the staging objects of every batch of *zarr_id* that no longer exists (e.g.
    written by a URL replayed after its batch ended); returns how many batches' areas."""
    with archive.db.session() as session:
        zarr = get_zarr(session, None, zarr_id, check_read=False)
        zarr_id = zarr.id
        live = set(session.scalars(select(UploadBatch.uid).where(UploadBatch.zarr_id == zarr_id)))
        store = archive.store_for(zarr.dandiset.embargoed)
    root = staging_zarr_prefix(zarr_id)
    stale = [p for p in store.iter_prefixes(root) if p[len(root) :].rstrip("/") not in live]
    # (some S3s, SeaweedFS among them, list emptied "directories": count what held objects)
    return sum(1 for prefix in stale if store.purge(prefix) > 0)


def stale_staging(
    store: ObjectStoreProtocol, zarr_id: str, live: set[str]
) -> list[tuple[str, int]]:
    """The staging areas of *zarr_id*'s batches that no longer exist (*live*: the uids of
    those that do), with the bytes each holds (what :func:`purge_stale_staging` removes)."""
    root = staging_zarr_prefix(zarr_id)
    stale = []
    for prefix in store.iter_prefixes(root):
        if prefix[len(root) :].rstrip("/") in live:
            continue
        versions = list(store.iter_versions(prefix))
        if versions:  # (some S3s, SeaweedFS among them, list emptied "directories")
            stale.append((prefix, sum(v.size for v in versions)))
    return stale


def check_staged(
    store: ObjectStoreProtocol,
    zarr_id: str,
    uid: str,
    expected: dict[str, str | None],
    declared: Mapping[str, tuple[int | None, bool]] | None = None,
) -> tuple[dict[str, tuple[int, str | None]], list[dict[str, str | None]]]:
    """:func:`check_staged_and_sources` without the sources."""
    staged, problems, _sources = check_staged_and_sources(store, zarr_id, uid, expected, declared)
    return staged, problems


def check_staged_and_sources(
    store: ObjectStoreProtocol,
    zarr_id: str,
    uid: str,
    expected: dict[str, str | None],
    declared: Mapping[str, tuple[int | None, bool]] | None = None,
) -> tuple[
    dict[str, tuple[int, str | None]], list[dict[str, str | None]], dict[str, ImportedSource]
]:
    """Every file of a batch that is staged with its md5 (``path -> (size, version id)``),
    the problems (``{"path", "expected", "found"}``: missing, or another md5), and the
    files imported server-side (``path -> source``: recorded in the same staging area,
    :mod:`.import_copy`; staged with their declared size and no version: the apply copies
    them from their source).

    *declared* gives files' declared ``(size, uploaded in parts)``: a declared size must be
    the staged one; a file uploaded in parts is checked by size only here (its ETag is not
    an md5: the apply step verifies its md5)."""
    declared = declared or {}
    prefix = staging_prefix(zarr_id, uid)
    latest: dict[str, tuple[str | None, int, str | None]] = {}
    recorded: list[ObjectVersion] = []
    # the current versions only (a deleted file is missing), its directories listed in
    # parallel: on the apply's path, under the uploads' and copies' load
    for version in store.iter_current_versions(prefix):
        path = version.key[len(prefix) :]
        if version.is_latest and path in expected:
            latest[path] = (
                None if version.is_delete_marker else version.etag,
                version.size,
                version.version_id if version.version_id not in ("", "null") else None,
            )
        elif version.is_latest and not version.is_delete_marker and path.startswith(SOURCES_DIR):
            recorded.append(version)
    recorded.sort(key=lambda v: v.last_modified)
    sources = {p: s for p, s in read_sources(store, recorded).items() if p in expected}
    problems: list[dict[str, str | None]] = []
    staged: dict[str, tuple[int, str | None]] = {}
    for path, etag in sorted(expected.items()):
        found = latest.get(path)
        size, in_parts = declared.get(path, (None, False))
        if path in sources and found is None and size is not None:
            staged[path] = (size, None)
        elif found is None or found[0] is None:
            problems.append({"path": path, "expected": etag, "found": None})
        elif size is not None and found[1] != size:
            problems.append(
                {"path": path, "expected": f"{size} bytes", "found": f"{found[1]} bytes"}
            )
        elif not in_parts and found[0] != etag:
            problems.append({"path": path, "expected": etag, "found": found[0]})
        else:
            staged[path] = (found[1], found[2])
    return staged, problems, {p: s for p, s in sources.items() if p not in latest}
