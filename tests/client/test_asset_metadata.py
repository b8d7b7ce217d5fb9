"""The metadata ``zarrchive upload`` gives a new Zarr asset: what dandi-cli gives one, and
valid for dandischema's ``PublishedAsset`` once the archive adds what it computes (issue #41:
the README's first Zarr could not be published for want of ``schemaVersion``)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from zarrchive import __version__
from zarrchive.client.asset_metadata import zarr_asset_metadata
from zarrchive.services.dandi import validation

CHECKSUM = "bb9f2587" + "0" * 24 + "-101--2741"
START = datetime(2026, 11, 29, 7, 0, tzinfo=UTC)


def made(**overrides: object) -> dict[str, Any]:
    values: dict[str, object] = dict(
        checksum=CHECKSUM,
        size=2741,
        schema_version="0.8.0",
        started=START,
        ended=START + timedelta(seconds=3),
    )
    values.update(overrides)
    return zarr_asset_metadata("data/my.zarr", **values)  # type: ignore[arg-type]


def test_the_fields_dandi_cli_writes() -> None:
    metadata = made()
    assert metadata["schemaKey"] == "Asset" and metadata["schemaVersion"] == "0.8.0"
    assert metadata["path"] == "data/my.zarr"
    assert metadata["encodingFormat"] == "application/x-zarr"
    assert metadata["digest"] == {"dandi:dandi-zarr-checksum": CHECKSUM}
    assert metadata["contentSize"] == 2741
    (activity,) = metadata["wasGeneratedBy"]
    assert activity["startDate"] == START.isoformat()
    assert activity["wasAssociatedWith"][0]["version"] == __version__


def test_it_validates_as_published() -> None:
    for metadata in (made(), made(checksum=None, size=None, schema_version=None)):
        published = validation.published_asset(
            metadata,
            asset_id="0a9f1d4e-7c1b-4bd6-a3f5-0a4f3c6c2d11",
            content_urls=["http://127.0.0.1:8000/api/assets/0a9f1d4e/download/"],
            embargoed=False,
            now=START,
        )
        published.setdefault("contentSize", 2741)
        published.setdefault("digest", {"dandi:dandi-zarr-checksum": CHECKSUM})
        assert validation.check(published, "PublishedAsset") == []
