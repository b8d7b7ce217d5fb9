"""The streaming tree hasher: ordering, grouping and input errors."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from zarrchive.checksum import (
    EMPTY_CHECKSUM,
    DirectoryDigest,
    TreeHasher,
    compute_checksum,
    iter_directory_digests,
)
from zarrchive.errors import InvalidDigest, InvalidPath, UngroupedEntries

A32 = "a" * 32


def test_sorted_order_is_grouped_even_with_prefix_names() -> None:
    # "a" (file), "a.b" (file), "a/b" (file in directory a): '.' < '/' in sort order.
    entries = [("a", 1, A32), ("a.b", 2, A32), ("a/b", 3, A32), ("a/b.c/d", 4, A32)]
    expected = compute_checksum(entries[::-1])
    assert compute_checksum(sorted(entries), grouped=True) == expected
    digests = list(iter_directory_digests(sorted(entries), grouped=True))
    assert [(d.path, d.count, d.size) for d in digests] == [
        ("a/b.c", 1, 4),
        ("a", 2, 7),
        ("", 4, 10),
    ]


def test_depth_first_order_with_files_after_subdirectories_is_grouped() -> None:
    entries = [("d/sub/x", 1, A32), ("d/f", 2, A32), ("d/sub2/y", 3, A32), ("d/e", 4, A32)]
    assert compute_checksum(entries, grouped=True) == compute_checksum(entries)
    assert [d.path for d in iter_directory_digests(entries, grouped=True)] == [
        "d/sub",
        "d/sub2",
        "d",
        "",
    ]


@pytest.mark.parametrize(
    "paths",
    [
        ["a/x", "b", "a/y"],
        ["a/b/x", "a/c/x", "a/b/y"],
        ["a/b/x", "c/d", "a/e/f"],
        ["a/b/c/d", "a/e", "a/b/f"],
    ],
)
def test_ungrouped_entries_are_refused(paths: list[str]) -> None:
    entries = [(p, 1, A32) for p in paths]
    with pytest.raises(UngroupedEntries, match=f"{paths[-1]!r} arrived after the hasher left"):
        compute_checksum(entries, grouped=True)
    with pytest.raises(UngroupedEntries):
        list(iter_directory_digests(entries, grouped=True))
    # Unless the caller lets the hasher sort them.
    assert compute_checksum(entries) == compute_checksum(sorted(entries), grouped=True)


@pytest.mark.parametrize("grouped", [False, True])
@pytest.mark.parametrize(
    ("entries", "error", "message"),
    [
        ([("a", 1, A32), ("a", 2, A32)], InvalidPath, "'a' appears more than once"),
        ([("d/a", 1, A32), ("d/a", 1, A32)], InvalidPath, "'d/a' appears more than once"),
        ([("", 1, A32)], InvalidPath, "'' is not a file path"),
        ([("a/", 1, A32)], InvalidPath, "'a/' is not a file path"),
        ([("/a", 1, A32)], InvalidPath, "'/a' is not a file path"),
        ([("/a/b", 1, A32)], InvalidPath, "'/a/b' has an empty path segment"),
        ([("a//b", 1, A32)], InvalidPath, "'a//b' has an empty path segment"),
        ([("a", 1, "A" * 32)], InvalidDigest, "is not an md5 digest"),
        ([("a", 1, '"' + A32 + '"')], InvalidDigest, "is not an md5 digest"),
        ([("a", -1, A32)], InvalidDigest, "'a': size -1 is negative"),
        ([("d/a", 1, A32), ("d/b", -5, A32)], InvalidDigest, "'d/b': size -5 is negative"),
        ([("a", "1", A32)], InvalidDigest, r"'a': size '1' is not an int \(str\)"),
        ([("a", True, A32)], InvalidDigest, r"'a': size True is not an int \(bool\)"),
        ([("a", 1.0, A32)], InvalidDigest, r"'a': size 1.0 is not an int \(float\)"),
        ([("a", 1, None)], InvalidDigest, "'a': None is not an md5 digest"),
        ([("a", 1, A32[:31])], InvalidDigest, f"'a': '{A32[:31]}' is not an md5 digest"),
        (
            [("d/a", 1, A32[:31]), ("d/b", 1, A32 + "a")],
            InvalidDigest,
            f"'d/a': '{A32[:31]}' is not an md5 digest",
        ),
    ],
)
def test_invalid_entries(
    entries: list[tuple[str, int, str]], error: type[Exception], message: str, grouped: bool
) -> None:
    with pytest.raises(error, match=message):
        compute_checksum(entries, grouped=grouped)


def test_invalid_entry_raises_before_its_directory_digest() -> None:
    entries = [("d/a", 1, A32), ("d/b", 1, "x"), ("e/c", 1, A32)]
    iterator = iter_directory_digests(entries, grouped=True)
    with pytest.raises(InvalidDigest, match="'d/b': 'x' is not an md5 digest"):
        next(iterator)
    hasher = TreeHasher()
    hasher.add("z", 1, "nope")
    with pytest.raises(InvalidDigest, match="'z': 'nope' is not an md5 digest"):
        hasher.finish()


def test_duplicate_in_a_directory_revisited_in_depth_first_order() -> None:
    entries = [("d/a", 1, A32), ("d/s/x", 1, A32), ("d/a", 1, A32)]
    with pytest.raises(InvalidPath, match="'d/a' appears more than once"):
        compute_checksum(entries, grouped=True)


def test_tree_hasher_api() -> None:
    hasher = TreeHasher(collect=True)
    hasher.add("x/y", 3, A32)
    assert hasher.completed == []
    hasher.add("z", 4, A32)
    assert [d.path for d in hasher.completed] == ["x"]
    root = hasher.finish()
    assert root is hasher.finish()  # idempotent
    assert isinstance(root, DirectoryDigest)
    assert (root.path, root.count, root.size, root.node_json) == ("", 2, 7, None)
    assert [d.path for d in hasher.completed] == ["x", ""]
    assert root.digest == compute_checksum([("x/y", 3, A32), ("z", 4, A32)])
    assert TreeHasher().finish().digest == EMPTY_CHECKSUM


def test_iter_directory_digests_is_lazy_for_grouped_input() -> None:
    produced: list[str] = []

    def entries() -> Iterator[tuple[str, int, str]]:
        for i in range(3):
            produced.append(f"d{i}/f")
            yield (f"d{i}/f", 1, A32)

    iterator = iter_directory_digests(entries(), grouped=True)
    first = next(iterator)
    assert first.path == "d0"
    assert produced == ["d0/f", "d1/f"]  # d0 is complete as soon as d1 starts
    assert [d.path for d in iterator] == ["d1", "d2", ""]


def test_add_files_equals_add() -> None:
    rows = {
        "": [("z", "1" * 32, 1), (".zgroup", "2" * 32, 2)],
        "a/b": [("c", "3" * 32, 3)],
        "a": [("d", "4" * 32, 4)],
        "é": [("\U00010000", "5" * 32, 5), ("\uffff", "6" * 32, 6)],
    }
    bulk = TreeHasher(collect=True, with_nodes=True)
    single = TreeHasher(collect=True, with_nodes=True)
    for directory, files in rows.items():
        bulk.add_files(directory, files)
        bulk.add_files(directory, [])  # no-op
        for name, md5, size in files:
            single.add(f"{directory}/{name}" if directory else name, size, md5)
    assert bulk.finish() == single.finish()
    assert bulk.completed == single.completed
    entries = [(f"{d}/{n}" if d else n, s, m) for d, files in rows.items() for n, m, s in files]
    assert bulk.finish().digest == compute_checksum(entries)


@pytest.mark.parametrize(
    ("directory", "files", "error", "message"),
    [
        ("d", [("ok", A32, 1), ("", A32, 1)], InvalidPath, "'' in 'd' is not a file name"),
        ("d", [("x/y", A32, 1)], InvalidPath, "'x/y' in 'd' is not a file name"),
        ("/d", [("x", A32, 1)], InvalidPath, "'/d/x' has an empty path segment"),
        ("d/", [("x", A32, 1)], InvalidPath, "'d//x' has an empty path segment"),
        ("d", [("x", "nope", 1)], InvalidDigest, "'d/x': 'nope' is not an md5 digest"),
        ("d", [("x", A32, 1), ("x", A32, 1)], InvalidPath, "'d/x' appears more than once"),
    ],
)
def test_add_files_errors(
    directory: str, files: list[tuple[str, str, int]], error: type[Exception], message: str
) -> None:
    hasher = TreeHasher()
    with pytest.raises(error, match=message):
        hasher.add_files(directory, files)
        hasher.finish()


def test_add_files_ungrouped() -> None:
    hasher = TreeHasher()
    hasher.add_files("a", [("x", A32, 1)])
    hasher.add_files("b", [("y", A32, 1)])
    with pytest.raises(UngroupedEntries, match="'a/z' arrived after the hasher left"):
        hasher.add_files("a", [("z", A32, 1)])
