"""Every directory's Dandi Zarr checksum below a local directory, from the digest cache.

:func:`local_checksum` and :func:`local_directory_digests` are the checksums of a local Zarr:
with a usable digest cache, from :func:`scan_tree`; without, every file hashed
(:func:`~zarrchive.client.local.hashing.hash_tree`).

:func:`scan_tree` walks a local Zarr like :mod:`zarrchive.client.local.walk` (same order of
errors, links followed, empty directories ignored, paths validated) and returns a
:class:`LocalTree`: the checksum of every directory that has files below it.  With a
:class:`~zarrchive.client.local.digest_cache.DigestCache`, a directory whose content is known
costs one ``scandir`` and one ``stat`` per entry: no file is read, no md5 looked up one
by one, no listing built or hashed.

When a directory's cached digest is used (:func:`_unchanged`), never stale:

- its cached row lists exactly the files and subdirectories that ``scandir`` lists now
  (names and kinds: a file added, removed, renamed, or a file replaced by a directory,
  changes them);
- every file's stat record ``(dev, ino, size, mtime_ns, ctime_ns)`` now is byte for byte
  the cached one, and every one of those was *settled* when hashed (a row keeps only
  settled files, and has a digest only if it kept them all; see
  :func:`~zarrchive.client.local.digest_cache.may_store`): a rewrite, even of the same size in
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
:data:`~zarrchive.client.local.hashing.CHUNK_FILES` files, as in
:mod:`zarrchive.client.local.hashing`), with its md5 read loop and buffers),
its listing is built from its files and its subdirectories' digests, and its row is
written (all rows of a chunk in one transaction, by a
:class:`~zarrchive.client.local.digest_cache.RowWriter` on its own thread: SQLite's work overlaps
the hashing).  Which directories have a row is read once, by one range query
(:meth:`~zarrchive.client.local.digest_cache.DigestCache.keys_below`): a directory without one is
not looked up.  The walk ``stat``-s every file once (:func:`survey_tree` stops there, before
any file is read); the record it took is the one kept (no ``fstat`` as the file is read,
see :func:`_read_surveyed_batch`), so a first run costs what a run without the cache costs,
plus those stats and packing the rows.  A directory whose records don't fit 64-bit integers
(a device or inode number beyond them) is read the same way and gets no row.
"""

from __future__ import annotations

import os
import sys
import time
from array import array
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from itertools import chain
from operator import attrgetter, itemgetter
from stat import S_ISDIR, S_ISREG
from typing import TYPE_CHECKING, TypeAlias

from zarrchive.checksum import DirectoryDigest
from zarrchive.checksum.digest import EMPTY_CHECKSUM
from zarrchive.checksum.node import ChildRow, directory_digest
from zarrchive.checksum.tree import TreeHasher
from zarrchive.client.local import hashing
from zarrchive.client.local.digest_cache import (
    SETTLE_NS,
    DirectoryRow,
    directory_key,
    pack_md5s,
    pack_records,
    unpack_row,
)
from zarrchive.client.local.hashing import (
    CHUNK_FILES,
    OPEN_FLAGS,
    ProgressCallback,
    check_jobs,
    hash_tree,
    md5_rest,
    thread_buffers,
)
from zarrchive.client.local.walk import (
    check_root,
    display,
    list_directory,
    names_are_valid,
    validate,
)
from zarrchive.errors import LocalFileError

if TYPE_CHECKING:
    from zarrchive.client.local.digest_cache import DigestCache, RowWriter

#: Below this many files to read, they are read on the walk's thread (no thread pool).
FEW_FILES = 64
#: At most this many directories wait for their files to be read (bounds memory when
#: many directories change without files to read).
MAX_PENDING_DIRECTORIES = 4096
#: Chunks of files being read while the walk goes on (see :meth:`_Scan.flush`).
READS_IN_FLIGHT = 1

_mode_of = attrgetter("st_mode")
_md5_of = itemgetter(1)
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
        "read_records",
        "records",
        "storable",
        "to_read",
    )

    def __init__(self) -> None:
        self.path = ""
        self.key = b""
        self.os_prefix = ""
        #: The stat records the walk took of :attr:`to_read` (5 integers a file, in
        #: :class:`~zarrchive.client.local.digest_cache.StatKey` order): they are kept, not an
        #: ``fstat`` of each file as it is read.
        self.read_records: array[int] | None = None
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
        "records",
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
        #: Their records (5 integers a file, native order), if taken.
        self.records: array[int] | None = None
        self.position = 0
        self.row: DirectoryRow | None = None
        self.trusted = True
        #: Still possibly unchanged: the row matches so far and so does every subdirectory.
        self.unchanged = False
        self.children: list[tuple[str, _Child]] = []


class _Scan:
    """One walk.  Every file is ``stat``-ed by the walk: its count, size and the files over
    *limit* are known before any is read, and its record is the one kept (no ``fstat`` as
    it is read).  *defer* (a survey, :func:`survey_tree`): no file is read during the walk,
    :meth:`flush_all` reads them after it."""

    def __init__(
        self,
        cache: DigestCache,
        jobs: int,
        progress: ProgressCallback | None,
        now_ns: int,
        *,
        defer: bool = False,
        limit: int | None = None,
    ) -> None:
        self.cache = cache
        self.jobs = jobs
        self.progress = progress
        self.now_ns = now_ns
        self.defer = defer
        self.limit = limit
        self.digests: dict[str, str] = {}
        self.pending: list[_Pending] = []
        self.pending_files = 0
        self.done_files = 0
        self.done_bytes = 0
        #: The files found and their bytes, and those over *limit*.
        self.files = 0
        self.size = 0
        self.too_big: list[tuple[str, int]] = []
        self.executor: ThreadPoolExecutor | None = None
        self.last_report = 0.0
        self.root_key = b""
        #: The keys of the cache's rows below the root (only those are looked up).
        self.known_keys: set[bytes] = set()
        #: Writes the rows on its own thread (made by the first :meth:`flush` with rows).
        self.writer: RowWriter | None = None
        #: The chunks being read: ``(pending, started, what waits for the reads)``, oldest
        #: first.
        self.reading: deque[tuple[list[_Pending], int, Callable[[], list[_Read]]]] = deque()

    # -- the walk ---------------------------------------------------------------------------
    def walk(self, root: str | os.PathLike[str]) -> None:
        """Walk the tree below *root* (files are read as it goes unless *defer*)."""
        top = check_root(root)
        self.root_key = directory_key(top)
        self.known_keys = self.cache.keys_below(self.root_key)
        identity = os.stat(top)
        stack = [self.enter("", top, (identity.st_dev, identity.st_ino), True)]
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
                        f"symbolic link loop: {display(os_path)} leads back to its ancestor "
                        f"{display(ancestors[child_identity] or '.')} (relative to the Zarr root)"
                    )
                ancestors[child_identity] = path
                stack.append(self.enter(path, os_path, child_identity, frame.trusted))
                continue
            stack.pop()
            del ancestors[frame.identity]
            self.finish(frame, stack[-1] if stack else None)

    def enter(self, path: str, os_path: str, identity: tuple[int, int], trusted: bool) -> _Frame:
        frame = _Frame()
        frame.path = path
        frame.os_prefix = os_prefix = os_path if os_path.endswith(os.sep) else os_path + os.sep
        frame.identity = identity
        frame.key = key = self.root_key + os.fsencode(os.sep + path) if path else self.root_key
        row = frame.row = self.cache.row(key, self.now_ns) if key in self.known_keys else None
        listing = self._stat_listing(frame, os_path)
        if listing is None:
            listing = list_directory(os_path)
            frame.files = listing[0]
            frame.dirs = sorted(name[:-1] for name in listing[1])
            frame.dir_stats = self._stat_all(os_prefix, frame.dirs)
            frame.file_stats = self._stat_all(os_prefix, frame.files)
        files, dirs = frame.files, frame.dirs
        prefix = path + "/" if path else ""
        frame.trusted = trusted and names_are_valid(
            listing, len(prefix.encode("utf-8", "surrogateescape"))
        )
        if not frame.trusted:
            for name in files:
                validate(prefix + name)
        frame.identities = [(st.st_dev, st.st_ino) for st in frame.dir_stats]
        file_stats = frame.file_stats
        packed = None
        if file_stats is not None:
            frame.records = records = _records(file_stats)
            if records is not None and row is not None and row.digest is not None:
                packed = _stored(records)
            if file_stats:
                sizes = list(map(_st_size, file_stats))
                self.files += len(sizes)
                self.size += sum(sizes)
                limit = self.limit
                if limit is not None and max(sizes) > limit:
                    self.too_big.extend(
                        (prefix + name, size)
                        for name, size in zip(files, sizes, strict=True)
                        if size > limit
                    )
        frame.unchanged = (
            row is not None
            and row.digest is not None
            and packed is not None
            and row.names == "\0".join(files)
            and row.dirs == "\0".join(dirs)
            and packed == row.stats
            and _pack_stats(frame.dir_stats) == row.dir_stats
        )
        return frame

    @staticmethod
    def _stat_listing(frame: _Frame, os_path: str) -> tuple[list[str], list[str]] | None:
        """List *os_path* and stat every entry (following links); ``None`` if anything is
        amiss (a broken link, an entry that is neither a file nor a directory, a race), for
        :func:`list_directory` to explain or redo."""
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
                        f"cannot access {display(os_prefix + name)}: {exc.strerror}"
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
        file_stats = frame.file_stats
        assert file_stats is not None  # (the walk stats every file)
        records = frame.records
        if records is None:
            # a device or inode number beyond 64 bits: the directory gets no row, its files
            # are read with records that are never kept
            records = _unkept_records(file_stats)
            pending.dir_records = None
        if row is not None and row.names and frame.files:
            self._sort_known(frame, row, file_stats, pending)
            if pending.to_read:
                pending.read_records = _subset(records, frame.files, pending.to_read)
        else:
            pending.to_read = frame.files
            pending.read_records = records
        self.pending.append(pending)
        self.pending_files += len(pending.to_read)
        if parent is not None:
            parent.children.append((frame.path.rpartition("/")[2], pending))
        if not self.defer and (
            self.pending_files >= CHUNK_FILES or len(self.pending) >= MAX_PENDING_DIRECTORIES
        ):
            self.flush(wait=False)

    @staticmethod
    def _sort_known(
        frame: _Frame, row: DirectoryRow, stats: list[os.stat_result], pending: _Pending
    ) -> None:
        """Split *frame*'s files into those whose record is the cached one and the others."""
        try:
            known = unpack_row(row.names, row.stats, row.md5s)
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
    def flush(self, *, wait: bool = True) -> None:
        """Read the pending directories' files, compute their digests, write their rows.

        Without *wait* (the walk's own flushes), the reads are started on the thread pool
        and the walk goes on: the chunk before is finished first (at most
        :data:`READS_IN_FLIGHT` chunks read at once), so the walk's ``stat`` calls (which
        release the GIL) overlap with the hashing.  Chunks are finished in the walk's order:
        a directory's digest is always computed after its subdirectories'."""
        pending, self.pending = self.pending, []
        self.pending_files = 0
        self._start(pending)
        self._finish_reads(0 if wait else READS_IN_FLIGHT)

    def flush_all(self) -> None:
        """:meth:`flush` by chunks of :data:`~zarrchive.client.local.hashing.CHUNK_FILES` files (after a
        walk that deferred the reading): the pending directories are in the walk's order, a
        directory after its subdirectories."""
        pending, self.pending = self.pending, []
        self.pending_files = 0
        chunk: list[_Pending] = []
        count = 0
        for item in pending:
            chunk.append(item)
            count += len(item.to_read)
            if count >= CHUNK_FILES or len(chunk) >= MAX_PENDING_DIRECTORIES:
                self._start(chunk)
                self._finish_reads(READS_IN_FLIGHT)
                chunk, count = [], 0
        self._start(chunk)
        self._finish_reads(0)

    def _start(self, pending: list[_Pending]) -> None:
        """Start reading the files of *pending* (finished by :meth:`_finish_reads`)."""
        if not pending:
            return
        started = hashing.clock_ns()
        surveyed: list[_SurveyedRun] = []
        for p in pending:
            if p.to_read:
                assert p.read_records is not None
                surveyed.append((p.path, p.os_prefix, p.to_read, p.read_records, 0))
        # Their records were taken by the walk, after the clock's now_ns: settled since then.
        self.reading.append((pending, started, self._read(surveyed, self.now_ns - SETTLE_NS)))

    def _finish_reads(self, keep: int) -> None:
        """Finish the chunks being read, oldest first, until at most *keep* are left."""
        while len(self.reading) > keep:
            pending, started, read = self.reading.popleft()
            self._flush(pending, started, dict(read()))

    def _flush(
        self,
        pending: list[_Pending],
        started: int,
        read: dict[str, tuple[list[ChildRow], bytearray]],
    ) -> None:
        """Compute the digests of *pending* (their files read: *read*; the chunk started at
        *started*) and write their rows."""
        rows: list[tuple[bytes, DirectoryRow]] = []
        for item in pending:
            files = item.known
            hashed_ns = started
            packed: bytes | None = None
            records: list[tuple[int, ...] | None] | None = None
            fresh: tuple[list[ChildRow], list[tuple[int, ...] | None]] | None = None
            got = read.get(item.path)
            if got is not None:
                hashed_ns = self.now_ns
                fresh_rows, kept = got
                assert item.read_records is not None
                if not files and 0 not in kept:
                    # every file read, each as it was when the walk stat-ed it
                    files = fresh_rows
                    packed = _stored(item.read_records)
                else:
                    values = item.read_records
                    fresh = (
                        fresh_rows,
                        [
                            tuple(values[5 * i : 5 * i + 5]) if keep else None
                            for i, keep in enumerate(kept)
                        ],
                    )
            if packed is None:
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
            if records is not None:
                if None in records:
                    storable = False
                    kept_pairs = [
                        (row, r) for row, r in zip(files, records, strict=True) if r is not None
                    ]
                    files = [row for row, _ in kept_pairs]
                    records = [r for _, r in kept_pairs]
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
                hashed_ns,
            )
            rows.append((item.key, row))
        if rows:
            if self.writer is None:
                self.writer = self.cache.writer()
            self.writer.submit(rows)

    def _read(
        self, runs: list[_SurveyedRun], settled_ns: int
    ) -> Callable[[], list[tuple[str, tuple[list[ChildRow], bytearray]]]]:
        """Start reading and md5-ing the files of *runs* (whose records the walk took), on
        the thread pool unless they are few; returns what waits for the results."""
        count = sum(len(run[2]) for run in runs)
        if count < FEW_FILES or self.jobs == 1:
            done = _read_surveyed_batch(runs, settled_ns) if count else []
            return lambda: done
        size = max(1, min(64, -(-count // (4 * self.jobs))))
        return _merged(
            [
                self._pool().submit(_read_surveyed_batch, batch, settled_ns)
                for batch in _surveyed_batches(runs, size)
            ]
        )

    def _pool(self) -> ThreadPoolExecutor:
        if self.executor is None:
            self.executor = ThreadPoolExecutor(self.jobs, thread_name_prefix="zarrchive-md5")
        return self.executor

    def _advance(self, files: int, nbytes: int) -> None:
        self.done_files += files
        self.done_bytes += nbytes
        if self.progress is not None:
            now = time.monotonic()
            if now - self.last_report >= 0.1:
                self.last_report = now
                self.progress(self.done_files, self.done_bytes)

    def close(self) -> None:
        self.reading.clear()
        if self.executor is not None:
            self.executor.shutdown(wait=True, cancel_futures=True)
            self.executor = None
        if self.writer is not None:
            self.writer.close()
            self.writer = None
        self.cache.flush()

    def tree(self) -> LocalTree:
        """The digests found (after the last flush)."""
        if self.progress is not None:
            self.progress(self.done_files, self.done_bytes)
        digests = self.digests
        if "" not in digests:
            digests[""] = EMPTY_CHECKSUM
        return LocalTree(digests)


def _merged(futures: list[Future[list[_Read]]]) -> Callable[[], list[_Read]]:
    """What waits for *futures* (batches of runs, in order) and joins the pieces of a
    directory split between batches."""

    def collect() -> list[_Read]:
        merged: dict[str, tuple[list[ChildRow], bytearray]] = {}
        for future in futures:
            for prefix, (rows, extra) in future.result():
                found = merged.get(prefix)
                if found is None:
                    merged[prefix] = (rows, extra)
                else:
                    found[0].extend(rows)
                    found[1].extend(extra)
        return list(merged.items())

    return collect


#: ``(prefix, os_prefix, names, records, offset)``: files of one directory whose stat
#: records the walk took: ``names[k]``'s is ``records[5 * (offset + k) : 5 * (offset + k) + 5]``.
_SurveyedRun: TypeAlias = tuple[str, str, list[str], "array[int]", int]
#: ``(prefix, (rows, kept))``: a directory's files read, their ``(name, md5, size)`` and,
#: per file, whether its record may be kept (``1``).
_Read: TypeAlias = tuple[str, tuple[list[ChildRow], bytearray]]


def _surveyed_batches(runs: list[_SurveyedRun], size: int) -> Iterator[list[_SurveyedRun]]:
    """The files of *runs* in batches of *size* files (runs split where needed)."""
    batch: list[_SurveyedRun] = []
    count = 0
    for prefix, os_prefix, names, records, offset in runs:
        start, end = 0, len(names)
        while start < end:
            take = min(size - count, end - start)
            piece = names if take == end else names[start : start + take]
            batch.append((prefix, os_prefix, piece, records, offset + start))
            start += take
            count += take
            if count == size:
                yield batch
                batch, count = [], 0
    if batch:
        yield batch


def _read_surveyed_batch(
    batch: list[_SurveyedRun], settled_ns: int
) -> list[tuple[str, tuple[list[ChildRow], bytearray]]]:
    """md5 every file of *batch*, the hot loop of a first run; each file's stat record is
    the one the walk took (no ``fstat``).  It is kept (``1`` in the mask) if settled before *settled_ns* (the clock
    before the walk's ``stat``) and as many bytes were read as it gave: a file written
    since that ``stat`` then has a later mtime or ctime, so the record kept is never
    that of the content read unless the two are the same."""
    buffers = thread_buffers()
    open_, readv, close, rest, flags = os.open, os.readv, os.close, md5_rest, OPEN_FLAGS
    result: list[tuple[str, tuple[list[ChildRow], bytearray]]] = []
    for prefix, os_prefix, names, values, offset in batch:
        rows: list[ChildRow] = []
        kept = bytearray()
        append, keep = rows.append, kept.append
        j = 5 * offset
        for name in names:
            path = os_prefix + name
            expected = values[j + 2]
            try:
                fd = open_(path, flags)
                try:
                    # (a small file of the size the walk's stat gave is read whole in one call)
                    size, hexdigest = rest(fd, buffers, readv(fd, buffers), expected)
                finally:
                    close(fd)
            except OSError as exc:
                raise LocalFileError(f"cannot read {display(path)}: {exc.strerror}") from None
            append((name, hexdigest, size))
            keep(size == expected and values[j + 3] < settled_ns and values[j + 4] < settled_ns)
            j += 5
        result.append((prefix, (rows, kept)))
    return result


_st_size = attrgetter("st_size")
_BIG_ENDIAN = sys.byteorder == "big"


def _records(stats: list[os.stat_result]) -> array[int] | None:
    """The stat records of *stats* (5 integers each, native order); ``None`` if a value
    does not fit a signed 64-bit integer (such a directory is not cached)."""
    try:
        return array("q", chain.from_iterable(map(_record, stats)))
    except OverflowError:
        return None


#: A time no record is settled before: a record with it is never kept.
_NEVER_SETTLED = (1 << 63) - 1


def _unkept_records(stats: list[os.stat_result]) -> array[int]:
    """Records of *stats* to read their files by (their sizes), never kept (see
    :func:`_read_surveyed_batch`): for files whose own records don't fit (:func:`_records`)."""
    return array(
        "q",
        chain.from_iterable((0, 0, st.st_size, _NEVER_SETTLED, _NEVER_SETTLED) for st in stats),
    )


def _stored(records: array[int]) -> bytes:
    """*records* as a row stores them (:func:`~zarrchive.client.local.digest_cache.pack_records`)."""
    if _BIG_ENDIAN:
        records = array("q", records)
        records.byteswap()
    return records.tobytes()


def _subset(records: array[int], names: list[str], subset: list[str]) -> array[int]:
    """The records of the files *subset* of *names* (whose records are *records*)."""
    where = {name: i for i, name in enumerate(names)}
    chosen = array("q")
    for name in subset:
        i = 5 * where[name]
        chosen.extend(records[i : i + 5])
    return chosen


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

    Without a usable *cache*, the same as :func:`local_directory_digests` (every file read).
    Errors: those of :func:`zarrchive.client.local.walk.walk_local`, and
    :class:`LocalFileError` for a file that cannot be read.
    """
    jobs = check_jobs(jobs)
    if cache is None or not cache.usable:
        hasher = TreeHasher(collect=True)
        hash_tree(root, jobs, progress, hasher, None)
        completed = hasher.completed
        return LocalTree({d.path: d.digest for d in completed if d.count or not d.path})
    scan = _Scan(cache, jobs, progress, hashing.clock_ns())
    try:
        scan.walk(root)
        scan.flush()
    finally:
        scan.close()
    return scan.tree()


def local_checksum(
    root: str | os.PathLike[str],
    *,
    jobs: int | None = None,
    progress: ProgressCallback | None = None,
    cache: DigestCache | None = None,
) -> str:
    """The Dandi Zarr checksum of the directory *root*.

    The same as ``compute_checksum(iter_local_entries(root), grouped=True)``,
    with the files of each directory given to the tree hash at once; with a usable
    *cache*, from the cached directory digests (:func:`scan_tree`).
    """
    if cache is not None and cache.usable:
        return scan_tree(root, cache=cache, jobs=jobs, progress=progress).checksum
    return hash_tree(root, jobs, progress, TreeHasher(), None).digest


def local_directory_digests(
    root: str | os.PathLike[str],
    *,
    jobs: int | None = None,
    progress: ProgressCallback | None = None,
    with_nodes: bool = False,
    cache: DigestCache | None = None,
) -> list[DirectoryDigest]:
    """Every directory's digest below *root* (deepest first as completed, the root last).

    With a usable *cache* (and without *with_nodes*), from the cached directory digests
    (:func:`scan_tree`)."""
    if cache is not None and cache.usable and not with_nodes:
        tree = scan_tree(root, cache=cache, jobs=jobs, progress=progress)
        return tree.directory_digests()
    hasher = TreeHasher(collect=True, with_nodes=with_nodes)
    hash_tree(root, jobs, progress, hasher, cache)
    return hasher.completed


class Survey:
    """A walk of a local Zarr that ``stat``-ed every file and read none yet
    (:func:`survey_tree`): what it found, and :meth:`tree` to finish it.

    The upload's check before anything is sent, and its first walk: a directory the digest
    cache knows was compared with its row as :func:`scan_tree` does; the others' files are
    read by :meth:`tree` with the records taken now (no second walk, no ``fstat``).  An
    upload that does not need the tree (a new Zarr: its files are hashed as they are sent)
    closes it instead (:meth:`close`)."""

    def __init__(self, scan: _Scan) -> None:
        self._scan: _Scan | None = scan
        #: The files below the root and their bytes.
        self.files = scan.files
        self.size = scan.size
        #: ``(path, size)`` of the files above the survey's *limit*, in path order.
        self.too_big = sorted(scan.too_big)

    def tree(self) -> LocalTree:
        """Read what the survey did not find in the cache (the rows written), and return
        every directory's checksum, as :func:`scan_tree` would have."""
        scan, self._scan = self._scan, None
        if scan is None:
            raise RuntimeError("the survey was finished or closed")
        try:
            scan.flush_all()
        finally:
            scan.close()
        return scan.tree()

    def close(self) -> None:
        """Forget the survey without reading anything."""
        scan, self._scan = self._scan, None
        if scan is not None:
            scan.pending = []
            scan.close()


def survey_tree(
    root: str | os.PathLike[str],
    *,
    cache: DigestCache,
    jobs: int | None = None,
    progress: ProgressCallback | None = None,
    limit: int | None = None,
) -> Survey:
    """Walk *root* and ``stat`` every file (nothing is read yet): its count and size, and
    the files larger than *limit* (:attr:`Survey.too_big`), then :meth:`Survey.tree`.

    Raises as :func:`scan_tree`'s walk does (names, links, entries neither file nor
    directory, unreadable directories), and :class:`LocalFileError` for a file that cannot
    be ``stat``-ed, before any file is read.  *cache* must be usable.
    """
    jobs = check_jobs(jobs)
    scan = _Scan(cache, jobs, progress, hashing.clock_ns(), defer=True, limit=limit)
    try:
        scan.walk(root)
    except BaseException:
        scan.close()
        raise
    return Survey(scan)


__all__ = [
    "LocalTree",
    "Survey",
    "local_checksum",
    "local_directory_digests",
    "scan_tree",
    "survey_tree",
]
