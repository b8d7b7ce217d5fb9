"""Publishing (``services.dandi.publish``): the names of published versions."""

from __future__ import annotations

from datetime import UTC, datetime

from zarrchive.services.dandi.publish import version_name


def test_version_names() -> None:
    assert version_name(datetime(2026, 11, 22, 4, 5, tzinfo=UTC)) == "0.261122.0405"
    assert version_name(datetime(2026, 1, 2, 23, 59, 30, tzinfo=UTC)) == "0.260102.2359"
