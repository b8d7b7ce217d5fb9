"""Manifests: random listings round-trip; generation streams in bounded memory."""

from __future__ import annotations

import json
import tempfile
import tracemalloc
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from zarrchive.checksum import compute_checksum
from zarrchive.manifest import (
    ManifestEntry,
    format_timestamp,
    generate_manifest,
    manifest_bytes,
    read_manifest,
)

segments = st.sampled_from(["0", "1", "10", "2", ".zarray", "a", "a-b", "a.b", "é", 'q"', "zz"])
paths = st.lists(segments, min_size=1, max_size=4).map("/".join)
timestamps = st.datetimes(
    min_value=datetime(2000, 1, 1),
    max_value=datetime(2100, 1, 1),
    timezones=st.sampled_from(
        [UTC, timezone(timedelta(hours=5, minutes=30)), timezone(-timedelta(hours=8))]
    ),
)
fields = st.tuples(
    st.text(min_size=1, max_size=12),
    timestamps,
    st.integers(min_value=0, max_value=2**45),
    st.binary(min_size=16, max_size=16).map(bytes.hex),
)


@st.composite
def listings(draw: st.DrawFn) -> list[ManifestEntry]:
    chosen = sorted(set(draw(st.lists(paths, max_size=40))))
    # a name cannot be both a file and a directory
    files = [p for p in chosen if not any(q.startswith(p + "/") for q in chosen)]
    return [ManifestEntry(p, *draw(fields)) for p in files]


def canonical(entry: ManifestEntry) -> tuple[Any, ...]:
    return (
        entry.path,
        entry.version_id,
        format_timestamp(entry.last_modified),
        entry.size,
        entry.etag,
    )


def naive_tree(entries: list[ManifestEntry]) -> dict[str, Any]:
    root: dict[str, Any] = {}
    for e in entries:
        *dirs, name = e.path.split("/")
        node = root
        for d in dirs:
            node = node.setdefault(d, {})
        node[name] = [e.version_id, format_timestamp(e.last_modified), e.size, e.etag]
    return root


def ordered(value: Any) -> Any:
    """Dicts as lists of pairs, so key order is compared too."""
    if isinstance(value, dict):
        return [(k, ordered(v)) for k, v in value.items()]
    return value


@settings(max_examples=150, deadline=None)
@given(listings())
def test_random_listings_round_trip(entries: list[ManifestEntry]) -> None:
    data = manifest_bytes(entries)
    parsed = read_manifest(data)
    back = list(parsed.entries)  # verifies statistics and checksum too
    assert [canonical(e) for e in back] == [canonical(e) for e in entries]
    doc = json.loads(data)
    assert ordered(doc["entries"]) == ordered(naive_tree(entries))
    stats = doc["statistics"]
    assert stats["entries"] == len(entries)
    assert stats["totalSize"] == sum(e.size for e in entries)
    assert stats["depth"] == max((e.path.count("/") for e in entries), default=0)
    newest = max((e.last_modified for e in entries), default=None)
    assert stats["lastModified"] == (None if newest is None else format_timestamp(newest))
    assert stats["zarrChecksum"] == compute_checksum((e.path, e.size, e.etag) for e in entries)
    assert manifest_bytes(back) == data


def synthetic(n: int) -> Iterator[ManifestEntry]:
    """``arr/{a}/{b}/{c}`` chunk keys, 100 per directory, lazily, in S3 (sorted) order."""
    t = datetime(2024, 5, 1, tzinfo=UTC)
    names = sorted(str(i) for i in range(100))
    i = 0
    for a in sorted(str(i) for i in range((n + 9999) // 10000)):
        for b in names:
            for c in names:
                if i == n:
                    return
                key = f"arr/{a}/{b}/{c}"
                yield ManifestEntry(
                    key, f"v{i:031d}", t + timedelta(seconds=i), 1000 + i % 7, f"{i:032x}"
                )
                i += 1


def test_generation_memory_does_not_grow_with_entries() -> None:
    n = 20_000  # the body (1.6 MB) is larger than the bound on memory below
    with tempfile.TemporaryFile() as body:
        tracemalloc.start()
        try:
            manifest = generate_manifest(synthetic(n), body)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert manifest.statistics.entries == n
        assert manifest.statistics.depth == 3
        assert manifest.body_size > 1_500_000  # the file is large...
    # ... but memory stays small (the TreeHasher's and the writer's open
    # directories, the 64 KiB output buffer)
    assert peak < 1_000_000, peak  # measured: about 320 kB for 10^4 and for 10^5 entries
