"""Issue 20 item 7: a big file's parts are hashed in the same read as the whole file
(``zarrchive.client.local.parts``), giving exactly what separate computation gives."""

from __future__ import annotations

import hashlib
import os
import time
from itertools import pairwise
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from zarrchive.client.local import hashing, iter_local_entries, parts
from zarrchive.client.local.parts import OnePassHasher, expected_part_size, recall
from zarrchive.services.zarr_engine.uploads.parts import (
    DEFAULT_PART_SIZE,
    MAX_OBJECT_SIZE,
    MAX_PART_SIZE,
    part_size_for,
)

pytestmark = pytest.mark.sqlite_only


def separately(data: bytes, part_size: int) -> tuple[str, list[str]]:
    slices = [data[i : i + part_size] for i in range(0, len(data), part_size)] or [b""]
    return hashlib.md5(data).hexdigest(), [hashlib.md5(s).hexdigest() for s in slices]


@settings(max_examples=200, deadline=None)
@given(
    data=st.binary(max_size=4000),
    part_size=st.integers(1, 700),
    cuts=st.lists(st.integers(0, 4000), max_size=12),
)
def test_one_pass_gives_the_md5s_of_separate_reads(
    data: bytes, part_size: int, cuts: list[int]
) -> None:
    hasher = OnePassHasher(part_size)
    bounds = sorted({0, len(data), *(c for c in cuts if c <= len(data))})
    for start, end in pairwise(bounds):
        hasher.update(memoryview(data)[start:end])  # blocks of any size, across part bounds
    assert hasher.finish() == separately(data, part_size)
    assert hasher.done == len(data)


@settings(max_examples=100, deadline=None)
@given(
    size=st.one_of(
        st.integers(0, MAX_OBJECT_SIZE),
        st.integers(DEFAULT_PART_SIZE * 9_990, DEFAULT_PART_SIZE * 10_010),
    ),
    threshold=st.integers(DEFAULT_PART_SIZE, MAX_PART_SIZE),
)
def test_expected_part_size_is_the_archives(size: int, threshold: int) -> None:
    """The client's guess is the archive's rule for any threshold from the default up."""
    assert expected_part_size(size) == part_size_for(size, threshold)


def test_walk_remembers_parts_of_big_files_only_while_unchanged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    mib = 1024**2
    monkeypatch.setattr(parts, "PART_HASH_MIN", 2 * mib)
    monkeypatch.setattr(parts, "DEFAULT_PART_SIZE", 3 * mib)
    parts.forget_all()
    big = os.urandom(7 * mib + 12345)  # parts of 3, 3 and 1 MiB + 12345 bytes
    middling = os.urandom(2 * mib)  # at PART_HASH_MIN: not above it
    root = tmp_path / "z"
    root.mkdir()
    (root / "big").write_bytes(big)
    (root / "mid").write_bytes(middling)
    (root / "small").write_bytes(b"x" * hashing.BLOCK_SIZE)  # one full block, then EOF
    # not for an upload: nothing more than the md5s
    assert {e.path: e.md5 for e in iter_local_entries(root, jobs=2, part_md5s=False)} == {
        "big": hashlib.md5(big).hexdigest(),
        "mid": hashlib.md5(middling).hexdigest(),
        "small": hashlib.md5(b"x" * hashing.BLOCK_SIZE).hexdigest(),
    }
    assert recall(str(root / "big"), len(big), 3 * mib) is None
    entries = {e.path: e for e in iter_local_entries(root, jobs=2, part_md5s=True)}
    assert list(entries) == ["big", "mid", "small"]
    assert entries["big"].md5 == hashlib.md5(big).hexdigest()
    assert entries["big"].size == len(big)
    assert entries["mid"].md5 == hashlib.md5(middling).hexdigest()
    assert entries["small"].md5 == hashlib.md5(b"x" * hashing.BLOCK_SIZE).hexdigest()

    whole, expected = separately(big, 3 * mib)
    assert whole == entries["big"].md5
    assert recall(str(root / "big"), len(big), 3 * mib) == tuple(expected)
    assert recall(str(root / "big"), len(big), 8 * mib) is None  # another part size
    assert recall(str(root / "mid"), len(middling), 3 * mib) is None  # not above the minimum
    # touched since: not trusted any more
    st_ = os.stat(root / "big")
    os.utime(root / "big", ns=(st_.st_atime_ns, st_.st_mtime_ns + 1_000_000_000))
    assert recall(str(root / "big"), len(big), 3 * mib) is None
    parts.forget_all()


def test_remembered_md5s_are_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(parts, "MAX_REMEMBERED_PARTS", 10)
    parts.forget_all()
    files = []
    for i in range(4):
        path = tmp_path / str(i)
        path.write_bytes(b"%d" % i)
        files.append(path)
        parts.remember(os.stat(path), 1, [f"{i:032x}"] * 4)  # 4 md5s each
    # the oldest files were forgotten first: 8 md5s kept, at most 10
    assert [recall(str(p), p.stat().st_size, 1) is not None for p in files] == [
        False,
        False,
        True,
        True,
    ]
    parts.forget_all()


def test_big_files_hashed_apart_go_to_the_digest_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A big file hashed by the walk's lane is kept in the digest cache like any other (and
    the entries come out in path order, placeholders filled in)."""
    from zarrchive.client.local.digest_cache import DigestCache

    mib = 1024**2
    monkeypatch.setattr(parts, "PART_HASH_MIN", 2 * mib)
    real_time_ns = time.time_ns
    # the clock 10 s ahead: the files just written look settled (digest_cache's rule)
    monkeypatch.setattr(time, "time_ns", lambda: real_time_ns() + 10**10)
    root = tmp_path / "z"
    (root / "d").mkdir(parents=True)
    contents = {
        "a": b"a",
        "d/big1": os.urandom(3 * mib),
        "d/m": b"m" * 10,
        "d/big2": os.urandom(2 * mib + 1),
        "z": b"z",
    }
    for path, data in contents.items():
        (root / path).write_bytes(data)
    expected = {p: hashlib.md5(d).hexdigest() for p, d in sorted(contents.items())}
    cache = DigestCache.open(tmp_path / "cache" / "digests.sqlite3")
    assert cache is not None
    try:
        got = [
            (e.path, e.md5) for e in iter_local_entries(root, jobs=2, cache=cache, part_md5s=True)
        ]
        assert got == sorted(expected.items())
        known = cache.known(str(root / "d") + os.sep, time.time_ns())
        assert set(known.positions) == {"big1", "big2", "m"}
        assert {name: md5 for name, _, md5 in known.items()} == {
            "big1": expected["d/big1"],
            "big2": expected["d/big2"],
            "m": expected["d/m"],
        }
    finally:
        cache.close()
        parts.forget_all()


def test_closing_the_walk_stops_the_big_files_lane(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import threading

    mib = 1024**2
    monkeypatch.setattr(parts, "PART_HASH_MIN", mib)
    root = tmp_path / "z"
    root.mkdir()
    (root / "a").write_bytes(b"a")
    for i in range(4):
        (root / f"big{i}").write_bytes(os.urandom(2 * mib))
    walk = iter_local_entries(root, jobs=2, part_md5s=True)
    first = next(walk)
    assert first.path == "a"
    walk.close()  # type: ignore[attr-defined]
    assert not [t for t in threading.enumerate() if t.name.startswith("zarrchive-md5-big")]
    parts.forget_all()
