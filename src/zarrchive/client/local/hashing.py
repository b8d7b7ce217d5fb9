"""md5 the files of a local Zarr in parallel: the sync engine's one md5 read loop.

:func:`iter_local_entries` yields a :class:`~zarrchive.checksum.ZarrEntry`
``(path, size, md5)`` for every file below a directory, in sorted path order
(code point order, which is also the order of an S3 listing), so its output can
be fed to the streaming tree hash with ``grouped=True``::

    compute_checksum(iter_local_entries(root), grouped=True)

The files come from the walk (:mod:`zarrchive.client.local.walk`: links followed, empty
directories ignored, paths validated) as runs of one directory's files.

Speed: files are hashed by a thread pool in batches (one task per file costs
more than hashing a small chunk file), each thread reading into its own reused
buffer (:func:`thread_buffers`, the package's one buffer pool) with ``os.readv`` and
hashing with :mod:`hashlib` (:func:`md5_rest`, the package's one md5 read loop, which the
tree's reads use too); both release the GIL.
The walk does not ``stat`` files (the size is the number of bytes hashed), so
it costs one ``scandir`` per directory and almost nothing per file.  Walking,
hashing and consuming alternate by chunks of :data:`CHUNK_FILES` files (see
:func:`hash_runs`): the next chunk is hashed when the caller asks for more.

Digest cache: given a :class:`~zarrchive.client.local.digest_cache.DigestCache` (``cache=``;
:func:`hash_local`, used by upload, download and verify, takes the process's default
one), a file whose stat record equals the cached one is not read: it costs a ``stat``.
The walk loads each directory's cached entries once; the threads ``stat`` the files
that have one, hash the others (``fstat`` on the open file) and the newly hashed files
are saved after each chunk.  A directory with no cached entry is hashed as without a
cache (but for the ``fstat``), so a first run costs about what it did.
"""

from __future__ import annotations

import hashlib
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor, wait
from functools import partial
from operator import itemgetter
from typing import TYPE_CHECKING, Literal, NamedTuple

from zarrchive.checksum import DirectoryDigest, TreeHasher, ZarrEntry
from zarrchive.client.local.walk import Run, display, walk_runs
from zarrchive.errors import InvalidInput, LocalFileError

if TYPE_CHECKING:  # imported when a cache is used (sqlite3 is not free to import)
    from zarrchive.client.local.digest_cache import DigestCache, HashedFile, Known

#: ``progress(files, bytes)``: the totals hashed so far, called from the caller's thread.
ProgressCallback = Callable[[int, int], None]

#: Size of each thread's read buffer.
BLOCK_SIZE = 1 << 20
#: A batch (one thread pool task) holds about this many bytes ...
BATCH_BYTES = 1 << 20
#: ... and at most this many files.
MAX_BATCH_FILES = 64
#: The walk lists this many files, then the threads hash them, and so on.
CHUNK_FILES = 16384
#: The first chunk of an upload's hashing (the chunks double from there up to
#: :data:`CHUNK_FILES`): its first batch goes out once these are hashed, not a whole chunk.
FIRST_UPLOAD_CHUNK = 128
#: A chunk with at least this share of its files in the digest cache is done on the
#: walk's thread, without the hashing threads.
MOSTLY_CACHED = 0.9
#: Seconds between two calls of the progress callback while the threads hash.
PROGRESS_INTERVAL = 0.2


def default_jobs() -> int:
    """Threads used by default: one per usable CPU plus a few for I/O waits, at most 32.

    Hashing small files from the page cache is bound by the GIL-held part of the
    work, where more threads than cores only add contention; a few spare threads
    cover files that must be read from a disk or a network file system.
    """
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        cpus = os.cpu_count() or 1
    return min(32, cpus + 2)


def transfer_jobs(jobs: int | None) -> int:
    """Parallel transfers of an upload or a download: *jobs*, by default
    :func:`default_jobs` but at least 8 (a transfer mostly waits on the network)."""
    chosen = jobs if jobs is not None else max(8, default_jobs())
    if chosen < 1:
        raise InvalidInput(f"--jobs must be at least 1, got {chosen}")
    return chosen


def check_jobs(jobs: int | None) -> int:
    """The hashing threads of a walk: *jobs*, by default :func:`default_jobs`
    (:class:`InvalidInput` below 1)."""
    jobs = default_jobs() if jobs is None else jobs
    if jobs < 1:
        raise InvalidInput(f"jobs must be at least 1, got {jobs}")
    return jobs


def clock_ns() -> int:
    """The clock the hashing stamps the files it hands to the digest cache with (when they
    were hashed: :func:`~zarrchive.client.local.digest_cache.may_store`).  Read through this
    module (``hashing.clock_ns()``) by every walk, so a test can move it ahead."""
    return time.time_ns()


#: How every file is opened for reading.
OPEN_FLAGS = os.O_RDONLY | getattr(os, "O_CLOEXEC", 0)

_pool = threading.local()


def thread_buffers() -> list[memoryview]:
    """This thread's read buffer for ``os.readv`` (one block of :data:`BLOCK_SIZE` bytes),
    made on the thread's first call and reused for every file it reads after: the one buffer
    pool of the sync engine's reads."""
    try:
        buffers: list[memoryview] = _pool.buffers
    except AttributeError:
        buffers = _pool.buffers = [memoryview(bytearray(BLOCK_SIZE))]
    return buffers


def md5_rest(fd: int, buffers: list[memoryview], n: int, expected: int = -1) -> tuple[int, str]:
    """``(size, md5)`` of the open file *fd* whose first *n* bytes were just read into
    ``buffers[0]`` (by ``os.readv(fd, buffers)``): the rest is read in blocks to the end.

    The sync engine's one md5 read loop (the hashing's batches, :func:`md5_file`, the tree's
    reads).  The caller reads the first block itself, to decide on it (a big file goes to
    the lane), and handles :class:`OSError`.  *expected*: the size a ``stat`` gave; a file
    smaller than a block read whole in one call is not read again for its end."""
    view = buffers[0]
    digest = hashlib.md5(view[:n], usedforsecurity=False)
    size = n
    if n == expected and n < BLOCK_SIZE:
        n = 0
    readv = os.readv
    while n:
        n = readv(fd, buffers)
        if n:
            digest.update(view[:n])
            size += n
    return size, digest.hexdigest()


class _BigFile(NamedTuple):
    """A big file hashed by a :class:`_Lane`."""

    size: int
    md5: str
    #: ``fstat`` when it was opened, and the time just before (for the digest cache)
    stat: os.stat_result
    started: int


class _Stopped(Exception):
    """The walk was closed while a big file was being hashed."""


def _hash_big_file(path: str, stop: threading.Event | None = None) -> _BigFile:
    """The md5 of a big file and, in the same read, its parts' md5s (remembered for the
    upload: :mod:`zarrchive.client.local.parts`), so a big file is read once, not twice.
    Gives up (:class:`_Stopped`) as soon as *stop* is set."""
    from zarrchive.client.local.parts import OnePassHasher, expected_part_size, remember

    buffers = thread_buffers()
    view = buffers[0]
    started = clock_ns()
    try:
        fd = os.open(path, OPEN_FLAGS)
    except OSError as exc:
        raise LocalFileError(f"cannot read {display(path)}: {exc.strerror}") from None
    try:
        st = os.fstat(fd)
        hasher = OnePassHasher(expected_part_size(st.st_size))
        update, readv = hasher.update, os.readv
        while n := readv(fd, buffers):
            update(view[:n])
            if stop is not None and stop.is_set():
                raise _Stopped
        after = os.fstat(fd)
    except OSError as exc:
        raise LocalFileError(f"cannot read {display(path)}: {exc.strerror}") from None
    finally:
        os.close(fd)
    whole, parts = hasher.finish()
    if hasher.done == st.st_size == after.st_size and (
        (after.st_mtime_ns, after.st_ctime_ns) == (st.st_mtime_ns, st.st_ctime_ns)
    ):
        remember(st, hasher.part_size, parts)
    return _BigFile(hasher.done, whole, st, started)


class _Lane:
    """Big files (above :data:`~zarrchive.client.local.parts.PART_HASH_MIN`), hashed apart from
    the others when the walk feeds an upload (``part_md5s``): one at a time, in the order
    met, on a thread of their own, each in one read that also gives its parts' md5s.

    A batch of the hashing threads that meets a big file leaves its row a placeholder
    (:meth:`defer`) and goes on; :func:`hash_runs` gives out the rows before it at once and
    the big file's once it is hashed (:meth:`resolve`).  So the upload starts sending the
    first big file while the next is hashed, instead of after every big file of the chunk
    (the batches' order puts them all on one thread), and reads each big file once."""

    def __init__(self) -> None:
        self._pool: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        #: ``id(rows) -> [(index, future, os_prefix)]``: the placeholders of a rows list
        self._deferred: dict[int, list[tuple[int, Future[_BigFile], str]]] = {}
        #: the big files hashed, for the digest cache (see :func:`hash_runs`)
        self.kept: list[HashedFile] = []

    def is_big(self, size: int) -> bool:
        from zarrchive.client.local import parts

        return size > parts.PART_HASH_MIN

    def defer(self, rows: list[tuple[str, str, int]], os_prefix: str, name: str, size: int) -> None:
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(1, thread_name_prefix="zarrchive-md5-big")
            future = self._pool.submit(_hash_big_file, os_prefix + name, self._stop)
            self._deferred.setdefault(id(rows), []).append((len(rows), future, os_prefix))
        rows.append((name, "", size))

    def resolve(self, prefix: str, rows: list[tuple[str, str, int]]) -> Iterator[_Hashed]:
        """*rows* with their placeholders filled in, in pieces: each big file's row once it
        is hashed, the rows before it before waiting for it."""
        with self._lock:
            deferred = self._deferred.pop(id(rows), None)
        if deferred is None:
            yield prefix, rows
            return
        start = 0
        for index, future, os_prefix in deferred:
            if index > start:
                yield prefix, rows[start:index]
            big = future.result()
            name = rows[index][0]
            rows[index] = (name, big.md5, big.size)
            st = big.stat
            if big.size == st.st_size:
                self.kept.append(
                    (
                        os_prefix,
                        name,
                        st.st_dev,
                        st.st_ino,
                        big.size,
                        st.st_mtime_ns,
                        st.st_ctime_ns,
                        big.md5,
                        big.started,
                    )
                )
            yield prefix, rows[index : index + 1]
            start = index + 1
        if start < len(rows):
            yield prefix, rows[start:]

    def close(self) -> None:
        self._stop.set()
        with self._lock:
            futures = [f for items in self._deferred.values() for _, f, _ in items]
            self._deferred.clear()
            pool, self._pool = self._pool, None
        for future in futures:
            future.cancel()
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)


def md5_file(path: str | os.PathLike[str]) -> tuple[int, str]:
    """``(size, md5)`` of a local file, read in large blocks (:func:`md5_rest`)."""
    os_path = os.fspath(path)
    buffers = thread_buffers()
    try:
        fd = os.open(os_path, OPEN_FLAGS)
    except OSError as exc:
        raise LocalFileError(f"cannot read {display(os_path)}: {exc.strerror}") from None
    try:
        return md5_rest(fd, buffers, os.readv(fd, buffers))
    except OSError as exc:
        raise LocalFileError(f"cannot read {display(os_path)}: {exc.strerror}") from None
    finally:
        os.close(fd)


#: ``(prefix, [(name, md5, size)])``: hashed files of one directory (a run or a part of one).
_Hashed = tuple[str, list[tuple[str, str, int]]]


def _hash_batch(batch: list[Run], lane: _Lane | None = None) -> list[_Hashed]:
    """md5 every file of *batch* (this loop is the hot spot).  With a *lane*, a file whose
    first read fills the buffer and that proves big is left to it."""
    buffers = thread_buffers()
    open_, readv, close, rest, flags = os.open, os.readv, os.close, md5_rest, OPEN_FLAGS
    result: list[_Hashed] = []
    for prefix, os_prefix, names in batch:
        rows: list[tuple[str, str, int]] = []
        append = rows.append
        for name in names:
            path = os_prefix + name
            try:
                fd = open_(path, flags)
                try:
                    n = readv(fd, buffers)
                    if n == BLOCK_SIZE and lane is not None:
                        st_size = os.fstat(fd).st_size
                        if lane.is_big(st_size):
                            lane.defer(rows, os_prefix, name, st_size)
                            continue
                    size, hexdigest = rest(fd, buffers, n)
                finally:
                    close(fd)
            except OSError as exc:
                raise LocalFileError(f"cannot read {display(path)}: {exc.strerror}") from None
            append((name, hexdigest, size))
        result.append((prefix, rows))
    return result


def _hash_cached_batch(
    batch: list[Run],
    known_by_dir: dict[str, Known],
    sink: list[HashedFile],
    lane: _Lane | None = None,
) -> list[_Hashed]:
    """:func:`_hash_batch` with a digest cache: a file whose stat record is the cached one
    is not read; every file read is appended to *sink* with its ``fstat`` record."""
    buffers = thread_buffers()
    open_, readv, close, rest, flags = os.open, os.readv, os.close, md5_rest, OPEN_FLAGS
    stat, fstat, time_ns = os.stat, os.fstat, clock_ns
    result: list[_Hashed] = []
    for prefix, os_prefix, names in batch:
        known = known_by_dir.get(os_prefix)
        positions, cached, cached_md5s = known if known is not None else _NOTHING_KNOWN
        rows: list[tuple[str, str, int]] = []
        append, keep = rows.append, sink.append
        # Before any file of the run is opened (and fstat-ed): the time of hashing.
        started = time_ns()
        for name in names:
            path = os_prefix + name
            try:
                if positions:
                    i = positions.get(name)
                    if i is not None:
                        st = stat(path)
                        j = 5 * i
                        if (
                            cached[j] == st.st_dev
                            and cached[j + 1] == st.st_ino
                            and cached[j + 2] == st.st_size
                            and cached[j + 3] == st.st_mtime_ns
                            and cached[j + 4] == st.st_ctime_ns
                        ):
                            append((name, cached_md5s[i], st.st_size))
                            continue
                fd = open_(path, flags)
                try:
                    st = fstat(fd)
                    n = readv(fd, buffers)
                    if n == BLOCK_SIZE and lane is not None and lane.is_big(st.st_size):
                        lane.defer(rows, os_prefix, name, st.st_size)
                        continue  # the lane's result goes to the cache (hash_runs)
                    size, hexdigest = rest(fd, buffers, n)
                finally:
                    close(fd)
            except OSError as exc:
                raise LocalFileError(f"cannot read {display(path)}: {exc.strerror}") from None
            append((name, hexdigest, size))
            if size == st.st_size:
                keep(
                    (
                        os_prefix,
                        name,
                        st.st_dev,
                        st.st_ino,
                        size,
                        st.st_mtime_ns,
                        st.st_ctime_ns,
                        hexdigest,
                        started,
                    )
                )
        result.append((prefix, rows))
    return result


_NOTHING_KNOWN: tuple[dict[str, int], list[int], list[str]] = ({}, [], [])


def iter_local_entries(
    root: str | os.PathLike[str],
    *,
    jobs: int | None = None,
    progress: ProgressCallback | None = None,
    cache: DigestCache | None = None,
    part_md5s: bool | None = None,
    first_chunk: int | None = None,
) -> Iterator[ZarrEntry]:
    """``ZarrEntry(path, size, md5)`` of every file below *root*, in sorted path order.

    *jobs* threads hash the files (default :func:`default_jobs`); *progress* is
    called with the number of files and bytes hashed so far; *cache*: md5s of
    unchanged files are taken from there, and new ones saved.  A missing root or
    a bad *jobs* raise at once; the errors of :func:`walk_local` and
    :class:`LocalFileError` for a file that cannot be read, while iterating.
    Closing the iterator early stops the threads.

    *part_md5s* (for an upload; None: :func:`zarrchive.client.local.parts.uploading`): the big
    files' parts are hashed in the same read as the whole file (:class:`_Lane`).

    *first_chunk*: the files are hashed a chunk at a time, the first result given only once
    its chunk is hashed; for a consumer that starts work on the first entries (an upload),
    the chunks ramp up from *first_chunk* files (see :func:`_chunks`).
    """
    if part_md5s is None:
        from zarrchive.client.local.parts import uploading

        part_md5s = uploading()
    hashed = hash_runs(walk_runs(root), check_jobs(jobs), progress, cache, part_md5s, first_chunk)
    return (
        ZarrEntry(prefix + name, size, md5) for prefix, rows in hashed for name, md5, size in rows
    )


def _chunks(
    runs: Iterator[Run], limit: int, first: int | None = None
) -> Iterator[tuple[list[Run], int]]:
    """The runs in chunks of at least *limit* files (the last one smaller), with their count.

    With *first*, the chunks ramp up: the first holds *first* files, each next one twice as
    many, until they reach *limit*; runs are split to keep to that (a directory of many
    files is then in several chunks).  Pure."""
    chunk: list[Run] = []
    count = 0
    target = limit if first is None else max(1, min(first, limit))
    for prefix, os_prefix, names in runs:
        if not names:
            chunk.append((prefix, os_prefix, names))
            continue
        start = 0
        while start < len(names):
            take = len(names) - start
            if target < limit:  # ramping up: cut the run at the chunk's size
                take = min(take, target - count)
            part = names if take == len(names) else names[start : start + take]
            chunk.append((prefix, os_prefix, part))
            count += take
            start += take
            if count >= target:
                yield chunk, count
                chunk, count = [], 0
                target = min(2 * target, limit)
    if chunk:
        yield chunk, count


def _batches(chunk: list[Run], size: int) -> Iterator[list[Run]]:
    """The files of *chunk* in batches of *size* files (runs split where needed)."""
    batch: list[Run] = []
    count = 0
    for prefix, os_prefix, names in chunk:
        start, end = 0, len(names)
        while start < end:
            take = min(size - count, end - start)
            batch.append((prefix, os_prefix, names if take == end else names[start : start + take]))
            start += take
            count += take
            if count == size:
                yield batch
                batch, count = [], 0
    if batch:
        yield batch


def hash_runs(
    runs: Iterator[Run],
    jobs: int,
    progress: ProgressCallback | None,
    cache: DigestCache | None = None,
    part_md5s: bool = False,
    first_chunk: int | None = None,
) -> Iterator[_Hashed]:
    """Hash the runs' files on *jobs* threads; the results in the runs' order.

    Strict alternation, chunk by chunk: the walk lists :data:`CHUNK_FILES`
    files, the threads hash them while this thread sleeps, then the caller
    consumes the results (feeds the tree hash), and so on.  Memory stays
    bounded, and the walk and the tree (Python code, holding the GIL) never run
    beside the hashing threads: for small files the work is bound by the GIL,
    and every hand-off of the GIL between threads costs more than it saves.

    With a *cache*, the chunk's directories' cached entries are loaded before the
    threads start, and the files they hashed are saved once they are done.

    With *part_md5s* (an upload), big files go to a :class:`_Lane`: read once for their
    md5 and their parts' md5s, and given out one by one as they are hashed.
    """
    pending: deque[Future[list[_Hashed]]] = deque()
    done_files = done_bytes = 0
    executor: ThreadPoolExecutor | None = None
    sink: list[HashedFile] = []
    lane = _Lane() if part_md5s else None

    def given_out(hashed: list[_Hashed]) -> Iterator[_Hashed]:
        if lane is None:
            yield from hashed
            return
        for prefix, rows in hashed:
            yield from lane.resolve(prefix, rows)
        if lane.kept and cache is not None and cache.usable:
            cache.store(lane.kept)
            lane.kept.clear()

    try:
        for chunk, count in _chunks(runs, CHUNK_FILES, first_chunk):
            hash_batch: Callable[[list[Run]], list[_Hashed]] = partial(_hash_batch, lane=lane)
            if cache is not None and cache.usable:
                now = clock_ns()
                known_by_dir: dict[str, Known] = {}
                for _, os_prefix, _ in chunk:
                    if os_prefix not in known_by_dir:
                        known_by_dir[os_prefix] = cache.known(os_prefix, now)
                hash_batch = partial(
                    _hash_cached_batch, known_by_dir=known_by_dir, sink=sink, lane=lane
                )
                cached = sum(len(known.positions) for known in known_by_dir.values())
                if cached >= MOSTLY_CACHED * count:
                    # A file found in the cache costs a stat: on this thread, it costs less
                    # than the hand-offs of the GIL between threads (the few others are
                    # hashed here too).
                    hashed = hash_batch(chunk)
                    done_files += count
                    done_bytes += sum(sum(map(_size_of, rows)) for _, rows in hashed)
                    if progress is not None:
                        progress(done_files, done_bytes)
                    if sink:
                        cache.store(sink)
                        sink.clear()
                    yield from given_out(hashed)
                    continue
            # At least 4 batches per thread, so that all work and the chunk's tail is short;
            # about BATCH_BYTES per batch once the file sizes are known.
            size = -(-count // (4 * jobs))
            if done_files:
                size = min(size, BATCH_BYTES // max(1, done_bytes // done_files))
            size = max(1, min(MAX_BATCH_FILES, size))
            if executor is None:
                executor = ThreadPoolExecutor(jobs, thread_name_prefix="zarrchive-md5")
            pending.extend(executor.submit(hash_batch, batch) for batch in _batches(chunk, size))
            # Asleep while the threads hash (they have the GIL to themselves), but for
            # a progress report now and then.
            counted: set[Future[list[_Hashed]]] = set()
            while True:
                timeout = None if progress is None else PROGRESS_INTERVAL
                done, running = wait(pending, timeout=timeout)
                for future in done - counted:
                    for _, rows in future.result():
                        done_files += len(rows)
                        done_bytes += sum(map(_size_of, rows))
                counted |= done
                if progress is not None:
                    progress(done_files, done_bytes)
                if not running:
                    break
            if sink and cache is not None:
                cache.store(sink)
                sink.clear()
            while pending:
                yield from given_out(pending.popleft().result())
    finally:
        for future in pending:
            future.cancel()
        if executor is not None:
            executor.shutdown(wait=True, cancel_futures=True)
        if lane is not None:
            lane.close()
        if cache is not None:
            cache.flush()


_size_of = itemgetter(2)


def local_entries(
    root: str | os.PathLike[str],
    *,
    jobs: int | None = None,
    progress: ProgressCallback | None = None,
    cache: DigestCache | None = None,
) -> list[ZarrEntry]:
    """:func:`iter_local_entries` as a list."""
    return list(iter_local_entries(root, jobs=jobs, progress=progress, cache=cache))


def hash_tree(
    root: str | os.PathLike[str],
    jobs: int | None,
    progress: ProgressCallback | None,
    hasher: TreeHasher,
    cache: DigestCache | None,
) -> DirectoryDigest:
    """Hash every file below *root* (the walk's runs, :func:`hash_runs`) into *hasher*, the
    files of each directory given to the tree hash at once; its root's digest.  Every file
    is read or found in *cache* one by one: the cached directory digests are the tree's
    (:mod:`zarrchive.client.local.tree`)."""
    hashed = hash_runs(walk_runs(root), check_jobs(jobs), progress, cache)
    add_files = hasher.add_files
    for prefix, rows in hashed:
        add_files(prefix[:-1], rows)
    return hasher.finish()


def hash_local(
    root: str,
    *,
    jobs: int,
    progress: Callable[[int, int], None] | None = None,
    cache: DigestCache | Literal["default"] | None = "default",
    part_md5s: bool | None = None,
) -> list[ZarrEntry]:
    """Every file below *root* with its md5, hashed on at most *jobs* threads (capped at the
    machine's sensible default); *progress* gets the increments of files and bytes.

    The sync engine's hashing (upload, download, verify): by default with the process's
    digest cache (:func:`zarrchive.client.local.digest_cache.default_cache`)."""
    if cache == "default":
        from zarrchive.client.local.digest_cache import default_cache

        cache = default_cache()
    done = [0, 0]

    def report(files: int, nbytes: int) -> None:
        if progress is not None:
            progress(files - done[0], nbytes - done[1])
        done[0], done[1] = files, nbytes

    entries = iter_local_entries(
        root, jobs=min(jobs, default_jobs()), progress=report, cache=cache, part_md5s=part_md5s
    )
    return list(entries)


__all__ = [
    "BATCH_BYTES",
    "BLOCK_SIZE",
    "CHUNK_FILES",
    "FIRST_UPLOAD_CHUNK",
    "OPEN_FLAGS",
    "ProgressCallback",
    "check_jobs",
    "clock_ns",
    "default_jobs",
    "hash_local",
    "hash_runs",
    "hash_tree",
    "iter_local_entries",
    "local_entries",
    "md5_file",
    "md5_rest",
    "thread_buffers",
    "transfer_jobs",
]
