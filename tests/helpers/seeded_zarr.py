"""A Zarr of many files written straight into S3 and its tree (no batches): what a long run of
uploads would leave, in seconds.  The objects are PUT in parallel and the tree updated once
(``apply_changes``), the Zarr's row set to the new root: every invariant of a Zarr at rest
holds (its checksum is the tree hash of its objects)."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping

from zarrchive.services.runtime import Archive
from zarrchive.services.zarr_engine.tree_updater import FileChange, apply_changes
from zarrchive.services.zarr_engine.zarrs import get_zarr
from zarrchive.storage.keys import zarr_object_key


def chunk_files(prefix: str, count: int, width: int = 100) -> dict[str, bytes]:
    """*count* small chunk files ``{prefix}/{i}/{j}`` (*width* per directory), each body
    distinct."""
    return {f"{prefix}/{n // width}/{n % width}": f"{prefix}:{n}".encode() for n in range(count)}


def seed_zarr(archive: Archive, zarr_id: str, files: Mapping[str, bytes]) -> str:
    """Add *files* to the Zarr (objects and tree, one update); its new checksum."""
    with archive.db.session() as session:
        store = archive.store_for(
            get_zarr(session, None, zarr_id, check_read=False).dandiset.embargoed
        )
    store.map(lambda item: store.put(zarr_object_key(zarr_id, item[0]), item[1]), files.items())
    changes: dict[str, FileChange] = {
        p: (hashlib.md5(b).hexdigest(), len(b)) for p, b in files.items()
    }
    with archive.db.write_session() as session:
        zarr = get_zarr(session, None, zarr_id, lock=True, check_read=False)
        state = apply_changes(store, zarr_id, changes)
        zarr.checksum, zarr.file_count, zarr.size = state.checksum, state.file_count, state.size
        return state.checksum
