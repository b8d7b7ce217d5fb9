"""The digest cache: md5s of unchanged local files are not read again, and never stale.

How a test sees whether a cached md5 was used: it *poisons* the cache (every cached md5
replaced by a wrong one, the stat records kept) and hashes again; a file whose md5 comes
out poisoned was taken from the cache, a file whose true md5 comes out was read.  Every
case the cache must not be fooled by (a rewrite of the same size in the same timestamp
tick, a restored mtime, a replacement by rename, a hard link, a copied tree, a clock set
back) must come out true.

Files written by a test are seconds old at most, which the cache refuses to keep (a later
rewrite could land in the same timestamp tick): most tests hash with the clock of
:mod:`zarrchive.client.local.hashing` set :data:`LATER` ahead, as if the files had settled.
"""

from __future__ import annotations

import hashlib
import logging
import multiprocessing
import os
import shutil
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.helpers.digest_caches import LATER
from zarrchive.checksum import compute_checksum
from zarrchive.client.local import digest_cache, hash_local, hashing, local_checksum, local_entries
from zarrchive.client.local.digest_cache import (
    SETTLE_NS,
    DigestCache,
    StatKey,
    default_cache,
    is_trusted,
    may_store,
    pack_md5s,
    pack_row,
    unpack_md5s,
    unpack_row,
)

POISON = "0" * 32
BIN = Path(sys.executable).parent


pytestmark = pytest.mark.usefixtures("fresh_warnings")


def make_tree(root: Path, files: int = 40) -> dict[str, bytes]:
    contents = {}
    for i in range(files):
        path = f"a/{i % 3}/{i}" if i % 4 else f"b{i}"
        data = f"file {i} ".encode() * (1 + i % 7)
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_bytes(data)
        contents[path] = data
    return contents


def md5s(root: Path, cache: DigestCache | None) -> dict[str, str]:
    return {e.path: e.md5 for e in local_entries(root, jobs=2, cache=cache)}


def true_md5s(root: Path) -> dict[str, str]:
    return {
        p.relative_to(root).as_posix(): hashlib.md5(p.read_bytes()).hexdigest()
        for p in root.rglob("*")
        if p.is_file()
    }


def poison(cache: DigestCache) -> int:
    """Replace every cached md5 by POISON, keeping the stat records, and forget every
    directory digest (else an unchanged directory's files are not even looked up); the
    entries changed."""
    db = cache._db
    assert db is not None
    changed = 0
    for path, names, stats, md5s_text in db.execute(
        "SELECT path, names, stats, md5s FROM directories"
    ).fetchall():
        known = unpack_row(names, stats, md5s_text)
        changed += len(known.positions)
        bad = {name: (record, POISON) for name, record, _ in known.items()}
        db.execute(
            "UPDATE directories SET md5s = ?, digest = NULL WHERE path = ?",
            (pack_row(bad)[2], path),
        )
    return changed


def rewrite_same_size_same_times(path: Path, data: bytes) -> None:
    """Rewrite *path* in place with *data* (same size), then restore its atime and mtime."""
    before = path.stat()
    assert len(data) == before.st_size
    with open(path, "r+b") as f:
        f.write(data)
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert path.stat().st_mtime_ns == before.st_mtime_ns


# -- the rules (pure) ------------------------------------------------------------------------
stat_keys = st.builds(
    StatKey,
    st.integers(0, 2**63 - 1),
    st.integers(0, 2**63 - 1),
    st.integers(0, 2**40),
    st.integers(-(2**62), 2**62),
    st.integers(-(2**62), 2**62),
)


@given(stat_keys, st.integers(-(2**62), 2**62))
def test_only_settled_records_may_be_stored(key: StatKey, hashed: int) -> None:
    assert may_store(key, hashed) == (
        key.mtime_ns < hashed - SETTLE_NS and key.ctime_ns < hashed - SETTLE_NS
    )


@given(
    write_ns=st.integers(0, 10**12),
    hash_delay=st.integers(0, 10**11),
    rewrite_delay=st.integers(0, 10**11),
    tick_ns=st.sampled_from([1, 1_000, 4_000_000, 10_000_000, 1_000_000_000, 2_000_000_000]),
)
def test_a_stored_record_differs_from_any_later_write(
    write_ns: int, hash_delay: int, rewrite_delay: int, tick_ns: int
) -> None:
    """The racy-git case, whatever the file system's timestamp granularity (up to FAT's 2 s):
    a file written at *write_ns*, hashed at ``write_ns + hash_delay`` and rewritten at or
    after the hashing gets another timestamp, if its record was stored at all."""
    stamp = write_ns - write_ns % tick_ns  # time stamps are truncated to the tick
    hashed = write_ns + hash_delay
    rewrite = hashed + rewrite_delay
    record = StatKey(1, 2, 3, stamp, stamp)
    if may_store(record, hashed):
        later = rewrite - rewrite % tick_ns
        assert later != stamp
        assert not is_trusted(record, hashed, StatKey(1, 2, 3, later, later), rewrite)


@given(stat_keys, stat_keys, st.integers(0, 2**62), st.integers(0, 2**62))
def test_trusted_only_for_the_same_record_and_a_clock_not_set_back(
    cached: StatKey, now: StatKey, hashed: int, clock: int
) -> None:
    trusted = is_trusted(cached, hashed, now, clock)
    assert trusted == (cached == now and hashed <= clock and may_store(cached, hashed))


@given(
    st.dictionaries(
        st.text(st.characters(exclude_characters="\0", exclude_categories=["Cs"]), min_size=1),
        st.tuples(
            st.tuples(*[st.integers(-(2**63), 2**63 - 1)] * 5),
            st.text("0123456789abcdef", min_size=32, max_size=32),
        ),
    )
)
@settings(max_examples=200)
def test_directory_rows_round_trip(known: dict[str, tuple[tuple[int, ...], str]]) -> None:
    names, stats, md5s_text = pack_row(known)
    unpacked = unpack_row(names, stats, md5s_text)
    assert {name: (record, md5) for name, record, md5 in unpacked.items()} == known


def test_a_damaged_row_is_refused() -> None:
    names, stats, md5s_text = pack_row(
        {"a": ((1, 2, 3, 4, 5), "f" * 32), "b": ((1, 2, 3, 4, 5), "e" * 32)}
    )
    with pytest.raises(ValueError):
        unpack_row(names, stats[:-8], md5s_text)
    with pytest.raises(ValueError):
        unpack_row(names, stats, md5s_text[:-1])
    with pytest.raises(ValueError):
        unpack_row(names + "\0c", stats, md5s_text)
    with pytest.raises(ValueError):
        unpack_row(names, stats, md5s_text + b"x")
    with pytest.raises(TypeError):
        unpack_row(names, stats, md5s_text.hex())  # type: ignore[arg-type]


@given(st.lists(st.text("0123456789abcdef", min_size=32, max_size=32), max_size=50))
def test_md5s_are_stored_as_16_bytes_each(md5s: list[str]) -> None:
    packed = pack_md5s(md5s)
    assert len(packed) == 16 * len(md5s)
    assert packed == b"".join(bytes.fromhex(md5) for md5 in md5s)
    assert unpack_md5s(packed) == md5s
    with pytest.raises(ValueError):
        unpack_md5s(packed + b"\0")


# -- the cache on real files -------------------------------------------------------------------
def test_unchanged_files_come_from_the_cache(
    tmp_path: Path, cache: DigestCache, settled: None
) -> None:
    root = tmp_path / "z"
    make_tree(root)
    expected = true_md5s(root)
    assert md5s(root, cache) == expected  # first run: every file read, and stored
    assert poison(cache) == len(expected)
    assert set(md5s(root, cache).values()) == {POISON}  # second run: none read
    assert md5s(root, None) == expected  # without the cache: read


def test_the_checksum_with_a_cache_is_the_checksum(
    tmp_path: Path, cache: DigestCache, settled: None
) -> None:
    root = tmp_path / "z"
    make_tree(root, 300)
    entries = [
        (p, len(d), hashlib.md5(d).hexdigest()) for p, d in sorted(make_tree(root, 300).items())
    ]
    expected = compute_checksum(entries)
    assert local_checksum(root, cache=cache) == expected  # filling
    assert local_checksum(root, cache=cache) == expected  # cached
    assert local_checksum(root, cache=cache, jobs=1) == expected


def test_fresh_files_are_not_cached(tmp_path: Path, cache: DigestCache) -> None:
    """Hashed at the real clock, the files just written are not kept: a rewrite of the same
    size in the same timestamp tick (mtime and ctime alike) would not show in the stat."""
    root = tmp_path / "z"
    make_tree(root)
    md5s(root, cache)
    assert poison(cache) == 0
    path = root / "b0"
    rewrite_same_size_same_times(path, b"FILE 0 ")
    assert md5s(root, cache) == true_md5s(root)


def test_a_rewrite_that_restores_the_mtime_is_seen(
    tmp_path: Path, cache: DigestCache, settled: None
) -> None:
    root = tmp_path / "z"
    make_tree(root)
    md5s(root, cache)
    poison(cache)
    rewrite_same_size_same_times(root / "a/1/1", b"FILE 1 FILE 1 ")  # the ctime changes
    found = md5s(root, cache)
    assert found["a/1/1"] == hashlib.md5(b"FILE 1 FILE 1 ").hexdigest()
    assert found["b0"] == POISON  # the others still come from the cache


def test_a_rewrite_in_the_same_tick_is_seen(
    tmp_path: Path, cache: DigestCache, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file system with coarse timestamps (every time truncated to 2 s), a file written,
    hashed and rewritten with the same size within one tick: the stat record is the same
    before and after, so the cache must not have kept it."""
    root = tmp_path / "z"
    root.mkdir()
    path = root / "f"
    path.write_bytes(b"before")
    tick = 2_000_000_000
    stamp = time.time_ns() // tick * tick
    real_stat, real_fstat = os.stat, os.fstat

    def coarse(result: os.stat_result) -> os.stat_result:
        fields = list(result)
        extra = {"st_mtime_ns": stamp, "st_ctime_ns": stamp, "st_atime_ns": stamp}
        return os.stat_result(fields, extra)

    monkeypatch.setattr(os, "stat", lambda p, *a, **k: coarse(real_stat(p, *a, **k)))
    monkeypatch.setattr(os, "fstat", lambda fd: coarse(real_fstat(fd)))
    assert os.stat(path).st_mtime_ns == stamp
    assert md5s(root, cache) == {"f": hashlib.md5(b"before").hexdigest()}
    path.write_bytes(b"after!")  # same size, same (coarse) times: the same stat record
    assert md5s(root, cache) == {"f": hashlib.md5(b"after!").hexdigest()}


def test_a_file_replaced_by_a_rename_is_read(
    tmp_path: Path, cache: DigestCache, settled: None
) -> None:
    root = tmp_path / "z"
    make_tree(root)
    md5s(root, cache)
    poison(cache)
    target = root / "b0"
    replacement = tmp_path / "new"
    replacement.write_bytes(b"FILE 0 ")  # the same size
    before = target.stat()
    os.utime(replacement, ns=(before.st_atime_ns, before.st_mtime_ns))  # and the same mtime
    os.replace(replacement, target)
    found = md5s(root, cache)
    assert found["b0"] == hashlib.md5(b"FILE 0 ").hexdigest()
    assert found["b4"] == POISON


def test_renamed_files_are_read(tmp_path: Path, cache: DigestCache, settled: None) -> None:
    """A directory renamed, or a file renamed within one: other paths, new ctimes."""
    root = tmp_path / "z"
    make_tree(root)
    md5s(root, cache)
    poison(cache)
    os.rename(root / "a" / "1", root / "a" / "9")
    os.rename(root / "b0", root / "b00")
    found = md5s(root, cache)
    expected = true_md5s(root)
    for path, md5 in found.items():
        if path.startswith("a/9/") or path == "b00":
            assert md5 == expected[path]
        else:
            assert md5 == POISON, path


def test_hard_links_are_read(tmp_path: Path, cache: DigestCache, settled: None) -> None:
    root = tmp_path / "z"
    make_tree(root)
    md5s(root, cache)
    poison(cache)
    os.link(root / "b0", root / "link")  # the link count changes b0's ctime
    found = md5s(root, cache)
    assert found["b0"] == found["link"] == hashlib.md5(b"file 0 ").hexdigest()
    # Written through one name, read through the other.
    md5s(root, cache)
    rewrite_same_size_same_times(root / "link", b"FILE 0 ")
    found = md5s(root, cache)
    assert found["b0"] == found["link"] == hashlib.md5(b"FILE 0 ").hexdigest()


def test_a_copied_tree_is_read(tmp_path: Path, cache: DigestCache, settled: None) -> None:
    root = tmp_path / "z"
    make_tree(root)
    md5s(root, cache)
    poison(cache)
    copy = tmp_path / "copy"
    shutil.copytree(root, copy, copy_function=shutil.copy2)  # times preserved
    assert (copy / "b0").stat().st_mtime_ns == (root / "b0").stat().st_mtime_ns
    assert md5s(copy, cache) == true_md5s(copy)


def test_a_clock_set_back_distrusts_the_entries(
    tmp_path: Path, cache: DigestCache, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Entries written while the clock read LATER are not trusted once it reads earlier (a
    rewrite could then repeat a time stamp already seen)."""
    root = tmp_path / "z"
    make_tree(root)
    with monkeypatch.context() as patch:
        patch.setattr(hashing, "clock_ns", lambda: time.time_ns() + LATER)
        md5s(root, cache)
    assert poison(cache) > 0
    assert md5s(root, cache) == true_md5s(root)  # the clock reads earlier than the entries
    monkeypatch.setattr(hashing, "clock_ns", lambda: time.time_ns() + 2 * LATER)
    assert set(md5s(root, cache).values()) == {POISON}  # and later again: trusted


def test_a_file_that_changes_while_hashed_is_not_kept(
    tmp_path: Path, cache: DigestCache, settled: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The record kept is the one before the read (fstat on the open file): a write during
    the read stamps a new time, so the md5 of the mixed content is never matched."""
    root = tmp_path / "z"
    root.mkdir()
    path = root / "f"
    path.write_bytes(b"x" * 100)
    old = time.time_ns() - 3600 * 10**9
    os.utime(path, ns=(old, old))
    real_readv = os.readv
    calls: list[int] = []

    def readv_then_write(fd: int, buffers: list[memoryview]) -> int:
        n = real_readv(fd, buffers)
        if not calls:
            calls.append(n)
            path.write_bytes(b"y" * 100)  # while it is being hashed
        return n

    monkeypatch.setattr(os, "readv", readv_then_write)
    md5s(root, cache)
    monkeypatch.setattr(os, "readv", real_readv)
    assert md5s(root, cache) == {"f": hashlib.md5(b"y" * 100).hexdigest()}


def test_directories_unused_for_long_are_removed(
    tmp_path: Path, cache: DigestCache, settled: None
) -> None:
    root = tmp_path / "z"
    make_tree(root)
    md5s(root, cache)
    db = cache._db
    assert db is not None
    rows = db.execute("SELECT count(*) FROM directories").fetchone()[0]
    assert rows == 4  # z, z/a/0, z/a/1, z/a/2 (z/a holds no file)
    today = db.execute("SELECT max(used_day) FROM directories").fetchone()[0]
    assert today == time.time_ns() // 86_400_000_000_000
    # Used yesterday: a run records today again (once a day).
    db.execute("UPDATE directories SET used_day = used_day - 1")
    md5s(root, cache)
    assert db.execute("SELECT min(used_day) FROM directories").fetchone()[0] == today
    # Not used for KEEP_DAYS: removed when a cache is opened.
    db.execute(
        "UPDATE directories SET used_day = used_day - ? WHERE path = ?",
        (digest_cache.KEEP_DAYS + 1, os.fsencode(root / "a" / "1")),
    )
    again = DigestCache.open(cache.path)
    assert again is not None
    assert db.execute("SELECT count(*) FROM directories").fetchone()[0] == rows - 1
    again.close()


# -- failures never break a command ----------------------------------------------------------
def test_a_corrupt_cache_file_is_ignored_with_one_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    bad = tmp_path / "digests.sqlite3"
    bad.write_bytes(b"this is not a database" * 100)
    root = tmp_path / "z"
    make_tree(root)
    with caplog.at_level(logging.WARNING, logger="zarrchive.client.local.digest_cache"):
        assert DigestCache.open(bad) is None
        assert DigestCache.open(bad) is None
    assert len(caplog.records) == 1
    assert "unusable" in caplog.records[0].getMessage()


def test_an_unwritable_cache_directory_is_ignored(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    monkeypatch.setenv("ZARRCHIVE_CACHE_DIR", str(blocker / "cache"))
    root = tmp_path / "z"
    make_tree(root)
    with caplog.at_level(logging.WARNING, logger="zarrchive.client.local.digest_cache"):
        assert default_cache() is None
        entries = hash_local(str(root), jobs=2)
    assert {e.path: e.md5 for e in entries} == true_md5s(root)
    assert "cannot be opened" in caplog.text


def test_a_cache_failing_mid_walk_turns_itself_off(
    tmp_path: Path, cache: DigestCache, settled: None, caplog: pytest.LogCaptureFixture
) -> None:
    root = tmp_path / "z"
    make_tree(root)
    md5s(root, cache)
    assert cache._db is not None
    cache._db.close()  # every later call fails
    with caplog.at_level(logging.WARNING, logger="zarrchive.client.local.digest_cache"):
        assert md5s(root, cache) == true_md5s(root)
        assert md5s(root, cache) == true_md5s(root)
    assert not cache.usable
    assert len(caplog.records) == 1


def test_a_read_only_cache_still_reads(
    tmp_path: Path, cache: DigestCache, settled: None, caplog: pytest.LogCaptureFixture
) -> None:
    root = tmp_path / "z"
    make_tree(root)
    md5s(root, cache)
    db = cache._db
    assert db is not None
    db.execute("PRAGMA query_only = 1")  # every write fails
    (root / "new").write_bytes(b"new")
    with caplog.at_level(logging.WARNING, logger="zarrchive.client.local.digest_cache"):
        assert md5s(root, cache) == true_md5s(root)
    assert "failed (writing" in caplog.text


def test_a_busy_cache_skips_the_write(tmp_path: Path, cache: DigestCache, settled: None) -> None:
    """Another process holding the write lock: this run's md5s are not kept, no warning,
    the cache stays on."""
    root = tmp_path / "z"
    make_tree(root)
    other = sqlite3.connect(cache.path, isolation_level=None, timeout=0)
    other.execute("BEGIN IMMEDIATE")
    try:
        digest_cache_timeout = 0.2
        assert cache._db is not None
        cache._db.execute(f"PRAGMA busy_timeout = {int(digest_cache_timeout * 1000)}")
        assert md5s(root, cache) == true_md5s(root)
        assert cache.usable
    finally:
        other.execute("ROLLBACK")
        other.close()
    assert poison(cache) == 0
    md5s(root, cache)
    assert poison(cache) == len(true_md5s(root))


def _hash_in_process(root: str, cache_path: str, later: bool, queue: multiprocessing.Queue) -> None:  # type: ignore[type-arg]
    if later:
        hashing.clock_ns = lambda: time.time_ns() + LATER
    cache = DigestCache.open(cache_path)
    results = [md5s(Path(root), cache) for _ in range(3)]
    queue.put(results)


def test_concurrent_processes_share_the_cache(tmp_path: Path) -> None:
    root = tmp_path / "z"
    make_tree(root, 400)
    expected = true_md5s(root)
    cache_path = str(tmp_path / "cache" / "digests.sqlite3")
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    workers = [
        context.Process(target=_hash_in_process, args=(str(root), cache_path, True, queue))
        for _ in range(3)
    ]
    for worker in workers:
        worker.start()
    results = [queue.get(timeout=120) for _ in workers]
    for worker in workers:
        worker.join(60)
        assert worker.exitcode == 0
    for runs in results:
        assert runs == [expected] * 3
    reopened = DigestCache.open(cache_path)
    assert reopened is not None
    assert poison(reopened) == len(expected)


# -- the default cache and the commands --------------------------------------------------------
def test_the_default_cache_follows_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ZARRCHIVE_CACHE_DIR", str(tmp_path / "one"))
    first = default_cache()
    assert first is not None and first.path == str(tmp_path / "one" / "digests.sqlite3")
    monkeypatch.setenv("ZARRCHIVE_NO_CACHE", "1")
    assert default_cache() is None
    monkeypatch.setenv("ZARRCHIVE_NO_CACHE", "0")
    assert default_cache() is first
    monkeypatch.setattr(digest_cache, "_default_enabled", False)  # --no-cache
    assert default_cache() is None


def test_hash_local_uses_the_default_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, settled: None
) -> None:
    monkeypatch.setenv("ZARRCHIVE_CACHE_DIR", str(tmp_path / "cache"))
    root = tmp_path / "z"
    make_tree(root)
    assert {e.path: e.md5 for e in hash_local(str(root), jobs=2)} == true_md5s(root)
    cache = default_cache()
    assert cache is not None
    assert poison(cache) == len(true_md5s(root))
    assert {e.md5 for e in hash_local(str(root), jobs=2)} == {POISON}
    assert {e.path: e.md5 for e in hash_local(str(root), jobs=2, cache=None)} == true_md5s(root)


def test_checksum_command_fills_and_uses_the_cache(tmp_path: Path) -> None:
    root = tmp_path / "z"
    make_tree(root, 100)
    old = time.time_ns() - 3600 * 10**9
    for path in root.rglob("*"):
        os.utime(path, ns=(old, old))
    time.sleep(SETTLE_NS / 1e9 + 0.2)  # the ctimes too must be settled: wait
    env = {k: v for k, v in os.environ.items() if not k.startswith("ZARRCHIVE_")}
    cache_dir = tmp_path / "cache"

    def checksum(*extra: str) -> str:
        done = subprocess.run(
            [str(BIN / "zarrchive"), "checksum", *extra, str(root)],
            capture_output=True,
            text=True,
            env={**env, "ZARRCHIVE_CACHE_DIR": str(cache_dir)},
            check=True,
        )
        return done.stdout.strip()

    expected = local_checksum(root)
    assert checksum("--no-cache") == expected
    assert not cache_dir.exists()
    assert checksum() == expected
    cache = DigestCache.open(cache_dir / "digests.sqlite3")
    assert cache is not None
    assert poison(cache) == 100
    cache.close()
    assert checksum() != expected  # the poisoned md5s were used: nothing was read
    assert checksum("--no-cache") == expected
    # The directory digests are cached too: an unchanged tree is not even hashed.
    cache_dir.joinpath("digests.sqlite3").unlink()
    assert checksum() == expected
    db = sqlite3.connect(cache_dir / "digests.sqlite3")
    fake = "f" * 32 + expected[32:]
    root_key = os.fsencode(os.path.abspath(root))
    with db:
        assert db.execute("UPDATE directories SET digest = ? WHERE path = ?", (fake, root_key))
    db.close()
    assert checksum() == fake
