"""Planning a patch upload (``zarrchive upload --patch``): pure, no I/O.

A patch sends the new and changed files among the local files it looked at (the selected
ones, :mod:`zarrchive.client.selection`) and deletes nothing.  It is compared with the
archive through the listings of the *affected* directories only: every directory that holds
a selected local file, and their ancestors up to the root (a directory the archive does not
have is not listed, nor is anything below it).  Never a listing of the whole Zarr.

Those listings also give the checksum the Zarr must have once the patch is applied
(:func:`plan_patch`): each affected directory's node is the archive's with the patch's files
set in it, the digests of affected subdirectories recomputed bottom-up, every other
subdirectory's digest as listed.  The upload compares it with what the archive reports at
the end.  A checksum of the local directory would say nothing: without the whole tree here,
it is not the Zarr's.

A directory of many pages (a Zarr v2 array's 10^5 chunks side by side) that holds few of the
patch's files is not listed whole: its first page and a look-up of each of those files (or
subdirectories) tell what the patch needs (a :class:`PartialListing`).  Its digest, and so
its ancestors', can't be predicted then; the final check compares the expected digest of each
fully listed directory right below such a directory, and each file sent into one
(:attr:`PatchPlan.expected`, :attr:`PatchPlan.check_files`).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from zarrchive.checksum import EMPTY_CHECKSUM, ChecksumNode, ChildDigest, ZarrEntry
from zarrchive.client.api import DirectoryListing, ListingEntry
from zarrchive.errors import InvalidInput, TransferError


@dataclass(frozen=True)
class PartialListing:
    """Part of a directory's listing: the archive's entries among the names looked up (and
    its first page); the others are unknown."""

    path: str
    digest: str
    directories: list[ListingEntry]
    files: list[ListingEntry]


Listing = DirectoryListing | PartialListing


def affected_directories(paths: Iterable[str]) -> set[str]:
    """Every directory holding one of the files *paths*, and their ancestors (``""`` = the
    root, always included)."""
    found: set[str] = {""}
    for path in paths:
        directory = path.rpartition("/")[0]
        while directory and directory not in found:
            found.add(directory)
            directory = directory.rpartition("/")[0]
    return found


def parent_of(directory: str) -> str:
    return directory.rpartition("/")[0]


@dataclass
class PatchPlan:
    """What a patch upload will send, and the checksum the Zarr will have after it."""

    #: New and changed files, in the order given (path order).
    upload: list[ZarrEntry]
    #: How many of them the archive doesn't have (the others replace a different file).
    new: int
    #: Selected local files equal to the archive's (same md5 and size): not sent.
    skipped: int
    #: The Zarr's checksum once the patch is applied (the archive's files, the patch's set);
    #: None when a directory was listed in part (see the module).
    expected_checksum: str | None
    #: The affected directories the archive has (each listed).
    listed: int = 0
    #: What the final check compares: ``directory -> its digest after the patch``, for the
    #: root, or (when a directory was listed in part) for each fully listed affected directory
    #: right below a partly listed one ...
    expected: dict[str, str] = field(default_factory=dict)
    #: ... and the files sent into partly listed directories.
    check_files: list[ZarrEntry] = field(default_factory=list)

    @property
    def upload_bytes(self) -> int:
        return sum(e.size for e in self.upload)

    @property
    def changed(self) -> int:
        return len(self.upload) - self.new


def plan_patch(entries: Sequence[ZarrEntry], listings: Mapping[str, Listing | None]) -> PatchPlan:
    """The plan for the selected local *entries* (``(path, size, md5)``).

    *listings*: for each directory of :func:`affected_directories` of the entries, the
    archive's listing (every page), or a :class:`PartialListing` holding at least the
    entries' names and the affected subdirectories' that the archive has, or ``None`` if the
    archive has no such directory.

    A local file where the archive has a directory, or a local directory where it has a
    file, can't be patched (the archive would refuse the batch, and a patch deletes
    nothing): :class:`InvalidInput` naming them, before anything is sent.
    """
    by_directory: dict[str, list[ZarrEntry]] = {}
    for entry in entries:
        by_directory.setdefault(entry.path.rpartition("/")[0], []).append(entry)
    directories = affected_directories(e.path for e in entries)
    missing = [d for d in directories if d not in listings]
    if missing:
        raise ValueError(f"no listing given for the affected directories {sorted(missing)[:5]}")

    clashes: list[str] = []
    nodes: dict[str, ChecksumNode] = {}
    sending: set[str] = set()
    new = skipped = listed = 0
    for directory in directories:
        listing = listings[directory]
        remote_files: dict[str, ChildDigest] = {}
        remote_dirs: dict[str, ChildDigest] = {}
        if listing is not None:
            listed += 1
            remote_files = {
                _name(directory, e.path): ChildDigest(e.digest, e.size) for e in listing.files
            }
            remote_dirs = {
                _name(directory, e.path): ChildDigest(e.digest, e.size) for e in listing.directories
            }
        if directory:
            parent = listings[parent_of(directory)]
            name = directory.rpartition("/")[2]
            if parent is not None and any(f.path == directory for f in parent.files):
                clashes.append(directory)
        node = ChecksumNode(remote_files, remote_dirs)
        for entry in by_directory.get(directory, ()):
            name = entry.path.rpartition("/")[2]
            if name in remote_dirs:
                clashes.append(entry.path)
                continue
            found = remote_files.get(name)
            if found is not None and found.digest == entry.md5 and found.size == entry.size:
                skipped += 1
                continue
            if found is None:
                new += 1
            node.set_file(name, entry.md5, entry.size)
            sending.add(entry.path)
        nodes[directory] = node
    if clashes:
        clashes.sort()
        shown = ", ".join(repr(p) for p in clashes[:5])
        more = f" and {len(clashes) - 5} more" if len(clashes) > 5 else ""
        raise InvalidInput(
            f"{len(clashes)} local path(s) clash with the archive's Zarr (a file here where it "
            f"has a directory, or a directory here where it has a file): {shown}{more}. A patch "
            "deletes nothing: remove the archive's entry first (or upload a full copy without "
            "--patch, which deletes it)"
        )
    # the affected directories' new digests, deepest first, each into its parent's node;
    # unknown for a partly listed directory and every directory above it
    unknown = {
        d
        for d in directories
        if isinstance(listings[d], PartialListing)
        for d in _self_and_ancestors(d)
    }
    expected: dict[str, str] = {}
    for directory in sorted(directories, key=_depth, reverse=True):
        if directory in unknown:
            continue
        node = nodes[directory]
        digest = EMPTY_CHECKSUM if node.is_empty else node.digest
        if not directory:
            expected[directory] = digest
            continue
        above = parent_of(directory)
        if above in unknown:
            expected[directory] = digest  # checked by itself at the end
        if not node.is_empty:
            nodes[above].set_directory(directory.rpartition("/")[2], digest)
    upload = [e for e in entries if e.path in sending]
    check_files = [e for e in upload if e.path.rpartition("/")[0] in unknown]
    return PatchPlan(upload, new, skipped, expected.get(""), listed, expected, check_files)


def _self_and_ancestors(directory: str) -> Iterator[str]:
    yield directory
    while directory:
        directory = parent_of(directory)
        yield directory


def _depth(directory: str) -> int:
    return directory.count("/") if directory else -1


def _name(directory: str, path: str) -> str:
    """The name of the entry *path* listed in *directory* (a listing the archive gave:
    checked, never trusted to be inside *directory*)."""
    parent, _, name = path.rpartition("/")
    if parent != directory or not name:
        raise TransferError(
            f"the archive listed {path!r} as an entry of {directory or 'the root'!r}: "
            "refusing to use it"
        )
    return name


__all__ = [
    "Listing",
    "PartialListing",
    "PatchPlan",
    "affected_directories",
    "parent_of",
    "plan_patch",
]
