"""Read the remote state of a Zarr from the archive's ``.checksum``-node listing.

:func:`walk_remote` lists directories concurrently and skips every subtree whose
digest equals the local directory's digest (the Dandi Zarr checksum covers every
file below it), so comparing an unchanged Zarr costs one request, and a Zarr
with a few changed files costs one listing per directory on their paths.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field

from zarrchive.checksum import ZarrEntry, iter_directory_digests
from zarrchive.client.api import ApiClient, DirectoryListing
from zarrchive.errors import InvalidPath, TransferError
from zarrchive.paths import validate_path


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


def list_affected(
    client: ApiClient, zarr_id: str, directories: Iterable[str], *, jobs: int = 8
) -> dict[str, DirectoryListing | None]:
    """The archive's listing (every page) of each of *directories*, or ``None`` for one the
    archive does not have: for a patch, which lists only the directories it touches.

    *directories* must hold the ancestors of each of its directories (``""``, the root,
    included: :func:`zarrchive.client.patch.affected_directories`).  They are listed from the
    root down, a level at a time (the levels' listings in parallel): a directory is listed
    only if its parent's listing names it as a directory, so a directory the archive lacks,
    and everything below it, costs no request.
    """
    wanted = set(directories)
    wanted.add("")
    by_depth: dict[int, list[str]] = {}
    for directory in wanted:
        by_depth.setdefault(directory.count("/") + 1 if directory else 0, []).append(directory)
    found: dict[str, DirectoryListing | None] = {}
    subdirectories: dict[str, set[str]] = {}
    jobs = max(1, min(jobs, 16))
    with ThreadPoolExecutor(jobs, thread_name_prefix="zarrchive-list") as pool:
        for depth in sorted(by_depth):
            to_list: list[str] = []
            for directory in by_depth[depth]:
                if directory == "":
                    to_list.append(directory)
                    continue
                if directory in subdirectories.get(directory.rpartition("/")[0], ()):
                    to_list.append(directory)
                else:
                    found[directory] = None
            listings = pool.map(lambda d: client.list_directory(zarr_id, d), to_list)
            for directory, listing in zip(to_list, listings, strict=True):
                for entry in (*listing.files, *listing.directories):
                    check_listed_path(directory, entry.path)
                found[directory] = listing
                subdirectories[directory] = {d.path for d in listing.directories}
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
    "RemoteState",
    "SubtreeFilter",
    "check_listed_path",
    "in_subtrees",
    "list_affected",
    "local_digests",
    "os_path",
    "walk_remote",
]
