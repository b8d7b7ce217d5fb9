"""fsspec reference files of a Zarr's states, for readers without zarrchive's code.

- The live state: a walk of the ``.checksum`` nodes (key order, memory bounded by the
  depth), every file referenced by its object's plain URL (public Zarr) or by the API's
  redirecting read route (embargoed Zarr: only its owners can resolve it).
- A pinned state (a published snapshot): a stream of its manifest, every file referenced
  with its pinned ``versionId``. A pinned state never changes, so the file of a public
  Zarr is kept in S3 (``zarr-refs/{zarr}/{checksum}-{base}.json``, beside the Zarr's
  objects, world-readable as they are) and later requests stream it back.

Metadata documents up to :data:`zarrchive.references.MAX_INLINE_BYTES` are inline, so
opening a Zarr costs the reference file alone.  The body is built in a spooled temporary
file (memory bounded whatever the Zarr's size) and then streamed.
"""

from __future__ import annotations

import hashlib
import logging
import tempfile
import urllib.parse
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import IO

from sqlalchemy import select

from zarrchive.db.models import Zarr
from zarrchive.errors import (
    CorruptManifest,
    InvalidManifest,
    InvalidPath,
    NotFound,
    StorageError,
)
from zarrchive.manifest import manifest_key
from zarrchive.manifest.reader import read_manifest
from zarrchive.paths import validate_path
from zarrchive.references import Reference, should_inline, write_reference_file
from zarrchive.services.runtime import Archive
from zarrchive.services.zarr_engine import snapshots
from zarrchive.services.zarr_engine.uploads import UploadState, upload_status
from zarrchive.services.zarr_engine.zarrs import ZarrRef, object_url, walk_files
from zarrchive.storage.keys import zarr_object_key, zarr_prefix
from zarrchive.storage.protocol import ObjectStoreProtocol

#: Bodies up to this size stay in memory while they are built; larger ones go to disk.
_SPOOL_BYTES = 8 * 1024 * 1024
#: Where kept reference files are (pinned states of public Zarrs, live states at rest).
REFERENCES_PREFIX = "zarr-refs/"
#: The name prefix of kept live states' files (a pinned state's starts with its checksum).
LIVE = "live-"

log = logging.getLogger(__name__)


@dataclass
class ReferenceBody:
    """A reference file ready to send: its chunks and its size in bytes."""

    chunks: Iterator[bytes]
    size: int


def references_key(zarr_id: str, checksum: str, base_url: str) -> str:
    """Where the reference file of a public pinned state is kept (its URLs depend on the
    public base URL, hence the digest of it in the name)."""
    base = hashlib.sha256(base_url.encode("utf-8")).hexdigest()[:12]
    return f"{REFERENCES_PREFIX}{zarr_id}/{checksum}-{base}.json"


def read_route_base(api_base: str, zarr_id: str) -> str:
    """The URL of the API's redirecting read route for the files of *zarr_id* (the base
    that an embargoed Zarr's reference files use)."""
    return f"{api_base.rstrip('/')}/api/zarr/{zarr_id}/read/"


def _base_url(store: ObjectStoreProtocol, zarr: ZarrRef, api_base: str) -> str:
    if zarr.embargoed:
        return read_route_base(api_base, zarr.id)
    return store.public_url(zarr_prefix(zarr.id))


def _file_url(base: str, path: str, version_id: str | None = None) -> str:
    url = base + urllib.parse.quote(path, safe="/~")
    if version_id is not None:
        url += "?versionId=" + urllib.parse.quote(version_id, safe="")
    return url


def _read(store: ObjectStoreProtocol, key: str, version_id: str | None = None) -> bytes:
    return b"".join(store.iter_content(key, version_id))


def _spooled() -> IO[bytes]:
    return tempfile.SpooledTemporaryFile(max_size=_SPOOL_BYTES)


def _stream(body: IO[bytes]) -> Iterator[bytes]:
    try:
        body.seek(0)
        while chunk := body.read(1024 * 1024):
            yield chunk
    finally:
        body.close()


def _finished(body: IO[bytes]) -> ReferenceBody:
    size = body.tell()
    return ReferenceBody(_stream(body), size)


def _resting_checksum(archive: Archive, zarr_id: str) -> str | None:
    """The Zarr's checksum, or ``None`` while batches are being applied to it (its objects
    and nodes are then changing)."""
    with archive.db.session() as session:
        if upload_status(session, zarr_id).state is UploadState.APPLYING:
            return None
        checksum: str | None = session.scalar(select(Zarr.checksum).where(Zarr.id == zarr_id))
        return checksum


def live_references(archive: Archive, zarr: ZarrRef, api_base: str) -> ReferenceBody:
    """The reference file of the Zarr's live state (the caller may read the Zarr).

    A state at rest is kept (``zarr-refs/{zarr}/live-{checksum}-{base}.json``, in the Zarr's
    bucket, the Zarr's previous live state's file removed), so a reader's ``HEAD`` and
    ``GET``, and every reader after them, cost one walk of the tree at most: the same
    checksum is the same files with the same contents.  It is kept only when the walk saw
    one state: no batch being applied before or after it, and the same checksum.
    """
    store = archive.store_for(zarr.embargoed)
    base = _base_url(store, zarr, api_base)
    before = _resting_checksum(archive, zarr.id)
    cached_key = None if before is None else references_key(zarr.id, LIVE + before, base)
    kept = None if cached_key is None else _kept(store, cached_key)
    if kept is not None:
        return kept

    def references() -> Iterator[Reference]:
        for path, child in walk_files(store, zarr.id):
            key = zarr_object_key(zarr.id, path)
            if should_inline(path, child.size):
                content = store.get(key)
                if content is not None:  # (else deleted since the node was read)
                    yield Reference(path, content=content)
                    continue
            yield Reference(path, url=_file_url(base, path))

    body = _spooled()
    try:
        write_reference_file(references(), body, base)
        if cached_key is not None and _resting_checksum(archive, zarr.id) == before:
            _drop_other_live_files(store, zarr.id, cached_key)
            return _keep(store, cached_key, body)
    except BaseException:
        body.close()
        raise
    return _finished(body)


def _kept(store: ObjectStoreProtocol, key: str) -> ReferenceBody | None:
    """The reference file kept at *key*, streamed from S3, if there is one."""
    found = store.head(key)
    return None if found is None else ReferenceBody(store.iter_content(key), found.size)


def _keep(store: ObjectStoreProtocol, key: str, body: IO[bytes]) -> ReferenceBody:
    """Keep the built *body* (positioned at its end) at *key* and stream it back from there
    (the upload closes *body*)."""
    size = body.tell()
    body.seek(0)
    store.upload_fileobj(key, body, "application/json")
    return ReferenceBody(store.iter_content(key), size)


def _drop_other_live_files(store: ObjectStoreProtocol, zarr_id: str, keep: str) -> None:
    """Remove the kept files of the Zarr's earlier live states (best effort)."""
    for info in store.iter_objects(f"{REFERENCES_PREFIX}{zarr_id}/{LIVE}"):
        if info.key != keep:
            try:
                store.delete_all_versions(info.key)
            except StorageError:
                log.warning("could not remove %s (a stale reference file)", info.key)


def snapshot_references(
    archive: Archive, zarr: ZarrRef, pin: snapshots.Pin, api_base: str
) -> ReferenceBody:
    """The reference file of a pinned state: every file at its pinned version."""
    store = archive.store_for(zarr.embargoed)
    base = _base_url(store, zarr, api_base)
    cached_key = None if zarr.embargoed else references_key(zarr.id, pin.checksum, base)
    kept = None if cached_key is None else _kept(store, cached_key)
    if kept is not None:
        return kept
    snapshots.ensure_manifest(archive, zarr, pin)
    body = _spooled()
    try:
        with _spooled() as manifest:
            for chunk in store.iter_content(manifest_key(zarr.id, pin.checksum)):
                manifest.write(chunk)
            manifest.seek(0)
            _write_pinned(store, zarr, pin, manifest, body, base)
        if cached_key is not None:
            return _keep(store, cached_key, body)
    except BaseException:
        body.close()
        raise
    return _finished(body)


def _write_pinned(
    store: ObjectStoreProtocol,
    zarr: ZarrRef,
    pin: snapshots.Pin,
    manifest: IO[bytes],
    body: IO[bytes],
    base: str,
) -> None:
    key = manifest_key(zarr.id, pin.checksum)

    def read_inline(path: str, version_id: str) -> bytes:
        return _read(store, zarr_object_key(zarr.id, path), version_id)

    try:
        write_pinned_references(manifest, body, base, pin.checksum, read_inline)
    except InvalidManifest as exc:
        raise CorruptManifest(
            f"the manifest {key} of a published snapshot of Zarr {zarr.id} is unreadable "
            f"({exc.message}): an administrator must investigate ('zarrchive admin fsck "
            f"{zarr.id}')"
        ) from exc


def write_pinned_references(
    manifest: IO[bytes],
    body: IO[bytes],
    base: str,
    checksum: str,
    read_inline: Callable[[str, str], bytes],
) -> int:
    """Write the reference file of the state the manifest *manifest* lists (it must be the
    state *checksum*) to *body*, streaming: ``read_inline(path, version_id)`` reads the
    small metadata documents; every other file is ``base`` + its path at its version.
    The number of files; :class:`InvalidManifest` if the manifest is not that state's."""
    parsed = read_manifest(manifest)
    if parsed.statistics.zarr_checksum != checksum:
        raise InvalidManifest(f"it describes {parsed.statistics.zarr_checksum}")

    def references() -> Iterator[Reference]:
        for entry in parsed.entries:
            if should_inline(entry.path, entry.size):
                yield Reference(entry.path, content=read_inline(entry.path, entry.version_id))
            else:
                yield Reference(entry.path, url=_file_url(base, entry.path, entry.version_id))

    return write_reference_file(references(), body, base)


def read_url(
    archive: Archive,
    zarr: ZarrRef,
    path: str,
    *,
    method: str = "GET",
    version_id: str | None = None,
) -> str:
    """Where the read route sends a reader of the file *path* (at *version_id*, if given):
    its public URL, or a presigned one for an embargoed Zarr.  :class:`NotFound` for any
    path that is no file of the Zarr, a malformed one included (a reader probing for
    metadata documents must see "absent", not "bad request")."""
    try:
        if version_id is None:
            return object_url(archive, zarr, path, method=method)
        key = zarr_object_key(zarr.id, validate_path(path))
        return snapshots.version_url(archive, zarr, key, version_id)
    except InvalidPath:
        raise NotFound(f"Zarr {zarr.id} has no file {path!r}") from None
