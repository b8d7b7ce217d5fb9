"""A group's page lists its subgroups as well as its arrays, codecs are named with their
settings, and the pages have an icon."""

from __future__ import annotations

import json

import httpx

from tests.helpers.api_uploads import upload
from tests.helpers.databases import SQLITE_ONLY

pytestmark = SQLITE_ONLY

ARRAY = {
    "zarr_format": 2,
    "shape": [4, 4],
    "chunks": [2, 2],
    "dtype": "<u2",
    "compressor": {"id": "zstd", "level": 0, "checksum": False},
    "fill_value": 0,
    "order": "C",
    "filters": None,
}


def test_subgroups_and_codec_settings(api: httpx.Client, anon: httpx.Client, zarr_id: str) -> None:
    group = json.dumps({"zarr_format": 2}).encode()
    upload(
        api,
        zarr_id,
        {
            ".zgroup": group,
            "sub/.zgroup": group,
            "sub/inner/.zarray": json.dumps(ARRAY).encode(),
            "image/.zarray": json.dumps(ARRAY).encode(),
            "v3group/zarr.json": json.dumps(
                {"zarr_format": 3, "node_type": "group", "attributes": {}}
            ).encode(),
            "plain/file": b"not zarr",
        },
    )
    root = anon.get(f"/zarr/{zarr_id}/")
    assert root.status_code == 200
    assert 'id="group-groups"' in root.text
    assert f'href="/zarr/{zarr_id}/sub/">sub/</a>: group' in root.text
    assert f'href="/zarr/{zarr_id}/v3group/">v3group/</a>: group' in root.text
    assert "plain/</a>: group" not in root.text  # a directory without Zarr metadata
    assert "image</a>: 4 × 4 uint16" in root.text
    image = anon.get(f"/zarr/{zarr_id}/image/")
    assert "<code>zstd (level 0, checksum false)</code>" in image.text


def test_favicon(anon: httpx.Client) -> None:
    page = anon.get("/")
    assert '<link rel="icon" href="/static/web/favicon.svg"' in page.text
    icon = anon.get("/static/web/favicon.svg")
    assert icon.status_code == 200 and icon.headers["content-type"].startswith("image/svg+xml")
    assert icon.content.startswith(b"<svg")
    moved = anon.get("/favicon.ico")
    assert moved.status_code == 301 and moved.headers["location"] == "/static/web/favicon.svg"
