"""Downloads and verification against the live server and SeaweedFS (public bucket)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zarr
from typer.testing import CliRunner

from tests.helpers.boto3_readers import Boto3Fetcher
from tests.helpers.local_zarr import file_count, make_zarr, zarr_checksum_of
from tests.helpers.zarr_nodes import as_array
from zarrchive.cli import app
from zarrchive.client import ApiClient, Uploader
from zarrchive.client.download import PARTIAL_SUFFIX, Downloader
from zarrchive.client.upload import BatchRecords
from zarrchive.errors import LocalFileError


@pytest.fixture
def uploaded(
    tmp_path: Path, client: ApiClient, dandiset: str, records: BatchRecords
) -> tuple[Path, str, dict[str, np.ndarray]]:
    source = tmp_path / "source.zarr"
    arrays = make_zarr(source, seed=7, coarse=8)
    result = Uploader(client, jobs=8, records=records).upload(source, dandiset=dandiset)
    assert result.ok and result.zarr_id
    return source, result.zarr_id, arrays


def cli(args: list[str], env: dict[str, str]) -> Any:
    return CliRunner().invoke(app, args, env=env)


def test_download_empty_partial_sync_verify(
    tmp_path: Path,
    client: ApiClient,
    client_env: dict[str, str],
    dandiset: str,
    uploaded: tuple[Path, str, dict[str, np.ndarray]],
) -> None:
    source, zarr_id, arrays = uploaded
    total = file_count(source)
    checksum = client.get_zarr(zarr_id).checksum
    dest = tmp_path / "dest.zarr"

    with Downloader(client, jobs=8) as downloader:
        first = downloader.download(zarr_id, dest)
        assert (first.downloaded, first.skipped, first.deleted, first.extra) == (total, 0, 0, [])
        assert first.ok and first.local_checksum == checksum == zarr_checksum_of(dest)
        group = zarr.open_group(dest, mode="r")
        for name, data in arrays.items():
            np.testing.assert_array_equal(as_array(group[name])[...], data)

        # Nothing to do the second time (DANDISET/NAME form).
        again = downloader.download(f"{dandiset}/source.zarr", dest)
        assert (again.downloaded, again.skipped) == (0, total)

        # A partial copy: 3 files missing, 1 corrupted (same size), 1 extra, 1 leftover partial.
        files = sorted(p for p in dest.rglob("*") if p.is_file())
        for p in files[10:13]:
            p.unlink()
        corrupted = files[20]
        corrupted.write_bytes(bytes(len(corrupted.read_bytes())))
        (dest / "g" / "extra.txt").write_bytes(b"not in the archive")
        (dest / ("leftover" + PARTIAL_SUFFIX)).write_bytes(b"half")
        partial = downloader.download(zarr_id, dest)
        assert (partial.downloaded, partial.skipped) == (4, total - 4)
        assert partial.extra == ["g/extra.txt"] and partial.ok
        assert not (dest / ("leftover" + PARTIAL_SUFFIX)).exists()
        assert zarr_checksum_of(dest) != checksum

    # --sync (CLI) deletes the extra file.
    result = cli(["download", zarr_id, str(dest), "--sync", "--jobs", "4"], client_env)
    assert result.exit_code == 0, result.stderr
    assert "downloaded 0 files (0 B), skipped" in result.stdout
    assert "deleted 1;" in result.stdout
    assert zarr_checksum_of(dest) == checksum

    # verify: a corrupted file is found, download repairs it.
    victim = sorted((dest / "a").rglob("*"))[-1]
    victim.write_bytes(victim.read_bytes() + b"!")
    relative = victim.relative_to(dest).as_posix()
    result = cli(["verify", zarr_id, str(dest)], client_env)
    assert result.exit_code == 1
    assert result.stdout == f"differs\t{relative}\n"
    assert "1 differ" in result.stderr
    result = cli(["download", zarr_id, str(dest)], client_env)
    assert result.exit_code == 0, result.stderr
    assert "downloaded 1 files" in result.stdout
    result = cli(["verify", f"{dandiset}/source.zarr", str(dest)], client_env)
    assert result.exit_code == 0, result.stderr
    assert result.stdout.startswith("OK: ")


def test_verify_lists_every_kind_of_difference(
    tmp_path: Path, client: ApiClient, uploaded: tuple[Path, str, dict[str, np.ndarray]]
) -> None:
    source, zarr_id, _ = uploaded
    (source / "zarr.json").unlink()
    (source / "g" / "new").write_bytes(b"new")
    changed = sorted((source / "g" / "c" / "c").rglob("*"))[-1]
    changed.write_bytes(b"changed")
    with Downloader(client, jobs=4) as verifier:
        result = verifier.verify(zarr_id, source)
    assert result.missing == ["zarr.json"]
    assert result.differ == [changed.relative_to(source).as_posix()]
    assert result.extra == ["g/new"]
    assert not result.ok


def test_download_through_an_injected_fetcher(
    tmp_path: Path,
    client: ApiClient,
    s3: Any,
    bucket: str,
    uploaded: tuple[Path, str, dict[str, np.ndarray]],
) -> None:
    source, zarr_id, _ = uploaded
    fetcher = Boto3Fetcher(s3, bucket, lambda f: f"zarr/{zarr_id}/{f.path}")
    with Downloader(client, jobs=4, fetcher=fetcher) as downloader:
        result = downloader.download(zarr_id, tmp_path / "via-boto3")
    assert result.ok and fetcher.fetched == result.downloaded == file_count(source)
    assert zarr_checksum_of(tmp_path / "via-boto3") == zarr_checksum_of(source)


def test_file_directory_conflicts_need_sync(
    tmp_path: Path, client: ApiClient, dandiset: str, records: BatchRecords
) -> None:
    source = tmp_path / "conflict.zarr"
    (source / "arr" / "sub").mkdir(parents=True)
    (source / "arr" / "0").write_bytes(b"zero")
    (source / "arr" / "sub" / "1").write_bytes(b"one")
    result = Uploader(client, jobs=2, records=records).upload(source, dandiset=dandiset)
    assert result.zarr_id
    dest = tmp_path / "dest"
    (dest / "arr" / "0").mkdir(parents=True)  # a directory where the archive has a file
    (dest / "arr" / "0" / "x").write_bytes(b"x")
    (dest / "arr" / "sub").write_bytes(b"a file where the archive has a directory")
    with Downloader(client, jobs=2) as downloader:
        with pytest.raises(LocalFileError, match="use --sync"):
            downloader.download(result.zarr_id, dest)
        fixed = downloader.download(result.zarr_id, dest, sync=True)
    assert (fixed.deleted, fixed.downloaded) == (2, 2) and fixed.ok
    assert zarr_checksum_of(dest) == zarr_checksum_of(source)


@pytest.mark.sqlite_only
def test_a_no_op_download_takes_the_cached_checksum(
    tmp_path: Path,
    client: ApiClient,
    uploaded: tuple[Path, str, dict[str, np.ndarray]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Once the local files are settled, a download of an unchanged copy compares the
    cached root checksum only (no file listed against the archive, none read); a change
    makes it compare and repair as before."""
    from zarrchive.client.local import digest_cache, hashing

    monkeypatch.setenv("ZARRCHIVE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(digest_cache, "_default", None)  # the test's own cache, closed below
    monkeypatch.setattr(digest_cache, "_default_path", None)
    source, zarr_id, _ = uploaded
    total = file_count(source)
    checksum = client.get_zarr(zarr_id).checksum
    dest = tmp_path / "dest.zarr"
    with Downloader(client, jobs=4) as downloader:
        assert downloader.download(zarr_id, dest).downloaded == total
        # The files' timestamps are settled for the cache from here on.
        monkeypatch.setattr(hashing, "clock_ns", lambda: time.time_ns() + 10**10)
        compared: list[str] = []
        original = Downloader._compare

        def counting(self: Downloader, zarr: Any, root: str) -> Any:
            compared.append(root)
            return original(self, zarr, root)

        monkeypatch.setattr(Downloader, "_compare", counting)
        first = downloader.download(zarr_id, dest)  # fills the cache (files read once)
        again = downloader.download(zarr_id, dest)
        assert (again.downloaded, again.skipped, again.deleted, again.extra) == (0, total, 0, [])
        assert again.ok and again.local_checksum == checksum
        assert (first.downloaded, first.skipped) == (0, total) and len(compared) == 0

        victim = sorted((dest / "a").rglob("*"))[-1]
        victim.write_bytes(victim.read_bytes() + b"!")
        repaired = downloader.download(zarr_id, dest)
        assert (repaired.downloaded, repaired.skipped) == (1, total - 1) and repaired.ok
        assert len(compared) == 1
    assert zarr_checksum_of(dest) == checksum
    opened = digest_cache._default
    assert opened is not None
    opened.close()
