"""Planning a patch upload (pure): what is sent, and the checksum the Zarr must have after."""

from __future__ import annotations

import hashlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from zarrchive.checksum import EMPTY_CHECKSUM, ZarrEntry, compute_checksum, iter_directory_digests
from zarrchive.client.api import DirectoryListing, ListingEntry
from zarrchive.client.patch import PartialListing, affected_directories, plan_patch
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


def listings_of(
    remote: dict[str, ZarrEntry], directories: set[str]
) -> dict[str, DirectoryListing | None]:
    """What the archive would list for *directories* of a Zarr holding *remote*."""
    digests = {d.path: d for d in iter_directory_digests(sorted(remote.values()), grouped=True)}
    out: dict[str, DirectoryListing | None] = {}
    for directory in directories:
        if directory and directory not in digests:
            out[directory] = None
            continue
        files = [
            ListingEntry(p.rpartition("/")[2], p, e.md5, e.size)
            for p, e in sorted(remote.items())
            if p.rpartition("/")[0] == directory
        ]
        subdirs = [
            ListingEntry(p.rpartition("/")[2], p, d.digest, d.size)
            for p, d in sorted(digests.items())
            if p and p.rpartition("/")[0] == directory
        ]
        digest = digests[directory].digest if directory in digests else EMPTY_CHECKSUM
        out[directory] = DirectoryListing(directory, digest, subdirs, files)
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
    plan = plan_patch(local_entries, listings_of(remote_entries, directories))

    sent = [e for e in local_entries if remote_entries.get(e.path) != e]
    assert plan.upload == sent  # new and changed only, in the order given
    assert plan.new == sum(1 for e in local_entries if e.path not in remote_entries)
    assert plan.skipped == len(local_entries) - len(sent)
    after = {**remote_entries, **{e.path: e for e in local_entries}}  # nothing deleted
    assert plan.expected_checksum == compute_checksum(after.values())
    assert plan.listed == sum(
        1 for d in directories if d == "" or any(p.startswith(d + "/") for p in remote)
    )


@settings(max_examples=150, deadline=None)
@given(
    remote=st.dictionaries(paths, contents, max_size=12),
    local=st.dictionaries(paths, contents, min_size=1, max_size=8),
    partial=st.sets(st.sampled_from(["", "d0", "d1", "d0/d1", "d1/d0", "d0/d0"]), min_size=1),
)
def test_partly_listed_directories_are_checked_below_them(
    remote: dict[str, bytes], local: dict[str, bytes], partial: set[str]
) -> None:
    """A directory listed in part (only the names the patch needs): the same files are sent,
    and what the final check compares covers every file sent."""
    remote_entries = {p: entry(p, c) for p, c in remote.items()}
    local_entries = sorted(entry(p, c) for p, c in local.items())
    directories = affected_directories(local)
    listings: dict[str, DirectoryListing | PartialListing | None] = dict(
        listings_of(remote_entries, directories)
    )
    for directory in partial & directories:
        listing = listings[directory]
        if listing is None:
            continue
        needed = {e.path for e in local_entries} | directories
        listings[directory] = PartialListing(
            directory,
            listing.digest,
            [d for d in listing.directories if d.path in needed],
            [f for f in listing.files if f.path in needed],
        )
    plan = plan_patch(local_entries, listings)
    full = plan_patch(local_entries, listings_of(remote_entries, directories))
    assert (plan.upload, plan.new, plan.skipped) == (full.upload, full.new, full.skipped)

    after = {**remote_entries, **{e.path: e for e in local_entries}}
    digests = {d.path: d.digest for d in iter_directory_digests(sorted(after.values()))}
    for directory, digest in plan.expected.items():
        assert digests[directory] == digest
    is_partial = any(isinstance(v, PartialListing) for v in listings.values())
    assert (plan.expected_checksum is None) == is_partial
    for sent in plan.upload:
        assert sent in plan.check_files or any(
            d == "" or sent.path.startswith(d + "/") for d in plan.expected
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
    listings = listings_of(remote_entries, affected_directories(local))
    with pytest.raises(InvalidInput) as info:
        plan_patch(local_entries, listings)
    assert clash in info.value.message and "deletes nothing" in info.value.message


def test_a_listing_outside_its_directory_is_refused() -> None:
    bad = DirectoryListing("", EMPTY_CHECKSUM, [], [ListingEntry("x", "../x", "0" * 32, 1)])
    with pytest.raises(Exception, match="refusing to use it"):
        plan_patch([entry("y", b"y")], {"": bad})
