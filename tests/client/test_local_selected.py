"""The walk of the selected files only (``upload --patch --include/--exclude``): the same
entries as the full walk filtered, and errors only for what is selected."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from zarrchive.client.local import hash_local
from zarrchive.client.local.selected import hash_selected
from zarrchive.client.selection import Selection
from zarrchive.errors import InvalidPath, LocalFileError

PATHS = [
    ".zattrs",
    "zarr.json",
    "a.b",
    "a-1/x",
    "a/.zattrs",
    "a/0/0",
    "a/0/1",
    "a/1/0",
    "b/zarr.json",
    "b/c/d/.zattrs",
    "b/c/d/0",
]


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    root = tmp_path / "t.zarr"
    for path in PATHS:
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_bytes(path.encode())
    return root


@pytest.mark.parametrize(
    ("includes", "excludes"),
    [
        ([], []),
        (["**/.zattrs", "**/zarr.json"], []),
        (["a/0/**"], []),
        ([], ["a"]),
        (["a"], ["a/0/1"]),
        (["*.b", "b/c"], ["**/0"]),
        (["nothing/**"], []),
    ],
)
def test_the_selected_entries_of_the_full_walk(
    tree: Path, includes: list[str], excludes: list[str]
) -> None:
    selection = Selection.parse(includes, excludes)
    full = hash_local(str(tree), jobs=2, cache=None)
    assert hash_selected(tree, selection, jobs=2) == [e for e in full if selection.selects(e.path)]


def test_trouble_outside_the_selection_is_none_of_its_business(tree: Path) -> None:
    os.symlink("missing", tree / "a" / "0" / "broken")
    os.symlink("..", tree / "a" / "1" / "loop")
    metadata = Selection.parse(["**/.zattrs"], ["a/1"])
    assert [e.path for e in hash_selected(tree, metadata)] == [
        ".zattrs",
        "a/.zattrs",
        "b/c/d/.zattrs",
    ]
    with pytest.raises(LocalFileError, match="broken symbolic link"):
        hash_selected(tree, Selection.parse(["a/0/**"]))
    with pytest.raises(LocalFileError, match="symbolic link loop"):
        hash_selected(tree, Selection.parse(["a/1/**"]))


def test_selected_paths_are_validated(tree: Path) -> None:
    (tree / "b" / "bad\\name").write_bytes(b"x")
    assert len(hash_selected(tree, Selection.parse(["a/**"]))) == 4
    with pytest.raises(InvalidPath, match="backslash"):
        hash_selected(tree, Selection.parse(["b/*"]))


def test_a_missing_root_fails_at_once(tmp_path: Path) -> None:
    with pytest.raises(LocalFileError, match="no such file or directory"):
        hash_selected(tmp_path / "missing", Selection())
