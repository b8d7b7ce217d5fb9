"""The draft's page says why a draft is ``Invalid``: its status (never ``Valid`` while an
error is listed) and, to its owners, every error of its metadata and of its assets'
(issue #41); other visitors see the status only."""

from __future__ import annotations

import re

import httpx
import pytest

from tests.conftest import Users
from tests.helpers.assets import add_blob_asset
from tests.helpers.databases import SQLITE_ONLY
from tests.helpers.jobs import HeldJobQueue
from tests.helpers.metadata import asset_metadata, dandiset_metadata, validate_now
from tests.helpers.web_site import browser

pytestmark = [pytest.mark.settings(publish_requires_valid=True), SQLITE_ONLY]

DATA = b"the bytes of a small NWB file, as far as this test is concerned\n" * 10


def status_on(page: str) -> str:
    found = re.search(r'<dd id="status">([^<]*)</dd>', page)
    assert found is not None, page[:2000]
    return found.group(1)


def test_an_invalid_draft_shows_its_errors_to_its_owners(
    base_url: str, api: httpx.Client, held: HeldJobQueue, dandiset: str, users: Users
) -> None:
    # the dandiset's own metadata is valid; one asset's is not (it lacks encodingFormat)
    metadata = dandiset_metadata()
    put = api.put(
        f"/api/dandisets/{dandiset}/versions/draft/",
        json={"metadata": metadata, "name": metadata.get("name", "x")},
    )
    assert put.status_code == 200, put.text
    good = {k: v for k, v in asset_metadata("good.nwb").items() if k != "path"}
    add_blob_asset(api, dandiset, DATA, "good.nwb", **good)
    add_blob_asset(api, dandiset, DATA + b"x", "bad.nwb", schemaVersion="0.8.0")
    info = validate_now(api, held, dandiset)
    assert info["version_validation_errors"] == [] and info["asset_validation_errors"]
    assert info["status"] == "Invalid"  # not "Valid" while an error is listed
    with browser(base_url, users.owner) as owner:
        page = owner.get(f"/dandiset/{dandiset}/draft")
        assert page.status_code == 200, page.text
        assert status_on(page.text) == "Invalid"
        errors = page.text.split('<ul id="validation-errors">', 1)[1].split("</ul>", 1)[0]
        assert "bad.nwb" in errors and "good.nwb" not in errors
        assert "encodingFormat" in errors
    with browser(base_url) as anon:
        page = anon.get(f"/dandiset/{dandiset}/draft")
        assert page.status_code == 200, page.text
        assert status_on(page.text) == "Invalid"
        assert 'id="validation-errors"' not in page.text
