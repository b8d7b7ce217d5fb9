"""DANDI's own client (``dandi``, current release, in ``.venv-dandi``) against a real
``zarrchive serve``: dandisets with NWB files uploaded in several parts, re-uploaded,
downloaded (draft, published, embargoed), and DANDI's error statuses."""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.helpers.dandi import DandiArchive, run_json
from tests.helpers.dandi_cli import (
    NWB_PATH,
    assets,
    create_dandiset,
    dandi,
    fetch_draft_folder,
    upload,
)
from tests.helpers.nwb import make_nwb
from zarrchive.checksum.dandi_etag import DEFAULT_PART_SIZE, dandi_etag, part_plan

#: Random bytes in the big file: just over one 64 MiB part, so the file has two parts (the
#: smallest multipart upload DANDI's part rule allows).
BIG_DATA = DEFAULT_PART_SIZE + 4096


@dataclass
class Uploaded:
    dandiset: str
    folder: Path
    nwb: Path
    etag: str


@pytest.fixture(scope="module")
def uploaded(dandi_archive: DandiArchive, tmp_path_factory: pytest.TempPathFactory) -> Uploaded:
    """A public dandiset holding a two-part NWB file, uploaded by ``dandi upload``."""
    work = tmp_path_factory.mktemp("dandi-upload")
    dandiset = create_dandiset(dandi_archive, "nwb public")
    folder = fetch_draft_folder(dandi_archive, dandiset, work, dandi_archive.owner)
    nwb = make_nwb(folder / NWB_PATH, BIG_DATA, seed=1)
    content = nwb.read_bytes()
    assert part_plan(len(content)).count == 2
    code, out = upload(dandi_archive, folder, dandi_archive.owner)
    assert code == 0, out
    return Uploaded(dandiset, folder, nwb, dandi_etag(content))


def test_server_info_is_what_dandi_needs(dandi_archive: DandiArchive) -> None:
    with dandi_archive.client() as anon:
        info = anon.get("/server-info").json()
        assert anon.get("/api/info/").json() == info
    assert info["services"]["api"]["url"] == f"{dandi_archive.url}/api"
    checked = run_json(
        "import json, sys, dandi\n"
        "from packaging.version import Version\n"
        "from dandischema.consts import ALLOWED_INPUT_SCHEMAS, DANDI_SCHEMA_VERSION\n"
        "info = json.loads(sys.argv[1])\n"
        "print(json.dumps({'cli_ok': Version(info['cli-minimal-version']) <= "
        "Version(dandi.__version__) and dandi.__version__ not in info['cli-bad-versions'],"
        " 'schema_ok': info['schema_version'] in [*ALLOWED_INPUT_SCHEMAS, DANDI_SCHEMA_VERSION]}))",
        json.dumps(info),
    )
    assert checked == {"cli_ok": True, "schema_ok": True}


def test_upload_stores_the_nwb_by_its_dandi_etag(
    dandi_archive: DandiArchive, uploaded: Uploaded
) -> None:
    found = assets(dandi_archive, uploaded.dandiset)
    assert set(found) == {NWB_PATH}
    asset = found[NWB_PATH]
    assert asset["size"] == uploaded.nwb.stat().st_size
    assert asset["zarr"] is None and asset["blob"]
    assert asset["metadata"]["digest"]["dandi:dandi-etag"] == uploaded.etag
    assert uploaded.etag.endswith("-2")
    with dandi_archive.client(dandi_archive.owner) as api:
        blob = api.post(
            "/api/blobs/digest/", json={"algorithm": "dandi:dandi-etag", "value": uploaded.etag}
        )
    assert blob.status_code == 200, blob.text
    assert blob.json()["blob_id"] == asset["blob"]


def test_reupload_sends_nothing_and_same_content_is_deduplicated(
    dandi_archive: DandiArchive, uploaded: Uploaded
) -> None:
    before = assets(dandi_archive, uploaded.dandiset)[NWB_PATH]
    code, out = upload(dandi_archive, uploaded.folder, dandi_archive.owner)
    assert code == 0, out
    assert "file exists" in out
    after = assets(dandi_archive, uploaded.dandiset)
    assert after[NWB_PATH]["modified"] == before["modified"]
    # the same bytes at another path: the server answers 409 + Location, no part travels
    copy = uploaded.folder / "sub-mouse1" / "sub-mouse1_ses-2.nwb"
    shutil.copyfile(uploaded.nwb, copy)
    try:
        code, out = upload(dandi_archive, uploaded.folder, dandi_archive.owner)
        assert code == 0, out
        both = assets(dandi_archive, uploaded.dandiset)
        assert both[copy.relative_to(uploaded.folder).as_posix()]["blob"] == before["blob"]
    finally:
        copy.unlink()
        with dandi_archive.client(dandi_archive.owner) as api:
            extra = both[copy.relative_to(uploaded.folder).as_posix()]["asset_id"]
            url = f"/api/dandisets/{uploaded.dandiset}/versions/draft/assets/{extra}/"
            assert api.delete(url).status_code == 204


def test_download_of_the_draft_is_byte_identical(
    dandi_archive: DandiArchive, uploaded: Uploaded, tmp_path: Path
) -> None:
    url = f"{dandi_archive.url}/dandiset/{uploaded.dandiset}/draft"
    code, out = dandi(dandi_archive, ["download", url], tmp_path)
    assert code == 0, out
    got = tmp_path / uploaded.dandiset / NWB_PATH
    assert got.read_bytes() == uploaded.nwb.read_bytes()
    yaml = (tmp_path / uploaded.dandiset / "dandiset.yaml").read_text()
    assert f"identifier: DANDI:{uploaded.dandiset}" in yaml
    # one asset by its download URL
    asset_id = assets(dandi_archive, uploaded.dandiset)[NWB_PATH]["asset_id"]
    (tmp_path / "one").mkdir()
    url = f"{dandi_archive.url}/api/assets/{asset_id}/download/"
    code, out = dandi(dandi_archive, ["download", url], tmp_path / "one")
    assert code == 0, out
    assert (tmp_path / "one" / Path(NWB_PATH).name).read_bytes() == uploaded.nwb.read_bytes()


def test_download_of_a_published_version(
    dandi_archive: DandiArchive, uploaded: Uploaded, tmp_path: Path
) -> None:
    with dandi_archive.client(dandi_archive.owner) as api:
        published = api.post(f"/api/dandisets/{uploaded.dandiset}/versions/draft/publish/")
        assert published.status_code == 200, published.text
        version = published.json()["version"]
        assert published.json()["status"] == "Published"
        draft = api.get(f"/api/dandisets/{uploaded.dandiset}/versions/draft/info/").json()
        assert draft["status"] == "Published"
    url = f"{dandi_archive.url}/api/dandisets/{uploaded.dandiset}/versions/{version}/"
    code, out = dandi(dandi_archive, ["download", url], tmp_path)
    assert code == 0, out
    got = tmp_path / uploaded.dandiset / NWB_PATH
    assert got.read_bytes() == uploaded.nwb.read_bytes()
    assert f"version: {version}" in (tmp_path / uploaded.dandiset / "dandiset.yaml").read_text()


def test_embargoed_dandiset(dandi_archive: DandiArchive, tmp_path: Path) -> None:
    """dandi sends its key only after a 401: anonymous requests get 401 (and dandi, with no
    key to give, stops), the owner's key downloads, a stranger learns nothing (404)."""
    dandiset = create_dandiset(dandi_archive, "nwb embargoed", embargo=True)
    with dandi_archive.client() as anon:
        assert anon.get(f"/api/dandisets/{dandiset}/").status_code == 401
    with dandi_archive.client(dandi_archive.stranger) as stranger:
        assert stranger.get(f"/api/dandisets/{dandiset}/").status_code == 404
    folder = fetch_draft_folder(dandi_archive, dandiset, tmp_path / "up", dandi_archive.owner)
    nwb = make_nwb(folder / NWB_PATH, 50_000, seed=2)
    code, out = upload(dandi_archive, folder, dandi_archive.owner)
    assert code == 0, out
    url = f"{dandi_archive.url}/api/dandisets/{dandiset}/versions/draft/"
    (tmp_path / "anon").mkdir()
    code, out = dandi(dandi_archive, ["download", url], tmp_path / "anon")
    assert code != 0, out
    assert not (tmp_path / "anon" / dandiset / NWB_PATH).exists()
    (tmp_path / "stranger").mkdir()
    code, out = dandi(
        dandi_archive, ["download", url], tmp_path / "stranger", dandi_archive.stranger
    )
    assert code != 0, out
    assert not (tmp_path / "stranger" / dandiset / NWB_PATH).exists()
    (tmp_path / "owner").mkdir()
    code, out = dandi(dandi_archive, ["download", url], tmp_path / "owner", dandi_archive.owner)
    assert code == 0, out
    assert (tmp_path / "owner" / dandiset / NWB_PATH).read_bytes() == nwb.read_bytes()


def test_dandi_errors_are_clear(
    dandi_archive: DandiArchive, uploaded: Uploaded, tmp_path: Path
) -> None:
    # a wrong token: 401 before anything is sent
    code, out = upload(dandi_archive, uploaded.folder, "0" * 40)
    assert code != 0
    assert "401" in out and "API token is not valid" in out, out
    with dandi_archive.client("0" * 40) as wrong:
        response = wrong.get("/api/auth/token/")
    assert response.status_code == 401
    assert "API token is not valid" in response.json()["detail"]
    with dandi_archive.client(dandi_archive.owner) as api:
        assert api.get("/api/auth/token").json() == dandi_archive.owner
    # an unknown dandiset: 404
    code, out = dandi(
        dandi_archive, ["download", f"{dandi_archive.url}/api/dandisets/999999/"], tmp_path
    )
    assert code != 0
    assert "No such Dandiset: '999999'" in out, out
    with dandi_archive.client() as anon:
        response = anon.get("/api/dandisets/999999/")
    assert (response.status_code, response.json()) == (404, {"detail": "no dandiset 999999"})
    # an unknown path in a known dandiset
    url = (
        f"{dandi_archive.url}/api/dandisets/{uploaded.dandiset}/versions/draft/assets/"
        "?path=sub-nobody/nothing.nwb"
    )
    code, out = dandi(dandi_archive, ["download", url], tmp_path)
    assert code != 0
    assert "sub-nobody/nothing.nwb" in out, out
