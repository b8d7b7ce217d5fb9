"""OME-Zarr on the Zarr pages: a real multiscale image written by ome-zarr-py (NGFF 0.4 on
Zarr v2, 0.5 on Zarr v3), uploaded through the API, is described exactly (levels, axes,
units, scales), its thumbnail is drawn from its smallest level, and its "Open with" links
carry the public URLs (none when embargoed); a malformed ``multiscales`` says why; public NWB
assets link to Neurosift; the reference files are linked from the Zarr's page."""

from __future__ import annotations

import io
import json
import re
import urllib.parse
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
import zarr
from PIL import Image

from tests.conftest import Users
from tests.helpers.api_uploads import read_tree, upload
from tests.helpers.databases import SQLITE_ONLY
from tests.helpers.ome_zarr import IMAGE_SHAPE, ome_python, table_rows, write_ome_zarr
from tests.helpers.web_site import add_asset, browser, upload_blob
from tests.helpers.zarr_client import create_dandiset, create_zarr
from zarrchive.services.runtime import Archive
from zarrchive.services.views import open_with
from zarrchive.services.views.thumbnail import stretch
from zarrchive.storage.keys import zarr_object_key

pytestmark = SQLITE_ONLY


def text(response: httpx.Response, status: int = 200) -> str:
    assert response.status_code == status, (response.request.url, response.text[:2000])
    assert response.headers["content-type"].startswith("text/html")
    return response.text


def _multiscale(root: Path, version: str) -> dict[str, Any]:
    """The multiscale image as ome-zarr-py wrote it."""
    if version == "0.4":
        found: dict[str, Any] = json.loads((root / ".zattrs").read_text())["multiscales"][0]
        return found
    attributes = json.loads((root / "zarr.json").read_text())["attributes"]
    assert attributes["ome"]["version"] == "0.5"
    found = attributes["ome"]["multiscales"][0]
    return found


def _numbers(values: list[float]) -> str:
    return ", ".join(str(v) for v in values)


def _hrefs(page: str, css_class: str) -> dict[str, str]:
    """``name -> href`` of the page's links of *css_class*."""
    links = re.findall(rf'<a class="{css_class}" href="([^"]+)"[^>]*>([^<]+)</a>', page)
    return {name: href.replace("&amp;", "&") for href, name in links}


def _neuroglancer_source(url: str) -> str:
    state = json.loads(urllib.parse.unquote(url.split("#!", 1)[1]))
    (layer,) = state["layers"]
    assert layer["type"] == "image"
    source: str = layer["source"]
    return source


@pytest.mark.parametrize(("version", "prefix"), [("0.4", ""), ("0.5", "plate/A/")])
def test_a_multiscale_image_written_by_ome_zarr_py(
    version: str,
    prefix: str,
    tmp_path: Path,
    base_url: str,
    api: httpx.Client,
    archive: Archive,
) -> None:
    root = write_ome_zarr(ome_python(), tmp_path, version)
    files = {prefix + path: body for path, body in read_tree(root).items()}
    dandiset = create_dandiset(api, "Cells")
    zarr_id = create_zarr(api, dandiset, "cells.ome.zarr")
    upload(api, zarr_id, files)
    image = _multiscale(root, version)
    levels = [zarr.open_array(root / d["path"], mode="r") for d in image["datasets"]]
    assert levels[0].shape == IMAGE_SHAPE == (3, 64, 96)
    assert [lv.shape for lv in levels[1:]] == [(3, 32, 48), (3, 16, 24)]
    group = prefix.rstrip("/")
    with browser(base_url) as anon:
        page = text(anon.get(f"/zarr/{zarr_id}/{prefix}"))
        assert "OME-Zarr image</h2>" in page
        assert f'id="ngff-version">{version}<' in page and 'id="ngff-name">cells<' in page
        assert 'id="ngff-invalid"' not in page
        assert table_rows(page, "ngff-axes") == [
            ["Name", "Type", "Unit"],
            ["c", "channel", "-"],
            ["y", "space", "micrometer"],
            ["x", "space", "micrometer"],
        ]
        expected = [["Path", "Shape", "Type", "Chunks", "Scale", "Translation"]]
        for dataset, level in zip(image["datasets"], levels, strict=True):
            scale, translation = dataset["coordinateTransformations"]
            expected.append(
                [
                    dataset["path"],
                    " × ".join(map(str, level.shape)),
                    "uint16",
                    " × ".join(map(str, level.chunks)),
                    _numbers(scale["scale"]),
                    _numbers(translation["translation"]),
                ]
            )
        assert table_rows(page, "ngff-levels") == expected
        assert expected[1][4] == "1.0, 0.5, 0.25" and expected[3][4] == "1.0, 2.0, 1.0"
        for dataset in image["datasets"]:
            assert f'href="/zarr/{zarr_id}/{prefix}{dataset["path"]}/">' in page
        assert 'id="group-arrays"' not in page  # its child arrays are the levels above
        # the thumbnail: the smallest level (s2), its middle channel
        src = re.search(r'<img id="thumbnail" src="([^"]+)"', page)
        assert src is not None
        assert src.group(1).startswith(f"/thumbnail/zarr/{zarr_id}/{prefix}s2?digest=")
        response = anon.get(src.group(1).replace("&amp;", "&"))
        assert response.status_code == 200 and response.headers["content-type"] == "image/png"
        picture = Image.open(io.BytesIO(response.content))
        smallest = np.asarray(levels[2][1])
        assert picture.size == (24, 16) and smallest.shape == (16, 24)
        assert np.asarray(picture).tolist() == stretch(smallest).tolist()
        # Open with: the public URL of the group's directory
        public = archive.store.public_url(zarr_object_key(zarr_id, group)).rstrip("/")
        links = _hrefs(page, "open-with")
        assert set(links) == {"Neuroglancer", "vizarr"}
        driver = "zarr2" if version == "0.4" else "zarr3"
        assert _neuroglancer_source(links["Neuroglancer"]) == f"{public}/|{driver}:"
        assert links["vizarr"] == f"{open_with.VIZARR}?source={urllib.parse.quote(public, safe='')}"
        # and the URL is the image's, readable anonymously
        metadata = ".zattrs" if version == "0.4" else "zarr.json"
        assert httpx.get(f"{public}/{metadata}").content == files[f"{prefix}{metadata}"]
        # a level is a plain array Neuroglancer reads (uint16, zstd): Neuroglancer alone
        level_page = text(anon.get(f"/zarr/{zarr_id}/{prefix}s1/"))
        level_links = _hrefs(level_page, "open-with")
        assert set(level_links) == {"Neuroglancer"}
        assert _neuroglancer_source(level_links["Neuroglancer"]) == f"{public}/s1/|{driver}:"
        # the reference file of the live state is linked from every page of the Zarr
        assert f'id="live-refs" href="/api/zarr/{zarr_id}/refs.json"' in level_page
        refs = anon.get(f"/api/zarr/{zarr_id}/refs.json")
        assert refs.status_code == 200
        inline = refs.json()["refs"][f"{prefix}{metadata}"]
        assert json.loads(inline) == json.loads(files[f"{prefix}{metadata}"])


def test_an_embargoed_image_is_described_but_offers_no_viewer(
    tmp_path: Path, base_url: str, api: httpx.Client, users: Users
) -> None:
    root = write_ome_zarr(ome_python(), tmp_path, "0.4")
    dandiset = create_dandiset(api, "Secret cells", embargo=True)
    zarr_id = create_zarr(api, dandiset, "cells.ome.zarr")
    upload(api, zarr_id, read_tree(root))
    with browser(base_url) as anon:
        assert anon.get(f"/zarr/{zarr_id}/").status_code in (401, 404)
    with browser(base_url, users.owner) as owner:
        page = text(owner.get(f"/zarr/{zarr_id}/"))
        assert len(table_rows(page, "ngff-levels")) == 4 and 'id="thumbnail"' in page
        assert 'id="open-with"' not in page and "neuroglancer" not in page.lower()
        assert "vizarr" not in page
        level = text(owner.get(f"/zarr/{zarr_id}/s0/"))
        assert 'id="array-shape">3 × 64 × 96<' in level and 'id="open-with"' not in level
        assert "embargoed: fetch it with your API token" in level


def _group(attributes: dict[str, Any]) -> dict[str, bytes]:
    """A v2 group with these attributes, a 2-D float64 array ``a`` (Neuroglancer reads no
    float64) and a 1-D uint8 array ``b`` (no image)."""
    a = {"zarr_format": 2, "shape": [4, 4], "chunks": [4, 4], "dtype": "<f8"}
    a |= {"compressor": None, "fill_value": 0, "filters": None, "order": "C"}
    b = a | {"shape": [4], "chunks": [4], "dtype": "|u1"}
    return {
        ".zgroup": b'{"zarr_format": 2}',
        ".zattrs": json.dumps(attributes).encode(),
        "a/.zarray": json.dumps(a).encode(),
        "b/.zarray": json.dumps(b).encode(),
    }


@pytest.mark.parametrize(
    ("multiscales", "reason"),
    [
        ("not a list", "multiscales is a string, not a list"),
        (
            [{"axes": [{"name": "y"}, {"name": "x"}], "datasets": [{"path": "../../other"}]}],
            "multiscales[0].datasets[0].path: &#39;../../other&#39; has a &#39;..&#39; segment: give a "
            "plain path",
        ),
        (
            [{"axes": [{"name": str(i)} for i in range(10_000)], "datasets": []}],
            "multiscales[0] declares 10000 axes; at most 8 are read",
        ),
    ],
)
def test_a_malformed_multiscales_says_why(
    multiscales: Any, reason: str, base_url: str, api: httpx.Client
) -> None:
    dandiset = create_dandiset(api, "Odd")
    zarr_id = create_zarr(api, dandiset, "odd.zarr")
    upload(api, zarr_id, _group({"multiscales": multiscales}))
    with browser(base_url) as anon:
        page = text(anon.get(f"/zarr/{zarr_id}/"))
        assert f'id="ngff-invalid">Not a valid OME-NGFF multiscales: {reason}.</p>' in page
        assert 'id="ngff-levels"' not in page and 'id="open-with"' not in page
        assert '<h2 id="meta-title">Group</h2>' in page
        array = text(anon.get(f"/zarr/{zarr_id}/a/"))
        assert 'id="array-dtype">float64<' in array and 'id="open-with"' not in array
        vector = text(anon.get(f"/zarr/{zarr_id}/b/"))
        assert 'id="array-dtype">uint8<' in vector and 'id="open-with"' not in vector


def test_nwb_assets_open_with_neurosift_when_public(
    base_url: str, api: httpx.Client, archive: Archive, users: Users
) -> None:
    nwb = b"\x89HDF\r\n\x1a\n an NWB file"
    public = create_dandiset(api, "Ephys")
    asset = add_asset(api, public, "sub-1/sub-1_ecephys.nwb", blob_id=upload_blob(api, public, nwb))
    add_asset(api, public, "sub-1/notes.txt", blob_id=upload_blob(api, public, b"notes"))
    embargoed = create_dandiset(api, "Secret ephys", embargo=True)
    add_asset(api, embargoed, "sub-2/sub-2.nwb", blob_id=upload_blob(api, embargoed, nwb))
    with browser(base_url) as anon:
        files = text(anon.get(f"/dandiset/{public}/draft/files", params={"location": "sub-1"}))
        links = _hrefs(files, "open-with")
        assert set(links) == {"open with Neurosift"}
        url = links["open with Neurosift"]
        assert url.startswith("https://neurosift.app/nwb?url=")
        (blob_url,) = urllib.parse.parse_qs(urllib.parse.urlsplit(url).query)["url"]
        assert blob_url.startswith(archive.store.public_url("blobs/"))
        assert httpx.get(blob_url).content == nwb  # public, anonymously
        download = anon.get(f"/download/asset/{asset['asset_id']}")
        assert download.headers["location"] == blob_url
    with browser(base_url, users.owner) as owner:
        secret = text(owner.get(f"/dandiset/{embargoed}/draft/files", params={"location": "sub-2"}))
        assert "sub-2.nwb" in secret and "neurosift" not in secret.lower()


def test_snapshots_link_their_reference_files(
    base_url: str, api: httpx.Client, archive: Archive
) -> None:
    dandiset = create_dandiset(api, "Published")
    zarr_id = create_zarr(api, dandiset, "p.zarr")
    files = {".zgroup": b'{"zarr_format": 2}', "x/0": b"zero"}
    info = upload(api, zarr_id, files)
    add_asset(api, dandiset, "p.zarr", zarr_id=zarr_id)
    response = api.post(f"/api/dandisets/{dandiset}/versions/draft/publish/")
    assert response.status_code == 200, response.text
    with browser(base_url) as anon:
        page = text(anon.get(f"/zarr/{zarr_id}/"))
        (row,) = table_rows(page, "snapshots")[1:]
        assert row[0] == info["checksum"] and row[-1] == "refs.json"
        quoted = urllib.parse.quote(info["checksum"], safe="")
        href = f"/api/zarr/{zarr_id}/snapshots/{quoted}/refs.json"
        assert f'<a class="snapshot-refs" href="{href}">refs.json</a>' in page
        refs = anon.get(href)
        assert refs.status_code == 200, refs.text
        body = refs.json()
        (url,) = body["refs"]["x/0"]
        url = url.replace("{{u}}", body.get("templates", {}).get("u", ""))
        assert "versionId=" in url and httpx.get(url).content == b"zero"


def test_levels_that_are_not_arrays_or_too_deep_are_shown_missing(
    base_url: str, api: httpx.Client
) -> None:
    """A level path the archive could not hold (the group's path and it beyond the longest
    Zarr path), one naming no directory, one naming a directory without an array: listed,
    none read; the page answers 200."""
    deep = "/".join(["d" * 200] * 4)
    axes = [{"name": "y", "type": "space"}, {"name": "x", "type": "space"}]
    scale = [{"type": "scale", "scale": [1, 1]}]
    datasets = [
        {"path": "l" * 200, "coordinateTransformations": scale},
        {"path": "absent", "coordinateTransformations": scale},
        {"path": "plain", "coordinateTransformations": scale},
    ]
    attributes = {"multiscales": [{"version": "0.4", "axes": axes, "datasets": datasets}]}
    group = _group(attributes)
    files = {f"{deep}/{path}": body for path, body in group.items()}
    files[f"{deep}/plain/file"] = b"not an array"
    dandiset = create_dandiset(api, "Deep")
    zarr_id = create_zarr(api, dandiset, "deep.zarr")
    upload(api, zarr_id, files)
    with browser(base_url) as anon:
        page = text(anon.get(f"/zarr/{zarr_id}/{deep}/"))
        rows = table_rows(page, "ngff-levels")[1:]
        assert rows == [
            ["l" * 200 + " (missing)", "no array here", "1, 1", "-"],
            ["absent (missing)", "no array here", "1, 1", "-"],
            ["plain", "no array here", "1, 1", "-"],
        ]
        assert 'id="thumbnail"' not in page
        # an OME-Zarr group all the same: the viewers may read what the archive can't show
        assert set(_hrefs(page, "open-with")) == {"Neuroglancer", "vizarr"}
