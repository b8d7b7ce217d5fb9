"""Directory digests from the digest cache (:mod:`zarrchive.client.local.tree`): never stale.

Two kinds of checks:

- *never stale*: after any change, the digests of :func:`scan_tree` with the cache equal
  the digests of every file read again (no cache);
- *reused*: a test *poisons* the cached directory digests (the md5 part of every cached
  digest replaced, its count and size kept) and scans again; a directory whose digest
  comes out poisoned was taken from the cache, one whose true digest comes out was hashed.
  A change must never leave a poisoned digest on its directory or any ancestor; an
  unchanged subtree beside it comes out poisoned (it cost its stats only).

As in ``test_digest_cache.py``, the walk's clock runs :data:`LATER` ahead so that files
just written count as settled; a mutation waits for the file system's timestamp tick
(:func:`tick`) so that it cannot land in the tick of the previous write.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import sqlite3
import tempfile
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.helpers.digest_caches import LATER
from zarrchive.checksum import EMPTY_CHECKSUM, compute_checksum
from zarrchive.client.local import hashing
from zarrchive.client.local.digest_cache import DigestCache, pack_records, unpack_records
from zarrchive.client.local.tree import (
    local_checksum,
    local_directory_digests,
    scan_tree,
    survey_tree,
)
from zarrchive.errors import InvalidPath, LocalFileError

POISON_MD5 = "0" * 32


pytestmark = pytest.mark.usefixtures("fresh_warnings")


def tick() -> None:
    """Wait past the file system's timestamp granularity (the kernel's coarse clock)."""
    time.sleep(0.02)


def write(root: Path, path: str, data: bytes) -> None:
    (root / path).parent.mkdir(parents=True, exist_ok=True)
    (root / path).write_bytes(data)


def make_tree(root: Path) -> None:
    for i in range(60):
        write(root, f"a/{i % 2}/{i % 3}/{i}" if i % 4 else f"b/{i}", b"data %d " % i * (i % 5))
    write(root, ".zgroup", b"{}")


def truth(root: Path) -> dict[str, str]:
    """Every directory's digest, every file read (no cache)."""
    return {d.path: d.digest for d in local_directory_digests(root, jobs=2)}


def scanned(root: Path, cache: DigestCache) -> dict[str, str]:
    return scan_tree(root, cache=cache, jobs=2).digests


def surveyed(root: Path, cache: DigestCache) -> dict[str, str]:
    """The tree by a survey (every file stat-ed first, then read), as an upload does."""
    return survey_tree(root, cache=cache, jobs=2).tree().digests


def poison(cache: DigestCache) -> int:
    """Replace the md5 part of every cached directory digest; the number replaced."""
    db = cache._db
    assert db is not None
    rows = db.execute("SELECT path, digest FROM directories WHERE digest != ''").fetchall()
    for key, digest in rows:
        db.execute(
            "UPDATE directories SET digest = ? WHERE path = ?", (POISON_MD5 + digest[32:], key)
        )
    return len(rows)


def poisoned(digests: dict[str, str]) -> set[str]:
    return {path for path, digest in digests.items() if digest.startswith(POISON_MD5)}


def rewrite_in_place(path: Path, data: bytes) -> None:
    """Rewrite *path* with *data* (same size), then restore its atime and mtime."""
    before = path.stat()
    assert len(data) == before.st_size
    with open(path, "r+b") as f:
        f.write(data)
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert path.stat().st_mtime_ns == before.st_mtime_ns


def ancestors(path: str) -> set[str]:
    """*path*'s directory and every directory above it (``""`` included)."""
    parts = path.split("/")[:-1]
    return {"/".join(parts[:i]) for i in range(len(parts) + 1)}


# -- what is reused ---------------------------------------------------------------------------
def test_an_unchanged_tree_is_not_hashed(tmp_path: Path, cache: DigestCache, settled: None) -> None:
    root = tmp_path / "z"
    make_tree(root)
    expected = truth(root)
    assert scanned(root, cache) == expected  # filling
    assert scanned(root, cache) == expected  # from the cache
    assert poison(cache) == len(expected)
    assert poisoned(scanned(root, cache)) == set(expected)  # every digest from the cache
    assert local_checksum(root, cache=cache).startswith(POISON_MD5)
    assert local_checksum(root, cache=None) == expected[""]


def test_a_change_deep_down_rehashes_its_ancestors_only(
    tmp_path: Path, cache: DigestCache, settled: None
) -> None:
    """A file rewritten in place, same size, mtime restored: no directory's mtime changes,
    yet every directory above it is hashed again, and nothing else is."""
    root = tmp_path / "z"
    make_tree(root)
    scanned(root, cache)
    poison(cache)
    tick()
    target = "a/1/1/7"
    rewrite_in_place(root / target, b"DATA 7 data 7 ")
    after = scanned(root, cache)
    expected = truth(root)
    changed = ancestors(target)
    assert poisoned(after) == set(expected) - changed
    for path in changed:  # from the true children of the changed ones: not poisoned
        assert not after[path].startswith(POISON_MD5)
    # ... and without the poison, exactly the truth
    fresh = DigestCache.open(tmp_path / "other.sqlite3")
    assert fresh is not None
    scanned(root, fresh)
    tick()
    rewrite_in_place(root / target, b"data 7 DATA 7 ")
    assert scanned(root, fresh) == truth(root)
    fresh.close()


# -- never stale: one mutation at a time --------------------------------------------------------
def _replace_by_rename(root: Path) -> str:
    staged = root / "staged"
    staged.write_bytes(b"DATA 6 " * 1)
    size = (root / "a/0/0/6").stat().st_size
    staged.write_bytes(b"X" * size)
    os.replace(staged, root / "a/0/0/6")
    return "a/0/0/6"


def _hard_link(root: Path) -> str:
    os.unlink(root / "a/1/1/13")
    os.link(root / "b/12", root / "a/1/1/13")
    return "a/1/1/13"


def _added(root: Path) -> str:
    write(root, "a/0/2/new", b"new")
    return "a/0/2/new"


def _removed(root: Path) -> str:
    os.unlink(root / "a/0/2/14")
    return "a/0/2/14"


def _renamed(root: Path) -> str:
    os.rename(root / "a/0/2/14", root / "a/0/2/14-renamed")
    return "a/0/2/x"


def _moved_between_directories(root: Path) -> str:
    os.rename(root / "a/0/2/14", root / "a/1/2/14")
    return "a/0/2/x"  # both a/0/2 and a/1/2 change; a is the common ancestor


def _directory_renamed(root: Path) -> str:
    os.rename(root / "a/1", root / "a/9")
    return "a/x"


def _directories_swapped(root: Path) -> str:
    """Two subdirectories with the same file names swap places (their own mtimes stay)."""
    os.rename(root / "a/0/1", root / "a/0/tmp")
    os.rename(root / "a/1/1", root / "a/0/1")
    os.rename(root / "a/0/tmp", root / "a/1/1")
    return "a/x"


def _file_replaced_by_directory(root: Path) -> str:
    os.unlink(root / "b/4")
    write(root, "b/4/inner", b"data 4 ")
    return "b/4/inner"


def _directory_replaced_by_file(root: Path) -> str:
    shutil.rmtree(root / "a/1/0")
    (root / "a/1/0").write_bytes(b"now a file")
    return "a/1/0"


def _empty_directory_filled(root: Path) -> str:
    (root / "a/empty/deeper").mkdir(parents=True)
    return "a/x"


def _rewritten_same_size_same_times(root: Path) -> str:
    rewrite_in_place(root / "b/8", b"DATA 8 DATA 8 DATA 8 ")
    return "b/8"


def _symbolic_link_added(root: Path) -> str:
    os.symlink("../../../b/16", root / "a/0/0/link")
    return "a/0/0/link"


MUTATIONS = [
    _replace_by_rename,
    _hard_link,
    _added,
    _removed,
    _renamed,
    _moved_between_directories,
    _directory_renamed,
    _directories_swapped,
    _file_replaced_by_directory,
    _directory_replaced_by_file,
    _empty_directory_filled,
    _rewritten_same_size_same_times,
    _symbolic_link_added,
]


@pytest.mark.parametrize("mutate", MUTATIONS, ids=lambda f: f.__name__.strip("_"))
def test_a_mutation_is_seen(tmp_path: Path, cache: DigestCache, settled: None, mutate) -> None:  # type: ignore[no-untyped-def]
    root = tmp_path / "z"
    make_tree(root)
    (root / "a/empty").mkdir()
    assert scanned(root, cache) == truth(root)
    tick()
    mutate(root)
    assert scanned(root, cache) == truth(root)
    assert scanned(root, cache) == truth(root)  # and the rows written after it are true


def test_a_retargeted_symbolic_link_is_seen(
    tmp_path: Path, cache: DigestCache, settled: None
) -> None:
    root = tmp_path / "z"
    make_tree(root)
    os.symlink("../../b/16", root / "a/0/link")
    assert scanned(root, cache) == truth(root)
    tick()
    os.unlink(root / "a/0/link")
    os.symlink("../../b/20", root / "a/0/link")  # same name, same kind, another file
    assert scanned(root, cache) == truth(root)


def test_a_copied_tree_is_hashed(tmp_path: Path, cache: DigestCache, settled: None) -> None:
    root = tmp_path / "z"
    make_tree(root)
    scanned(root, cache)
    poison(cache)
    copy = tmp_path / "copy"
    shutil.copytree(root, copy, copy_function=shutil.copy2)  # times preserved
    assert poisoned(scanned(copy, cache)) == set()
    assert scanned(copy, cache) == truth(root)


def test_fresh_files_give_no_directory_digest(tmp_path: Path, cache: DigestCache) -> None:
    """At the real clock, files just written are not settled: no digest is kept, and a
    rewrite of the same size in the same tick is seen."""
    root = tmp_path / "z"
    make_tree(root)
    assert scanned(root, cache) == truth(root)
    assert poison(cache) == 0
    rewrite_in_place(root / "b/8", b"DATA 8 DATA 8 DATA 8 ")  # no tick: maybe the same one
    assert scanned(root, cache) == truth(root)


def test_a_clock_set_back_distrusts_the_digests(
    tmp_path: Path, cache: DigestCache, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "z"
    make_tree(root)
    with monkeypatch.context() as patch:
        patch.setattr(hashing, "clock_ns", lambda: time.time_ns() + LATER)
        scanned(root, cache)
    assert poison(cache) > 0
    assert poisoned(scanned(root, cache)) == set()  # the clock reads earlier than the rows
    monkeypatch.setattr(hashing, "clock_ns", lambda: time.time_ns() + 2 * LATER)
    scanned(root, cache)  # rows written again, at this clock
    poison(cache)
    assert poisoned(scanned(root, cache)) == set(truth(root))


def test_file_rows_without_a_digest_are_used_for_their_md5s(
    tmp_path: Path, cache: DigestCache, settled: None
) -> None:
    """Rows written file by file (``hash_local``) have no digest: the tree is hashed from
    their md5s (not read again), and the digests kept from then on."""
    root = tmp_path / "z"
    make_tree(root)
    hashing.hash_local(str(root), jobs=2, cache=cache)
    db = cache._db
    assert db is not None
    assert db.execute("SELECT count(*) FROM directories WHERE digest IS NOT NULL").fetchone() == (
        0,
    )
    assert scanned(root, cache) == truth(root)
    assert db.execute("SELECT count(*) FROM directories WHERE digest IS NULL").fetchone() == (0,)


def test_json_digests_match(tmp_path: Path, cache: DigestCache, settled: None) -> None:
    root = tmp_path / "z"
    make_tree(root)
    plain = local_directory_digests(root, jobs=2)
    local_directory_digests(root, jobs=2, cache=cache)
    cached = local_directory_digests(root, jobs=2, cache=cache)
    assert sorted(cached, key=lambda d: d.path) == sorted(plain, key=lambda d: d.path)
    assert cached[-1].path == ""


def test_empty_and_fileless_trees(tmp_path: Path, cache: DigestCache, settled: None) -> None:
    root = tmp_path / "z"
    (root / "x" / "y").mkdir(parents=True)
    for _ in range(2):
        tree = scan_tree(root, cache=cache, jobs=1)
        assert tree.digests == {"": EMPTY_CHECKSUM}
        assert (tree.files, tree.size) == (0, 0)
    write(root, "x/y/f", b"12345")
    tree = scan_tree(root, cache=cache, jobs=1)
    assert tree.checksum == compute_checksum([("x/y/f", 5, hashlib.md5(b"12345").hexdigest())])
    assert (tree.files, tree.size) == (1, 5)


def test_the_walk_errors_are_kept(tmp_path: Path, cache: DigestCache, settled: None) -> None:
    root = tmp_path / "z"
    make_tree(root)
    scanned(root, cache)
    os.symlink("nowhere", root / "a/0/0/broken")
    with pytest.raises(LocalFileError, match="broken symbolic link"):
        scanned(root, cache)
    os.unlink(root / "a/0/0/broken")
    os.symlink("../..", root / "a/0/loop")
    with pytest.raises(LocalFileError, match="symbolic link loop"):
        scanned(root, cache)
    os.unlink(root / "a/0/loop")
    write(root, "a/0/bad\\name", b"x")
    with pytest.raises(InvalidPath):
        scanned(root, cache)
    with pytest.raises(LocalFileError, match="no such file"):
        scan_tree(tmp_path / "missing", cache=cache)


def test_a_failing_cache_falls_back_to_reading(
    tmp_path: Path, cache: DigestCache, settled: None
) -> None:
    root = tmp_path / "z"
    make_tree(root)
    scanned(root, cache)
    assert cache._db is not None
    cache._db.close()  # every query now fails
    assert scanned(root, cache) == truth(root)
    assert not cache.usable


def test_records_round_trip() -> None:
    records = [(1, 2, 3, -4, 5), (2**63 - 1, 0, 7, 8, 9)]
    packed = pack_records([x for r in records for x in r])
    assert packed is not None
    assert unpack_records(packed) == records
    assert pack_records([2**63]) is None
    assert unpack_records(b"123") is None
    assert unpack_records(packed[:-8]) is None


# -- the survey: the walk first, the reading after (an upload's check) --------------------------
def files_of(root: Path) -> list[tuple[str, int]]:
    return sorted(
        (p.relative_to(root).as_posix(), p.stat().st_size) for p in root.rglob("*") if p.is_file()
    )


def test_a_survey_finishes_as_the_scan_does(
    tmp_path: Path, cache: DigestCache, settled: None
) -> None:
    root = tmp_path / "z"
    make_tree(root)
    expected = truth(root)
    found = files_of(root)
    survey = survey_tree(root, cache=cache, jobs=2, limit=1 << 40)
    assert (survey.files, survey.size, survey.too_big) == (
        len(found),
        sum(n for _, n in found),
        [],
    )
    tree = survey.tree()
    assert tree.digests == expected
    assert (tree.files, tree.size) == (survey.files, survey.size)
    with pytest.raises(RuntimeError):
        survey.tree()
    # its rows are the scan's: a scan, then a survey, take every digest from the cache
    assert poison(cache) == len(expected)
    assert poisoned(scanned(root, cache)) == set(expected)
    again = survey_tree(root, cache=cache, jobs=1)
    assert (again.files, again.size) == (len(found), sum(n for _, n in found))
    assert poisoned(again.tree().digests) == set(expected)


def test_a_first_scan_keeps_the_records_its_walk_took(
    tmp_path: Path, cache: DigestCache, settled: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A scan stats every file as a survey does: the first run (nothing cached) hashes
    every file without an ``fstat`` of it, and the records it kept are the files' own (a
    second run takes every digest from the cache)."""
    root = tmp_path / "z"
    make_tree(root)
    expected = truth(root)
    real_fstat = os.fstat
    fstatted: list[int] = []

    def spy(fd: int) -> os.stat_result:
        fstatted.append(fd)
        return real_fstat(fd)

    with monkeypatch.context() as patch:
        patch.setattr(os, "fstat", spy)
        assert scan_tree(root, cache=cache, jobs=2).digests == expected
        assert fstatted == []
    assert poison(cache) == len(expected)
    assert poisoned(scanned(root, cache)) == set(expected)


def test_chunks_read_while_the_walk_goes_on_give_the_scans_tree(
    tmp_path: Path, cache: DigestCache, settled: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The walk starts the reads of a chunk and goes on (the chunk before is finished
    first): many small chunks on the thread pool give the same digests, and rows, as one."""
    from zarrchive.client.local import tree as local_tree

    root = tmp_path / "z"
    make_tree(root)
    for i in range(12):
        write(root, f"c/{i % 3}/{i}/f", bytes([i]) * (i + 1))
    expected = truth(root)
    monkeypatch.setattr(local_tree, "CHUNK_FILES", 3)
    monkeypatch.setattr(local_tree, "FEW_FILES", 1)
    in_flight: list[int] = []
    start = local_tree._Scan._start

    def spy(self: local_tree._Scan, pending: list[local_tree._Pending]) -> None:
        start(self, pending)
        in_flight.append(len(self.reading))

    monkeypatch.setattr(local_tree._Scan, "_start", spy)
    assert scan_tree(root, cache=cache, jobs=3).digests == expected
    assert max(in_flight) == 2  # a chunk was read while the walk went on
    assert poison(cache) == len(expected)
    assert poisoned(scanned(root, cache)) == set(expected)
    tick()
    rewrite_in_place(root / "c/1/7/f", b"changed!")
    assert poisoned(scanned(root, cache)) == set(expected) - ancestors("c/1/7/f")


def test_a_directory_whose_records_do_not_fit_is_read_and_gets_no_row(
    tmp_path: Path, cache: DigestCache, settled: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A device or inode number beyond 64 bits (``_records`` gives none): its files are read
    every run, its row is never written, the others are cached as usual."""
    from zarrchive.client.local import tree as local_tree

    root = tmp_path / "z"
    make_tree(root)
    expected = truth(root)
    records = local_tree._records
    odd = (root / "a/0/1/10").stat().st_ino  # its directory's records "overflow"

    def overflowing(stats: list[os.stat_result]) -> object:
        return None if any(st.st_ino == odd for st in stats) else records(stats)

    monkeypatch.setattr(local_tree, "_records", overflowing)
    assert scan_tree(root, cache=cache, jobs=2).digests == expected
    key = os.fsencode(os.path.abspath(root))
    assert key + b"/a/0/1" not in cache.keys_below(key)
    assert key + b"/a/0/2" in cache.keys_below(key)
    poison(cache)
    assert poisoned(scanned(root, cache)) == set(expected) - ancestors("a/0/1/10")


def test_a_survey_reads_nothing_and_lists_the_big_files(
    tmp_path: Path, cache: DigestCache, settled: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "z"
    make_tree(root)
    write(root, "a/0/1/zzz", b"0123456789" * 10)
    opened: list[str] = []
    real_open = os.open

    def spy(path: str, flags: int, *args: int, **kwargs: object) -> int:
        opened.append(path)
        return real_open(path, flags, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "open", spy)
    survey = survey_tree(root, cache=cache, jobs=2, limit=20)
    assert survey.too_big == [(p, n) for p, n in files_of(root) if n > 20]
    assert ("a/0/1/zzz", 100) in survey.too_big
    survey.close()
    survey.close()
    assert [p for p in opened if not p.startswith(str(tmp_path / "cache"))] == []
    assert cache.keys_below(os.fsencode(os.path.abspath(root))) == set()  # no row written


def test_the_survey_refuses_what_the_walk_refuses(
    tmp_path: Path, cache: DigestCache, settled: None
) -> None:
    root = tmp_path / "z"
    make_tree(root)
    os.symlink("nowhere", root / "a/0/0/broken")
    with pytest.raises(LocalFileError, match="broken symbolic link"):
        survey_tree(root, cache=cache)
    os.unlink(root / "a/0/0/broken")
    os.symlink("../..", root / "a/0/loop")
    with pytest.raises(LocalFileError, match="symbolic link loop"):
        survey_tree(root, cache=cache)
    os.unlink(root / "a/0/loop")
    write(root, "a/0/bad\\name", b"x")
    with pytest.raises(InvalidPath):
        survey_tree(root, cache=cache)
    with pytest.raises(LocalFileError, match="no such file"):
        survey_tree(tmp_path / "missing", cache=cache)


def test_a_change_after_the_survey_is_never_stale(
    tmp_path: Path, cache: DigestCache, settled: None
) -> None:
    """The records kept are the survey's, taken before the files are read: a file rewritten
    in between (same size, mtime restored; or another size) is read as it is then, and its
    record is never trusted again."""
    root = tmp_path / "z"
    make_tree(root)
    victims = [p for p in sorted(root.rglob("*")) if p.is_file() and p.stat().st_size > 2]
    survey = survey_tree(root, cache=cache, jobs=2)
    tick()
    rewrite_in_place(victims[0], b"#" * victims[0].stat().st_size)
    victims[1].write_bytes(b"longer than it was" * 5)
    assert survey.tree().digests == truth(root)  # read as they are now
    assert scanned(root, cache) == truth(root)
    tick()
    rewrite_in_place(victims[0], b"%" * victims[0].stat().st_size)
    assert surveyed(root, cache) == scanned(root, cache) == truth(root)


# -- never stale: any sequence of changes (property) --------------------------------------------
NAMES = ["a", "b", "c"]
paths = st.lists(st.sampled_from(NAMES), min_size=1, max_size=3).map("/".join)
contents = st.sampled_from([b"", b"x", b"y", b"xy", b"yx", b"xyz"])
operations = st.one_of(
    st.tuples(st.just("write"), paths, contents),
    st.tuples(st.just("rewrite"), paths, contents),
    st.tuples(st.just("remove"), paths, st.just(b"")),
    st.tuples(st.just("rename"), paths, paths),
    st.tuples(st.just("link"), paths, paths),
    st.tuples(st.just("mkdir"), paths, st.just(b"")),
)


def _apply(root: Path, operation: tuple[str, str, object]) -> None:
    kind, path, argument = operation
    target = root / path
    try:
        if kind == "write":
            assert isinstance(argument, bytes)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(argument)
        elif kind == "rewrite" and target.is_file():
            assert isinstance(argument, bytes)
            data = (argument * 8)[: target.stat().st_size].ljust(target.stat().st_size, b"z")
            rewrite_in_place(target, data)
        elif kind == "remove":
            if target.is_dir():
                shutil.rmtree(target)
            elif target.exists():
                target.unlink()
        elif kind == "rename" and target.exists():
            assert isinstance(argument, str)
            destination = root / argument
            if not str(destination).startswith(str(target) + "/"):
                destination.parent.mkdir(parents=True, exist_ok=True)
                os.rename(target, destination)
        elif kind == "link" and target.is_file():
            assert isinstance(argument, str)
            destination = root / argument
            destination.parent.mkdir(parents=True, exist_ok=True)
            if destination.is_dir():
                shutil.rmtree(destination)
            elif destination.exists():
                destination.unlink()
            os.link(target, destination)
        elif kind == "mkdir":
            target.mkdir(parents=True, exist_ok=True)
    except (NotADirectoryError, FileExistsError, IsADirectoryError, OSError):
        pass  # a path through a file, a directory over a non-empty one...: nothing done


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(st.lists(operations, min_size=1, max_size=8))
def test_never_stale_after_any_changes(
    settled: None, operations: list[tuple[str, str, object]]
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "z"
        root.mkdir()
        write(root, "a/a/a", b"xyz")
        write(root, "b", b"xy")
        cache = DigestCache.open(Path(tmp) / "cache.sqlite3")
        assert cache is not None
        try:
            assert scanned(root, cache) == truth(root)
            for operation in operations:
                tick()
                _apply(root, operation)
                assert scanned(root, cache) == truth(root), operation
        finally:
            cache.close()


@settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(st.lists(st.tuples(st.booleans(), operations), min_size=1, max_size=6))
def test_never_stale_with_changes_between_survey_and_reading(
    settled: None, steps: list[tuple[bool, tuple[str, str, object]]]
) -> None:
    """Any change, made after a survey stat-ed the files and before they are read, or
    between two scans: every later scan or survey gives the truth."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "z"
        root.mkdir()
        write(root, "a/a/a", b"xyz")
        write(root, "b", b"xy")
        cache = DigestCache.open(Path(tmp) / "cache.sqlite3")
        assert cache is not None
        try:
            assert surveyed(root, cache) == truth(root)
            for in_between, operation in steps:
                tick()
                if in_between:
                    try:
                        survey = survey_tree(root, cache=cache, jobs=1)
                    except (LocalFileError, InvalidPath):
                        continue
                    tick()
                    _apply(root, operation)
                    with contextlib.suppress(LocalFileError):  # a file removed meanwhile
                        survey.tree()
                else:
                    _apply(root, operation)
                tick()
                assert surveyed(root, cache) == truth(root), operation
                assert scanned(root, cache) == truth(root), operation
        finally:
            cache.close()


def test_the_row_of_a_directory_is_one_row(
    tmp_path: Path, cache: DigestCache, settled: None
) -> None:
    """One row per directory, with its files' md5s and its subdirectories' names."""
    root = tmp_path / "z"
    make_tree(root)
    scanned(root, cache)
    db = sqlite3.connect(tmp_path / "cache" / "digests.sqlite3")
    rows = dict(db.execute("SELECT path, dirs FROM directories").fetchall())
    db.close()
    key = os.fsencode(os.path.abspath(root))
    assert rows[key] == "a\0b"
    assert rows[key + b"/a/0/1"] == ""
    assert len(rows) == len(truth(root))


KILLED_WRITER = """
import os, signal, sys, time
from zarrchive.client.local import digest_cache, hashing, tree as local_tree

hashing.clock_ns = lambda: time.time_ns() + 10**10  # the files count as settled
local_tree.CHUNK_FILES = 8  # many batches of rows
original = digest_cache.DigestCache.store_rows
calls = [0]


def store_rows(self, rows):
    calls[0] += 1
    if calls[0] < 3:
        return original(self, rows)
    # Killed in the middle of the third batch's transaction.
    db = self._db
    db.execute("BEGIN IMMEDIATE")
    db.executemany(
        "INSERT OR REPLACE INTO directories (path, names, stats, md5s, hashed_ns, used_day) "
        "VALUES (?, ?, ?, ?, ?, ?)",
        [(k, r.names, r.stats, r.md5s, r.hashed_ns, 0) for k, r in rows[: len(rows) // 2 + 1]],
    )
    os.kill(os.getpid(), signal.SIGKILL)


digest_cache.DigestCache.store_rows = store_rows
cache = digest_cache.DigestCache.open(sys.argv[2])
local_tree.scan_tree(sys.argv[1], cache=cache, jobs=2)
"""


def test_a_writer_killed_mid_way_leaves_no_stale_digest(tmp_path: Path, settled: None) -> None:
    """The rows are written by a thread of their own, batch by batch: a process killed in
    the middle of a batch leaves the batches before it and nothing of that one, and what
    it left is never stale after changes, in directories it wrote and in the others."""
    import signal
    import subprocess
    import sys

    root = tmp_path / "z"
    make_tree(root)
    path = tmp_path / "cache" / "digests.sqlite3"
    path.parent.mkdir()
    done = subprocess.run(
        [sys.executable, "-c", KILLED_WRITER, str(root), str(path)], capture_output=True
    )
    assert done.returncode == -signal.SIGKILL, done.stderr
    db = sqlite3.connect(path)
    written = {key for (key,) in db.execute("SELECT path FROM directories")}
    db.close()
    expected = truth(root)
    assert 0 < len(written) < len(expected)
    cache = DigestCache.open(path)
    assert cache is not None
    try:
        assert cache.keys_below(os.fsencode(os.path.abspath(root))) == written
        assert scanned(root, cache) == expected
        top = os.fsencode(os.path.abspath(root))
        in_written = next(
            p
            for p in sorted(root.rglob("*"))
            if p.is_file()
            and top + b"/" + os.fsencode(p.parent.relative_to(root).as_posix()) in written
        )
        tick()
        rewrite_in_place(in_written, b"#" * in_written.stat().st_size)
        (root / "b" / "new").write_bytes(b"new")
        assert scanned(root, cache) == truth(root) != expected
    finally:
        cache.close()


def test_only_the_rows_below_the_root_are_looked_up(
    tmp_path: Path, cache: DigestCache, settled: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One range read finds the rows below the root (not those of a sibling whose name
    starts with the root's); a directory without one is not looked up at all."""
    for name in ("z", "z0", "z.b", "y"):
        make_tree(tmp_path / name)
        scanned(tmp_path / name, cache)
    make_tree(tmp_path / "fresh")
    key = os.fsencode(os.path.abspath(tmp_path / "z"))
    below = cache.keys_below(key)
    assert key in below and len(below) == len(truth(tmp_path / "z"))
    assert all(k == key or k.startswith(key + b"/") for k in below)
    looked_up: list[bytes] = []
    original = DigestCache.row

    def row(self: DigestCache, key: bytes, now_ns: int) -> object:
        looked_up.append(key)
        return original(self, key, now_ns)

    monkeypatch.setattr(DigestCache, "row", row)
    assert scanned(tmp_path / "fresh", cache) == truth(tmp_path / "fresh")
    assert looked_up == []
    assert scanned(tmp_path / "z", cache) == truth(tmp_path / "z")
    assert set(looked_up) == below


def test_files_around_the_read_size_are_hashed_whole(
    tmp_path: Path, cache: DigestCache, settled: None
) -> None:
    """A small file is read in one call (its size from the ``fstat``); one of the buffer's
    size or more is read on to its end."""
    root = tmp_path / "z"
    block = hashing.BLOCK_SIZE
    for size in (0, 1, block - 1, block, block + 1, 2 * block + 3):
        write(root, f"a/{size}", bytes(range(256)) * (size // 256) + b"x" * (size % 256))
    expected = truth(root)
    assert scanned(root, cache) == expected  # read, the rows written
    assert scanned(root, cache) == expected  # from the rows
    assert expected[""] == compute_checksum(
        [
            (f"a/{p.name}", p.stat().st_size, hashlib.md5(p.read_bytes()).hexdigest())
            for p in (root / "a").iterdir()
        ]
    )
