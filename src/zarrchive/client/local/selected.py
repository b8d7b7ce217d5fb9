"""Walk and hash only the selected files of a local Zarr (``upload --patch --include/--exclude``).

:func:`hash_selected` is :func:`zarrchive.client.local.hashing.hash_local` restricted to a
:class:`~zarrchive.client.selection.Selection`:

- a directory whose :attr:`~zarrchive.client.selection.DirectorySelection.prune` is true is
  never entered: not listed, not even ``stat``-ed (``--include 'arr/0/**'`` lists the root and
  ``arr``, then walks ``arr/0`` alone);
- in the directories it enters, the walk lists the names (one ``scandir``, which tells files
  from directories without a ``stat`` on the usual file systems) and opens, ``stat``-s or
  hashes only the selected files: ``--include '**/.zattrs'`` lists every directory and reads
  the ``.zattrs`` files alone.  An entry that is neither a file nor a directory (a broken
  link, a socket) is an error only if it is selected;
- the paths of selected files are validated as the full walk validates them, symbolic links
  are followed, and a link leading back to an ancestor is an error.

The selected files are hashed as the full walk hashes them
(:func:`zarrchive.client.local.hashing.hash_runs`: threads, the digest cache), and walked
with the full walk's checks (:mod:`zarrchive.client.local.walk`).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from zarrchive.checksum import ZarrEntry
from zarrchive.client.local.hashing import check_jobs, hash_runs
from zarrchive.client.local.walk import (
    Run,
    check_root,
    directory_identity,
    display,
    list_directory,
    names_are_valid,
    validate,
)
from zarrchive.client.selection import DirectorySelection, Selection
from zarrchive.errors import LocalFileError

if TYPE_CHECKING:
    from zarrchive.client.local.digest_cache import DigestCache


def _list_selected(os_path: str, node: DirectorySelection) -> tuple[list[str], list[str]]:
    """The selected files of the directory *os_path* and its subdirectories (``name/``),
    sorted (:func:`zarrchive.client.local.walk.list_directory`)."""
    return list_directory(os_path, None if node.everything else node.selects)


class _Frame:
    __slots__ = ("identity", "items", "node", "os_prefix", "position", "prefix", "trusted")

    def __init__(
        self,
        node: DirectorySelection,
        prefix: str,
        os_prefix: str,
        listing: tuple[list[str], list[str]],
        identity: tuple[int, int],
        trusted: bool,
    ) -> None:
        self.node = node
        self.prefix = prefix  # the entry path with a final "/" ("" for the root)
        self.os_prefix = os_prefix
        self.identity = identity
        files, dirs = listing
        # path order: a subdirectory sorts as "name/" among the files
        self.items = sorted([*files, *dirs])
        self.position = 0
        self.trusted = trusted


def walk_selected(root: str | os.PathLike[str], selection: Selection) -> Iterator[Run]:
    """The selected files below *root* as runs ``(prefix, os_prefix, names)``, in path order
    (see the module).  A missing *root* raises at once."""
    top = check_root(root)
    node = selection.root()
    if node.prune:
        return iter(())
    os_prefix = top if top.endswith(os.sep) else top + os.sep
    return _walk(
        _Frame(node, "", os_prefix, _list_selected(top, node), directory_identity(top), True)
    )


def _walk(root: _Frame) -> Iterator[Run]:
    stack = [root]
    ancestors = {root.identity: ""}
    while stack:
        frame = stack[-1]
        items = frame.items
        start = frame.position
        end = start
        while end < len(items) and not items[end].endswith("/"):
            end += 1
        if end > start:
            frame.position = end
            names = items[start:end]
            prefix = frame.prefix
            if not (
                frame.trusted
                and names_are_valid((names, []), len(prefix.encode("utf-8", "surrogateescape")))
            ):
                for name in names:
                    validate(prefix + name)
            yield prefix, frame.os_prefix, names
            continue
        if end == len(items):
            stack.pop()
            del ancestors[frame.identity]
            continue
        frame.position = end + 1
        name = items[end][:-1]
        child = frame.node.child(name)
        if child.prune:
            continue
        path = frame.prefix + name
        os_path = frame.os_prefix + name
        identity = directory_identity(os_path)
        if identity in ancestors:
            raise LocalFileError(
                f"symbolic link loop: {display(os_path)} leads back to its ancestor "
                f"{display(ancestors[identity] or '.')} (relative to the Zarr root)"
            )
        listing = _list_selected(os_path, child)
        if not listing[0] and not listing[1]:
            continue
        trusted = frame.trusted and names_are_valid(
            ([], [name + "/"]), len(frame.prefix.encode("utf-8", "surrogateescape"))
        )
        ancestors[identity] = path
        stack.append(_Frame(child, path + "/", os_path + os.sep, listing, identity, trusted))


def hash_selected(
    root: str | os.PathLike[str],
    selection: Selection,
    *,
    jobs: int | None = None,
    progress: Callable[[int, int], None] | None = None,
    cache: DigestCache | None = None,
) -> list[ZarrEntry]:
    """``ZarrEntry(path, size, md5)`` of every selected file below *root*, in path order;
    *progress* gets the increments of files and bytes hashed; *cache*: the digest cache
    (md5s of unchanged files taken from it, new ones saved)."""
    done = [0, 0]

    def report(files: int, nbytes: int) -> None:
        if progress is not None:
            progress(files - done[0], nbytes - done[1])
        done[0], done[1] = files, nbytes

    hashed = hash_runs(walk_selected(root, selection), check_jobs(jobs), report, cache)
    return [
        ZarrEntry(prefix + name, size, md5) for prefix, rows in hashed for name, md5, size in rows
    ]


__all__ = ["hash_selected", "walk_selected"]
