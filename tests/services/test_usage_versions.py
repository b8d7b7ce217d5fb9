"""``admin usage`` counts the noncurrent object versions nothing needs (issue #38 item 3): its
figures equal what a full listing of both buckets sums, less the versions the kept manifests
(a published state's, the current state's, one younger than the retention) name; gc frees
exactly them.  In-memory store, SQLite."""

from __future__ import annotations

import httpx
import pytest

from tests.helpers.databases import SQLITE_ONLY
from tests.helpers.version_histories import History, OffsetClock, run_stores_on
from zarrchive.config import PublishedZarrs
from zarrchive.db import models
from zarrchive.manifest import manifest_key, read_manifest
from zarrchive.services.dandi.usage import usage_report
from zarrchive.services.runtime import Archive
from zarrchive.storage.keys import zarr_prefix
from zarrchive.version_retention import Freed

pytestmark = [SQLITE_ONLY, pytest.mark.settings(published_zarrs=PublishedZarrs.SNAPSHOT)]


@pytest.fixture
def archive(memory_archive: Archive) -> Archive:
    return memory_archive


def _named(archive: Archive, zarr_id: str, checksum: str) -> set[tuple[str, str]]:
    raw = b"".join(archive.store.iter_content(manifest_key(zarr_id, checksum)))
    return {(zarr_prefix(zarr_id) + e.path, e.version_id) for e in read_manifest(raw).entries}


def test_usage_counts_the_noncurrent_versions_nothing_needs_as_a_listing_sums(
    api: httpx.Client, archive: Archive, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = OffsetClock()
    monkeypatch.setattr(models, "datetime", clock.shifted_datetime())
    run_stores_on(archive, clock)
    h = History.start(api, archive, clock, History.dandiset_with_blob(api, archive), 0)
    h.write("a", b"A1")
    h.write("d/b", b"B1")
    h.manifest()
    h.publish()  # pins state 1
    pinned = h.checksum
    h.write("a", b"A2")
    h.manifest()  # state 2: its manifest grows older than the retention
    old = h.checksum
    h.rewrite_blob()
    h.wait(31)
    h.write("a", b"A3")
    h.write("d/b", b"B3")
    h.manifest()  # state 3: younger than the retention
    recent = h.checksum
    h.write("a", b"A4")
    h.delete("d/b")  # state 4 (current): no manifest

    report = usage_report(archive)
    # the full listing of both buckets: every noncurrent version and delete marker ...
    noncurrent = [
        v
        for store in (archive.store, archive.embargo_store)
        for v in store.iter_versions("")
        if not v.is_latest and not v.key.startswith("zarr-staging/")
    ]
    # ... less what the kept manifests name
    needed = _named(archive, h.zarr_id, pinned) | _named(archive, h.zarr_id, recent)
    unneeded = [v for v in noncurrent if (v.key, v.version_id) not in needed]
    assert any(v.key.endswith("/a") for v in unneeded)  # A2: only the old manifest names it
    assert any(v.key == h.blob_key for v in unneeded)
    assert (report.unneeded_versions, report.unneeded_version_bytes) == (
        len(unneeded),
        sum(0 if v.is_delete_marker else v.size for v in unneeded),
    )
    assert report.orphaned_bytes >= report.unneeded_version_bytes > 0
    orphaned = report.as_json()["orphaned"]
    assert isinstance(orphaned, dict)
    assert (orphaned["noncurrent_versions"], orphaned["noncurrent_version_bytes"]) == (
        report.unneeded_versions,
        report.unneeded_version_bytes,
    )

    # gc once all of them are past the retention (the recent manifest then is too: its
    # versions become unneeded only then)
    h.wait(31)
    due = usage_report(archive)
    assert h.gc() == Freed(due.unneeded_versions, due.unneeded_version_bytes)
    after = usage_report(archive)
    assert (after.unneeded_versions, after.unneeded_version_bytes) == (0, 0)
    assert h.read_manifest_state(pinned) == h.states[pinned]
    assert old in h.states and recent in h.states
    h.check()
