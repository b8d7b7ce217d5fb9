"""Walk a local Zarr directory and md5 its files in parallel.

:func:`iter_local_entries` yields a :class:`~zarrchive.checksum.ZarrEntry`
``(path, size, md5)`` for every file below a directory, in sorted path order
(code point order, which is also the order of an S3 listing), so its output can
be fed to the streaming tree hash with ``grouped=True``::

    compute_checksum(iter_local_entries(root), grouped=True)

The walk follows symbolic links (a link that leads back to one of its own
ancestors is an error, not an endless walk), ignores empty directories (S3 has
none), and validates every path with :mod:`zarrchive.paths`.

Speed: files are hashed by a thread pool in batches (one task per file costs
more than hashing a small chunk file), each thread reading into its own reused
buffer with ``os.readv`` and hashing with :mod:`hashlib`; both release the GIL.
The walk does not ``stat`` files (the size is the number of bytes hashed), so
it costs one ``scandir`` per directory and almost nothing per file.  Walking,
hashing and consuming alternate by chunks of :data:`CHUNK_FILES` files (see
:func:`_hash_runs`): the next chunk is hashed when the caller asks for more.

Digest cache: given a :class:`~zarrchive.client.digest_cache.DigestCache` (``cache=``;
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
import re
import stat
import threading
import time
from bisect import bisect_left
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor, wait
from functools import partial
from operator import itemgetter
from typing import TYPE_CHECKING, Literal, NamedTuple

from zarrchive.checksum import DirectoryDigest, TreeHasher, ZarrEntry
from zarrchive.errors import InvalidInput, LocalFileError
from zarrchive.paths import MAX_PATH_BYTES, MAX_SEGMENT_BYTES, validate_path

if TYPE_CHECKING:  # imported when a cache is used (sqlite3 is not free to import)
    from zarrchive.client.digest_cache import DigestCache, HashedFile, Known

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

# Anything validate_path could object to in one name (besides length and surrogates).
_SUSPECT = re.compile(r"[\x00-\x1f\x7f-\x9f\\]")


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


class LocalFile(NamedTuple):
    """A file found by the walk: its entry path and the path to open."""

    path: str
    os_path: str


def _display(path: str) -> str:
    """A path for a one-line message (quoted, escapes for control characters)."""
    return repr(path)


def _check_root(root: str | os.PathLike[str]) -> str:
    top = os.fspath(root)
    try:
        st = os.stat(top)
    except FileNotFoundError:
        raise LocalFileError(f"{_display(top)}: no such file or directory") from None
    except OSError as exc:
        raise LocalFileError(f"{_display(top)}: cannot access: {exc.strerror}") from None
    if not stat.S_ISDIR(st.st_mode):
        raise LocalFileError(f"{_display(top)} is not a directory")
    return top


def _names_are_valid(listing: tuple[list[str], list[str]], prefix_bytes: int) -> bool:
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


def _validate(path: str) -> None:
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
            f"{_display(entry.path)} is a broken symbolic link "
            f"(it points to {_display(os.readlink(entry.path))})"
        )
    return LocalFileError(f"{_display(entry.path)} is not a regular file or a directory")


def _list_directory(
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
                        f"cannot access {_display(entry.path)}: {exc.strerror}"
                    ) from None
    except OSError as exc:
        raise LocalFileError(f"cannot read directory {_display(os_path)}: {exc.strerror}") from None
    files.sort()
    dirs.sort()
    return files, dirs


def _identity(os_path: str) -> tuple[int, int]:
    try:
        st = os.stat(os_path)
    except OSError as exc:
        raise LocalFileError(f"cannot access {_display(os_path)}: {exc.strerror}") from None
    return st.st_dev, st.st_ino


#: ``(prefix, os_prefix, names)``: consecutive files of one directory.
_Run = tuple[str, str, list[str]]


def _walk_runs(root: str | os.PathLike[str]) -> Iterator[_Run]:
    """Check *root* at once, then return the walk as runs of files, in path order."""
    top = _check_root(root)
    os_prefix = top if top.endswith(os.sep) else top + os.sep
    listing = _list_directory(top)
    trusted = _names_are_valid(listing, 0)
    return _runs(_Dir("", os_prefix, listing, _identity(top), trusted))


def _runs(root: _Dir) -> Iterator[_Run]:
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
                    _validate(frame.prefix + name)
            yield frame.prefix, frame.os_prefix, names
            continue
        name = dirs[frame.dir_position][:-1]
        frame.dir_position += 1
        path = frame.prefix + name
        os_path = frame.os_prefix + name
        identity = _identity(os_path)
        if identity in ancestors:
            raise LocalFileError(
                f"symbolic link loop: {_display(os_path)} leads back to its ancestor "
                f"{_display(ancestors[identity] or '.')} (relative to the Zarr root)"
            )
        listing = _list_directory(os_path)
        if not listing[0] and not listing[1]:
            continue
        prefix = path + "/"
        trusted = frame.trusted and _names_are_valid(
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
        for prefix, os_prefix, names in _walk_runs(root)
        for name in names
    )


_buffers = threading.local()


def _md5(os_path: str) -> tuple[int, str]:
    try:
        buffers: list[memoryview] = _buffers.buffers
    except AttributeError:
        buffers = _buffers.buffers = [memoryview(bytearray(BLOCK_SIZE))]
    view = buffers[0]
    digest = hashlib.md5(usedforsecurity=False)
    size = 0
    try:
        fd = os.open(os_path, _OPEN_FLAGS)
    except OSError as exc:
        raise LocalFileError(f"cannot read {_display(os_path)}: {exc.strerror}") from None
    try:
        while n := os.readv(fd, buffers):
            digest.update(view[:n])
            size += n
    except OSError as exc:
        raise LocalFileError(f"cannot read {_display(os_path)}: {exc.strerror}") from None
    finally:
        os.close(fd)
    return size, digest.hexdigest()


_OPEN_FLAGS = os.O_RDONLY | getattr(os, "O_CLOEXEC", 0)


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
    upload: :mod:`zarrchive.client.parts`), so a big file is read once, not twice.  Gives
    up (:class:`_Stopped`) as soon as *stop* is set."""
    from zarrchive.client.parts import OnePassHasher, expected_part_size, remember

    try:
        buffers: list[memoryview] = _buffers.buffers
    except AttributeError:
        buffers = _buffers.buffers = [memoryview(bytearray(BLOCK_SIZE))]
    view = buffers[0]
    started = _time_ns()
    try:
        fd = os.open(path, _OPEN_FLAGS)
    except OSError as exc:
        raise LocalFileError(f"cannot read {_display(path)}: {exc.strerror}") from None
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
        raise LocalFileError(f"cannot read {_display(path)}: {exc.strerror}") from None
    finally:
        os.close(fd)
    whole, parts = hasher.finish()
    if hasher.done == st.st_size == after.st_size and (
        (after.st_mtime_ns, after.st_ctime_ns) == (st.st_mtime_ns, st.st_ctime_ns)
    ):
        remember(st, hasher.part_size, parts)
    return _BigFile(hasher.done, whole, st, started)


class _Lane:
    """Big files (above :data:`~zarrchive.client.parts.PART_HASH_MIN`), hashed apart from
    the others when the walk feeds an upload (``part_md5s``): one at a time, in the order
    met, on a thread of their own, each in one read that also gives its parts' md5s.

    A batch of the hashing threads that meets a big file leaves its row a placeholder
    (:meth:`defer`) and goes on; :func:`_hash_runs` gives out the rows before it at once and
    the big file's once it is hashed (:meth:`resolve`).  So the upload starts sending the
    first big file while the next is hashed, instead of after every big file of the chunk
    (the batches' order puts them all on one thread), and reads each big file once."""

    def __init__(self) -> None:
        self._pool: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        #: ``id(rows) -> [(index, future, os_prefix)]``: the placeholders of a rows list
        self._deferred: dict[int, list[tuple[int, Future[_BigFile], str]]] = {}
        #: the big files hashed, for the digest cache (see :func:`_hash_runs`)
        self.kept: list[HashedFile] = []

    def is_big(self, size: int) -> bool:
        from zarrchive.client.parts import PART_HASH_MIN

        return size > PART_HASH_MIN

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
    """``(size, md5)`` of a local file, read in large blocks."""
    return _md5(os.fspath(path))


#: ``(prefix, [(name, md5, size)])``: hashed files of one directory (a run or a part of one).
_Hashed = tuple[str, list[tuple[str, str, int]]]


def _hash_batch(batch: list[_Run], lane: _Lane | None = None) -> list[_Hashed]:
    """md5 every file of *batch*: :func:`_md5` inlined, this loop is the hot spot.  With a
    *lane*, a file whose first read fills the buffer and that proves big is left to it."""
    try:
        buffers: list[memoryview] = _buffers.buffers
    except AttributeError:
        buffers = _buffers.buffers = [memoryview(bytearray(BLOCK_SIZE))]
    view = buffers[0]
    open_, readv, close, md5, flags = os.open, os.readv, os.close, hashlib.md5, _OPEN_FLAGS
    result: list[_Hashed] = []
    for prefix, os_prefix, names in batch:
        rows: list[tuple[str, str, int]] = []
        append = rows.append
        for name in names:
            path = os_prefix + name
            try:
                fd = open_(path, flags)
                try:
                    size = n = readv(fd, buffers)
                    if n == BLOCK_SIZE and lane is not None:
                        st_size = os.fstat(fd).st_size
                        if lane.is_big(st_size):
                            lane.defer(rows, os_prefix, name, st_size)
                            continue
                    digest = md5(view[:n], usedforsecurity=False)
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
        result.append((prefix, rows))
    return result


def _hash_cached_batch(
    batch: list[_Run],
    known_by_dir: dict[str, Known],
    sink: list[HashedFile],
    lane: _Lane | None = None,
) -> list[_Hashed]:
    """:func:`_hash_batch` with a digest cache: a file whose stat record is the cached one
    is not read; every file read is appended to *sink* with its ``fstat`` record."""
    try:
        buffers: list[memoryview] = _buffers.buffers
    except AttributeError:
        buffers = _buffers.buffers = [memoryview(bytearray(BLOCK_SIZE))]
    view = buffers[0]
    open_, readv, close, md5, flags = os.open, os.readv, os.close, hashlib.md5, _OPEN_FLAGS
    stat, fstat, time_ns = os.stat, os.fstat, _time_ns
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
                    size = n = readv(fd, buffers)
                    if n == BLOCK_SIZE and lane is not None and lane.is_big(st.st_size):
                        lane.defer(rows, os_prefix, name, st.st_size)
                        continue  # the lane's result goes to the cache (_hash_runs)
                    digest = md5(view[:n], usedforsecurity=False)
                    while n:
                        n = readv(fd, buffers)
                        if n:
                            digest.update(view[:n])
                            size += n
                finally:
                    close(fd)
            except OSError as exc:
                raise LocalFileError(f"cannot read {_display(path)}: {exc.strerror}") from None
            hexdigest = digest.hexdigest()
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


def _time_ns() -> int:
    return time.time_ns()


def _check_jobs(jobs: int | None) -> int:
    jobs = default_jobs() if jobs is None else jobs
    if jobs < 1:
        raise InvalidInput(f"jobs must be at least 1, got {jobs}")
    return jobs


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

    *part_md5s* (for an upload; None: :func:`zarrchive.client.parts.uploading`): the big
    files' parts are hashed in the same read as the whole file (:class:`_Lane`).

    *first_chunk*: the files are hashed a chunk at a time, the first result given only once
    its chunk is hashed; for a consumer that starts work on the first entries (an upload),
    the chunks ramp up from *first_chunk* files (see :func:`_chunks`).
    """
    if part_md5s is None:
        from zarrchive.client.parts import uploading

        part_md5s = uploading()
    hashed = _hash_runs(
        _walk_runs(root), _check_jobs(jobs), progress, cache, part_md5s, first_chunk
    )
    return (
        ZarrEntry(prefix + name, size, md5) for prefix, rows in hashed for name, md5, size in rows
    )


def _chunks(
    runs: Iterator[_Run], limit: int, first: int | None = None
) -> Iterator[tuple[list[_Run], int]]:
    """The runs in chunks of at least *limit* files (the last one smaller), with their count.

    With *first*, the chunks ramp up: the first holds *first* files, each next one twice as
    many, until they reach *limit*; runs are split to keep to that (a directory of many
    files is then in several chunks).  Pure."""
    chunk: list[_Run] = []
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


def _batches(chunk: list[_Run], size: int) -> Iterator[list[_Run]]:
    """The files of *chunk* in batches of *size* files (runs split where needed)."""
    batch: list[_Run] = []
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


def _hash_runs(
    runs: Iterator[_Run],
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
            hash_batch: Callable[[list[_Run]], list[_Hashed]] = partial(_hash_batch, lane=lane)
            if cache is not None and cache.usable:
                now = _time_ns()
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


def _local_tree(
    root: str | os.PathLike[str],
    jobs: int | None,
    progress: ProgressCallback | None,
    hasher: TreeHasher,
    cache: DigestCache | None,
) -> DirectoryDigest:
    hashed = _hash_runs(_walk_runs(root), _check_jobs(jobs), progress, cache)
    add_files = hasher.add_files
    for prefix, rows in hashed:
        add_files(prefix[:-1], rows)
    return hasher.finish()


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
    *cache*, from the cached directory digests (:mod:`zarrchive.client.local_tree`).
    """
    if cache is not None and cache.usable:
        from zarrchive.client.local_tree import scan_tree

        return scan_tree(root, cache=cache, jobs=jobs, progress=progress).checksum
    return _local_tree(root, jobs, progress, TreeHasher(), None).digest


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
    (:mod:`zarrchive.client.local_tree`)."""
    if cache is not None and cache.usable and not with_nodes:
        from zarrchive.client.local_tree import scan_tree

        tree = scan_tree(root, cache=cache, jobs=jobs, progress=progress)
        return tree.directory_digests()
    hasher = TreeHasher(collect=True, with_nodes=with_nodes)
    _local_tree(root, jobs, progress, hasher, cache)
    return hasher.completed


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
    digest cache (:func:`zarrchive.client.digest_cache.default_cache`)."""
    if cache == "default":
        from zarrchive.client.digest_cache import default_cache

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
    "BLOCK_SIZE",
    "LocalFile",
    "ProgressCallback",
    "default_jobs",
    "hash_local",
    "iter_local_entries",
    "local_checksum",
    "local_directory_digests",
    "local_entries",
    "md5_file",
    "transfer_jobs",
    "walk_local",
]
