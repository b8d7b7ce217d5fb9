"""Read the remote state of a Zarr from the archive's ``.checksum``-node listing.

:func:`walk_remote` lists directories concurrently and skips every subtree whose
digest equals the local directory's digest (the Dandi Zarr checksum covers every
file below it), so comparing an unchanged Zarr costs one request, and a Zarr
with a few changed files costs one listing per directory on their paths.

:func:`read_affected` reads what a patch upload (``--patch``) compares with: the whole
``.checksum`` node of each directory it touches (:func:`fetch_node`, one request each), and
checks that they are one state of the Zarr.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from urllib.parse import quote

from zarrchive.checksum import ChecksumNode, ZarrEntry, iter_directory_digests
from zarrchive.client.api import ApiClient, DirectoryListing
from zarrchive.client.patch import affected_directories, parent_of
from zarrchive.errors import ApiError, InvalidChecksumNode, InvalidPath, TransferError
from zarrchive.paths import validate_path


@dataclass(frozen=True)
class RemoteFile:
    """A file of a Zarr in the archive: its path, md5 and size, and where to read it.

    The files a download fetches (:class:`~zarrchive.client.download.Downloader`: *url*, the
    object's URL, public or presigned) and the files a published version pins
    (:class:`~zarrchive.client.snapshot.Snapshot`: *version_id*, the S3 version the
    manifest names) are this one type."""

    path: str
    md5: str
    size: int
    #: The URL to GET its bytes from (``""`` until one is needed: a snapshot's files).
    url: str = ""
    #: The S3 version of the object, for a file pinned by a published version's manifest.
    version_id: str | None = None
    #: The URL to HEAD it at (its public URL, or a presigned HEAD of an embargoed object;
    #: a presigned GET cannot be HEADed): a big file's download reads S3's checksum there.
    #: None: no HEAD (the file is checked by its md5).
    head_url: str | None = None
    #: The ETag every GET of it must match (``If-Match``: S3 answers 412 once the object
    #: changed), the one its HEAD answered; None: any.
    etag: str | None = None


@dataclass
class RemoteState:
    """Files of the walked directories, and the subtrees equal to the local ones."""

    root_digest: str
    #: ``path -> (md5, size)`` of every remote file outside the identical subtrees.
    files: dict[str, tuple[str, int]] = field(default_factory=dict)
    #: Directory paths (``""`` = the root) whose remote digest equals the local one.
    identical: set[str] = field(default_factory=set)
    #: Number of directory listings read.
    listed: int = 0

    def in_identical(self, path: str) -> bool:
        """True if the file *path* lies in a subtree known to be identical."""
        return in_subtrees(path, self.identical)


def in_subtrees(path: str, subtrees: set[str]) -> bool:
    """True if the file *path* lies below one of the directories *subtrees*."""
    if not subtrees:
        return False
    if "" in subtrees:
        return True
    directory = path
    while True:
        cut = directory.rfind("/")
        if cut < 0:
            return False
        directory = directory[:cut]
        if directory in subtrees:
            return True


class SubtreeFilter:
    """:func:`in_subtrees` memoised per directory (for millions of files)."""

    def __init__(self, subtrees: set[str]) -> None:
        self.subtrees = subtrees
        self._memo: dict[str, bool] = {}

    def __call__(self, path: str) -> bool:
        if not self.subtrees:
            return False
        cut = path.rfind("/")
        directory = path[:cut] if cut >= 0 else ""
        known = self._memo.get(directory)
        if known is None:
            known = in_subtrees(path, self.subtrees)
            self._memo[directory] = known
        return known


def local_digests(entries: Iterable[ZarrEntry]) -> dict[str, str]:
    """``directory path -> Dandi Zarr checksum`` of every local directory (``""`` = root).

    *entries* must be in sorted path order (as :mod:`zarrchive.client.local` yields them).
    """
    return {d.path: d.digest for d in iter_directory_digests(entries, grouped=True)}


def walk_remote(
    client: ApiClient,
    zarr_id: str,
    local: Mapping[str, str],
    *,
    root_digest: str | None = None,
    jobs: int = 8,
) -> RemoteState:
    """The remote files that may differ from the local tree described by *local* digests.

    *root_digest*: the Zarr's checksum if already known (saves nothing but a listing
    when it equals the local root: then no directory is listed at all).
    """
    if root_digest is not None and local.get("") == root_digest:
        return RemoteState(root_digest, identical={""})
    state = RemoteState(root_digest or "")
    jobs = max(1, min(jobs, 16))
    with ThreadPoolExecutor(jobs, thread_name_prefix="zarrchive-list") as pool:
        pending: set[Future[DirectoryListing]] = {pool.submit(client.list_directory, zarr_id, "")}
        try:
            while pending:
                done, pending = wait(pending, return_when=FIRST_COMPLETED)
                for future in done:
                    listing = future.result()
                    state.listed += 1
                    if listing.path == "":
                        state.root_digest = listing.digest
                        if local.get("") == listing.digest:
                            state.identical.add("")
                            return state
                    for entry in (*listing.files, *listing.directories):
                        check_listed_path(listing.path, entry.path)
                    for entry in listing.files:
                        state.files[entry.path] = (entry.digest, entry.size)
                    for entry in listing.directories:
                        if local.get(entry.path) == entry.digest:
                            state.identical.add(entry.path)
                        else:
                            pending.add(pool.submit(client.list_directory, zarr_id, entry.path))
        finally:
            for future in pending:
                future.cancel()
    return state


#: How many times the affected directories are read again when their nodes disagree (another
#: upload changed the Zarr while they were being read) before giving up.
READ_ATTEMPTS = 3


def fetch_node(client: ApiClient, zarr_id: str, directory: str) -> ChecksumNode | None:
    """The archive's ``.checksum`` node of *directory* (``""``: the root): every child's
    digest and size, in one request whatever the directory's width; ``None`` if the Zarr has
    no such directory.  Its digest is checked against its listing (the md5 of its bytes)."""
    path = f"/api/zarr/{quote(zarr_id, safe='')}/node/" + (
        quote(directory, safe="/~") + "/" if directory else ""
    )
    try:
        response = client.request("GET", path)
    except ApiError as exc:
        if exc.status_code != 404:
            raise
        if directory == "":  # the root always has a node: this archive has no such route
            raise TransferError(
                "the archive does not serve directory nodes (GET /api/zarr/{id}/node/): it is "
                "older than this client; upgrade it, or upload a full copy without --patch"
            ) from None
        return None
    try:
        return ChecksumNode.from_json(response.content)
    except InvalidChecksumNode as exc:
        raise TransferError(
            f"the archive's node of {directory or 'the root'!r} is not valid: {exc.message}"
        ) from None


def read_affected(
    client: ApiClient, zarr_id: str, paths: Iterable[str], *, jobs: int = 8
) -> dict[str, ChecksumNode | None]:
    """What the archive has in the directories a patch of the files *paths* touches: each of
    :func:`~zarrchive.client.patch.affected_directories` ``(paths)`` with its whole node
    (:func:`fetch_node`: one request, whatever its width), or ``None`` for one the archive
    does not have.

    They are read from the root down, a level at a time (the levels' nodes in parallel): a
    directory is read only if its parent's node names it as a directory, so a directory the
    archive lacks, and everything below it, costs no request.  The nodes read must agree: each
    one's digest is the one its parent's node gives it.  Then they are one state of the Zarr,
    the one whose checksum is the root node's digest, and not a mix of states before and
    after another upload applied meanwhile; if they disagree, they are read again (at most
    :data:`READ_ATTEMPTS` times, then :class:`TransferError`).
    """
    directories = affected_directories(paths)
    by_depth: dict[int, list[str]] = {}
    for directory in directories:
        by_depth.setdefault(directory.count("/") + 1 if directory else 0, []).append(directory)
    jobs = max(1, min(jobs, 16))
    with ThreadPoolExecutor(jobs, thread_name_prefix="zarrchive-list") as pool:
        for _ in range(READ_ATTEMPTS):
            found = _read_levels(pool, client, zarr_id, by_depth)
            if found is not None:
                return found
    raise TransferError(
        "the Zarr kept changing while the directories this patch touches were read (another "
        "upload or deletion is being applied): nothing was sent; try again later"
    )


def _read_levels(
    pool: ThreadPoolExecutor, client: ApiClient, zarr_id: str, by_depth: dict[int, list[str]]
) -> dict[str, ChecksumNode | None] | None:
    """One reading of the directories *by_depth*, from the root down; ``None`` as soon as a
    node disagrees with its parent's (the Zarr changed between the two reads)."""
    found: dict[str, ChecksumNode | None] = {}
    for depth in sorted(by_depth):
        to_read: list[str] = []
        for directory in by_depth[depth]:
            parent = found.get(parent_of(directory)) if directory else None
            if directory == "" or (
                parent is not None and directory.rpartition("/")[2] in parent.directories
            ):
                to_read.append(directory)
            else:
                found[directory] = None
        nodes = pool.map(lambda d: fetch_node(client, zarr_id, d), to_read)
        for directory, node in zip(to_read, nodes, strict=True):
            parent = found.get(parent_of(directory)) if directory else None
            if parent is not None:
                listed = parent.directories[directory.rpartition("/")[2]]
                if node is None or node.digest != listed.digest:
                    return None
            found[directory] = node
    return found


def check_listed_path(directory: str, path: str) -> None:
    """Refuse an entry the archive listed in *directory* unless it is a valid entry path
    directly inside it: a server (or anything between) must never make the client write
    outside its destination (``..``, absolute paths, backslashes...)."""
    try:
        validate_path(path)
    except InvalidPath as exc:
        raise TransferError(
            f"the archive listed an invalid path {path!r} ({exc.message}): refusing to use it"
        ) from None
    parent, _, name = path.rpartition("/")
    if parent != directory or not name:
        raise TransferError(
            f"the archive listed {path!r} as an entry of {directory or 'the root'!r}: "
            "refusing to use it"
        )


def os_path(root: str | os.PathLike[str], path: str) -> str:
    """The local path of the entry *path* below *root* (a valid entry path: never outside
    *root*)."""
    validate_path(path)
    return os.path.join(os.fspath(root), *path.split("/"))


__all__ = [
    "READ_ATTEMPTS",
    "RemoteFile",
    "RemoteState",
    "SubtreeFilter",
    "check_listed_path",
    "fetch_node",
    "in_subtrees",
    "local_digests",
    "os_path",
    "read_affected",
    "walk_remote",
]
