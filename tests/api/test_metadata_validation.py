"""Metadata validation with dandischema (issue #24 part 1): the draft's and its assets'
metadata are validated in the background after each change, ``/info/`` reports DANDI's
status and errors, and publishing refuses what is not valid (409 pending, 400 invalid)."""

from __future__ import annotations

import hashlib

import httpx
import pytest

from tests.helpers.api_uploads import upload
from tests.helpers.assets import add_blob_asset, add_zarr_asset, assets_url, ok
from tests.helpers.databases import SQLITE_ONLY
from tests.helpers.jobs import HeldJobQueue
from tests.helpers.metadata import asset_metadata, dandiset_metadata, info, validate_now
from zarrchive.services.dandi import validation
from zarrchive.services.runtime import Archive

pytestmark = [pytest.mark.settings(publish_requires_valid=True), SQLITE_ONLY]

DATA = b"the bytes of a small NWB file, as far as this test is concerned\n" * 10


def publish(api: httpx.Client, dandiset: str) -> httpx.Response:
    return api.post(f"/api/dandisets/{dandiset}/versions/draft/publish/")


def put_metadata(api: httpx.Client, dandiset: str, metadata: dict[str, object]) -> None:
    ok(
        api.put(
            f"/api/dandisets/{dandiset}/versions/draft/",
            json={"metadata": metadata, "name": metadata.get("name", "x")},
        )
    )


def test_invalid_metadata_is_reported_and_publishing_refused(
    api: httpx.Client, held: HeldJobQueue, dandiset: str
) -> None:
    assert info(api, dandiset)["status"] == "Pending"
    assert held.queued("validate:")  # queued when the creation committed
    pending = publish(api, dandiset)
    assert pending.status_code == 409, pending.text
    assert "pending" in pending.json()["detail"]

    body = validate_now(api, held, dandiset)
    assert body["status"] == "Invalid"
    messages = {(e["field"], e["message"]) for e in body["version_validation_errors"]}
    for missing in ("contributor", "description", "license"):
        assert ("", f"'{missing}' is a required property") in messages, messages
    refused = publish(api, dandiset)
    assert refused.status_code == 400, refused.text
    detail = refused.json()["detail"]
    assert detail.startswith("Dandiset metadata or asset metadata is not valid: fix")
    assert "'license' is a required property" in detail
    assert [
        v["version"] for v in ok(api.get(f"/api/dandisets/{dandiset}/versions/"))["results"]
    ] == ["draft"]


def test_a_draft_without_assets_is_invalid(
    api: httpx.Client, held: HeldJobQueue, dandiset: str
) -> None:
    put_metadata(api, dandiset, dandiset_metadata())
    body = validate_now(api, held, dandiset)
    assert body["status"] == "Invalid"
    assert body["version_validation_errors"], body  # dandischema: no files, nothing to publish
    assert publish(api, dandiset).status_code == 400


def test_fixed_metadata_validates_and_publishes(
    api: httpx.Client, held: HeldJobQueue, dandiset: str, archive: Archive
) -> None:
    put_metadata(api, dandiset, {"name": "incomplete", "schemaVersion": "0.8.0"})
    asset = add_blob_asset(api, dandiset, DATA, "sub-1/sub-1.nwb", schemaVersion="0.8.0")
    body = validate_now(api, held, dandiset)
    assert body["status"] == "Invalid"
    errors = body["asset_validation_errors"]
    assert errors and {e["path"] for e in errors} == {"sub-1/sub-1.nwb"}, errors
    assert any("encodingFormat" in e["field"] + e["message"] for e in errors), errors

    # fixed: the dandiset's metadata, then the asset's
    put_metadata(api, dandiset, dandiset_metadata("fixed"))
    ok(
        api.put(
            assets_url(dandiset) + f"{asset['asset_id']}/",
            json={"metadata": asset_metadata("sub-1/sub-1.nwb"), "blob_id": asset["blob_id"]},
        )
    )
    assert info(api, dandiset)["status"] == "Pending"
    body = validate_now(api, held, dandiset)
    assert body["status"] == "Valid", body
    assert body["version_validation_errors"] == [] and body["asset_validation_errors"] == []
    served = ok(api.get(assets_url(dandiset) + f"{asset['asset_id']}/"))
    assert served["digest"]["dandi:sha2-256"] == hashlib.sha256(DATA).hexdigest()

    published = publish(api, dandiset)
    assert published.status_code == 200, published.text
    version = published.json()["version"]
    metadata = ok(api.get(f"/api/dandisets/{dandiset}/versions/{version}/"))
    assert metadata["identifier"] == f"DANDI:{dandiset}"
    assert metadata["assetsSummary"]["numberOfFiles"] == 1
    assert metadata["assetsSummary"]["numberOfBytes"] == len(DATA)
    # what was published is valid as published (dandischema's own models, unchanged)
    assert validation.check(metadata, "PublishedDandiset") == []
    (pinned,) = ok(api.get(assets_url(dandiset, version), params={"metadata": "true"}))["results"]
    assert pinned["metadata"]["digest"]["dandi:sha2-256"] == hashlib.sha256(DATA).hexdigest()
    assert validation.check(pinned["metadata"], "PublishedAsset") == []
    assert info(api, dandiset)["status"] == "Published"  # the draft, unchanged since


def test_zarr_assets_get_their_format_digest_and_size(
    api: httpx.Client, held: HeldJobQueue, dandiset: str, zarr_id: str
) -> None:
    put_metadata(api, dandiset, dandiset_metadata())
    # an asset's Zarr has files (an empty one is refused as an asset)
    upload(api, zarr_id, {"zarr.json": b'{"zarr_format": 3, "node_type": "group"}'})
    held.run("manifest")
    # no encodingFormat, digest or size: the archive fills them in for a Zarr
    add_zarr_asset(api, dandiset, zarr_id, "test.zarr", schemaKey="Asset", schemaVersion="0.8.0")
    body = validate_now(api, held, dandiset)
    assert body["asset_validation_errors"] == [], body
    assert body["status"] == "Valid", body
    upload(api, zarr_id, {"x": b"1"})
    held.run("manifest")
    # validated before the upload: not for what is there now, so pending again
    pending = publish(api, dandiset)
    assert pending.status_code == 409, pending.text
    body = validate_now(api, held, dandiset)
    assert body["status"] == "Valid", body
    assert body["asset_validation_errors"] == []
    published = publish(api, dandiset)
    assert published.status_code == 200, published.text
    (pinned,) = ok(
        api.get(assets_url(dandiset, published.json()["version"]), params={"metadata": "true"})
    )["results"]
    assert pinned["metadata"]["encodingFormat"] == "application/x-zarr"
    assert pinned["metadata"]["contentSize"] == 41
    assert validation.check(pinned["metadata"], "PublishedAsset") == []


def test_an_invalid_asset_is_named_when_publishing(
    api: httpx.Client, held: HeldJobQueue, dandiset: str
) -> None:
    put_metadata(api, dandiset, dandiset_metadata())
    add_blob_asset(
        api,
        dandiset,
        DATA,
        "good.nwb",
        **{k: v for k, v in asset_metadata("good.nwb").items() if k != "path"},
    )
    add_blob_asset(api, dandiset, DATA + b"x", "bad.nwb", schemaVersion="0.8.0")
    body = validate_now(api, held, dandiset)
    # never "Valid" while an error is listed (issue #41): the dandiset's own metadata has none
    assert body["status"] == "Invalid" and body["version_validation_errors"] == []
    assert {e["path"] for e in body["asset_validation_errors"]} == {"bad.nwb"}
    refused = publish(api, dandiset)
    assert refused.status_code == 400
    assert "bad.nwb" in refused.json()["detail"]


@pytest.mark.settings(publish_requires_valid=False)
def test_without_the_requirement_the_status_is_still_reported(
    api: httpx.Client, held: HeldJobQueue, dandiset: str
) -> None:
    add_blob_asset(api, dandiset, DATA, "a.bin")
    assert validate_now(api, held, dandiset)["status"] == "Invalid"
    assert publish(api, dandiset).status_code == 200


def test_older_schema_versions_are_checked_without_downloading_their_schema() -> None:
    errors = validation.check({"schemaVersion": "0.6.10", "name": "x"}, "PublishedDandiset")
    assert errors  # pydantic's errors; no request to GitHub (it would fail here)
    assert validation.check({"name": "x"}, "PublishedDandiset") == [
        validation.MetadataError(
            "schemaVersion", "missing: give the DANDI schema version of the metadata (0.8.0)"
        )
    ]


def test_errors_of_hostile_metadata_are_bounded() -> None:
    metadata = dandiset_metadata(contributor=[{"schemaKey": "Person"}] * 5000)
    errors = validation.check(metadata, "PublishedDandiset")
    assert len(errors) <= validation.MAX_ERRORS + 1
