"""Planning a patch upload (``zarrchive upload --patch``): pure, no I/O.

A patch sends the new and changed files among the local files it looked at (the selected
ones, :mod:`zarrchive.client.selection`) and deletes nothing.  It is compared with the
archive through the ``.checksum`` nodes of the *affected* directories only: every directory
that holds a selected local file, and their ancestors up to the root (a directory the archive
does not have is not read, nor is anything below it).  Never a listing of the whole Zarr.

Each node holds every child's digest, however wide the directory (a Zarr v2 array's 10^5
chunks side by side: one node of 7 MB, one request), and the nodes read agree with one
another (:func:`~zarrchive.client.remote.read_affected`): they are one state of the Zarr, its
checksum the root node's digest (:attr:`PatchPlan.base_checksum`).  So :func:`plan_patch`
predicts the checksum the Zarr must have once the patch is applied: each affected directory's
node with the patch's files set in it, the digests of affected subdirectories recomputed
bottom-up, every other subdirectory's digest as its parent's node gives it.  The upload
compares it with the archive's checksum at the end: equal means (short of an md5 collision)
that the Zarr holds exactly that state plus the patch, every file anywhere in it, so a change
by anyone else applied after the read, to any file, fails the check.  A checksum of the
local directory would say nothing: without the whole tree here, it is not the Zarr's.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from zarrchive.checksum import EMPTY_CHECKSUM, ChecksumNode, ZarrEntry
from zarrchive.errors import InvalidInput


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
    #: The Zarr's checksum as read (the root node's digest) ...
    base_checksum: str
    #: ... and once the patch is applied (that state, the patch's files set).
    expected_checksum: str
    #: The affected directories the archive has (each read whole).
    listed: int = 0

    @property
    def upload_bytes(self) -> int:
        return sum(e.size for e in self.upload)

    @property
    def changed(self) -> int:
        return len(self.upload) - self.new


def plan_patch(entries: Sequence[ZarrEntry], nodes: Mapping[str, ChecksumNode | None]) -> PatchPlan:
    """The plan for the selected local *entries* (``(path, size, md5)``).

    *nodes*: for each directory of :func:`affected_directories` of the entries, the
    archive's node (every child), or ``None`` if the archive has no such directory (the root
    always has one, maybe empty); read as one state of the Zarr (see the module).

    A local file where the archive has a directory, or a local directory where it has a
    file, can't be patched (the archive would refuse the batch, and a patch deletes
    nothing): :class:`InvalidInput` naming them, before anything is sent.
    """
    by_directory: dict[str, list[ZarrEntry]] = {}
    for entry in entries:
        by_directory.setdefault(entry.path.rpartition("/")[0], []).append(entry)
    directories = affected_directories(e.path for e in entries)
    missing = [d for d in directories if d not in nodes]
    if missing:
        raise ValueError(f"no node given for the affected directories {sorted(missing)[:5]}")
    root = nodes[""]
    base = EMPTY_CHECKSUM if root is None or root.is_empty else root.digest

    clashes: list[str] = []
    patched: dict[str, ChecksumNode] = {}
    sending: set[str] = set()
    new = skipped = listed = 0
    for directory in directories:
        archived = nodes[directory]
        if archived is not None:
            listed += 1
        if directory:
            parent = nodes[parent_of(directory)]
            if parent is not None and directory.rpartition("/")[2] in parent.files:
                clashes.append(directory)
        # a copy: the archive's nodes are left as read
        node = ChecksumNode(archived.files, archived.directories) if archived else ChecksumNode()
        for entry in by_directory.get(directory, ()):
            name = entry.path.rpartition("/")[2]
            if name in node.directories:
                clashes.append(entry.path)
                continue
            found = node.files.get(name)
            if found is not None and found.digest == entry.md5 and found.size == entry.size:
                skipped += 1
                continue
            if found is None:
                new += 1
            node.set_file(name, entry.md5, entry.size)
            sending.add(entry.path)
        patched[directory] = node
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
    # the affected directories' new digests, deepest first, each into its parent's node
    expected = EMPTY_CHECKSUM
    for directory in sorted(directories, key=_depth, reverse=True):
        node = patched[directory]
        digest = EMPTY_CHECKSUM if node.is_empty else node.digest
        if not directory:
            expected = digest
        elif not node.is_empty:
            patched[parent_of(directory)].set_directory(directory.rpartition("/")[2], digest)
    upload = [e for e in entries if e.path in sending]
    return PatchPlan(upload, new, skipped, base, expected, listed)


def _depth(directory: str) -> int:
    return directory.count("/") if directory else -1


__all__ = [
    "PatchPlan",
    "affected_directories",
    "parent_of",
    "plan_patch",
]
