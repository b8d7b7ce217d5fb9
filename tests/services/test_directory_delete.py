"""Directory deletes below the API: the pure parts (targets, covering, the batch's rows) with
properties, and the tree update that drops a whole directory, against deleting its files
one by one (same nodes, same root)."""

from __future__ import annotations

import hashlib
import uuid
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.helpers.databases import SQLITE_ONLY
from tests.helpers.seeded_zarr import chunk_files
from tests.helpers.zarr_client import oracle_checksum
from zarrchive.errors import InvalidInput
from zarrchive.services.runtime import Archive
from zarrchive.services.zarr_engine.tree_updater import (
    FileChange,
    apply_changes,
    check_dropped_directories,
)
from zarrchive.services.zarr_engine.uploads import directory_delete
from zarrchive.services.zarr_engine.uploads.directory_delete import (
    Expansion,
    Plan,
    Resolved,
    Target,
    cover,
    delete_subtree_nodes,
    encode_targets,
    expand,
    iter_subtree,
    parse_targets,
)
from zarrchive.storage.keys import checksum_prefix, zarr_object_key

names = st.sampled_from(["a", "b", "c", "a.b", "0"])
paths = st.lists(names, min_size=1, max_size=4).map("/".join)


# -- pure -----------------------------------------------------------------------------------
def test_targets_parsed() -> None:
    assert parse_targets(["a/b", "c/", "d/e/"]) == [
        Target("a/b"),
        Target("c", directory=True),
        Target("d/e", directory=True),
    ]
    for bad, why in (
        ([""], "the root directory can't be deleted"),
        (["/"], "the root directory can't be deleted"),
        (["a", "a/"], "'a' appears more than once"),
        (["a//b"], "empty"),
        (["a/../b"], ".."),
    ):
        with pytest.raises(InvalidInput) as caught:
            parse_targets(bad)
        assert why in caught.value.message and "nothing was deleted" in caught.value.message


@given(st.lists(paths, max_size=12), st.lists(paths, max_size=6))
def test_cover_keeps_the_outermost(files: list[str], directories: list[str]) -> None:
    counts = {d: len(d) for d in directories}
    resolved = cover(files, counts)
    kept = [*resolved.files, *resolved.directories]
    # nothing kept lies inside a kept directory, and everything dropped lies inside one
    for path in kept:
        assert not any(path.startswith(d + "/") for d in resolved.directories)
    for path in [*files, *directories]:
        if path not in kept:
            assert any(path.startswith(d + "/") for d in resolved.directories) or (
                path in resolved.directories
            )
    assert resolved.file_count == len(resolved.files) + sum(counts[d] for d in resolved.directories)


@given(st.lists(paths, max_size=8, unique=True), st.lists(paths, max_size=4, unique=True))
def test_batch_rows_round_trip(files: list[str], directories: list[str]) -> None:
    resolved = cover(files, dict.fromkeys(directories, 1))
    plan = Plan.of_rows(encode_targets(resolved))
    assert plan == Plan(sorted(resolved.files), sorted(resolved.directories))
    # rows never name what a directory of theirs covers, even if written so
    assert Plan.of_rows(encode_targets(Resolved(files, dict.fromkeys(directories, 1)))) == plan
    # a batch written before directories were deletable: files only
    assert Plan.of_rows(files) == Plan(sorted(files), [])


def test_dropped_directories_checked() -> None:
    check_dropped_directories(["a/b", "c"], [])
    check_dropped_directories(["a/b", "c"], ["d", "a/c"])
    for changes, dropped in (([], [""]), (["a/b"], ["a"]), (["a"], ["a"]), ([], ["a", "a/b"])):
        with pytest.raises(ValueError):
            check_dropped_directories(changes, dropped)


# -- against S3 -----------------------------------------------------------------------------
def _nodes(archive: Archive, zarr_id: str, s3: Any) -> dict[str, bytes]:
    prefix = checksum_prefix(zarr_id)
    listed = s3.list_objects_v2(Bucket=archive.store.bucket, Prefix=prefix).get("Contents", [])
    return {
        o["Key"][len(prefix) :]: s3.get_object(Bucket=archive.store.bucket, Key=o["Key"])[
            "Body"
        ].read()
        for o in listed
    }


def _changes(files: dict[str, bytes]) -> dict[str, FileChange]:
    return {p: (hashlib.md5(b).hexdigest(), len(b)) for p, b in files.items()}


@SQLITE_ONLY
def test_dropping_a_directory_equals_deleting_its_files(archive: Archive, s3: Any) -> None:
    files = {
        **chunk_files("arr", 230, width=20),
        **chunk_files("arr/x/deeper", 30, width=7),
        "arr.txt": b"beside arr",
        "keep/0": b"kept",
        ".zgroup": b"{}",
    }
    store = archive.store
    dropped, one_by_one = str(uuid.uuid4()), str(uuid.uuid4())
    for zid in (dropped, one_by_one):
        apply_changes(store, zid, _changes(files))
    plan = Plan(["keep/0"], ["arr"])
    walked = expand(store, dropped, plan)
    deleted = sorted(walked.deleted_paths(plan))
    walked.close()
    gone = sorted(p for p in files if p.startswith("arr/") or p == "keep/0")
    assert deleted == gone  # streamed from the nodes, each file once

    expansion = Expansion()
    for path, depth, _node in iter_subtree(store, dropped, "arr"):
        expansion.add(path, depth)
    assert expansion.levels[0] == ["arr"] and max(expansion.levels) == 3  # arr/x/deeper/{i}
    state = apply_changes(store, dropped, {"keep/0": None}, ["arr"])
    delete_subtree_nodes(store, dropped, expansion)
    other = apply_changes(store, one_by_one, dict.fromkeys(gone))

    remaining = {p: b for p, b in files.items() if p not in set(gone)}
    assert state == other
    assert state.checksum == oracle_checksum(remaining)
    assert _nodes(archive, dropped, s3) == _nodes(archive, one_by_one, s3)
    assert set(_nodes(archive, dropped, s3)) == {".checksum"}  # only the root's is left
    # dropping it again changes nothing
    assert apply_changes(store, dropped, {}, ["arr"]) == state


class _Lost(Exception):
    pass


@SQLITE_ONLY
def test_objects_deleted_in_chunks_under_the_claim(
    archive: Archive, s3: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The claim is renewed between requests; an applier that loses it stops, the tree
    untouched, and the next one deletes only what is left."""
    monkeypatch.setattr(directory_delete, "DELETE_CHUNK", 50)
    monkeypatch.setattr(directory_delete, "DELETE_PARALLEL", 1)
    store = archive.store
    zarr_id = str(uuid.uuid4())
    files = {**chunk_files("d", 420, width=30), "f": b"f"}
    store.map(lambda item: store.put(zarr_object_key(zarr_id, item[0]), item[1]), files.items())
    apply_changes(store, zarr_id, _changes(files))
    nodes_before = _nodes(archive, zarr_id, s3)
    plan = Plan(["f"], ["d"])

    renewals = []

    def loses_after_three() -> None:
        renewals.append(1)
        if len(renewals) == 3:
            raise _Lost

    with pytest.raises(_Lost):
        directory_delete.delete_objects(store, zarr_id, plan, loses_after_three)
    left = [
        o["Key"]
        for o in s3.list_objects_v2(Bucket=store.bucket, Prefix=f"zarr/{zarr_id}/").get(
            "Contents", []
        )
    ]
    assert len(left) == len(files) - 101  # 3 requests: ["f"], then 50 keys of "d/", twice
    assert _nodes(archive, zarr_id, s3) == nodes_before  # the tree is untouched

    deleted: list[int] = []

    def counts() -> None:
        deleted.append(1)

    expansion = directory_delete.delete_objects(store, zarr_id, plan, counts)
    assert expansion.files == len(files) - 101 + 1  # what was left ("f" again: it is named)
    assert len(deleted) >= (len(files) - 101) // 50
    assert s3.list_objects_v2(Bucket=store.bucket, Prefix=f"zarr/{zarr_id}/").get("KeyCount") == 0
    assert sorted(expansion.levels) == [0, 1] and len(expansion.levels[1]) == 14
