"""Deleting files and whole directories of a Zarr (``DELETE /api/zarr/{id}/files/``).

The request names *targets*: files, or directories (a path naming a directory of the
Zarr, with or without a trailing ``/``).  It checks them against the tree (the parents'
``.checksum`` nodes: a directory's node entry gives its file count without visiting it)
and records a ``delete`` batch whose rows are the targets, a directory written with a
trailing ``/`` (:func:`encode_targets`): the batch holds at most the request's paths,
never the expanded subtree.

The apply engine (:mod:`.apply`) then, holding the batch's claim:

1. **objects** (no lock): deletes the named files' keys and every current object under
   each named directory's prefix, as S3 lists it page by page (an applier that takes over
   after a crash deletes only what is left), in requests of :data:`DELETE_CHUNK` keys
   (delete markers on a versioned bucket: the versions a pinned state names stay readable,
   as for a file's deletion), renewing the claim between requests; then walks each
   subtree's ``.checksum`` nodes (:func:`iter_subtree`: breadth first,
   :data:`WALK_PARALLEL` nodes read at a time) for their directories.  Memory: one page of
   keys, the nodes being read, and the subtree's directory names (:class:`Expansion`),
   never every file.
2. **tree** (the Zarr's lock, one transaction): ``apply_changes`` removes the files and
   drops each directory from its parent's node (once, whatever the subtree's size), then
   the subtree's own nodes are deleted, deepest level first (:func:`delete_subtree_nodes`),
   before the commit.

Idempotent: a crash in step 1 leaves the tree untouched (the next applier lists and deletes
what is left); a crash in step 2 after ``apply_changes`` leaves the parent without the directory
and, since nodes go deepest level first, every remaining node of the subtree still reachable
from the directory's own node, which the next applier walks from (it does not need the
parent to name it).  The deleted paths, for the change records, are those step 1's walk of
the nodes found (:func:`expand`: spooled to a temporary file, read back in step 2), so the
nodes are read once, outside the lock.
"""

from __future__ import annotations

import tempfile
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import IO

from zarrchive.checksum import ChecksumNode, ZarrDigest
from zarrchive.errors import FilesNotFound, InvalidInput, StorageError, ZarrchiveError
from zarrchive.paths import split_path, validate_path
from zarrchive.services.zarr_engine.tree_updater import FileChange, read_nodes
from zarrchive.storage.keys import checksum_node_key, zarr_object_key
from zarrchive.storage.protocol import ObjectStoreProtocol

#: Keys per S3 DeleteObjects request (S3's maximum); the claim is renewed between requests.
DELETE_CHUNK = 1000
#: Delete requests sent at a time (SeaweedFS on 2 busy cores takes 1-2 s per 1000 keys, and
#: no less with more at once; S3 itself scales).
DELETE_PARALLEL = 2
#: Listings of a deleted directory's prefix before giving up (one suffices on S3).
LISTING_PASSES = 3
#: ``.checksum`` nodes read at a time while walking a subtree.
WALK_PARALLEL = 16
#: The claim is renewed at least this often while the subtree's nodes are walked.
RENEW_SECONDS = 4.0
#: A deletion of at most this many files is applied before the request answers (DANDI's
#: behaviour: 204, the files are gone); a larger one is applied by the background job
#: (202, the Zarr ``applying`` until it is done), when the archive has a job queue.
INLINE_DELETE_FILES = 1000


# -- the request: targets ----------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Target:
    """A path named for deletion; *directory*: written with a trailing ``/`` (only a
    directory will do)."""

    path: str
    directory: bool = False


def parse_targets(paths: Sequence[str]) -> list[Target]:
    """The paths of a deletion request, checked (every problem reported at once): valid
    entry paths, a trailing ``/`` asks for a directory, the root is refused, no path twice
    (``a`` and ``a/`` are the same path).  Pure."""
    targets: list[Target] = []
    seen: set[str] = set()
    errors: list[str] = []
    for raw in paths:
        if raw in ("", "/"):
            errors.append(
                "the root directory can't be deleted: name its top-level files and "
                "directories to empty the Zarr"
            )
            continue
        directory = isinstance(raw, str) and raw.endswith("/")
        try:
            path = validate_path(raw[:-1] if directory else raw)
        except ZarrchiveError as exc:
            errors.append(exc.message)
            continue
        if path in seen:
            errors.append(f"{path!r} appears more than once in the deletion")
            continue
        seen.add(path)
        targets.append(Target(path, directory))
    if errors:
        more = f" (and {len(errors) - 20} more)" if len(errors) > 20 else ""
        raise InvalidInput("; ".join(errors[:20]) + more + "; nothing was deleted")
    return targets


@dataclass(frozen=True)
class Resolved:
    """The targets as the tree has them: files, and directories with their file count."""

    files: list[str]
    #: directory -> files below it
    directories: dict[str, int]

    @property
    def file_count(self) -> int:
        """How many files the deletion removes (those inside a named directory once)."""
        return len(self.files) + sum(self.directories.values())


def resolve_targets(
    store: ObjectStoreProtocol, zarr_id: str, targets: Sequence[Target]
) -> Resolved:
    """Each target as a file or a directory of the tree, from its parent's node; else
    :class:`FilesNotFound` (404 ``missing``, nothing deleted).  A target inside a named
    directory must exist too, and is then covered by it."""
    parents = sorted({split_path(t.path)[0] for t in targets})
    nodes = read_nodes(store, zarr_id, parents)
    files: list[str] = []
    directories: dict[str, int] = {}
    missing: list[str] = []
    for target in targets:
        parent, name = split_path(target.path)
        node = nodes[parent]
        if node is not None and not target.directory and name in node.files:
            files.append(target.path)
        elif node is not None and name in node.directories:
            directories[target.path] = ZarrDigest.parse(node.directories[name].digest).count
        else:
            missing.append(target.path + ("/" if target.directory else ""))
    if missing:
        raise FilesNotFound(
            f"{len(missing)} of the paths are neither files nor directories of Zarr {zarr_id}"
            f": {', '.join(missing[:20])}; nothing was deleted",
            detail={
                "message": "files or directories not found; nothing was deleted",
                "missing": missing,
            },
        )
    return cover(files, directories)


def cover(files: Sequence[str], directories: dict[str, int]) -> Resolved:
    """Drop the files and directories that lie inside a named directory (and a file of a
    directory's name).  Pure."""
    named = set(directories)

    def inside(path: str) -> bool:
        parts = path.split("/")
        return any("/".join(parts[:i]) in named for i in range(1, len(parts)))

    return Resolved(
        [p for p in files if not inside(p) and p not in named],
        {d: n for d, n in directories.items() if not inside(d)},
    )


def encode_targets(resolved: Resolved) -> list[str]:
    """The rows of the ``delete`` batch: files as they are, directories with a ``/``."""
    return [*resolved.files, *(d + "/" for d in resolved.directories)]


@dataclass(frozen=True)
class Plan:
    """A ``delete`` batch as the apply reads it back."""

    files: list[str]
    directories: list[str]

    @classmethod
    def of_rows(cls, rows: Iterable[str]) -> Plan:
        """From the batch's rows (:func:`encode_targets`; older batches hold files only);
        what lies inside a directory of the batch is covered by it."""
        files: list[str] = []
        directories: list[str] = []
        for row in rows:
            if row.endswith("/"):
                directories.append(row[:-1])
            else:
                files.append(row)
        covered = cover(files, dict.fromkeys(directories, 0))
        return cls(sorted(covered.files), sorted(covered.directories))

    @property
    def file_changes(self) -> dict[str, FileChange]:
        return dict.fromkeys(self.files)


# -- the apply: walking and deleting ----------------------------------------------------------
def _join(directory: str, name: str) -> str:
    return f"{directory}/{name}" if directory else name


def iter_subtree(
    store: ObjectStoreProtocol, zarr_id: str, directory: str
) -> Iterator[tuple[str, int, ChecksumNode]]:
    """``(directory, depth below *directory*, node)`` of every directory of the subtree
    that has a node, breadth first, read :data:`WALK_PARALLEL` at a time (from the node of
    *directory* itself: its parent need not name it)."""
    frontier: deque[tuple[str, int]] = deque([(directory, 0)])
    while frontier:
        group = [frontier.popleft() for _ in range(min(WALK_PARALLEL, len(frontier)))]
        nodes = read_nodes(store, zarr_id, [d for d, _ in group])
        for path, depth in group:
            node = nodes[path]
            if node is None:
                continue
            yield path, depth, node
            frontier.extend((_join(path, name), depth + 1) for name in sorted(node.directories))


#: A spool of deleted paths stays in memory up to this size, then goes to a temporary file.
SPOOL_BYTES = 1 << 20


def _spool() -> IO[bytes]:
    """A new spool (closed by :meth:`Expansion.close`)."""
    return tempfile.SpooledTemporaryFile(max_size=SPOOL_BYTES)


@dataclass
class Expansion:
    """What step 1 did: the subtrees' directories by depth (their nodes are deleted after
    the tree update), the files below them (spooled: memory stays bounded however many;
    for the change records), and how many objects it deleted."""

    #: depth below the named directory -> directories (a subtree's own node at depth 0)
    levels: dict[int, list[str]] = field(default_factory=dict)
    files: int = 0
    #: the paths of the files below the named directories, each followed by a NUL byte
    below: IO[bytes] = field(default_factory=_spool)

    def add(self, directory: str, depth: int, names: Iterable[str] = ()) -> None:
        """A directory of a subtree, and the names of its files."""
        self.levels.setdefault(depth, []).append(directory)
        for name in names:
            self.below.write(_join(directory, name).encode("utf-8", "surrogateescape") + b"\0")

    @property
    def directories(self) -> int:
        return sum(len(level) for level in self.levels.values())

    def deleted_paths(self, plan: Plan) -> Iterator[str]:
        """Every path the deletion removes, streamed: the named files, then those found
        below the named directories by the walk (each once; read back from the spool)."""
        yield from plan.files
        self.below.seek(0)
        rest = b""
        while block := self.below.read(SPOOL_BYTES):
            *paths, rest = (rest + block).split(b"\0")
            for path in paths:
                yield path.decode("utf-8", "surrogateescape")

    def close(self) -> None:
        self.below.close()


def expand(
    store: ObjectStoreProtocol,
    zarr_id: str,
    plan: Plan,
    keep_claim: Callable[[], None] = lambda: None,
) -> Expansion:
    """Walk the named directories' subtrees by their nodes (calling *keep_claim* every
    :data:`RENEW_SECONDS`): their directories by depth and their files."""
    expansion = Expansion()
    renewed = time.monotonic()
    for directory in plan.directories:
        for path, depth, node in iter_subtree(store, zarr_id, directory):
            expansion.add(path, depth, node.files)
            if time.monotonic() - renewed > RENEW_SECONDS:
                keep_claim()
                renewed = time.monotonic()
    return expansion


def _object_chunks(store: ObjectStoreProtocol, zarr_id: str, plan: Plan) -> Iterator[list[str]]:
    """The keys to delete, in lists of at most :data:`DELETE_CHUNK`: the named files', then
    the current objects under each named directory as S3 lists them (page by page, so an
    applier that takes over deletes only what is left).  A directory is listed again until
    nothing is left under it (SeaweedFS's listing order is not byte order for every name)."""
    for start in range(0, len(plan.files), DELETE_CHUNK):
        yield [zarr_object_key(zarr_id, p) for p in plan.files[start : start + DELETE_CHUNK]]
    for directory in plan.directories:
        prefix = zarr_object_key(zarr_id, directory) + "/"
        for _pass in range(LISTING_PASSES):
            chunk: list[str] = []
            found = False
            for info in store.iter_objects(prefix):
                found = True
                chunk.append(info.key)
                if len(chunk) == DELETE_CHUNK:
                    yield chunk
                    chunk = []
            if chunk:
                yield chunk
            if not found:
                break
        else:
            raise StorageError(
                f"Zarr {zarr_id}: objects under {directory!r} are still listed after "
                f"{LISTING_PASSES} deletions; the deletion stays queued and is applied again"
            )


def delete_objects(
    store: ObjectStoreProtocol, zarr_id: str, plan: Plan, keep_claim: Callable[[], None]
) -> Expansion:
    """Step 1: delete the objects of every file of the deletion, :data:`DELETE_PARALLEL`
    requests of :data:`DELETE_CHUNK` keys at a time, calling *keep_claim* (which raises
    when the claim is lost) between them; then walk the subtrees' nodes (:func:`expand`):
    their directories for step 2, their files for the change records."""
    pending: list[list[str]] = []
    deleted = 0

    def flush() -> None:
        nonlocal deleted
        store.map(store.delete_many, pending)
        deleted += sum(len(c) for c in pending)
        pending.clear()
        keep_claim()

    for chunk in _object_chunks(store, zarr_id, plan):
        pending.append(chunk)
        if len(pending) == DELETE_PARALLEL:
            flush()
    if pending:
        flush()
    expansion = expand(store, zarr_id, plan, keep_claim)
    expansion.files = deleted
    return expansion


def delete_subtree_nodes(store: ObjectStoreProtocol, zarr_id: str, expansion: Expansion) -> None:
    """Step 2, after ``apply_changes`` dropped the directories: delete the subtrees'
    ``.checksum`` nodes, the deepest level first (a crash leaves every remaining node
    reachable from a named directory's node)."""
    for depth in sorted(expansion.levels, reverse=True):
        store.delete_many(checksum_node_key(zarr_id, d) for d in expansion.levels[depth])
