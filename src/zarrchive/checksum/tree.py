"""The Dandi Zarr tree hash over a set of ``(path, size, md5)`` entries.

The hasher streams: it keeps one open frame per directory level and folds a
directory into its parent as soon as the input leaves it, so memory is bounded
by the depth and the widest directory, not by the number of entries.  That
needs the entries grouped by directory (every path below a directory
contiguous), which holds for S3 listings, for any lexicographic sort and for a
depth-first walk.  :func:`compute_checksum` and :func:`iter_directory_digests`
accept entries in any order and sort them first unless told they are grouped.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from operator import itemgetter
from typing import NamedTuple

from zarrchive.checksum.digest import EMPTY_CHECKSUM, is_md5
from zarrchive.checksum.node import ChildRow, directory_digest, node_json
from zarrchive.errors import InvalidDigest, InvalidPath, UngroupedEntries


class ZarrEntry(NamedTuple):
    """One file of a Zarr: its path relative to the Zarr root, size and md5."""

    path: str
    size: int
    md5: str


@dataclass(frozen=True, slots=True)
class DirectoryDigest:
    """A directory's checksum, produced when the hasher leaves the directory.

    ``path`` is relative to the Zarr root (``""`` for the root).  ``node_json``
    is the exact ``.checksum`` document when the hasher was asked for nodes.
    """

    path: str
    digest: str
    count: int
    size: int
    node_json: str | None = None


class _Frame:
    __slots__ = ("closed", "count", "directories", "files", "name", "size")

    def __init__(self, name: str) -> None:
        self.name = name
        self.files: list[ChildRow] = []
        self.directories: list[ChildRow] = []
        self.closed: set[str] = set()
        self.count = 0  # files in the closed subdirectories
        self.size = 0  # bytes in the closed subdirectories


class TreeHasher:
    """Streaming tree hash over entries grouped by directory.

    Call :meth:`add` for every file, then :meth:`finish`; :attr:`completed`
    collects the directory digests produced so far when *collect* is set.

    Paths are checked as they arrive; digests, sizes and duplicate names are
    checked in bulk when the hasher leaves a directory, before its digest
    exists (:meth:`add` or :meth:`finish` raise), which keeps :meth:`add` cheap.
    """

    def __init__(self, *, collect: bool = False, with_nodes: bool = False) -> None:
        root = _Frame("")
        self._stack: list[_Frame] = [root]
        self._files = root.files  # the current directory's files
        self._parts: list[str] = []
        self._dir = ""
        self._collect = collect or with_nodes
        self._with_nodes = with_nodes
        self.completed: list[DirectoryDigest] = []
        self._finished: DirectoryDigest | None = None

    def add(self, path: str, size: int, md5: str) -> None:
        """Add one file.  Paths must be normalised (see :mod:`zarrchive.paths`)."""
        directory, slash, name = path.rpartition("/")
        if directory != self._dir:
            self._enter(directory, path)
        if not name or (slash and not directory):
            raise InvalidPath(
                f"{path!r} is not a file path: it is empty, ends with '/' or starts with '/'"
            )
        self._files.append((name, md5, size))

    def add_files(self, directory: str, files: list[tuple[str, str, int]]) -> None:
        """Add the files ``(name, md5, size)`` of one *directory* (``""``: the root) at once.

        The same as ``add(directory + "/" + name, size, md5)`` for each file, at a
        fraction of the cost; names must be non-empty and contain no ``/``.
        """
        if not files:
            return
        if not all(map(_by_name, files)) or "/" in "".join(map(_by_name, files)):
            for name, _, _ in files:
                if not name or "/" in name:
                    raise InvalidPath(f"{name!r} in {directory!r} is not a file name")
        if directory != self._dir:
            first = f"{directory}/{files[0][0]}" if directory else files[0][0]
            self._enter(directory, first)
        self._files.extend(files)

    def _enter(self, directory: str, path: str) -> None:
        new_parts = directory.split("/") if directory else []
        old_parts = self._parts
        stack = self._stack
        common = 0
        limit = min(len(old_parts), len(new_parts))
        while common < limit and old_parts[common] == new_parts[common]:
            common += 1
        while len(stack) > common + 1:
            self._close()
        for segment in new_parts[common:]:
            if not segment:
                raise InvalidPath(f"{path!r} has an empty path segment")
            if segment in stack[-1].closed:
                raise UngroupedEntries(
                    f"{path!r} arrived after the hasher left its directory: entries must be "
                    "grouped by directory (sorted), or use compute_checksum(..., grouped=False)"
                )
            stack.append(_Frame(segment))
        self._parts = new_parts
        self._dir = directory
        self._files = stack[-1].files

    def _close(self) -> DirectoryDigest | None:
        """Fold the deepest open directory into its parent; its digest if collected or the root."""
        stack = self._stack
        frame = stack.pop()
        depth = len(stack)
        files = frame.files
        count, size = frame.count, frame.size
        if files:
            files.sort(key=_by_name)
            _check_files(files, self._parts, depth)
            count += len(files)
            size += sum(map(_size_of, files))
        directories = frame.directories
        directories.sort(key=_by_name)
        listing, digest = directory_digest(directories, files, count, size)
        if depth:
            parent = stack[-1]
            parent.directories.append((frame.name, digest, size))
            parent.closed.add(frame.name)
            parent.count += count
            parent.size += size
            if not self._collect:
                return None
        result = DirectoryDigest(
            "/".join(self._parts[:depth]) if depth else "",
            digest,
            count,
            size,
            node_json(listing, digest) if self._with_nodes else None,
        )
        if self._collect:
            self.completed.append(result)
        return result

    def finish(self) -> DirectoryDigest:
        """Close every open directory and return the root's digest."""
        if self._finished is None:
            while len(self._stack) > 1:
                self._close()
            self._parts = []
            self._finished = self._close()
        assert self._finished is not None
        return self._finished


_by_name = itemgetter(0)
_md5_of = itemgetter(1)
_size_of = itemgetter(2)
_HEX = b"0123456789abcdef"


def _check_files(files: list[ChildRow], parts: list[str], depth: int) -> None:
    """Check a directory's name-sorted files: unique names, md5 digests, sizes >= 0."""
    names = set(map(_by_name, files))
    md5s_ok = sizes_ok = False
    try:
        md5s = list(map(_md5_of, files))
        # Each 32 characters long, and nothing left once the lowercase hex digits are deleted.
        md5s_ok = set(map(len, md5s)) == {32} and not (
            "".join(md5s).encode("ascii").translate(None, _HEX)
        )
        sizes = list(map(_size_of, files))
        sizes_ok = set(map(type, sizes)) == {int} and min(sizes) >= 0
    except (TypeError, UnicodeEncodeError):
        pass
    if len(names) == len(files) and md5s_ok and sizes_ok:
        return
    previous = None
    for name, md5, size in files:  # find the first culprit, for the message
        path = "/".join([*parts[:depth], name])
        if name == previous:
            raise InvalidPath(f"{path!r} appears more than once")
        previous = name
        if not is_md5(md5):
            raise InvalidDigest(f"{path!r}: {md5!r} is not an md5 digest")
        if type(size) is not int:
            raise InvalidDigest(f"{path!r}: size {size!r} is not an int ({type(size).__name__})")
        if size < 0:
            raise InvalidDigest(f"{path!r}: size {size} is negative")
    raise AssertionError("unreachable")  # pragma: no cover


def _ordered(
    entries: Iterable[tuple[str, int, str]], grouped: bool
) -> Iterable[tuple[str, int, str]]:
    return entries if grouped else sorted(entries, key=_by_name)


def compute_checksum(entries: Iterable[tuple[str, int, str]], *, grouped: bool = False) -> str:
    """The Dandi Zarr checksum of the files ``(path, size, md5)``.

    Entries may come in any order; pass ``grouped=True`` when they are already
    grouped by directory (an S3 listing, a sorted list, a depth-first walk) to
    stream them without sorting.
    """
    hasher = TreeHasher()
    add = hasher.add
    for path, size, md5 in _ordered(entries, grouped):
        add(path, size, md5)
    return hasher.finish().digest


def iter_directory_digests(
    entries: Iterable[tuple[str, int, str]], *, grouped: bool = False, with_nodes: bool = False
) -> Iterator[DirectoryDigest]:
    """Every directory's digest, deepest first as each is completed, the root last.

    With *with_nodes*, each carries its exact ``.checksum`` document.
    """
    hasher = TreeHasher(collect=True, with_nodes=with_nodes)
    for path, size, md5 in _ordered(entries, grouped):
        hasher.add(path, size, md5)
        if hasher.completed:
            yield from hasher.completed
            hasher.completed.clear()
    hasher.finish()
    yield from hasher.completed


__all__ = [
    "EMPTY_CHECKSUM",
    "DirectoryDigest",
    "TreeHasher",
    "ZarrEntry",
    "compute_checksum",
    "iter_directory_digests",
]
