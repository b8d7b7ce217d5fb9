"""DANDI's own client downloads dandiset B, whose asset is a published (frozen) Zarr of
dandiset A (#39 item 2): the files of that state, byte for byte, under B's asset path, with
dandi's own checksum verification against B's asset."""

from __future__ import annotations

from pathlib import Path

from tests.helpers.dandi import DandiArchive, run_dandi, show
from tests.helpers.shared_zarrs import FIRST, SHARED_PATH, published_zarr, share
from tests.helpers.zarr_client import create_dandiset


def test_dandi_downloads_a_shared_zarr_as_b_s_own(
    dandi_archive: DandiArchive, tmp_path: Path
) -> None:
    with dandi_archive.client(dandi_archive.owner) as api:
        _, zarr_id, _ = published_zarr(api, FIRST)
        b = create_dandiset(api, "B")
        assert share(api, b, zarr_id)["shared_zarr"]["mode"] == "freeze"
    url = f"{dandi_archive.url}/api/dandisets/{b}/versions/draft/"
    home, key = dandi_archive.home, dandi_archive.key(dandi_archive.owner)
    done = run_dandi(["download", url], cwd=tmp_path, home=home, api_keys=key, timeout=300)
    assert done.returncode == 0, show(done)
    root = tmp_path / b / SHARED_PATH
    found = {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()}
    assert found == FIRST
