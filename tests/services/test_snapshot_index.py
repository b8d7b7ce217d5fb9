"""The snapshot index parsed from a manifest, and the version map of unembargo (pure)."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from zarrchive.checksum import EMPTY_CHECKSUM, compute_checksum, iter_directory_digests
from zarrchive.manifest import ManifestEntry
from zarrchive.services.zarr_engine.node_cache import DIRECTORY, FILE
from zarrchive.services.zarr_engine.snapshots import build_index, version_map
from zarrchive.storage.objects import ObjectVersion

NOW = datetime(2026, 11, 24, tzinfo=UTC)
names = st.sampled_from(["a", "b", "c.0", "z", "0"])
paths = st.lists(names, min_size=1, max_size=4).map("/".join)


def entries_of(files: dict[str, bytes]) -> list[ManifestEntry]:
    return [
        ManifestEntry(p, f"v-{p}", NOW, len(b), hashlib.md5(b).hexdigest())
        for p, b in sorted(files.items())  # S3's key order groups directories
    ]


def consistent(files: dict[str, bytes]) -> dict[str, bytes]:
    """Drop paths that are both a file and a directory."""
    kept: dict[str, bytes] = {}
    for path in sorted(files, key=len):
        parts = path.split("/")
        if any("/".join(parts[:i]) in kept for i in range(1, len(parts))):
            continue
        kept[path] = files[path]
    return {p: b for p, b in kept.items() if not any(o.startswith(p + "/") for o in kept)}


@settings(max_examples=150, deadline=None)
@given(st.dictionaries(paths, st.binary(max_size=8), max_size=25))
def test_index_matches_the_tree_hash(raw: dict[str, bytes]) -> None:
    files = consistent(raw)
    index = build_index(entries_of(files))
    if not files:
        assert (index.checksum, index.file_count, index.size) == (EMPTY_CHECKSUM, 0, 0)
        assert index.nodes[""].page(None, 10) == ([], False)
        return
    triples = [(p, len(b), hashlib.md5(b).hexdigest()) for p, b in files.items()]
    assert index.checksum == compute_checksum(triples)
    assert index.versions == {p: f"v-{p}" for p in files}
    for directory in iter_directory_digests(triples):
        node = index.nodes[directory.path]
        assert (node.digest, node.count, node.size) == (
            directory.digest,
            directory.count,
            directory.size,
        )
        prefix = directory.path + "/" if directory.path else ""
        below = [p[len(prefix) :] for p in files if p.startswith(prefix)]
        want_files = sorted(r for r in below if "/" not in r)
        want_dirs = sorted({r.split("/")[0] for r in below if "/" in r})
        # paging one row at a time walks exactly the children, directories first
        rows, after = [], None
        while True:
            page, more = node.page(after, 1)
            rows += page
            if not more:
                break
            after = (page[-1][0], page[-1][1])
        assert [(k, n) for k, n, _ in rows] == [(DIRECTORY, d) for d in want_dirs] + [
            (FILE, f) for f in want_files
        ]


def version(vid: str, seconds: int, *, latest: bool = False, marker: bool = False) -> ObjectVersion:
    return ObjectVersion(
        "k", vid, latest, marker, None if marker else "e", 1, NOW + timedelta(seconds=seconds)
    )


def test_version_map_pairs_histories_in_write_order() -> None:
    source = [version("s3", 3, latest=True), version("s1", 1), version("s2", 2, marker=True)]
    target = [version("t3", 9, latest=True), version("t1", 7), version("t2", 8, marker=True)]
    assert version_map(source, target) == {"s1": "t1", "s2": "t2", "s3": "t3"}
