"""DANDI's own client with the archive's accounts (issue #36): a ``read`` key downloads an
embargoed dandiset of its user and is refused an upload; a reviewer's key downloads it
until the reviewer is removed."""

from __future__ import annotations

from pathlib import Path

from tests.helpers.dandi import DandiArchive
from tests.helpers.dandi_cli import (
    NWB_PATH,
    create_dandiset,
    dandi,
    fetch_draft_folder,
    upload,
)
from tests.helpers.nwb import make_nwb


def test_read_keys_and_reviewers_with_dandi(dandi_archive: DandiArchive, tmp_path: Path) -> None:
    dandiset = create_dandiset(dandi_archive, "nwb for review", embargo=True)
    folder = fetch_draft_folder(dandi_archive, dandiset, tmp_path / "up", dandi_archive.owner)
    nwb = make_nwb(folder / NWB_PATH, 50_000, seed=3)
    code, out = upload(dandi_archive, folder, dandi_archive.owner)
    assert code == 0, out
    with dandi_archive.client(dandi_archive.owner) as api:
        made = api.post("/api/auth/tokens/", json={"name": "dandi read", "scope": "read"})
        assert made.status_code == 201, made.text
        read_key = made.json()["key"]
    url = f"{dandi_archive.url}/api/dandisets/{dandiset}/versions/draft/"

    def download(where: str, token: str) -> tuple[int, str, Path]:
        (tmp_path / where).mkdir()
        code, out = dandi(dandi_archive, ["download", url], tmp_path / where, token)
        return code, out, tmp_path / where / dandiset / NWB_PATH

    code, out, got = download("read", read_key)
    assert code == 0, out
    assert got.read_bytes() == nwb.read_bytes()
    make_nwb(folder / "sub-mouse1/sub-mouse1_ses-2.nwb", 20_000, seed=4)
    code, out = upload(dandi_archive, folder, read_key)
    assert code != 0 and "403" in out and "read-only" in out, out

    reviewers = f"/api/dandisets/{dandiset}/reviewers/"
    with dandi_archive.client(dandi_archive.owner) as api:
        done = api.put(reviewers, json=[{"username": _username(dandi_archive)}])
        assert done.status_code == 200, done.text
    code, out, got = download("reviewer", dandi_archive.stranger)
    assert code == 0, out
    assert got.read_bytes() == nwb.read_bytes()
    with dandi_archive.client(dandi_archive.owner) as api:
        assert api.put(reviewers, json=[]).status_code == 200
    code, out, got = download("removed", dandi_archive.stranger)
    assert code != 0 and not got.exists(), out


def _username(archive: DandiArchive) -> str:
    with archive.client(archive.stranger) as stranger:
        name: str = stranger.get("/api/users/me/").json()["username"]
    return name
