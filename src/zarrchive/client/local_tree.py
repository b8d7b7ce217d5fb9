"""Every directory's Dandi Zarr checksum below a local directory, from the digest cache.

:func:`scan_tree` walks a local Zarr like :mod:`zarrchive.client.local` (same order of
errors, links followed, empty directories ignored, paths validated) and returns a
:class:`LocalTree`: the checksum of every directory that has files below it.  With a
:class:`~zarrchive.client.digest_cache.DigestCache`, a directory whose content is known
costs one ``scandir`` and one ``stat`` per entry: no file is read, no md5 looked up one
by one, no listing built or hashed.

When a directory's cached digest is used (:func:`_unchanged`), never stale:

- its cached row lists exactly the files and subdirectories that ``scandir`` lists now
  (names and kinds: a file added, removed, renamed, or a file replaced by a directory,
  changes them);
- every file's stat record ``(dev, ino, size, mtime_ns, ctime_ns)`` now is byte for byte
  the cached one, and every one of those was *settled* when hashed (a row keeps only
  settled files, and has a digest only if it kept them all; see
  :func:`~zarrchive.client.digest_cache.may_store`): a rewrite, even of the same size in
  the same timestamp tick or with its mtime restored, a replacement by rename and a hard
  link made or removed all change a record;
- every subdirectory's stat record is the cached one, *and* every subdirectory's own
  digest was taken from the cache by the same rule, recursively.  A directory's mtime
  changes when an entry is added, removed or renamed in it, but not when a file in it is
  rewritten in place, nor when anything changes deeper down: it is never trusted alone;
  the recursion is what covers a change anywhere below;
- the row was stored before the clock's "now" (a clock set back since is not trusted).

The digest of a directory is a function of the names, md5s and sizes of the files below
it, so under those conditions it is the cached one.  A copied tree has other paths (and
inodes): nothing of it is in the cache.

A directory that is not unchanged is hashed: its files whose record is the cached one
give their cached md5, the others are read (by a thread pool, in chunks of
:data:`~zarrchive.client.local.CHUNK_FILES` files, as in :mod:`zarrchive.client.local`),
its listing is built from its files and its subdirectories' digests, and its row is
written (all rows of a chunk in one transaction, by a
:class:`~zarrchive.client.digest_cache.RowWriter` on its own thread: SQLite's work overlaps
the hashing).  Which directories have a row is read once, by one range query
(:meth:`~zarrchive.client.digest_cache.DigestCache.keys_below`): a directory without one is
neither looked up nor ``stat``-ed file by file (its files are ``fstat``-ed as they are
read), so a first run costs what a run without the cache costs, plus packing the rows.
"""

from __future__ import annotations

import hashlib
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from itertools import chain
from operator import attrgetter, itemgetter
from stat import S_ISDIR, S_ISREG
from typing import TYPE_CHECKING, TypeAlias

from zarrchive.checksum import DirectoryDigest
from zarrchive.checksum.digest import EMPTY_CHECKSUM
from zarrchive.checksum.node import ChildRow, directory_digest
from zarrchive.client import local as _local
from zarrchive.client.digest_cache import (
    SETTLE_NS,
    DirectoryRow,
    pack_md5s,
    pack_records,
    unpack_records,
)
from zarrchive.client.local import (
    _OPEN_FLAGS,
    BLOCK_SIZE,
    CHUNK_FILES,
    ProgressCallback,
    _batches,
    _check_jobs,
    _check_root,
    _display,
    _list_directory,
    _names_are_valid,
    _Run,
    _validate,
)
from zarrchive.errors import LocalFileError

if TYPE_CHECKING:
    from zarrchive.client.digest_cache import DigestCache, RowWriter

#: Below this many files to read, they are read on the walk's thread (no thread pool).
FEW_FILES = 64
#: At most this many directories wait for their files to be read (bounds memory when
#: many directories change without files to read).
MAX_PENDING_DIRECTORIES = 4096

_mode_of = attrgetter("st_mode")
_md5_of = itemgetter(1)
_MAX_INT = (1 << 63) - 1
_record = attrgetter(*("st_dev", "st_ino", "st_size", "st_mtime_ns", "st_ctime_ns"))
_size_of = itemgetter(2)
_by_name = itemgetter(0)


@dataclass
class LocalTree:
    """What :func:`scan_tree` found: every non-empty directory's checksum."""

    #: ``directory path -> Dandi Zarr checksum`` (``""``: the root), deepest first as
    #: completed, the root last; a directory with no file below it is not listed.
    digests: dict[str, str]

    @property
    def checksum(self) -> str:
        """The root's checksum (the empty Zarr's for a directory without files)."""
        return self.digests.get("", EMPTY_CHECKSUM)

    @property
    def files(self) -> int:
        return _totals(self.checksum)[0]

    @property
    def size(self) -> int:
        return _totals(self.checksum)[1]

    def directory_digests(self) -> list[DirectoryDigest]:
        """The digests as :class:`DirectoryDigest` (without nodes), in the same order."""
        return [
            DirectoryDigest(path, digest, *_totals(digest)) for path, digest in self.digests.items()
        ]


def _totals(digest: str) -> tuple[int, int]:
    """``(count, size)`` of a checksum ``{md5}-{count}--{size}``."""
    head, _, size = digest.partition("--")
    return int(head.rpartition("-")[2]), int(size)


class _Pending:
    """A directory to hash: its known files, those to read, its subdirectories."""

    __slots__ = (
        "children",
        "digest",
        "dir_records",
        "dirs",
        "key",
        "known",
        "os_prefix",
        "path",
        "records",
        "storable",
        "to_read",
    )

    def __init__(self) -> None:
        self.path = ""
        self.key = b""
        self.os_prefix = ""
        #: ``(name, md5, size)`` of the files whose record is the cached one.
        self.known: list[ChildRow] = []
        #: Their records, by name, for the row to write.
        self.records: dict[str, tuple[int, ...]] = {}
        #: Names of the files to read.
        self.to_read: list[str] = []
        #: ``(name, digest or pending subdirectory)``; a digest of ``""`` is an empty subtree.
        self.children: list[tuple[str, _Child]] = []
        self.dirs: list[str] = []
        self.dir_records: bytes | None = None
        #: False once something below cannot be cached: the row gets no digest.
        self.storable = True
        self.digest: str | None = None


_Child: TypeAlias = str | _Pending


class _Frame:
    """A directory of the walk, entered and not yet finished."""

    __slots__ = (
        "children",
        "dir_stats",
        "dirs",
        "file_stats",
        "files",
        "identities",
        "identity",
        "key",
        "os_prefix",
        "path",
        "position",
        "row",
        "trusted",
        "unchanged",
    )

    def __init__(self) -> None:
        self.path = ""
        self.os_prefix = ""
        self.files: list[str] = []
        self.dirs: list[str] = []
        self.identities: list[tuple[int, int]] = []
        self.identity = (0, 0)
        self.key = b""
        self.dir_stats: list[os.stat_result] = []
        #: The files' stats, if taken by the listing (when the directory has a row).
        self.file_stats: list[os.stat_result] | None = None
        self.position = 0
        self.row: DirectoryRow | None = None
        self.trusted = True
        #: Still possibly unchanged: the row matches so far and so does every subdirectory.
        self.unchanged = False
        self.children: list[tuple[str, _Child]] = []


class _Scan:
    def __init__(
        self, cache: DigestCache, jobs: int, progress: ProgressCallback | None, now_ns: int
    ) -> None:
        self.cache = cache
        self.jobs = jobs
        self.progress = progress
        self.now_ns = now_ns
        self.digests: dict[str, str] = {}
        self.pending: list[_Pending] = []
        self.pending_files = 0
        self.done_files = 0
        self.done_bytes = 0
        self.executor: ThreadPoolExecutor | None = None
        self.last_report = 0.0
        self.root_key = b""
        #: The keys of the cache's rows below the root (only those are looked up).
        self.known_keys: set[bytes] = set()
        #: Writes the rows on its own thread (made by the first :meth:`flush` with rows).
        self.writer: RowWriter | None = None

    # -- the walk ---------------------------------------------------------------------------
    def enter(self, path: str, os_path: str, identity: tuple[int, int], trusted: bool) -> _Frame:
        frame = _Frame()
        frame.path = path
        frame.os_prefix = os_prefix = os_path if os_path.endswith(os.sep) else os_path + os.sep
        frame.identity = identity
        frame.key = key = self.root_key + os.fsencode(os.sep + path) if path else self.root_key
        row = frame.row = self.cache.row(key, self.now_ns) if key in self.known_keys else None
        listing = None
        if row is not None and row.digest is not None:
            # Worth a stat of every entry: they decide whether the row is still true.
            listing = self._stat_listing(frame, os_path)
        if listing is None:
            listing = _list_directory(os_path)
            frame.files = listing[0]
            frame.dirs = sorted(name[:-1] for name in listing[1])
            frame.dir_stats = self._stat_all(os_prefix, frame.dirs)
        files, dirs = frame.files, frame.dirs
        prefix = path + "/" if path else ""
        frame.trusted = trusted and _names_are_valid(
            listing, len(prefix.encode("utf-8", "surrogateescape"))
        )
        if not frame.trusted:
            for name in files:
                _validate(prefix + name)
        frame.identities = [(st.st_dev, st.st_ino) for st in frame.dir_stats]
        frame.unchanged = (
            row is not None
            and row.digest is not None
            and frame.file_stats is not None
            and row.names == "\0".join(files)
            and row.dirs == "\0".join(dirs)
            and list(map(_record, frame.file_stats)) == unpack_records(row.stats)
            and list(map(_record, frame.dir_stats)) == unpack_records(row.dir_stats)
        )
        return frame

    @staticmethod
    def _stat_listing(frame: _Frame, os_path: str) -> tuple[list[str], list[str]] | None:
        """List *os_path* and stat every entry (following links); ``None`` if anything is
        amiss (a broken link, an entry that is neither a file nor a directory, a race), for
        :func:`_list_directory` to explain or redo."""
        os_prefix = frame.os_prefix
        try:
            names = os.listdir(os_path)
            names.sort()
            stats = list(map(os.stat, [os_prefix + name for name in names]))
        except OSError:
            return None
        modes = list(map(_mode_of, stats))
        if all(map(S_ISREG, modes)):
            frame.files, frame.file_stats = names, stats
            return names, []
        files: list[str] = []
        file_stats: list[os.stat_result] = []
        dirs: list[str] = []
        dir_stats: list[os.stat_result] = []
        for name, st, mode in zip(names, stats, modes, strict=True):
            if S_ISREG(mode):
                files.append(name)
                file_stats.append(st)
            elif S_ISDIR(mode):
                dirs.append(name)
                dir_stats.append(st)
            else:
                return None
        frame.files, frame.file_stats, frame.dirs, frame.dir_stats = (
            files,
            file_stats,
            dirs,
            dir_stats,
        )
        return files, [name + "/" for name in dirs]

    @staticmethod
    def _stat_all(os_prefix: str, names: list[str]) -> list[os.stat_result]:
        stat = os.stat
        try:
            return [stat(os_prefix + name) for name in names]
        except OSError:
            for name in names:  # which one, for the message
                try:
                    stat(os_prefix + name)
                except OSError as exc:
                    raise LocalFileError(
                        f"cannot access {_display(os_prefix + name)}: {exc.strerror}"
                    ) from None
            raise

    def finish(self, frame: _Frame, parent: _Frame | None) -> None:
        """Done with *frame*'s subdirectories: its digest from the cache, or to compute."""
        row = frame.row
        if frame.unchanged and row is not None and row.digest is not None:
            digest = row.digest
            if digest:
                self.digests[frame.path] = digest
                if self.progress is not None:
                    count, size = _totals(digest)
                    for _, child in frame.children:
                        if isinstance(child, str) and child:
                            sub_count, sub_size = _totals(child)
                            count -= sub_count
                            size -= sub_size
                    self._advance(count, size)
            if parent is not None:
                parent.children.append((frame.path.rpartition("/")[2], digest))
            return
        if parent is not None:
            parent.unchanged = False
        pending = _Pending()
        pending.path = frame.path
        pending.key = frame.key
        pending.os_prefix = frame.os_prefix
        pending.children = frame.children
        pending.dirs = frame.dirs
        pending.dir_records = _pack_stats(frame.dir_stats)
        if row is not None and row.names and frame.files:
            file_stats = frame.file_stats
            if file_stats is None:
                file_stats = self._stat_all(frame.os_prefix, frame.files)
            self._sort_known(frame, row, file_stats, pending)
        else:
            pending.to_read = frame.files
        self.pending.append(pending)
        self.pending_files += len(pending.to_read)
        if parent is not None:
            parent.children.append((frame.path.rpartition("/")[2], pending))
        if self.pending_files >= CHUNK_FILES or len(self.pending) >= MAX_PENDING_DIRECTORIES:
            self.flush()

    @staticmethod
    def _sort_known(
        frame: _Frame, row: DirectoryRow, stats: list[os.stat_result], pending: _Pending
    ) -> None:
        """Split *frame*'s files into those whose record is the cached one and the others."""
        from zarrchive.client.digest_cache import _unpack

        try:
            known = _unpack(row.names, row.stats, row.md5s)
        except (ValueError, TypeError):
            pending.to_read = frame.files
            return
        positions, cached, md5s = known
        records = pending.records
        append, read = pending.known.append, pending.to_read.append
        for name, st in zip(frame.files, stats, strict=True):
            i = positions.get(name)
            if i is not None:
                record = _record(st)
                if tuple(cached[5 * i : 5 * i + 5]) == record:
                    append((name, md5s[i], st.st_size))
                    records[name] = record
                    continue
            read(name)

    # -- hashing and the rows -----------------------------------------------------------------
    def flush(self) -> None:
        """Read the pending directories' files, compute their digests, write their rows."""
        pending, self.pending = self.pending, []
        self.pending_files = 0
        if not pending:
            return
        started = _local._time_ns()  # before any file of the chunk is opened
        runs: list[_Run] = [(p.path, p.os_prefix, p.to_read) for p in pending if p.to_read]
        read = dict(self._read(runs, started - SETTLE_NS))
        rows: list[tuple[bytes, DirectoryRow]] = []
        for item in pending:
            files = item.known
            fresh = read.get(item.path)
            records: list[tuple[int, ...] | None]
            if fresh is None:
                records = [item.records[name] for name, _, _ in files]
            else:
                fresh_files, fresh_records = fresh
                if files:
                    known_records = item.records
                    merged = sorted(
                        [
                            *((row, known_records[row[0]]) for row in files),
                            *zip(fresh_files, fresh_records, strict=True),
                        ],
                        key=_name_of_pair,
                    )
                    files = [row for row, _ in merged]
                    records = [record for _, record in merged]
                else:
                    files, records = fresh_files, fresh_records
            directories: list[ChildRow] = []
            own_size = sum(map(_size_of, files))
            count, size = len(files), own_size
            storable = item.storable and item.dir_records is not None
            for name, child in item.children:
                if isinstance(child, str):
                    digest = child
                else:
                    assert child.digest is not None
                    digest = child.digest
                    storable = storable and child.storable
                if digest:
                    sub_count, sub_size = _totals(digest)
                    directories.append((name, digest, sub_size))
                    count += sub_count
                    size += sub_size
            directories.sort(key=_by_name)
            if count:
                digest = directory_digest(directories, files, count, size)[1]
                self.digests[item.path] = digest
            else:
                digest = ""
            item.digest = digest
            self._advance(len(files), own_size)
            # The row: the files with a settled record, and the digest if they all are.
            if None in records:
                storable = False
                kept = [(row, r) for row, r in zip(files, records, strict=True) if r is not None]
                files = [row for row, _ in kept]
                records = [r for _, r in kept]
            packed = pack_records(chain.from_iterable(records))  # type: ignore[arg-type]
            item.storable = storable and packed is not None
            if packed is None or item.dir_records is None:
                continue
            row = DirectoryRow(
                "\0".join(map(_by_name, files)),
                packed,
                pack_md5s(map(_md5_of, files)),
                "\0".join(item.dirs),
                item.dir_records,
                digest if item.storable else None,
                started,
            )
            rows.append((item.key, row))
        if rows:
            if self.writer is None:
                self.writer = self.cache.writer()
            self.writer.submit(rows)

    def _read(
        self, runs: list[_Run], settled_ns: int
    ) -> list[tuple[str, tuple[list[ChildRow], list[tuple[int, ...] | None]]]]:
        """Read and md5 the files of *runs*, on the thread pool unless they are few."""
        count = sum(len(names) for _, _, names in runs)
        if count == 0:
            return []
        if count < FEW_FILES or self.jobs == 1:
            return _read_batch(runs, settled_ns)
        if self.executor is None:
            self.executor = ThreadPoolExecutor(self.jobs, thread_name_prefix="zarrchive-md5")
        size = max(1, min(64, -(-count // (4 * self.jobs))))
        futures = [
            self.executor.submit(_read_batch, batch, settled_ns) for batch in _batches(runs, size)
        ]
        merged: dict[str, tuple[list[ChildRow], list[tuple[int, ...] | None]]] = {}
        for future in futures:
            for prefix, (rows, records) in future.result():
                found = merged.get(prefix)
                if found is None:
                    merged[prefix] = (rows, records)
                else:
                    found[0].extend(rows)
                    found[1].extend(records)
        return list(merged.items())

    def _advance(self, files: int, nbytes: int) -> None:
        self.done_files += files
        self.done_bytes += nbytes
        if self.progress is not None:
            now = time.monotonic()
            if now - self.last_report >= 0.1:
                self.last_report = now
                self.progress(self.done_files, self.done_bytes)

    def close(self) -> None:
        if self.executor is not None:
            self.executor.shutdown(wait=True, cancel_futures=True)
            self.executor = None
        if self.writer is not None:
            self.writer.close()
            self.writer = None
        self.cache.flush()


_buffers = threading.local()


def _read_batch(
    batch: list[_Run], settled_ns: int
) -> list[tuple[str, tuple[list[ChildRow], list[tuple[int, ...] | None]]]]:
    """md5 every file of *batch* (the hot loop of a first run, as
    :func:`zarrchive.client.local._hash_batch`), with each file's stat record (``fstat``
    on the open file) if it may be cached: its mtime and ctime before *settled_ns*, and as
    many bytes read as it had (see :func:`~zarrchive.client.digest_cache.may_store`)."""
    try:
        buffers: list[memoryview] = _buffers.buffers
    except AttributeError:
        buffers = _buffers.buffers = [memoryview(bytearray(BLOCK_SIZE))]
    view = buffers[0]
    open_, readv, close, fstat, md5 = os.open, os.readv, os.close, os.fstat, hashlib.md5
    flags, block = _OPEN_FLAGS, len(view)
    result: list[tuple[str, tuple[list[ChildRow], list[tuple[int, ...] | None]]]] = []
    for prefix, os_prefix, names in batch:
        rows: list[ChildRow] = []
        records: list[tuple[int, ...] | None] = []
        append, keep = rows.append, records.append
        for name in names:
            path = os_prefix + name
            try:
                fd = open_(path, flags)
                try:
                    st = fstat(fd)
                    size = n = readv(fd, buffers)
                    digest = md5(view[:n], usedforsecurity=False)
                    # A small file whose size the fstat just gave, read whole in one call:
                    # no second call to find its end (the first one's shortness says it).
                    # Grown since the fstat, it is read on and its record not kept.
                    if n == st.st_size and n < block:
                        n = 0
                    while n:
                        n = readv(fd, buffers)
                        if n:
                            digest.update(view[:n])
                            size += n
                finally:
                    close(fd)
            except OSError as exc:
                raise LocalFileError(f"cannot read {_display(path)}: {exc.strerror}") from None
            append((name, digest.hexdigest(), size))
            if (
                st.st_mtime_ns < settled_ns
                and st.st_ctime_ns < settled_ns
                and size == st.st_size
                and 0 <= st.st_dev <= _MAX_INT
                and 0 <= st.st_ino <= _MAX_INT
            ):
                keep((st.st_dev, st.st_ino, size, st.st_mtime_ns, st.st_ctime_ns))
            else:
                keep(None)
        result.append((prefix, (rows, records)))
    return result


def _name_of_pair(pair: tuple[ChildRow, object]) -> str:
    return pair[0][0]


def _pack_stats(stats: list[os.stat_result]) -> bytes | None:
    return pack_records(chain.from_iterable(map(_record, stats)))


def scan_tree(
    root: str | os.PathLike[str],
    *,
    cache: DigestCache | None,
    jobs: int | None = None,
    progress: ProgressCallback | None = None,
) -> LocalTree:
    """Every non-empty directory's checksum below *root* (see :class:`LocalTree`).

    Without a usable *cache*, the same as :func:`zarrchive.client.local.local_directory_digests`
    (every file read).  Errors: those of :func:`zarrchive.client.local.walk_local`, and
    :class:`LocalFileError` for a file that cannot be read.
    """
    jobs = _check_jobs(jobs)
    if cache is None or not cache.usable:
        from zarrchive.client.local import local_directory_digests

        completed = local_directory_digests(root, jobs=jobs, progress=progress)
        return LocalTree({d.path: d.digest for d in completed if d.count or not d.path})
    top = _check_root(root)
    scan = _Scan(cache, jobs, progress, _local._time_ns())
    from zarrchive.client.digest_cache import directory_key

    scan.root_key = directory_key(top)
    scan.known_keys = cache.keys_below(scan.root_key)
    try:
        identity = os.stat(top)
        stack = [scan.enter("", top, (identity.st_dev, identity.st_ino), True)]
        ancestors = {stack[0].identity: ""}
        while stack:
            frame = stack[-1]
            if frame.position < len(frame.dirs):
                i = frame.position
                frame.position += 1
                name = frame.dirs[i]
                path = f"{frame.path}/{name}" if frame.path else name
                os_path = frame.os_prefix + name
                child_identity = frame.identities[i]
                if child_identity in ancestors:
                    raise LocalFileError(
                        f"symbolic link loop: {_display(os_path)} leads back to its ancestor "
                        f"{_display(ancestors[child_identity] or '.')} (relative to the Zarr root)"
                    )
                ancestors[child_identity] = path
                stack.append(scan.enter(path, os_path, child_identity, frame.trusted))
                continue
            stack.pop()
            del ancestors[frame.identity]
            scan.finish(frame, stack[-1] if stack else None)
        scan.flush()
    finally:
        scan.close()
    if scan.progress is not None:
        scan.progress(scan.done_files, scan.done_bytes)
    digests = scan.digests
    if "" not in digests:
        digests[""] = EMPTY_CHECKSUM
    return LocalTree(digests)


__all__ = ["LocalTree", "scan_tree"]
