"""Unusual (but valid) file names survive upload, listing, download and zarr reads."""

from __future__ import annotations

from pathlib import Path

from tests.helpers.local_zarr import zarr_checksum_of
from zarrchive.client import ApiClient, Downloader, Uploader
from zarrchive.client.upload import BatchRecords

NAMES = [
    "with space",
    "plus+sign",
    "percent%20literal",
    "hash#tag",
    "question?mark",
    "ampersand&equals=",
    "ünïcödé-Ω",
    "tilde~",
    "semi;colon",
    "sub dir/a b",
    "[brackets]/(x)",
]


def test_unusual_names_round_trip(
    tmp_path: Path, client: ApiClient, dandiset: str, records: BatchRecords
) -> None:
    local = tmp_path / "names.zarr"
    for i, name in enumerate(NAMES):
        path = local / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(name.encode() * (i + 1))
    result = Uploader(client, jobs=4, records=records).upload(local, dandiset=dandiset)
    assert result.ok and result.uploaded == len(NAMES)
    assert result.remote_checksum == zarr_checksum_of(local)
    assert result.zarr_id
    with Downloader(client, jobs=4) as downloader:
        copy = downloader.download(result.zarr_id, tmp_path / "copy")
        assert copy.ok and copy.downloaded == len(NAMES)
        assert downloader.verify(result.zarr_id, tmp_path / "copy").ok
    for name in NAMES:
        assert (tmp_path / "copy" / name).read_bytes() == (local / name).read_bytes()
    # A change in an oddly named directory is found through the listing.
    (local / "sub dir" / "a b").write_bytes(b"changed")
    again = Uploader(client, jobs=4, records=records).upload(local, dandiset=dandiset)
    assert (again.uploaded, again.skipped) == (1, len(NAMES) - 1) and again.ok
