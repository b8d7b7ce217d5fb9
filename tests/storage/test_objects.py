"""zarrchive.storage.objects: the order of a key's versions and delete markers."""

from __future__ import annotations

from zarrchive.storage.objects import ObjectVersion, oldest_first


def test_oldest_first_orders_versions_and_markers() -> None:
    from datetime import UTC, datetime

    t = [datetime(2026, 1, 1, 0, 0, s, tzinfo=UTC) for s in range(4)]

    def v(vid: str, when: datetime, marker: bool = False, latest: bool = False) -> ObjectVersion:
        return ObjectVersion("k", vid, latest, marker, None if marker else "e", 1, when)

    # as S3 lists them: versions newest first, then markers newest first; same-second ties
    listed = [v("v3", t[3], latest=True), v("v2", t[1]), v("v1", t[1]), v("m1", t[2], True)]
    assert [x.version_id for x in oldest_first(listed)] == ["v1", "v2", "m1", "v3"]
    latest_marker = [v("v1", t[2]), v("m1", t[2], True, latest=True)]
    assert [x.version_id for x in oldest_first(latest_marker)] == ["v1", "m1"]
