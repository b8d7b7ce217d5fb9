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
from typing import TYPE_CHECKING
from urllib.parse import quote

from zarrchive.checksum import ZarrEntry, iter_directory_digests
from zarrchive.client.api import MAX_PAGE_SIZE, ApiClient, DirectoryListing, ListingEntry
from zarrchive.errors import ApiError, InvalidPath, TransferError
from zarrchive.paths import validate_path

if TYPE_CHECKING:
    from zarrchive.client.patch import Listing


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


#: A directory of more than one page holding at most this many of a patch's files and
#: subdirectories is not listed whole: each of them is looked up.
PROBE_LIMIT = 32


def list_affected(
    client: ApiClient,
    zarr_id: str,
    paths: Iterable[str],
    *,
    jobs: int = 8,
    page_size: int = MAX_PAGE_SIZE,
    probe_limit: int = PROBE_LIMIT,
) -> dict[str, Listing | None]:
    """What the archive has in the directories a patch of the files *paths* touches: each of
    :func:`~zarrchive.client.patch.affected_directories` ``(paths)`` with its listing (every
    page), or ``None`` for one the archive does not have.

    They are listed from the root down, a level at a time (the levels' listings in
    parallel): a directory is listed only if its parent's listing names it as a directory,
    so a directory the archive lacks, and everything below it, costs no request.  A
    directory of more than one page (*page_size* entries) in which the patch has at most
    *probe_limit* files and subdirectories is not listed further: each of those names is
    looked up instead (a :class:`~zarrchive.client.patch.PartialListing`).
    """
    from zarrchive.client.patch import PartialListing, affected_directories

    paths = list(paths)
    directories = affected_directories(paths)
    names: dict[str, set[str]] = {}
    for path in [*paths, *directories]:
        if path:
            parent, _, name = path.rpartition("/")
            names.setdefault(parent, set()).add(name)
    by_depth: dict[int, list[str]] = {}
    for directory in directories:
        by_depth.setdefault(directory.count("/") + 1 if directory else 0, []).append(directory)
    found: dict[str, Listing | None] = {}
    subdirectories: dict[str, set[str]] = {}

    def look(directory: str) -> Listing:
        page = client.list_page(zarr_id, directory, page_size=page_size)
        wanted = names.get(directory, set())
        files, dirs = list(page.files), list(page.directories)
        if page.next is None or len(wanted) > probe_limit:
            while page.next:
                page = client.list_page(zarr_id, directory, cursor=page.next, page_size=page_size)
                files.extend(page.files)
                dirs.extend(page.directories)
            listing = DirectoryListing(directory, page.digest, dirs, files)
            _check_listing(listing)
            return listing
        seen = {e.path for e in (*files, *dirs)}
        prefix = f"{directory}/" if directory else ""
        todo = [prefix + name for name in sorted(wanted) if prefix + name not in seen]
        with ThreadPoolExecutor(min(8, max(1, len(todo))), "zarrchive-look") as lookers:
            for kind, entry in lookers.map(lambda path: look_up(client, zarr_id, path), todo):
                if kind == "file":
                    files.append(entry)
                elif kind == "directory":
                    dirs.append(entry)
        partial = PartialListing(directory, page.digest, dirs, files)
        _check_listing(partial)
        return partial

    jobs = max(1, min(jobs, 16))
    with ThreadPoolExecutor(jobs, thread_name_prefix="zarrchive-list") as pool:
        for depth in sorted(by_depth):
            to_list: list[str] = []
            for directory in by_depth[depth]:
                if directory == "" or directory in subdirectories.get(
                    directory.rpartition("/")[0], ()
                ):
                    to_list.append(directory)
                else:
                    found[directory] = None
            for directory, listing in zip(to_list, pool.map(look, to_list), strict=True):
                found[directory] = listing
                subdirectories[directory] = {d.path for d in listing.directories}
    return found


def look_up(client: ApiClient, zarr_id: str, path: str) -> tuple[str | None, ListingEntry]:
    """``("file" | "directory" | None, entry)``: what the archive has at *path* (None:
    nothing; the entry is then a placeholder)."""
    name = path.rpartition("/")[2]
    try:
        data = client.request(
            "GET",
            f"/api/zarr/{quote(zarr_id, safe='')}.zarr/{quote(path, safe='/~')}",
            params={"page_size": 1},
        ).json()
    except ApiError as exc:
        if exc.status_code == 404:
            return None, ListingEntry(name, path, "", 0)
        raise
    except ValueError:
        raise TransferError(f"the archive answered a look-up of {path!r} with no JSON") from None
    kind = data.get("type") if isinstance(data, dict) else None
    try:
        if kind == "file":
            return "file", ListingEntry(name, path, str(data["md5"]), int(data["size"]))
        if kind == "directory":
            return "directory", ListingEntry(name, path, str(data["digest"]), int(data["size"]))
    except (KeyError, TypeError, ValueError):
        raise TransferError(
            f"the archive answered a look-up of {path!r} without its digest and size"
        ) from None
    raise TransferError(
        f"the archive answered a look-up of {path!r} with neither a file nor a directory"
    )


def _check_listing(listing: Listing) -> None:
    for entry in (*listing.files, *listing.directories):
        check_listed_path(listing.path, entry.path)


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
    "PROBE_LIMIT",
    "RemoteState",
    "SubtreeFilter",
    "check_listed_path",
    "in_subtrees",
    "list_affected",
    "local_digests",
    "look_up",
    "os_path",
    "walk_remote",
]
