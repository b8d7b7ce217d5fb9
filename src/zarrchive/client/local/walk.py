"""Walk a local Zarr directory: every file below it, in sorted path order.

The walk follows symbolic links (a link that leads back to one of its own ancestors is an
error, not an endless walk), ignores empty directories (S3 has none), and validates every
path with :mod:`zarrchive.paths`.  It does not ``stat`` files: it costs one ``scandir`` per
directory and almost nothing per file.

:func:`walk_local` gives :class:`LocalFile` s; :func:`walk_runs` gives the same files as
:data:`Run` s, the unit the hashing works on (:mod:`zarrchive.client.local.hashing`).  The
checks and helpers below are shared with the other walks of the package (the tree's,
:mod:`~zarrchive.client.local.tree`, and the selected walk's,
:mod:`~zarrchive.client.local.selected`), so each walk reports the same errors in the same
words.
"""

from __future__ import annotations

import os
import re
import stat
from bisect import bisect_left
from collections.abc import Callable, Iterator
from typing import NamedTuple

from zarrchive.errors import LocalFileError
from zarrchive.paths import MAX_PATH_BYTES, MAX_SEGMENT_BYTES, validate_path

# Anything validate_path could object to in one name (besides length and surrogates).
_SUSPECT = re.compile(r"[\x00-\x1f\x7f-\x9f\\]")

#: ``(prefix, os_prefix, names)``: consecutive files of one directory, in path order:
#: *prefix* is the directory's entry path with a final ``/`` (``""`` for the root),
#: *os_prefix* the same on disk, *names* the files' names.
Run = tuple[str, str, list[str]]


class LocalFile(NamedTuple):
    """A file found by the walk: its entry path and the path to open."""

    path: str
    os_path: str


def display(path: str) -> str:
    """A path for a one-line message (quoted, escapes for control characters)."""
    return repr(path)


def check_root(root: str | os.PathLike[str]) -> str:
    """*root* as a string, once checked to be a directory (:class:`LocalFileError` if it is
    missing, cannot be reached or is not a directory): every walk starts here."""
    top = os.fspath(root)
    try:
        st = os.stat(top)
    except FileNotFoundError:
        raise LocalFileError(f"{display(top)}: no such file or directory") from None
    except OSError as exc:
        raise LocalFileError(f"{display(top)}: cannot access: {exc.strerror}") from None
    if not stat.S_ISDIR(st.st_mode):
        raise LocalFileError(f"{display(top)} is not a directory")
    return top


def names_are_valid(listing: tuple[list[str], list[str]], prefix_bytes: int) -> bool:
    """Fast check that ``prefix + name`` is a valid entry path for every name listed.

    Accepts only what :func:`validate_path` accepts, given a valid prefix of
    *prefix_bytes* bytes (0 for the root), ``/`` included.  ``scandir`` never
    returns empty names, ``.`` or ``..``; a subdirectory's name ends with ``/``
    here, which only makes the check stricter.  When it fails, the walk checks
    each path with :func:`validate_path` for the exact message.
    """
    files, dirs = listing
    if not files and not dirs:
        return True
    joined = "".join(files) + "".join(dirs)
    if _SUSPECT.search(joined) is not None:
        return False
    try:
        joined.encode("utf-8")
    except UnicodeEncodeError:  # undecodable bytes in a name (surrogateescape)
        return False
    names = files + dirs
    if joined.isascii():
        longest = max(map(len, names))
    else:
        longest = max(len(name.encode("utf-8")) for name in names)
    return longest <= MAX_SEGMENT_BYTES and prefix_bytes + longest <= MAX_PATH_BYTES


def validate(path: str) -> None:
    """Raise the :class:`InvalidPath` that :func:`validate_path` gives for *path*."""
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:
        # A name that is not UTF-8 on disk: report its bytes, not the escapes.
        validate_path(os.fsencode(path))
    validate_path(path)


class _Dir:
    """One directory of the walk: its files and subdirectories still to visit."""

    __slots__ = (
        "dir_position",
        "dirs",
        "file_position",
        "files",
        "identity",
        "os_prefix",
        "prefix",
        "trusted",
    )

    def __init__(
        self,
        prefix: str,
        os_prefix: str,
        listing: tuple[list[str], list[str]],
        identity: tuple[int, int],
        trusted: bool,
    ) -> None:
        self.prefix = prefix  # the entry path of the directory, with a final "/" ("" for the root)
        self.os_prefix = os_prefix  # the same on disk
        self.files, self.dirs = listing
        self.file_position = self.dir_position = 0
        self.identity = identity
        self.trusted = trusted  # every name below was checked valid so far


def odd_entry_error(entry: os.DirEntry[str]) -> LocalFileError:
    """The error of a directory entry that is neither a file nor a directory (a broken
    symbolic link, a socket, a device)."""
    if entry.is_symlink():
        return LocalFileError(
            f"{display(entry.path)} is a broken symbolic link "
            f"(it points to {display(os.readlink(entry.path))})"
        )
    return LocalFileError(f"{display(entry.path)} is not a regular file or a directory")


def list_directory(
    os_path: str, keep: Callable[[str], bool] | None = None
) -> tuple[list[str], list[str]]:
    """The sorted names of the files and of the subdirectories (with a final ``/``).

    A directory sorts as ``name/``: the paths of its files are ``name/...``.
    Merging the two lists in that order keeps the walk in the code point order
    of the full paths (S3's order).  With *keep*, only the files (and the entries that are
    neither file nor directory, errors) whose name it keeps are considered: the others
    are not even ``stat``-ed beyond what ``scandir`` tells.
    """
    files: list[str] = []
    dirs: list[str] = []
    try:
        with os.scandir(os_path) as iterator:
            for entry in iterator:
                try:
                    if entry.is_file():
                        if keep is None or keep(entry.name):
                            files.append(entry.name)
                    elif entry.is_dir():
                        dirs.append(entry.name + "/")
                    elif keep is None or keep(entry.name):
                        raise odd_entry_error(entry)
                except OSError as exc:
                    raise LocalFileError(
                        f"cannot access {display(entry.path)}: {exc.strerror}"
                    ) from None
    except OSError as exc:
        raise LocalFileError(f"cannot read directory {display(os_path)}: {exc.strerror}") from None
    files.sort()
    dirs.sort()
    return files, dirs


def directory_identity(os_path: str) -> tuple[int, int]:
    """``(device, inode)`` of the directory *os_path* (links followed): how a walk tells a
    symbolic link that leads back to one of its ancestors."""
    try:
        st = os.stat(os_path)
    except OSError as exc:
        raise LocalFileError(f"cannot access {display(os_path)}: {exc.strerror}") from None
    return st.st_dev, st.st_ino


def walk_runs(root: str | os.PathLike[str]) -> Iterator[Run]:
    """Check *root* at once, then return the walk as runs of files, in path order."""
    top = check_root(root)
    os_prefix = top if top.endswith(os.sep) else top + os.sep
    listing = list_directory(top)
    trusted = names_are_valid(listing, 0)
    return _runs(_Dir("", os_prefix, listing, directory_identity(top), trusted))


def _runs(root: _Dir) -> Iterator[Run]:
    stack = [root]
    ancestors = {root.identity: ""}
    while stack:
        frame = stack[-1]
        files, dirs = frame.files, frame.dirs
        start = frame.file_position
        if frame.dir_position < len(dirs):  # the files before the next directory
            end = bisect_left(files, dirs[frame.dir_position], start)
        else:
            end = len(files)
            if start == end:
                stack.pop()
                del ancestors[frame.identity]
                continue
        if end > start:
            frame.file_position = end
            names = files if end - start == len(files) else files[start:end]
            if not frame.trusted:
                for name in names:
                    validate(frame.prefix + name)
            yield frame.prefix, frame.os_prefix, names
            continue
        name = dirs[frame.dir_position][:-1]
        frame.dir_position += 1
        path = frame.prefix + name
        os_path = frame.os_prefix + name
        identity = directory_identity(os_path)
        if identity in ancestors:
            raise LocalFileError(
                f"symbolic link loop: {display(os_path)} leads back to its ancestor "
                f"{display(ancestors[identity] or '.')} (relative to the Zarr root)"
            )
        listing = list_directory(os_path)
        if not listing[0] and not listing[1]:
            continue
        prefix = path + "/"
        trusted = frame.trusted and names_are_valid(
            listing, len(prefix.encode("utf-8", "surrogateescape"))
        )
        ancestors[identity] = path
        stack.append(_Dir(prefix, os_path + os.sep, listing, identity, trusted))


def walk_local(root: str | os.PathLike[str]) -> Iterator[LocalFile]:
    """Every file below *root*, in sorted entry path order, following symbolic links.

    Raises :class:`LocalFileError` when *root* is missing or not a directory
    (at once), and while iterating when a directory cannot be read, a link is
    broken or loops back to an ancestor, or an entry is neither a file nor a
    directory; :class:`InvalidPath` for a path that is not a valid Zarr entry path.
    """
    return (
        LocalFile(prefix + name, os_prefix + name)
        for prefix, os_prefix, names in walk_runs(root)
        for name in names
    )


__all__ = [
    "LocalFile",
    "Run",
    "check_root",
    "directory_identity",
    "display",
    "list_directory",
    "names_are_valid",
    "odd_entry_error",
    "validate",
    "walk_local",
    "walk_runs",
]
