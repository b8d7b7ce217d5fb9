"""The changes of a restore (manifest.diff): applied to the current entries they give the
target's, exactly; only differences are changes; streamed in bounded memory."""

from __future__ import annotations

import tracemalloc
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from zarrchive.errors import InvalidManifest
from zarrchive.manifest import ManifestEntry, merge_changes
from zarrchive.manifest.diff import restore_changes, same_content

NOW = datetime(2026, 1, 1, tzinfo=UTC)
paths = st.lists(st.sampled_from(["0", "1", "a", "a.b", "é", "z"]), min_size=1, max_size=3).map(
    "/".join
)
#: few versions and md5s, so that entries often share one or the other
versions = st.sampled_from(["v1", "v2", "v3"])
md5s = st.sampled_from(["0" * 32, "1" * 32, "2" * 32 + "-2"])
sizes = st.integers(min_value=0, max_value=2)


@st.composite
def states(draw: st.DrawFn) -> list[ManifestEntry]:
    chosen = sorted(set(draw(st.lists(paths, max_size=25))))
    return [
        ManifestEntry(p, draw(versions), NOW, draw(sizes), draw(md5s))
        for p in chosen
        if not any(q.startswith(p + "/") for q in chosen)
    ]


@st.composite
def related(draw: st.DrawFn) -> tuple[list[ManifestEntry], list[ManifestEntry]]:
    """Two states, the second often made of the first (kept, changed or dropped entries)."""
    current = draw(states())
    if draw(st.booleans()):
        return current, draw(states())
    target = []
    for entry in current:
        action = draw(st.sampled_from(["keep", "drop", "rewrite", "same bytes"]))
        if action == "keep":
            target.append(entry)
        elif action == "rewrite":
            target.append(entry._replace(version_id=draw(versions), etag=draw(md5s)))
        elif action == "same bytes":
            target.append(entry._replace(version_id=entry.version_id + "'"))
    return current, target


@settings(max_examples=300, deadline=None)
@given(related())
def test_the_changes_applied_to_the_current_state_give_the_target_exactly(
    pair: tuple[list[ManifestEntry], list[ManifestEntry]],
) -> None:
    current, target = pair
    changes = list(restore_changes(current, target))
    applied = {e.path: e for e in merge_changes(current, changes)}
    before = {e.path: e for e in current}
    wanted = {e.path: e for e in target}
    assert applied.keys() == wanted.keys()
    for path, entry in wanted.items():
        # every path holds the target's bytes: written from the target's very entry, or
        # left alone because it already held them
        assert applied[path] == entry or (
            applied[path] == before[path] and same_content(before[path], entry)
        )


@settings(max_examples=300, deadline=None)
@given(related())
def test_only_differences_are_changes(
    pair: tuple[list[ManifestEntry], list[ManifestEntry]],
) -> None:
    current, target = pair
    before = {e.path: e for e in current}
    wanted = {e.path: e for e in target}
    changes = list(restore_changes(current, target))
    assert [c.path for c in changes] == sorted({c.path for c in changes})
    for change in changes:
        if change.entry is None:
            assert change.path in before and change.path not in wanted
        else:
            assert change.entry == wanted[change.path]
            assert change.path not in before or not same_content(before[change.path], change.entry)
    changed = {c.path for c in changes}
    for path in before.keys() | wanted.keys():
        if path not in changed:
            assert path in before and path in wanted
            assert same_content(before[path], wanted[path])


def test_same_content_trusts_an_md5_not_a_multipart_etag() -> None:
    entry = ManifestEntry("a", "v1", NOW, 3, "0" * 32)
    assert same_content(entry, entry._replace(version_id="v2"))
    assert not same_content(entry, entry._replace(version_id="v2", size=4))
    parts = entry._replace(etag="0" * 32 + "-2")
    assert not same_content(parts, parts._replace(version_id="v2"))
    assert same_content(parts, parts)


def test_unsorted_input_is_refused() -> None:
    a = ManifestEntry("a", "v1", NOW, 1, "0" * 32)
    b = ManifestEntry("b", "v1", NOW, 1, "0" * 32)
    with pytest.raises(InvalidManifest, match="sorted"):
        list(restore_changes([b, a], []))
    with pytest.raises(InvalidManifest, match="sorted"):
        list(restore_changes([], [a, a]))


def _entries(count: int, version: str, changed_every: int = 0) -> Iterator[ManifestEntry]:
    for i in range(count):
        changed = changed_every and i % changed_every == 0
        yield ManifestEntry(
            f"0/{i:09d}", version + ("x" if changed else ""), NOW, 10, f"{int(changed):032d}"
        )


def test_the_diff_of_large_manifests_streams_in_bounded_memory() -> None:
    count = 50_000
    tracemalloc.start()
    try:
        changes = 0
        for _change in restore_changes(
            _entries(count, "v"), _entries(count, "v", changed_every=100)
        ):
            changes += 1
        _now, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert changes == count // 100
    assert peak < 1_000_000
