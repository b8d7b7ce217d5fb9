"""A local cache of the md5s of local files, so that an unchanged file is not read again.

The md5 of a file is kept in a small SQLite file (:func:`default_cache_path`), under the
file's directory path and name, with the file's *stat record* when it was hashed:
``(device, inode, size, mtime_ns, ctime_ns)``.  A cached md5 is used only when the
file's stat record now is exactly the one it was hashed with, and only if the record was
*settled* when it was hashed (:func:`may_store`); otherwise the file is read and hashed.

Why that is never stale (the cases the cache must not be fooled by):

- *A rewrite with the same size in the same timestamp tick* (the racy-git problem): a
  file whose mtime or ctime was within :data:`SETTLE_NS` of the clock when it was hashed
  is not cached at all, so any later write, which stamps a time at least that late, gives
  a different record.  :data:`SETTLE_NS` (3 s) is more than the coarsest timestamp
  granularity of common file systems (FAT: 2 s).
- *A write that restores the mtime* (``touch -d``, ``rsync -t``, ``os.utime``): the
  ctime, which no program can set, changes.
- *A file replaced by a rename*: another inode, and a new ctime.  *A hard link made or
  removed*: the link count changes the ctime.  *A copied tree*: other paths and inodes.
- *A changed clock*: a record stamped after "now" (the clock went back since it was
  written) is not trusted; a file with a time in the future is not cached (it is not
  settled).

Limits, as for any stat-based cache (git's index, rsync's quick check): a program that
rewrites a file and then resets both its mtime and the system clock, or a network file
system whose server clock runs more than :data:`SETTLE_NS` behind this machine's *and*
whose timestamps are coarse, could hide a change.  ``--no-cache`` (or
``ZARRCHIVE_NO_CACHE=1``) hashes everything.  The cache is used on POSIX systems only (on
Windows ``st_ctime`` is the creation time, which a rewrite does not change).

Concurrency and failures: the file is in WAL mode (readers never wait for a writer) with
a busy timeout; several processes may use it at once.  A cache that cannot be opened,
read or written (corrupt, read-only, disk full) never fails a command: the files are
hashed, and one warning is logged (``zarrchive.client.local.digest_cache``).
"""

from __future__ import annotations

import contextlib
import logging
import os
import queue
import sqlite3
import sys
import threading
import time
from array import array
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, NamedTuple

log = logging.getLogger(__name__)

#: A file whose mtime or ctime is less than this before the time of hashing is not cached.
SETTLE_NS = 3_000_000_000
#: Seconds a writer waits for another process's write to end before giving up (the md5s
#: of that chunk are then simply not cached).
BUSY_TIMEOUT = 5.0
#: A directory whose entries were not used for this many days is removed from the cache.
KEEP_DAYS = 60
#: Bumped when the schema changes: an older file is rebuilt.
SCHEMA_VERSION = 6
#: Stat records are stored as signed 64-bit integers: larger device or inode numbers are
#: not cached.
_MAX_INT = (1 << 63) - 1

#: One row per directory (by its absolute path): its files' names (``\\0``-separated),
#: their stat records (``array("q")``, 5 integers a file: dev, ino, size, mtime_ns,
#: ctime_ns), their md5s (16 bytes each, concatenated), and the latest time any was hashed.  Reading
#: or writing a directory is one row, unpacked by C code: a few tenths of a microsecond
#: a file, where a row a file costs several microseconds.
#:
#: The directory's digest (:class:`DirectoryRow`, written by
#: :mod:`zarrchive.client.local.tree`) is kept beside them with the names and stat records
#: of its subdirectories; it is ``NULL`` in a row written file by file (:meth:`store`).
_SCHEMA = """
CREATE TABLE IF NOT EXISTS directories (
    path BLOB PRIMARY KEY,
    names TEXT NOT NULL,
    stats BLOB NOT NULL,
    md5s BLOB NOT NULL,
    hashed_ns INTEGER NOT NULL,
    used_day INTEGER NOT NULL,
    dirs TEXT NOT NULL DEFAULT '',
    dir_stats BLOB NOT NULL DEFAULT x'',
    digest TEXT
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS directories_used_day ON directories (used_day)
"""


class StatKey(NamedTuple):
    """What identifies a file's content without reading it."""

    dev: int
    ino: int
    size: int
    mtime_ns: int
    ctime_ns: int


def stat_key(st: os.stat_result) -> StatKey:
    return StatKey(st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


#: A file just hashed: ``(os_directory, name, dev, ino, size, mtime_ns, ctime_ns, md5,
#: hashed_ns)``: where, its stat record when opened, its md5 (hex), and the clock
#: (``time.time_ns()``) before it was opened.  A flat tuple: one is made per file hashed.
HashedFile = tuple[str, str, int, int, int, int, int, str, int]


def may_store(key: StatKey, hashed_ns: int) -> bool:
    """True if a file with stat record *key*, hashed after *hashed_ns*, may be cached.

    Its mtime and ctime must be at least :data:`SETTLE_NS` older than the hashing: a
    later write then stamps a later time (whatever the file system's timestamp
    granularity up to that), so it cannot leave the record unchanged.
    """
    settled = hashed_ns - SETTLE_NS
    return (
        key.mtime_ns < settled
        and key.ctime_ns < settled
        and 0 <= key.dev <= _MAX_INT
        and 0 <= key.ino <= _MAX_INT
    )


def may_store_record(file: HashedFile) -> bool:
    """:func:`may_store` for a file just hashed."""
    _, _, dev, ino, _, mtime, ctime, _, hashed = file
    settled = hashed - SETTLE_NS
    return mtime < settled and ctime < settled and 0 <= dev <= _MAX_INT and 0 <= ino <= _MAX_INT


def is_trusted(cached: StatKey, hashed_ns: int, now: StatKey, now_ns: int) -> bool:
    """True if a cached md5 (file record *cached*, hashed at *hashed_ns*) is the md5 of
    the file whose record is *now*, at the clock's *now_ns*.

    The records must be equal, the cached one settled when hashed, and hashed before
    *now_ns* (else the clock went back since, and a rewrite could repeat a timestamp).
    """
    return cached == now and hashed_ns <= now_ns and may_store(cached, hashed_ns)


def default_cache_dir() -> Path:
    """``$ZARRCHIVE_CACHE_DIR``, else the platform's user cache directory + ``zarrchive``:
    ``$XDG_CACHE_HOME`` or ``~/.cache`` (Linux and other Unixes), ``~/Library/Caches``
    (macOS), ``%LOCALAPPDATA%`` (Windows)."""
    explicit = os.environ.get("ZARRCHIVE_CACHE_DIR")
    if explicit:
        return Path(explicit)
    if sys.platform == "darwin":
        return Path.home() / "Library" / "Caches" / "zarrchive"
    if sys.platform == "win32":
        local = os.environ.get("LOCALAPPDATA")
        return (Path(local) if local else Path.home() / "AppData" / "Local") / "zarrchive" / "Cache"
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "zarrchive"


def default_cache_path() -> Path:
    """The digest cache's file in :func:`default_cache_dir`."""
    return default_cache_dir() / "digests.sqlite3"


class Known(NamedTuple):
    """One directory's cached files, as stored (unpacked by C code, not file by file):
    file ``i`` is named in *positions* (``name -> i``), its stat record is
    ``stats[5 * i : 5 * i + 5]`` (:class:`StatKey` order) and its md5 ``md5s[i]``."""

    positions: dict[str, int]
    stats: array[int]
    md5s: list[str]

    def items(self) -> Iterator[tuple[str, tuple[int, ...], str]]:
        """``(name, stat record, md5)`` of every file."""
        stats, md5s = self.stats, self.md5s
        for name, i in self.positions.items():
            yield name, tuple(stats[5 * i : 5 * i + 5]), md5s[i]


NOTHING_KNOWN = Known({}, array("q"), [])


class DirectoryRow(NamedTuple):
    """One directory as cached by :mod:`zarrchive.client.local.tree`.

    *names*: its files' names, sorted and ``\\0``-separated; *stats*: their stat records
    (:func:`pack_records`); *md5s*: their md5s, 16 bytes each (:func:`pack_md5s`; only
    settled files are kept: a row that lacks a file never has a digest).  *dirs* and *dir_stats*: the same for
    its subdirectories (no md5s).  *digest*: the directory's Dandi Zarr checksum when every
    file below it was settled (``""``: no file below it), ``None`` if not known.
    *hashed_ns*: the clock when its newest file was hashed.
    """

    names: str
    stats: bytes
    md5s: bytes
    dirs: str
    dir_stats: bytes
    digest: str | None
    hashed_ns: int


#: The stat record's fields, in :class:`StatKey` order.
STAT_FIELDS = ("st_dev", "st_ino", "st_size", "st_mtime_ns", "st_ctime_ns")


def unpack_records(packed: bytes) -> list[tuple[int, ...]] | None:
    """The stat records packed by :func:`pack_records`, as 5-tuples; ``None`` if damaged."""
    values = array("q")
    try:
        values.frombytes(packed)
    except (ValueError, TypeError):
        return None
    if len(values) % 5:
        return None
    if _BIG_ENDIAN:
        values.byteswap()
    each = iter(values)
    return list(zip(each, each, each, each, each, strict=False))


def pack_md5s(md5s: Iterable[str]) -> bytes:
    """Hex md5s as stored: 16 bytes each, concatenated (half the bytes of the hex)."""
    return bytes.fromhex(" ".join(md5s))


def unpack_md5s(packed: bytes) -> list[str]:
    """The inverse of :func:`pack_md5s` (lower-case hex); ValueError if not whole md5s."""
    if len(packed) % 16:
        raise ValueError(f"{len(packed)} bytes of md5s")
    text = packed.hex()
    return [text[i : i + 32] for i in range(0, len(text), 32)]


def pack_records(records: Iterable[int]) -> bytes | None:
    """Stat record integers (5 a file, :class:`StatKey` order) as stored: little-endian
    signed 64-bit; ``None`` if one does not fit (such a directory is not cached)."""
    try:
        packed = array("q", records)
    except OverflowError:
        return None
    if _BIG_ENDIAN:
        packed.byteswap()
    return packed.tobytes()


class DigestCache:
    """The md5s of local files by stat record, in the SQLite file *path*.

    Opened with :meth:`open` (``None`` if unusable).  One thread at a time may use an
    instance (the walk's thread); :meth:`known` loads one directory's entries,
    :meth:`store` saves newly hashed files.  Any SQLite error after opening turns the
    cache off for the rest of the process, with one warning: never an error.
    """

    def __init__(self, connection: sqlite3.Connection, path: str) -> None:
        self._db: sqlite3.Connection | None = connection
        self.path = path
        #: What :meth:`known` returned, by directory key, until the next :meth:`store`.
        self._loaded: dict[bytes, Known] = {}
        #: Directories read whose day of use is before today, until :meth:`flush`.
        self._used: set[bytes] = set()
        #: Held by every use of the connection (the walk's thread and a :class:`RowWriter`).
        self._lock = threading.RLock()

    @classmethod
    def open(cls, path: str | os.PathLike[str] | None = None) -> DigestCache | None:
        """The cache in *path* (default :func:`default_cache_path`), created if missing;
        ``None``, with a warning, if it cannot be opened or created."""
        target = Path(path) if path is not None else default_cache_path()
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            db = sqlite3.connect(
                target, timeout=BUSY_TIMEOUT, isolation_level=None, check_same_thread=False
            )
        except (OSError, sqlite3.Error) as exc:
            warn_once(
                f"the digest cache {str(target)!r} cannot be opened ({exc}): hashing every file"
            )
            return None
        try:
            _prepare(db)
        except sqlite3.Error as exc:
            db.close()
            warn_once(
                f"the digest cache {str(target)!r} is unusable ({exc}): hashing every file "
                "(delete it to start a new one)"
            )
            return None
        return cls(db, str(target))

    def close(self) -> None:
        with self._lock:
            if self._db is not None:
                self._db.close()
                self._db = None

    def __enter__(self) -> DigestCache:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def usable(self) -> bool:
        return self._db is not None

    def _fail(self, what: str, exc: Exception) -> None:
        warn_once(f"the digest cache {self.path!r} failed ({what}: {exc}): hashing every file")
        with self._lock:
            db, self._db = self._db, None
            if db is not None:
                with contextlib.suppress(sqlite3.Error):
                    db.close()

    def _select(self, key: bytes, columns: str) -> Any | None:
        """The *columns* of the directory row *key*; None if there is none, no usable
        database, or the read failed (then the cache is given up: :meth:`_fail`)."""
        db = self._db
        if db is None:
            return None
        try:
            with self._lock:
                return db.execute(
                    f"SELECT {columns} FROM directories WHERE path = ?", (key,)
                ).fetchone()
        except sqlite3.Error as exc:
            self._fail("reading", exc)
            return None

    def has_row(self, key: bytes) -> bool:
        """Whether the directory *key* (:func:`directory_key`) has a row (walked before)."""
        return self._select(key, "1") is not None

    def known(self, os_directory: str, now_ns: int) -> Known:
        """The trusted cached files of *os_directory* (as walked: a path to a directory,
        with or without a final separator), at the clock's *now_ns*.

        Nothing is known if the directory was stored later than *now_ns* (the clock went
        back since).  The row's day of use is updated by :meth:`flush` (once a day)."""
        key = _directory_key(os_directory)
        row = self._select(key, "names, stats, md5s, hashed_ns, used_day")
        known = NOTHING_KNOWN
        if row is not None and row[4] < _today():
            self._used.add(key)
        if row is not None and row[3] <= now_ns:
            try:
                known = unpack_row(row[0], row[1], row[2])
            except (ValueError, TypeError) as exc:
                warn_once(f"the digest cache {self.path!r} has a damaged entry ({exc}): ignored")
        self._loaded[key] = known
        return known

    def row(self, key: bytes, now_ns: int) -> DirectoryRow | None:
        """The cached row of the directory *key* (:func:`directory_key`), ``None`` if there
        is none, it is damaged, or it was stored later than *now_ns* (the clock went back
        since)."""
        found = self._select(
            key, "names, stats, md5s, dirs, dir_stats, digest, hashed_ns, used_day"
        )
        if found is None:
            return None
        if found[7] < _today():
            self._used.add(key)
        names, stats, md5s, dirs, dir_stats, digest, hashed_ns, _ = found
        if (
            hashed_ns > now_ns
            or not isinstance(names, str)
            or not isinstance(stats, bytes)
            or not isinstance(md5s, bytes)
            or not isinstance(dirs, str)
            or not isinstance(dir_stats, bytes)
            or not (digest is None or isinstance(digest, str))
        ):
            return None
        return DirectoryRow(names, stats, md5s, dirs, dir_stats, digest, hashed_ns)

    def keys_below(self, root_key: bytes) -> set[bytes]:
        """The keys of the rows of the directory *root_key* (:func:`directory_key`) and of
        every directory below it, in one range read (a walk then looks up only those: a
        first run costs no look-up at all).  Empty without a usable database or on error."""
        db = self._db
        if db is None:
            return set()
        sep = os.fsencode(os.sep)
        prefix = root_key if root_key.endswith(sep) else root_key + sep
        # Every key that starts with *prefix*: from it (inclusive) to the prefix with its
        # last byte (the separator, never 0xff) plus one (exclusive).
        end = prefix[:-1] + bytes([prefix[-1] + 1])
        try:
            with self._lock:
                found = db.execute(
                    "SELECT path FROM directories WHERE path = ? OR (path >= ? AND path < ?)",
                    (root_key, prefix, end),
                ).fetchall()
        except sqlite3.Error as exc:
            self._fail("reading", exc)
            return set()
        return {key for (key,) in found if isinstance(key, bytes)}

    def writer(self) -> RowWriter:
        """A :class:`RowWriter` of this cache (close it before the cache)."""
        return RowWriter(self)

    def store_rows(self, rows: Iterable[tuple[bytes, DirectoryRow]]) -> int:
        """Save whole directory rows ``(key, row)`` (:func:`directory_key`) in one
        transaction (each replaces the directory's row); the number saved.  Errors as for
        :meth:`store`."""
        db = self._db
        if db is None:
            return 0
        today = _today()
        values = [
            (
                key,
                row.names,
                row.stats,
                row.md5s,
                row.hashed_ns,
                today,
                row.dirs,
                row.dir_stats,
                row.digest,
            )
            for key, row in rows
        ]
        if not values:
            return 0
        try:
            with self._lock:
                db.execute("BEGIN IMMEDIATE")
                try:
                    db.executemany(
                        "INSERT OR REPLACE INTO directories (path, names, stats, md5s, "
                        "hashed_ns, used_day, dirs, dir_stats, digest) "
                        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                        values,
                    )
                    db.execute("COMMIT")
                except BaseException:
                    if db.in_transaction:
                        db.execute("ROLLBACK")
                    raise
        except sqlite3.OperationalError as exc:
            if not _is_busy(exc):
                self._fail("writing", exc)
            return 0
        except sqlite3.Error as exc:
            self._fail("writing", exc)
            return 0
        self._used.difference_update(value[0] for value in values)
        return len(values)

    def store(self, files: Iterable[HashedFile]) -> int:
        """Save the settled ones of *files* (:func:`may_store`); the number saved.

        Each directory's row is rewritten with its entries loaded by :meth:`known` (or
        read again) and the new ones.  If another process holds the write lock longer
        than :data:`BUSY_TIMEOUT`, they are not saved (a later run hashes them again);
        other errors turn the cache off.
        """
        db = self._db
        if db is None:
            return 0
        by_directory: dict[str, list[HashedFile]] = {}
        for file in files:
            where, _, dev, ino, _, mtime, ctime, _, hashed = file
            settled = hashed - SETTLE_NS  # may_store, inlined
            if (
                mtime < settled
                and ctime < settled
                and 0 <= dev <= _MAX_INT
                and 0 <= ino <= _MAX_INT
            ):
                by_directory.setdefault(where, []).append(file)
        saved = 0
        try:
            with self._lock:
                db.execute("BEGIN IMMEDIATE")
                try:
                    for where, new in by_directory.items():
                        key = _directory_key(where)
                        known = self._loaded.get(key)
                        if known is None:
                            known = self._read(db, key)
                        merged = {name: (record, md5) for name, record, md5 in known.items()}
                        for _, name, dev, ino, size, mtime, ctime, md5, _ in new:
                            merged[name] = ((dev, ino, size, mtime, ctime), md5)
                        hashed = max(file[8] for file in new)
                        db.execute(
                            "INSERT OR REPLACE INTO directories (path, names, stats, md5s, "
                            "hashed_ns, used_day) VALUES (?, ?, ?, ?, ?, ?)",
                            (key, *pack_row(merged), hashed, _today()),
                        )
                        self._used.discard(key)
                        saved += len(new)
                    db.execute("COMMIT")
                except BaseException:
                    if db.in_transaction:
                        db.execute("ROLLBACK")
                    raise
        except sqlite3.OperationalError as exc:
            if _is_busy(exc):
                return 0
            self._fail("writing", exc)
            return 0
        except sqlite3.Error as exc:
            self._fail("writing", exc)
            return 0
        finally:
            self._loaded.clear()
        return saved

    def flush(self) -> None:
        """Record today as the day of use of the directories read since the last flush
        (rows not used for :data:`KEEP_DAYS` days are removed when a cache is opened)."""
        db = self._db
        self._loaded.clear()
        if db is None or not self._used:
            return
        used, self._used = self._used, set()
        today = _today()
        try:
            with self._lock:
                db.execute("BEGIN IMMEDIATE")
                try:
                    db.executemany(
                        "UPDATE directories SET used_day = ? WHERE path = ?",
                        [(today, key) for key in used],
                    )
                    db.execute("COMMIT")
                except BaseException:
                    if db.in_transaction:
                        db.execute("ROLLBACK")
                    raise
        except sqlite3.OperationalError as exc:
            if not _is_busy(exc):
                self._fail("writing", exc)
        except sqlite3.Error as exc:
            self._fail("writing", exc)

    def _read(self, db: sqlite3.Connection, key: bytes) -> Known:
        row = db.execute(
            "SELECT names, stats, md5s, hashed_ns FROM directories WHERE path = ?", (key,)
        ).fetchone()
        if row is None or row[3] > time.time_ns():
            return NOTHING_KNOWN
        try:
            return unpack_row(row[0], row[1], row[2])
        except (ValueError, TypeError):
            return NOTHING_KNOWN

    def forget(self) -> None:
        """Remove every entry (``zarrchive`` has no command for it: delete the file)."""
        db = self._db
        if db is None:
            return
        try:
            with self._lock:
                db.execute("DELETE FROM directories")
                self._loaded.clear()
        except sqlite3.Error as exc:
            self._fail("clearing", exc)


class RowWriter:
    """Writes directory rows (:meth:`DigestCache.store_rows`) on a thread of its own, so
    that SQLite's work (which runs without the GIL) overlaps the walk and the hashing.

    Each batch is one transaction of rows each complete in itself (computed from what was
    read, and with the clock before any of their files was opened): a process stopped at any
    point leaves rows that were true, or none; never one that is half written.  At most
    :attr:`MAX_QUEUED` batches wait (then :meth:`submit` waits).  A failure is the cache's
    (one warning, the cache off): never the caller's.
    """

    MAX_QUEUED = 4

    def __init__(self, cache: DigestCache) -> None:
        self._cache = cache
        self._queue: queue.Queue[list[tuple[bytes, DirectoryRow]] | None] = queue.Queue(
            self.MAX_QUEUED
        )
        self.saved = 0
        self._thread: threading.Thread | None = None

    def submit(self, rows: list[tuple[bytes, DirectoryRow]]) -> None:
        """Queue *rows* to be written (the thread starts with the first batch)."""
        if not rows or not self._cache.usable:
            return
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._run, name="zarrchive-digest-cache", daemon=True
            )
            self._thread.start()
        self._queue.put(rows)

    def _run(self) -> None:
        while True:
            rows = self._queue.get()
            if rows is None:
                return
            try:
                self.saved += self._cache.store_rows(rows)
            except Exception as exc:  # never the caller's failure
                self._cache._fail("writing", exc)

    def close(self) -> None:
        """Write what is queued, then stop the thread."""
        thread, self._thread = self._thread, None
        if thread is not None:
            self._queue.put(None)
            thread.join()

    def __enter__(self) -> RowWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


_BIG_ENDIAN = sys.byteorder == "big"


def pack_row(files: dict[str, tuple[tuple[int, ...], str]]) -> tuple[str, bytes, bytes]:
    """``(names, stats, md5s)`` of a directory row's files (:class:`DirectoryRow`), from
    ``name -> (stat record, md5)``."""
    stats = array("q")
    for record, _ in files.values():
        stats.extend(record)
    if _BIG_ENDIAN:  # stored little-endian, whatever the machine
        stats.byteswap()
    return "\0".join(files), stats.tobytes(), pack_md5s(md5 for _, md5 in files.values())


def unpack_row(names_text: str, stats_bytes: bytes, md5s_bytes: bytes) -> Known:
    """The files of a directory row (:class:`DirectoryRow`'s *names*, *stats* and *md5s*) as
    :class:`Known`: the inverse of :func:`pack_row`; ValueError (TypeError for md5s that are
    not bytes) if the three do not agree."""
    if not names_text:
        return NOTHING_KNOWN
    names = names_text.split("\0")
    stats = array("q")
    stats.frombytes(stats_bytes)
    if _BIG_ENDIAN:
        stats.byteswap()
    if not isinstance(md5s_bytes, bytes):
        raise TypeError("md5s are not bytes")
    count = len(names)
    if len(stats) != 5 * count or len(md5s_bytes) != 16 * count:
        raise ValueError(f"{count} names, {len(stats)} integers, {len(md5s_bytes)} md5 bytes")
    md5s = unpack_md5s(md5s_bytes)
    return Known(dict(zip(names, range(count), strict=True)), stats, md5s)


def _is_busy(exc: sqlite3.OperationalError) -> bool:
    text = str(exc)
    return "locked" in text or "busy" in text


def directory_key(os_directory: str) -> bytes:
    """The key of a directory's row: its absolute path (as walked, links not resolved)."""
    return os.fsencode(os.path.abspath(os_directory))


_directory_key = directory_key


#: The page size of a new cache file: a directory's row (about 60 bytes a file) fits in
#: one page for directories of up to a few hundred files, without a chain of overflow pages
#: each partly empty (with 4 KiB pages the file was twice its rows' bytes).
PAGE_SIZE = 16384


def _prepare(db: sqlite3.Connection) -> None:
    db.execute(f"PRAGMA page_size={PAGE_SIZE}")  # no effect on an existing file
    db.execute("PRAGMA journal_mode=WAL")
    # NORMAL, not OFF: in WAL mode it syncs only at checkpoints (a few times per 10^5 files),
    # and it keeps the file consistent through a machine crash; with OFF a torn checkpoint
    # could mix the pages of two versions of a large row (names of one, records of another).
    db.execute("PRAGMA synchronous=NORMAL")
    version = db.execute("PRAGMA user_version").fetchone()[0]
    if version != SCHEMA_VERSION:
        db.execute("BEGIN IMMEDIATE")
        try:
            if version != 0:
                db.execute("DROP TABLE IF EXISTS files")
                db.execute("DROP TABLE IF EXISTS directories")
            for statement in _SCHEMA.split(";"):
                if statement.strip():
                    db.execute(statement)
            db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
            db.execute("COMMIT")
        except BaseException:
            if db.in_transaction:
                db.execute("ROLLBACK")
            raise
    # A file that is not a database fails here, not in the middle of a walk.
    db.execute("SELECT count(*) FROM directories WHERE path = x''").fetchone()
    try:
        db.execute("DELETE FROM directories WHERE used_day < ?", (_today() - KEEP_DAYS,))
    except sqlite3.OperationalError as exc:  # another process is writing: next time
        if not _is_busy(exc):
            raise


def _today() -> int:
    """Days since the epoch, by the clock."""
    return time.time_ns() // 86_400_000_000_000


_warned: set[str] = set()


def warn_once(message: str) -> None:
    """Log *message* as a warning, once per process."""
    if message not in _warned:
        _warned.add(message)
        log.warning("zarrchive: warning: %s", message)


# -- the process's default cache ---------------------------------------------------------------
_default_enabled = True
_default: DigestCache | None = None
_default_path: Path | None = None
_default_lock = threading.Lock()


def cache_enabled() -> bool:
    """False when disabled (``--no-cache``, :func:`disable_default_cache`,
    ``ZARRCHIVE_NO_CACHE`` set to anything but ``0``/empty) or not on POSIX."""
    flag = os.environ.get("ZARRCHIVE_NO_CACHE", "")
    return _default_enabled and flag in ("", "0") and os.name == "posix"


def disable_default_cache() -> None:
    """Hash every file in this process (``--no-cache``)."""
    global _default_enabled
    _default_enabled = False


def default_cache() -> DigestCache | None:
    """The process's cache in :func:`default_cache_path` (opened on first use, again if
    that path changes); ``None`` if disabled or unusable."""
    global _default, _default_path
    if not cache_enabled():
        return None
    path = default_cache_path()
    with _default_lock:
        if path != _default_path:
            if _default is not None:
                _default.close()
            _default = DigestCache.open(path)
            _default_path = path
        return _default if _default is not None and _default.usable else None


def now_ns() -> int:
    return time.time_ns()


#: A file this process wrote and checked itself: ``(os_directory, name, stat after it was
#: put in place, md5)``.
WrittenFile = tuple[str, str, os.stat_result, str]


def store_written(cache: DigestCache, files: Iterable[WrittenFile]) -> int:
    """Save the md5s of files this process wrote itself, their bytes checked against the
    md5 while they were written (a download), without reading them again; the number saved.

    Each file's stat record is the one taken right after it was renamed into place.  It is
    stored as if hashed now: only the files whose mtime and ctime are already
    :data:`SETTLE_NS` old are kept (:func:`may_store`), the rest is hashed by the next
    command that needs it.  A later write changes the record (mtime, or ctime when the
    mtime is restored), as for a file hashed by reading; the one window this adds is
    between the rename and that stat (microseconds): another program rewriting the new
    file in place, with the same size, within one timestamp tick of the rename.
    """
    hashed = now_ns()
    return cache.store(
        (
            where,
            name,
            st.st_dev,
            st.st_ino,
            st.st_size,
            st.st_mtime_ns,
            st.st_ctime_ns,
            md5,
            hashed,
        )
        for where, name, st, md5 in files
    )


__all__ = [
    "SETTLE_NS",
    "STAT_FIELDS",
    "DigestCache",
    "DirectoryRow",
    "HashedFile",
    "Known",
    "RowWriter",
    "StatKey",
    "WrittenFile",
    "cache_enabled",
    "default_cache",
    "default_cache_dir",
    "default_cache_path",
    "directory_key",
    "disable_default_cache",
    "is_trusted",
    "may_store",
    "may_store_record",
    "pack_md5s",
    "pack_records",
    "pack_row",
    "stat_key",
    "store_written",
    "unpack_md5s",
    "unpack_records",
    "unpack_row",
]
