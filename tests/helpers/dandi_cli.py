"""DANDI's own client (``dandi``) driving a :class:`~tests.helpers.dandi.DandiArchive`:
dandisets made as DANDI's web UI does, ``dandi download`` of a draft's folder, ``dandi
upload``, and the assets the archive lists."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.helpers.dandi import DandiArchive, run_dandi, show

#: Where the NWB file of a dandiset goes, as DANDI's layout names it.
NWB_PATH = "sub-mouse1/sub-mouse1_ses-1.nwb"


def create_dandiset(archive: DandiArchive, name: str, *, embargo: bool = False) -> str:
    """A dandiset made as DANDI's web UI does: ``{name, metadata}``, ``?embargo=true``."""
    with archive.client(archive.owner) as api:
        response = api.post(
            "/api/dandisets/",
            params={"embargo": "true"} if embargo else None,
            json={"name": name, "metadata": {"description": f"{name} (zarrchive tests)"}},
        )
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    assert body["embargo_status"] == ("EMBARGOED" if embargo else "OPEN")
    return str(body["identifier"])


def dandi(
    archive: DandiArchive, args: list[str], cwd: Path, token: str | None = None
) -> tuple[int, str]:
    """``dandi ARGS`` in *cwd* with *token* as its API key: the exit code and its output."""
    done = run_dandi(
        args, cwd=cwd, home=archive.home, api_keys=archive.key(token) if token else None
    )
    return done.returncode, show(done)


def fetch_draft_folder(archive: DandiArchive, dandiset: str, where: Path, token: str) -> Path:
    """``dandi download`` of the (empty) draft: the folder with its ``dandiset.yaml``, where
    DANDI's users put their files before ``dandi upload``."""
    where.mkdir(parents=True, exist_ok=True)
    url = f"{archive.url}/api/dandisets/{dandiset}/versions/draft/"
    code, out = dandi(archive, ["download", url], where, token)
    assert code == 0, out
    folder = where / dandiset
    assert f"identifier: DANDI:{dandiset}" in (folder / "dandiset.yaml").read_text()
    return folder


def upload(archive: DandiArchive, folder: Path, token: str) -> tuple[int, str]:
    """``dandi upload`` of *folder* to the archive."""
    return dandi(archive, ["upload", "-i", archive.url], folder, token)


def assets(archive: DandiArchive, dandiset: str, version: str = "draft") -> dict[str, Any]:
    """The version's assets (with their metadata) by path."""
    with archive.client(archive.owner) as api:
        response = api.get(
            f"/api/dandisets/{dandiset}/versions/{version}/assets/", params={"metadata": "true"}
        )
    assert response.status_code == 200, response.text
    return {a["path"]: a for a in response.json()["results"]}


__all__ = ["NWB_PATH", "assets", "create_dandiset", "dandi", "fetch_draft_folder", "upload"]
