"""Merging a manifest with recorded changes, and diffing manifests: properties on random
Zarr states and change sequences (the merged manifest is the listing of the new state, byte
for byte)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from zarrchive.errors import InvalidManifest
from zarrchive.manifest import (
    DifferenceKind,
    ManifestChange,
    ManifestEntry,
    diff_manifests,
    manifest_bytes,
    merge_changes,
    merge_manifest,
    read_manifest,
)
from zarrchive.manifest.writer import chunk_stream

segments = st.sampled_from(["0", "1", "10", ".zarray", "a", "a-b", "a.b", "é", "z"])
paths = st.lists(segments, min_size=1, max_size=3).map("/".join)
entries_of = st.builds(
    lambda v, s, size, etag: (
        v,
        datetime(2026, 1, 1, tzinfo=UTC) + timedelta(seconds=s),
        size,
        etag,
    ),
    st.text("abcXYZ019_", min_size=1, max_size=8),
    st.integers(0, 10**6),
    st.integers(0, 10**9),
    st.binary(min_size=16, max_size=16).map(bytes.hex),
)
State = dict[str, tuple[str, datetime, int, str]]


def _no_clash(paths: set[str]) -> bool:
    """No path is also a directory of another (a manifest cannot hold both)."""
    return not any(p.startswith(q + "/") for p in paths for q in paths)


def listing(state: State) -> list[ManifestEntry]:
    """What S3 lists for a state: current objects in key order."""
    return [ManifestEntry(p, *state[p]) for p in sorted(state)]


states = st.dictionaries(paths, entries_of, max_size=25).filter(lambda s: _no_clash(set(s)))
#: one batch: paths written (with their new object) and paths deleted
batches = st.tuples(st.dictionaries(paths, entries_of, max_size=8), st.sets(paths, max_size=5))


def apply_batch(state: State, written: State, deleted: set[str]) -> State:
    after = {p: v for p, v in state.items() if p not in deleted}
    after.update(written)
    return after


def net_changes(state: State, sequence: list[tuple[State, set[str]]]) -> list[ManifestChange]:
    """The last change of each path over a sequence of batches, sorted by path (what the
    service reads from its records)."""
    last: dict[str, ManifestEntry | None] = {}
    for written, deleted in sequence:
        for path in deleted:
            last[path] = None
        for path, value in written.items():
            last[path] = ManifestEntry(path, *value)
    return [ManifestChange(p, last[p]) for p in sorted(last)]


@settings(max_examples=300, deadline=None)
@given(states, st.lists(batches, max_size=5))
def test_merge_of_the_listing_with_the_changes_is_the_new_listing(
    start: State, sequence: list[tuple[State, set[str]]]
) -> None:
    state = start
    applied: list[tuple[State, set[str]]] = []
    for written, deleted in sequence:
        after = apply_batch(state, written, deleted - set(written))
        if not _no_clash(set(after)):
            continue  # the archive refuses a file/directory clash before applying
        applied.append((written, deleted - set(written)))
        state = after
    merged = list(merge_changes(listing(start), net_changes(start, applied)))
    assert merged == listing(state)
    assert manifest_bytes(merged, database_checksum="x") == manifest_bytes(
        listing(state), database_checksum="x"
    )


@settings(max_examples=200, deadline=None)
@given(states, batches)
def test_merge_reads_a_written_manifest_as_its_base(
    start: State, batch: tuple[State, set[str]]
) -> None:
    written, deleted = batch
    deleted -= set(written)
    after = apply_batch(start, written, deleted)
    if not _no_clash(set(after)):
        return
    base = read_manifest(manifest_bytes(listing(start))).entries
    merged = manifest_bytes(merge_changes(base, net_changes(start, [(written, deleted)])))
    assert merged == manifest_bytes(listing(after))


@settings(max_examples=200, deadline=None)
@given(states, states)
def test_diff_names_exactly_the_paths_that_differ(a: State, b: State) -> None:
    differences = {d.path: d for d in diff_manifests(listing(a), listing(b))}
    for path in set(a) | set(b):
        if path not in b:
            assert differences.pop(path).kind is DifferenceKind.MISSING
        elif path not in a:
            assert differences.pop(path).kind is DifferenceKind.EXTRA
        elif a[path][0] != b[path][0] or a[path][1:] != b[path][1:]:
            d = differences.pop(path)
            assert d.kind is DifferenceKind.DIFFERENT and d.fields
    assert differences == {}
    assert list(diff_manifests(listing(a), listing(a))) == []


def test_diff_reports_each_differing_field() -> None:
    t = datetime(2026, 1, 1, tzinfo=UTC)
    mine = ManifestEntry("a/0", "v1", t, 3, "0" * 32)
    theirs = ManifestEntry("a/0", "v2", t + timedelta(milliseconds=500), 4, "1" * 32)
    (d,) = diff_manifests([mine], [theirs])
    assert d.fields == ("versionId", "size", "ETag")  # same second: not a difference
    assert d.describe() == (
        "a/0: different: versionId v1 in the manifest, v2 in S3; size 3 in the manifest, "
        f"4 in S3; ETag {'0' * 32} in the manifest, {'1' * 32} in S3"
    )


def test_unsorted_inputs_are_refused() -> None:
    t = datetime(2026, 1, 1, tzinfo=UTC)
    e = [ManifestEntry("b", "v", t, 1, "0" * 32), ManifestEntry("a", "v", t, 1, "0" * 32)]
    with pytest.raises(InvalidManifest, match="sorted"):
        list(merge_changes(e, []))
    with pytest.raises(InvalidManifest, match="sorted"):
        list(merge_changes([], [ManifestChange("b", None), ManifestChange("b", None)]))
    with pytest.raises(InvalidManifest, match="sorted"):
        list(diff_manifests([], e))


# -- the fast merge of a manifest file (the manifest job's) -----------------------------------
odd_segments = st.sampled_from(["0", "1", ".zarray", "a", "a-b", "a.b", "é", 'q"u', "日本", "a b"])
odd_paths = st.lists(odd_segments, min_size=1, max_size=3).map("/".join)
odd_entries = st.builds(
    lambda v, s, size, etag: (
        v,
        datetime(2026, 1, 1, tzinfo=UTC) + timedelta(seconds=s, microseconds=s % 7),
        size,
        etag,
    ),
    st.text('abcXYZ019_"\\é', min_size=1, max_size=8),  # (escapes: rendered again)
    st.integers(0, 10**6),
    st.integers(0, 10**9),
    st.binary(min_size=16, max_size=16).map(bytes.hex),
)
odd_states = st.dictionaries(odd_paths, odd_entries, max_size=25).filter(
    lambda s: _no_clash(set(s))
)
odd_batches = st.tuples(
    st.dictionaries(odd_paths, odd_entries, max_size=8), st.sets(odd_paths, max_size=5)
)


def _fast_merge(base: bytes, changes: list[ManifestChange], database: str | None) -> bytes:
    import tempfile

    with tempfile.SpooledTemporaryFile() as body:
        stream = chunk_stream(iter([base[i : i + 7] for i in range(0, len(base), 7)]))
        return merge_manifest(stream, changes, body, database_checksum=database).getvalue()


@settings(max_examples=150, deadline=None)
@given(odd_states, st.lists(odd_batches, max_size=4))
def test_the_fast_merge_of_a_written_manifest_is_the_new_listings_manifest(
    start: State, sequence: list[tuple[State, set[str]]]
) -> None:
    state = start
    applied: list[tuple[State, set[str]]] = []
    for written, deleted in sequence:
        after = apply_batch(state, written, deleted - set(written))
        if not _no_clash(set(after)):
            continue
        applied.append((written, deleted - set(written)))
        state = after
    base = manifest_bytes(listing(start), database_checksum="old")
    merged = _fast_merge(base, net_changes(start, applied), "x")
    assert merged == manifest_bytes(listing(state), database_checksum="x")


def test_the_fast_merge_reads_other_layouts_and_refuses_broken_files() -> None:
    import io
    import json
    import tempfile

    t = datetime(2026, 1, 1, tzinfo=UTC)
    state = {
        "a/0": ("v0", t, 1, "0" * 32),
        "a/1": ("v1", t, 2, "1" * 32),
        "b": ("v", t, 3, "2" * 32),
    }
    written = manifest_bytes(listing(state))
    change = [
        ManifestChange("a/1", None),
        ManifestChange("c", ManifestEntry("c", "w", t, 4, "3" * 32)),
    ]
    after = {"a/0": state["a/0"], "b": state["b"], "c": ("w", t, 4, "3" * 32)}
    expected = manifest_bytes(listing(after))
    # other spacing on the lines (valid JSON, one entry a line): read and rendered again
    spaced = written.replace(b'": [', b'":[').replace(b'",', b'", ')
    assert spaced != written and _fast_merge(spaced, change, None) == expected
    # a compact file (not the streaming layout): merged through merge_changes when seekable
    compact = json.dumps(json.loads(written)).encode()
    with tempfile.SpooledTemporaryFile() as body:
        merged = merge_manifest(io.BytesIO(compact), change, body).getvalue()
    assert merged == expected
    with pytest.raises(InvalidManifest, match="streaming layout"):
        _fast_merge(compact, change, None)
    # truncated, unsorted
    with pytest.raises(InvalidManifest, match="truncated"):
        _fast_merge(written[: written.index(b'\n  "b"')], change, None)
    unsorted = written.replace(b'"0": ["v0"', b'"9": ["v0"')
    with pytest.raises(InvalidManifest, match="sorted"):
        _fast_merge(unsorted, change, None)
