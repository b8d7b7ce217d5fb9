"""Planning a patch upload (pure): what is sent, and the checksum the Zarr must have after."""

from __future__ import annotations

import hashlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from zarrchive.checksum import (
    EMPTY_CHECKSUM,
    ChecksumNode,
    ZarrEntry,
    compute_checksum,
    iter_directory_digests,
)
from zarrchive.client.patch import affected_directories, plan_patch
from zarrchive.errors import InvalidInput

# files are named f*, directories d*: no path is both a file and a directory
paths = st.builds(
    lambda dirs, name: "/".join([*dirs, name]),
    st.lists(st.sampled_from(["d0", "d1", "d2"]), max_size=3),
    st.sampled_from(["f0", "f1", "f2", ".zattrs"]),
)
contents = st.sampled_from([b"", b"a", b"bb", b"ccc"])


def entry(path: str, content: bytes) -> ZarrEntry:
    return ZarrEntry(path, len(content), hashlib.md5(content).hexdigest())


def nodes_of(remote: dict[str, ZarrEntry], directories: set[str]) -> dict[str, ChecksumNode | None]:
    """What the archive would answer for the nodes of *directories* of a Zarr holding
    *remote*: each directory's ``.checksum`` document as the archive writes it, parsed."""
    documents = {
        d.path: d.node_json
        for d in iter_directory_digests(sorted(remote.values()), grouped=True, with_nodes=True)
    }
    out: dict[str, ChecksumNode | None] = {}
    for directory in directories:
        document = documents.get(directory)
        if document is None:
            out[directory] = ChecksumNode() if directory == "" else None
        else:
            out[directory] = ChecksumNode.from_json(document)
    return out


@settings(max_examples=150, deadline=None)
@given(
    remote=st.dictionaries(paths, contents, max_size=12),
    local=st.dictionaries(paths, contents, max_size=8),
)
def test_plan_sends_the_difference_and_predicts_the_checksum(
    remote: dict[str, bytes], local: dict[str, bytes]
) -> None:
    remote_entries = {p: entry(p, c) for p, c in remote.items()}
    local_entries = sorted(entry(p, c) for p, c in local.items())
    directories = affected_directories(local)
    nodes = nodes_of(remote_entries, directories)
    kept = {d: (n.files.copy(), n.directories.copy()) for d, n in nodes.items() if n is not None}
    plan = plan_patch(local_entries, nodes)

    sent = [e for e in local_entries if remote_entries.get(e.path) != e]
    assert plan.upload == sent  # new and changed only, in the order given
    assert plan.new == sum(1 for e in local_entries if e.path not in remote_entries)
    assert plan.skipped == len(local_entries) - len(sent)
    assert plan.base_checksum == compute_checksum(remote_entries.values())
    after = {**remote_entries, **{e.path: e for e in local_entries}}  # nothing deleted
    assert plan.expected_checksum == compute_checksum(after.values())
    assert plan.listed == sum(
        1 for d in directories if d == "" or any(p.startswith(d + "/") for p in remote)
    )
    # the archive's nodes are left as read
    assert {d: (n.files, n.directories) for d, n in nodes.items() if n is not None} == kept


def test_a_wide_directory_is_predicted_whole() -> None:
    """A directory of 5,000 files of which the patch changes one and adds one: the Zarr's
    checksum after it is predicted (every other file's digest comes from the node); one
    other file's digest differing in the archive gives another checksum."""
    remote = {
        f"arr/{i}.{j}": entry(f"arr/{i}.{j}", f"{i},{j}".encode())
        for i in range(50)
        for j in range(100)
    }
    remote["arr/.zarray"] = entry("arr/.zarray", b"{}")
    local = [entry("arr/.zarray", b'{"v": 2}'), entry("arr/.zattrs", b"{}")]
    plan = plan_patch(local, nodes_of(remote, {"", "arr"}))
    assert (plan.new, plan.skipped, plan.listed) == (1, 0, 2)
    after = {**remote, **{e.path: e for e in local}}
    assert plan.expected_checksum == compute_checksum(after.values())
    changed = {**remote, "arr/7.7": entry("arr/7.7", b"someone else's")}
    assert compute_checksum({**changed, **{e.path: e for e in local}}.values()) != (
        plan.expected_checksum
    )


def test_affected_directories() -> None:
    assert affected_directories([]) == {""}
    assert affected_directories(["a/b/c", "a/x", ".zattrs"]) == {"", "a", "a/b"}


@pytest.mark.parametrize(
    ("remote", "local", "clash"),
    [
        ({"a/b": b"x"}, {"a": b"y"}, "'a'"),  # a file here, a directory there
        ({"a": b"x"}, {"a/b": b"y"}, "'a'"),  # a directory here, a file there
        ({"a": b"x"}, {"a/b/c": b"y"}, "'a'"),
    ],
)
def test_clashes_are_refused_before_anything_is_sent(
    remote: dict[str, bytes], local: dict[str, bytes], clash: str
) -> None:
    remote_entries = {p: entry(p, c) for p, c in remote.items()}
    local_entries = sorted(entry(p, c) for p, c in local.items())
    nodes = nodes_of(remote_entries, affected_directories(local))
    with pytest.raises(InvalidInput) as info:
        plan_patch(local_entries, nodes)
    assert clash in info.value.message and "deletes nothing" in info.value.message


def test_a_new_zarr() -> None:
    local = [entry("a/b", b"x"), entry(".zattrs", b"{}")]
    plan = plan_patch(local, {"": ChecksumNode(), "a": None})
    assert (plan.base_checksum, plan.new, plan.listed) == (EMPTY_CHECKSUM, 2, 1)
    assert plan.expected_checksum == compute_checksum(local)
