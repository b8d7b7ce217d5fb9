"""``zarrchive upload s3://BUCKET/PREFIX`` against the live server: a Zarr in a second bucket of
the test SeaweedFS imported server-side (the archive copies; nothing streamed by the client),
one on a second SeaweedFS on another port streamed by the client, both with the checksum of
the zarr-checksum oracle over the same files; a source object changed after the listing is
refused and nothing of its batch recorded; an interrupted import resumed by a rerun."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from typer.testing import CliRunner

from tests.conftest import TEST_ACCESS_KEY, TEST_SECRET_KEY, make_settings
from tests.helpers.counting_proxy import CountingProxy, counting_proxy
from tests.helpers.local_zarr import zarr_checksum_of
from tests.helpers.s3_zarr import (
    PART,
    SMALL_ZARR,
    put_in_parts,
    put_tree,
    source_s3_client,
    write_tree,
)
from zarrchive.cli import app
from zarrchive.client import ApiClient, s3_import
from zarrchive.client.s3_import import S3Importer
from zarrchive.client.s3_source import S3Location, S3Source, SourceChanged
from zarrchive.client.selection import Selection
from zarrchive.config import Settings
from zarrchive.errors import InvalidInput
from zarrchive.services.zarr_engine.uploads import import_copy
from zarrchive.storage.keys import staging_zarr_prefix
from zarrchive.storage.seaweedfs import SeaweedFS

#: The bucket of the test SeaweedFS the archive may import from (ZARRCHIVE_IMPORT_BUCKETS).
SOURCE_BUCKET = f"zsrc-{os.getpid()}-{uuid.uuid4().hex[:6]}"


@pytest.fixture
def settings(
    seaweedfs: SeaweedFS, bucket: str, embargo_bucket: str, database_url: str, tmp_path: Path
) -> Settings:
    """The archive's settings, allowing imports from :data:`SOURCE_BUCKET`."""
    return make_settings(seaweedfs, bucket, database_url, tmp_path, import_buckets=(SOURCE_BUCKET,))


@pytest.fixture(scope="module")
def source_s3(seaweedfs: SeaweedFS) -> Any:
    """A boto3 client of the test SeaweedFS, with :data:`SOURCE_BUCKET` created."""
    return source_s3_client(seaweedfs, SOURCE_BUCKET)


@pytest.fixture(scope="module")
def other_seaweedfs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SeaweedFS]:
    """A second SeaweedFS on other ports: a source the archive can't read."""
    server = SeaweedFS(tmp_path_factory.mktemp("other-seaweedfs"), TEST_ACCESS_KEY, TEST_SECRET_KEY)
    server.start()
    try:
        yield server
    finally:
        server.stop()


def _source(client: Any, bucket: str, prefix: str) -> S3Source:
    return S3Source(S3Location(bucket, prefix), client)


def _prefix() -> str:
    return f"imports/{uuid.uuid4().hex[:8]}/my.zarr"


def test_server_side_import_is_exact_and_sends_no_data(
    client: ApiClient, dandiset: str, source_s3: Any, tmp_path: Path, archive: Any
) -> None:
    files = {**SMALL_ZARR, "b/c/big": b"\x07" * (PART + 1000)}  # put in parts: no md5 ETag
    prefix = _prefix()
    put_tree(source_s3, SOURCE_BUCKET, prefix, files, in_parts=("b/c/big",))
    expected = zarr_checksum_of(write_tree(tmp_path / "my.zarr", files))
    importer = S3Importer(client, _source(source_s3, SOURCE_BUCKET, prefix), mode="server")
    result = importer.run(dandiset=dandiset, require_zarr=True)
    assert result.ok, result
    assert result.remote_checksum == result.local_checksum == expected
    assert (importer.server_copied, importer.streamed) == (len(files), 0)
    assert result.name == "my.zarr" and result.asset_id is not None
    # a rerun finds nothing to do
    again = S3Importer(client, _source(source_s3, SOURCE_BUCKET, prefix), mode="server").run(
        dandiset=dandiset
    )
    assert again.ok and again.uploaded == 0 and again.skipped == len(files)


def test_streamed_import_from_another_endpoint(
    client: ApiClient, dandiset: str, other_seaweedfs: SeaweedFS, tmp_path: Path
) -> None:
    other = other_seaweedfs.client()
    other.create_bucket(Bucket="elsewhere")
    prefix = _prefix()
    put_tree(other, "elsewhere", prefix, SMALL_ZARR)
    expected = zarr_checksum_of(write_tree(tmp_path / "my.zarr", SMALL_ZARR))
    importer = S3Importer(
        client,
        _source(other, "elsewhere", prefix),
        source_endpoint_url=other_seaweedfs.endpoint_url,  # not the archive's: streamed
        batch_files=7,
    )
    result = importer.run(dandiset=dandiset, name="streamed.zarr")
    assert result.ok and result.remote_checksum == expected
    assert (importer.server_copied, importer.streamed) == (0, len(SMALL_ZARR))
    assert result.batches == 3


def test_a_source_the_archive_may_not_read_is_streamed(
    client: ApiClient, dandiset: str, seaweedfs: SeaweedFS, tmp_path: Path
) -> None:
    """``auto``: the archive refuses a bucket it was not told it may import from (403: to hash
    the object uploaded in parts, then to copy), the client hashes and streams the files
    instead."""
    s3 = seaweedfs.client()
    unlisted = f"zunlisted-{uuid.uuid4().hex[:8]}"
    s3.create_bucket(Bucket=unlisted)
    files = {**SMALL_ZARR, "b/c/big": os.urandom(PART + 1000)}
    put_tree(s3, unlisted, "z", files, in_parts=("b/c/big",))
    importer = S3Importer(client, _source(s3, unlisted, "z"))
    result = importer.run(dandiset=dandiset, name="z")
    assert result.ok
    assert result.remote_checksum == zarr_checksum_of(write_tree(tmp_path / "z", files))
    assert (importer.server_copied, importer.streamed, importer.server_hashed) == (0, len(files), 0)


@pytest.mark.parametrize("mode", ["server", "client"])
def test_a_source_changed_after_its_listing_is_refused(
    client: ApiClient, dandiset: str, source_s3: Any, archive: Any, mode: Any
) -> None:
    prefix = _prefix()
    put_tree(source_s3, SOURCE_BUCKET, prefix, SMALL_ZARR)
    source = _source(source_s3, SOURCE_BUCKET, prefix)
    listed = source.listing()
    source_s3.put_object(Bucket=SOURCE_BUCKET, Key=f"{prefix}/b/c/3", Body=b"changed")
    with pytest.raises(SourceChanged):
        S3Importer(client, source, mode=mode).run(dandiset=dandiset, objects=listed)
    zarr = client.find_zarr(dandiset, "my.zarr")
    assert zarr is not None and zarr.file_count == 0 and not zarr.upload_in_progress
    leftovers = list(archive.store.iter_objects(staging_zarr_prefix(zarr.zarr_id)))
    assert leftovers == []
    # listed again, it imports the new content
    result = S3Importer(client, source, mode=mode).run(dandiset=dandiset)
    assert result.ok and client.get_file(zarr.zarr_id, "b/c/3") is not None


def test_an_interrupted_import_resumes(
    client: ApiClient, dandiset: str, source_s3: Any, tmp_path: Path
) -> None:
    prefix = _prefix()
    put_tree(source_s3, SOURCE_BUCKET, prefix, SMALL_ZARR)
    source = _source(source_s3, SOURCE_BUCKET, prefix)
    sent: list[str] = []

    def interrupt_second(uid: str) -> None:
        sent.append(uid)
        if len(sent) == 2:
            raise KeyboardInterrupt

    first = S3Importer(client, source, mode="server", batch_files=6, on_batch_sent=interrupt_second)
    with pytest.raises(KeyboardInterrupt):
        first.run(dandiset=dandiset)
    zarr = client.find_zarr(dandiset, "my.zarr")
    assert zarr is not None and zarr.upload_in_progress  # the second batch is left open
    rerun = S3Importer(client, source, mode="server", batch_files=6, on_batch_sent=sent.append)
    result = rerun.run(dandiset=dandiset)
    assert result.ok
    assert result.remote_checksum == zarr_checksum_of(write_tree(tmp_path / "z", SMALL_ZARR))
    assert result.uploaded == len(SMALL_ZARR) - 6  # the first batch is not sent again
    assert sent[2] == sent[1]  # the batch left open was taken up


def test_patch_dry_run_and_filters_through_the_cli(
    client_env: dict[str, str],
    client: ApiClient,
    dandiset: str,
    seaweedfs: SeaweedFS,
    source_s3: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    prefix = _prefix()
    put_tree(source_s3, SOURCE_BUCKET, prefix, SMALL_ZARR)
    for name, value in {
        **client_env,
        "AWS_ACCESS_KEY_ID": TEST_ACCESS_KEY,
        "AWS_SECRET_ACCESS_KEY": TEST_SECRET_KEY,
        "AWS_DEFAULT_REGION": "us-east-1",
    }.items():
        monkeypatch.setenv(name, value)
    url = f"s3://{SOURCE_BUCKET}/{prefix}"
    common = ["upload", url, "-d", dandiset, "--source-endpoint-url", seaweedfs.endpoint_url]
    dry = CliRunner().invoke(app, [*common, "--dry-run"])
    assert dry.exit_code == 0, dry.output
    assert f"would upload {len(SMALL_ZARR)} files" in dry.stdout
    assert client.find_zarr(dandiset, "my.zarr") is None  # a dry run creates nothing
    patch = CliRunner().invoke(app, [*common, "--patch", "--include", "b/**"])
    assert patch.exit_code == 0, patch.output
    zarr = client.find_zarr(dandiset, "my.zarr")
    assert zarr is not None
    assert zarr.file_count == sum(1 for p in SMALL_ZARR if p.startswith("b/"))
    full = CliRunner().invoke(app, common)
    assert full.exit_code == 0, full.output
    assert client.get_zarr(zarr.zarr_id).file_count == len(SMALL_ZARR)
    assert (
        S3Importer(client, _source(source_s3, SOURCE_BUCKET, prefix))
        .run(dandiset=dandiset, dry_run=True, patch=True, selection=Selection.parse(["a/**"]))
        .planned_uploads
        == 0
    )


def test_a_source_above_5_gib_is_copied_server_side_and_refused_streamed(
    client: ApiClient,
    dandiset: str,
    source_s3: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """S3's limits (5 GiB a PUT, 5 GiB a ``CopyObject``) lowered to 1 MiB: server-side, the
    archive copies the bigger object in parts (hashed as it copies) and the checksum is exact;
    streamed, it is refused before anything is sent."""
    monkeypatch.setattr(s3_import, "MAX_IMPORT_BYTES", 1024**2)
    monkeypatch.setattr(import_copy, "COPY_OBJECT_LIMIT", 1024**2)
    files = {**SMALL_ZARR, "b/c/big": os.urandom(PART + 1000)}
    prefix = _prefix()
    put_tree(source_s3, SOURCE_BUCKET, prefix, files)
    expected = zarr_checksum_of(write_tree(tmp_path / "my.zarr", files))
    server = S3Importer(client, _source(source_s3, SOURCE_BUCKET, prefix), mode="server")
    result = server.run(dandiset=dandiset, require_zarr=True)
    assert result.ok and result.remote_checksum == expected
    assert (server.server_copied, server.streamed) == (len(files), 0)
    streamed = S3Importer(client, _source(source_s3, SOURCE_BUCKET, prefix), mode="client")
    with pytest.raises(InvalidInput, match="larger than 5 GiB"):
        streamed.run(dandiset=dandiset, name="streamed.zarr")
    assert client.find_zarr(dandiset, "streamed.zarr") is None


@pytest.fixture
def proxied_source(seaweedfs: SeaweedFS) -> Iterator[tuple[Any, CountingProxy]]:
    """A boto3 client of the test SeaweedFS through a counting proxy: every request the
    client sends to the source, counted."""
    with counting_proxy(seaweedfs.endpoint_url) as proxy:
        client = boto3.client(
            "s3",
            endpoint_url=proxy.url,
            aws_access_key_id=TEST_ACCESS_KEY,
            aws_secret_access_key=TEST_SECRET_KEY,
            region_name="us-east-1",
        )
        yield client, proxy


def _reads(proxy: CountingProxy) -> list[tuple[str, str]]:
    """The requests to the source other than listings (``GET ?list-type=2``)."""
    return [(m, what) for m, what in proxy.requests() if "list-type=2" not in what]


def test_objects_in_parts_are_hashed_by_the_archive_and_never_read_by_the_client(
    client: ApiClient,
    dandiset: str,
    source_s3: Any,
    proxied_source: tuple[Any, CountingProxy],
    tmp_path: Path,
) -> None:
    """Server-side, the md5s of objects uploaded in parts are the archive's (``.../import/
    hash/``): the client sends the source nothing but its listing, and the checksum is the
    zarr-checksum oracle's of the same bytes."""
    source_client, proxy = proxied_source
    files = {
        **SMALL_ZARR,
        "b/c/big": os.urandom(PART + 1000),
        "a/c/big": os.urandom(PART + 3),
    }
    prefix = _prefix()
    put_tree(source_s3, SOURCE_BUCKET, prefix, files, in_parts=("b/c/big", "a/c/big"))
    expected = zarr_checksum_of(write_tree(tmp_path / "my.zarr", files))
    source = _source(source_client, SOURCE_BUCKET, prefix)
    importer = S3Importer(client, source, mode="server")
    result = importer.run(dandiset=dandiset, require_zarr=True)
    assert result.ok, result
    assert result.local_checksum == result.remote_checksum == expected
    assert (importer.server_copied, importer.streamed, importer.server_hashed) == (len(files), 0, 2)
    assert _reads(proxy) == [] and proxy.requests() != []
    # a rerun compares again, and still reads nothing
    again = S3Importer(client, source, mode="server").run(dandiset=dandiset)
    assert again.ok and again.uploaded == 0 and again.local_checksum == expected
    assert _reads(proxy) == []


def test_an_object_in_parts_changed_before_the_archive_hashes_it_is_refused(
    client: ApiClient,
    dandiset: str,
    source_s3: Any,
    proxied_source: tuple[Any, CountingProxy],
) -> None:
    source_client, proxy = proxied_source
    files = {**SMALL_ZARR, "b/c/big": os.urandom(PART + 1000)}
    prefix = _prefix()
    put_tree(source_s3, SOURCE_BUCKET, prefix, files, in_parts=("b/c/big",))
    source = _source(source_client, SOURCE_BUCKET, prefix)
    listed = source.listing()
    put_in_parts(source_s3, SOURCE_BUCKET, f"{prefix}/b/c/big", os.urandom(PART + 1000))
    with pytest.raises(SourceChanged, match="b/c/big"):
        S3Importer(client, source, mode="server").run(dandiset=dandiset, objects=listed)
    assert _reads(proxy) == []  # the archive found it out, not a read of ours
    zarr = client.find_zarr(dandiset, "my.zarr")
    assert zarr is None or (zarr.file_count == 0 and not zarr.upload_in_progress)
