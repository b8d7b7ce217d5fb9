"""Reading a Zarr as a published version pins it: ``DANDISET@VERSION/PATH``.

A published version's Zarr asset names the checksum it pins (its ``digest``); the archive
serves that state's **manifest**, which names every file's S3 *version*.  The client reads
the manifest once (one GET, presigned for an embargoed dandiset), and then:

- lists directories from it (no further API calls),
- reads each file as exactly its pinned version: ``{object URL}?versionId=...`` from the
  public bucket (no credentials), or presigned URLs of those versions from
  ``POST /api/zarr/{id}/snapshots/{checksum}/download/`` for an embargoed dandiset.

So a version keeps reading the same bytes while the draft changes the same Zarr.
``DANDISET@draft/PATH`` reads the live draft, as ``DANDISET/PATH`` does.

A Zarr asset may name a **pinned view** instead of a Zarr (``snapshot`` mode: a published
version's Zarr, or another dandiset's Zarr shared by a draft): a read-only Zarr of its own
id (a UUID of version 5) showing one published state, whose info gives ``s3_url`` as its
``read/`` route (one API redirect per file).  Such a Zarr is read as a snapshot too
(:func:`open_view`): its manifest once, then the pinned versions straight from the bucket
of the Zarr it is a view of.

Here: the :class:`Snapshot` (its files, :class:`~zarrchive.client.remote.RemoteFile` with
their S3 versions), the readers of its pinned versions and :class:`SnapshotDownloader`; its
zarr-python store is :class:`~zarrchive.client.store.SnapshotStore`.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field, replace
from typing import Any
from urllib.parse import quote

import httpx

from zarrchive.checksum import EMPTY_CHECKSUM
from zarrchive.client.address import DRAFT, VersionedAddress, parse_address
from zarrchive.client.api import ApiClient, DownloadLink, ZarrInfo
from zarrchive.client.download import Downloader, require_token, resolve_zarr
from zarrchive.client.readers import HttpObjectReader, PresignedObjectReader
from zarrchive.client.remote import RemoteFile, RemoteState, check_listed_path
from zarrchive.errors import (
    ApiError,
    InvalidInput,
    InvalidManifest,
    NetworkError,
    NotFound,
    TransferError,
)
from zarrchive.manifest import read_manifest
from zarrchive.transport import RETRY_EXCEPTIONS, http_client, send, transport_message

ZARR_DIGEST = "dandi:dandi-zarr-checksum"
MANIFEST_TIMEOUT = httpx.Timeout(120.0, connect=10.0)


@dataclass
class Snapshot:
    """A Zarr's state as a published version pins it, read from its manifest."""

    address: VersionedAddress
    #: The Zarr (its live info: id, dandiset, S3 location).
    zarr: ZarrInfo
    checksum: str
    private: bool
    #: ``path -> file`` (each with its pinned :attr:`~RemoteFile.version_id`).
    files: dict[str, RemoteFile]
    #: ``directory -> (subdirectory names, file names)``, sorted.
    tree: dict[str, tuple[list[str], list[str]]] = field(default_factory=dict)

    @property
    def info(self) -> ZarrInfo:
        """The Zarr's info with the snapshot's checksum, file count and size."""
        return replace(
            self.zarr,
            checksum=self.checksum,
            file_count=len(self.files),
            size=sum(f.size for f in self.files.values()),
            upload_in_progress=False,
        )

    def object_url(self, path: str) -> str:
        """The public URL of exactly the pinned version of *path*."""
        version_id = self.files[path].version_id
        assert version_id is not None  # (every file of a manifest has one)
        return f"{self.zarr.object_url(path)}?versionId={quote(version_id, safe='')}"

    def children(self, directory: str) -> tuple[list[str], list[str]]:
        return self.tree.get(directory, ([], []))


def _snapshot_route(zarr_id: str, checksum: str) -> str:
    return f"/api/zarr/{zarr_id}/snapshots/{quote(checksum, safe='')}/"


def _build_tree(paths: list[str]) -> dict[str, tuple[list[str], list[str]]]:
    dirs: dict[str, set[str]] = {"": set()}
    files: dict[str, list[str]] = {}
    for path in paths:
        parent, _, name = path.rpartition("/")
        files.setdefault(parent, []).append(name)
        child = parent
        while child:
            up, _, dname = child.rpartition("/")
            known = dirs.setdefault(up, set())
            if dname in known:
                break
            known.add(dname)
            child = up
    return {
        d: (sorted(dirs.get(d, set())), sorted(files.get(d, []))) for d in set(dirs) | set(files)
    }


def open_snapshot(client: ApiClient, ref: str | VersionedAddress) -> Snapshot:
    """The snapshot that ``DANDISET@VERSION/PATH`` names (a published version)."""
    address = parse_address(ref) if isinstance(ref, str) else ref
    if address.is_draft:
        raise InvalidInput(f"{address}: the draft is not a snapshot; read it live")
    asset = client.find_asset(address.dandiset, address.path, version=address.version)
    if asset is None:
        raise NotFound(
            f"version {address.version} of dandiset {address.dandiset} has no asset "
            f"{address.path!r}"
        )
    if asset.zarr_id is None:
        raise InvalidInput(f"{address}: the asset is not a Zarr")
    checksum = str((asset.metadata.get("digest") or {}).get(ZARR_DIGEST, ""))
    if not checksum:
        raise TransferError(f"{address}: the published asset names no Zarr checksum")
    zarr = client.get_zarr(asset.zarr_id)
    if is_view_id(zarr.zarr_id):
        zarr = _view_location(client, zarr)
    return _pinned_snapshot(client, address, zarr, checksum)


def is_view_id(zarr_id: str) -> bool:
    """Whether *zarr_id* names a pinned view (a UUID of version 5; a Zarr's is of
    version 4)."""
    try:
        return uuid.UUID(zarr_id).version == 5
    except ValueError:
        return False


def _view_location(client: ApiClient, view: ZarrInfo) -> ZarrInfo:
    """The view's info with the S3 location of the Zarr it shows (its files' pinned
    versions are there): the view's own ``s3_url`` is its ``read/`` route, a redirect per
    file."""
    data: dict[str, Any] = client.request(
        "GET", f"/api/zarr/{quote(view.zarr_id, safe='')}/"
    ).json()
    of = data.get("view_of")
    if not isinstance(of, str) or not of:
        return view
    zarr = client.get_zarr(of)
    return replace(view, s3_url=zarr.s3_url, s3_path=zarr.s3_path)


def open_view(client: ApiClient, view: ZarrInfo, address: VersionedAddress) -> Snapshot:
    """The state a pinned view *view* shows, as a :class:`Snapshot` (its files read at their
    pinned versions from the bucket, as a published version's)."""
    return _pinned_snapshot(client, address, _view_location(client, view), view.checksum)


def _pinned_snapshot(
    client: ApiClient, address: VersionedAddress, zarr: ZarrInfo, checksum: str
) -> Snapshot:
    """The state *checksum* of *zarr* (a Zarr, or a view of that state), from its manifest."""
    private = client.is_private(zarr.dandiset)
    if private:
        require_token(client, zarr)
    if checksum == EMPTY_CHECKSUM:
        return Snapshot(address, zarr, checksum, private, {}, {"": ([], [])})
    route = _snapshot_route(zarr.zarr_id, checksum)
    info: dict[str, Any] = client.request("GET", route).json()
    if not info.get("manifest_url"):  # a frozen Zarr's manifest is written on first read
        client.request("GET", route + "files/", params={"page_size": 1})
        info = client.request("GET", route).json()
    files = _read_manifest(client, str(info["manifest_url"]), zarr.zarr_id, checksum)
    return Snapshot(address, zarr, checksum, private, files, _build_tree(list(files)))


def _read_manifest(
    client: ApiClient, url: str, zarr_id: str, checksum: str
) -> dict[str, RemoteFile]:
    """The manifest at *url* (on S3: retried as the client's requests are)."""
    try:
        with http_client(
            timeout=MANIFEST_TIMEOUT, max_connections=1, follow_redirects=True
        ) as http:
            response = send(http, "GET", url, policy=client.retry, on_retry=client.on_retry)
    except RETRY_EXCEPTIONS as exc:
        raise NetworkError(
            f"cannot read the manifest of Zarr {zarr_id} at {checksum}: {transport_message(exc)}"
        ) from None
    if response.status_code != 200:
        raise TransferError(
            f"cannot read the manifest of Zarr {zarr_id} at {checksum}: S3 answered "
            f"{response.status_code}"
        )
    try:
        parsed = read_manifest(response.content)
        files: dict[str, RemoteFile] = {}
        for entry in parsed.entries:  # verified against the statistics when exhausted
            check_listed_path(entry.path.rpartition("/")[0], entry.path)
            files[entry.path] = RemoteFile(
                entry.path, entry.etag.strip('"'), entry.size, version_id=entry.version_id
            )
    except InvalidManifest as exc:
        raise TransferError(f"the manifest of Zarr {zarr_id} is invalid: {exc.message}") from None
    if parsed.statistics.zarr_checksum != checksum:
        raise TransferError(
            f"the manifest of Zarr {zarr_id} describes {parsed.statistics.zarr_checksum}, "
            f"not the pinned {checksum}"
        )
    return files


def snapshot_urls(client: ApiClient, snapshot: Snapshot, paths: list[str]) -> dict[str, str]:
    """Presigned URLs of exactly the pinned versions (for an embargoed dandiset), batched."""
    return {path: link.url for path, link in snapshot_links(client, snapshot, paths).items()}


def snapshot_links(
    client: ApiClient, snapshot: Snapshot, paths: list[str]
) -> dict[str, DownloadLink]:
    """:func:`snapshot_urls` with each file's presigned HEAD when the archive gives one."""
    step = client.info().max_batch_files
    route = _snapshot_route(snapshot.zarr.zarr_id, snapshot.checksum) + "download/"
    links: dict[str, DownloadLink] = {}
    for start in range(0, len(paths), step):
        chunk = [{"path": p} for p in paths[start : start + step]]
        for item in client.request("POST", route, json=chunk).json():
            links[str(item["path"])] = DownloadLink.from_json(item)
    return links


# -- readers of the pinned versions (for the zarr-python store) ---------------------------------
class _PinnedFilesReader(HttpObjectReader):
    """Reads only the files of :attr:`snapshot`: any other path is absent, without a request."""

    snapshot: Snapshot

    def read(self, path: str, range_header: str | None = None) -> bytes | None:
        if path not in self.snapshot.files:
            return None
        return super().read(path, range_header)

    def exists(self, path: str) -> bool:
        return path in self.snapshot.files


class SnapshotReader(_PinnedFilesReader):
    """Reads the pinned versions from the public bucket (``?versionId=``, no credentials);
    files the snapshot does not have are absent without a request."""

    def __init__(self, snapshot: Snapshot, *, max_connections: int = 32) -> None:
        super().__init__(snapshot.zarr.s3_url, max_connections=max_connections)
        self.snapshot = snapshot

    def url(self, path: str) -> str:
        return self.snapshot.object_url(path)


class PresignedSnapshotReader(_PinnedFilesReader, PresignedObjectReader):
    """Reads an embargoed snapshot's pinned versions through presigned URLs of them."""

    def __init__(self, api: ApiClient, snapshot: Snapshot, *, max_connections: int = 32) -> None:
        super().__init__(api, snapshot.zarr.zarr_id, max_connections=max_connections)
        self.snapshot = snapshot

    def _presign(self, path: str) -> str:
        return snapshot_urls(self.api, self.snapshot, [path])[path]


# -- download and verify --------------------------------------------------------------------------
class SnapshotDownloader(Downloader):
    """:class:`Downloader` that also takes ``DANDISET@VERSION/PATH``: it then compares with
    and fetches exactly the pinned state; so for any reference that resolves to a pinned
    view (its manifest read once, each file from the bucket at its pinned version, no API
    request per file).  Every other reference: as the Downloader."""

    _snapshot: Snapshot | None = None

    def _resolve(self, ref: str | ZarrInfo) -> ZarrInfo:
        self._snapshot = None
        if isinstance(ref, ZarrInfo) or "@" not in ref.split("/", 1)[0]:
            zarr = super()._resolve(ref)
            address = _address_of(ref if isinstance(ref, str) else zarr.zarr_id, zarr)
        else:
            address = parse_address(ref)
            if not address.is_draft:
                self._snapshot = open_snapshot(self.client, address)
                return self._snapshot.info
            zarr = resolve_zarr(self.client, f"{address.dandiset}/{address.path}")
        if is_view_id(zarr.zarr_id):
            self._snapshot = open_view(self.client, zarr, address)
            return self._snapshot.info
        return zarr

    def _remote_state(self, zarr: ZarrInfo, digests: dict[str, str]) -> RemoteState:
        if self._snapshot is None:
            return super()._remote_state(zarr, digests)
        files = {p: (f.md5, f.size) for p, f in self._snapshot.files.items()}
        return RemoteState(self._snapshot.checksum, files=files)

    def _object_url(self, zarr: ZarrInfo, path: str) -> str:
        if self._snapshot is None:
            return super()._object_url(zarr, path)
        return self._snapshot.object_url(path)

    def _private_links(self, zarr: ZarrInfo, paths: list[str]) -> dict[str, DownloadLink]:
        if self._snapshot is None:
            return super()._private_links(zarr, paths)
        return snapshot_links(self.client, self._snapshot, paths)


def _address_of(ref: str, zarr: ZarrInfo) -> VersionedAddress:
    """``DANDISET@draft/PATH`` of a ``DANDISET/PATH`` reference (a Zarr id: its dandiset's
    draft and its name), for messages."""
    dandiset, sep, path = ref.strip().partition("/")
    if sep and path:
        return VersionedAddress(dandiset, DRAFT, path.strip("/"))
    return VersionedAddress(zarr.dandiset, DRAFT, zarr.name)


__all__ = [
    "ApiError",
    "PresignedSnapshotReader",
    "Snapshot",
    "SnapshotDownloader",
    "SnapshotReader",
    "is_view_id",
    "open_snapshot",
    "open_view",
    "snapshot_links",
    "snapshot_urls",
]
