"""DANDI's own client uploading, re-uploading and downloading a Zarr: its checksum is
zarr-checksum's, and the download is byte-identical."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from zarr_checksum import compute_zarr_checksum
from zarr_checksum.generators import yield_files_local

from tests.helpers.dandi import DandiArchive, run_dandi, show

ZARR = "sub-mouse1/sub-mouse1_ses-1.zarr"
SIDE = 16  # a 16 x 16 array of 1 x 1 chunks: 256 chunk files in 16 nested directories


def write_array(root: Path, name: str, side: int, seed: int) -> None:
    """A Zarr v2 array of uint8 in 1 x 1 chunks, nested (``i/j``), uncompressed."""
    array = root / name
    array.mkdir(parents=True)
    meta = {
        "zarr_format": 2,
        "shape": [side, side],
        "chunks": [1, 1],
        "dtype": "|u1",
        "compressor": None,
        "fill_value": 0,
        "filters": None,
        "order": "C",
        "dimension_separator": "/",
    }
    (array / ".zarray").write_text(json.dumps(meta))
    for i in range(side):
        (array / str(i)).mkdir()
        for j in range(side):
            (array / str(i) / str(j)).write_bytes(bytes([(seed + i * side + j) % 251 + 1]))


def make_zarr(root: Path) -> Path:
    root.mkdir(parents=True)
    (root / ".zgroup").write_text(json.dumps({"zarr_format": 2}))
    (root / ".zattrs").write_text(json.dumps({"description": "zarrchive test"}))
    write_array(root, "a", SIDE, seed=3)
    return root


def local_checksum(root: Path) -> str:
    return str(compute_zarr_checksum(yield_files_local(root)))


def tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def remote_checksum(archive: DandiArchive, dandiset: str) -> str:
    with archive.client(archive.owner) as api:
        page = api.get(
            f"/api/dandisets/{dandiset}/versions/draft/assets/",
            params={"path": ZARR, "metadata": "true"},
        ).json()
    (asset,) = page["results"]
    return str(asset["metadata"]["digest"]["dandi:dandi-zarr-checksum"])


def test_zarr_upload_reupload_download(dandi_archive: DandiArchive, tmp_path: Path) -> None:
    with dandi_archive.client(dandi_archive.owner) as api:
        created = api.post("/api/dandisets/", json={"name": "zarr", "metadata": {}})
    dandiset = created.json()["identifier"]
    home, key = dandi_archive.home, dandi_archive.key(dandi_archive.owner)
    url = f"{dandi_archive.url}/api/dandisets/{dandiset}/versions/draft/"
    done = run_dandi(["download", url], cwd=tmp_path, home=home, api_keys=key, timeout=300)
    assert done.returncode == 0, show(done)
    folder = tmp_path / dandiset
    zarr = make_zarr(folder / ZARR)

    def upload() -> None:
        done = run_dandi(
            ["upload", "-i", dandi_archive.url], cwd=folder, home=home, api_keys=key, timeout=300
        )
        assert done.returncode == 0, show(done)
        assert remote_checksum(dandi_archive, dandiset) == local_checksum(zarr)

    upload()
    # change, add and delete chunks; upload again
    (zarr / "a" / "0" / "0").write_bytes(b"\xff")
    (zarr / "a" / "7" / "3").write_bytes(b"\xfe")
    shutil.rmtree(zarr / "a" / "15")
    (zarr / "a" / "14" / "2").unlink()
    write_array(zarr, "b", 3, seed=9)
    upload()
    # download: byte-identical
    out = tmp_path / "download"
    out.mkdir()
    done = run_dandi(["download", url], cwd=out, home=home, api_keys=key, timeout=300)
    assert done.returncode == 0, show(done)
    assert tree(out / dandiset / ZARR) == tree(zarr)
