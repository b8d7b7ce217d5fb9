"""Sharded Zarr v3 end to end: written by zarr-python 3, uploaded and downloaded by the CLI,
read through open_store and over plain HTTP from the public bucket, shown on its page, and
its thumbnail drawn from range reads of only the inner chunks it needs."""

from __future__ import annotations

import io
import math
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import numcodecs
import numpy as np
import pytest
import zarr
from PIL import Image
from typer.testing import CliRunner
from zarr.codecs import BytesCodec, ShardingCodec

from tests.helpers.local_zarr import zarr_checksum_of
from tests.helpers.multipart import THRESHOLD
from tests.helpers.sharded_zarr import (
    VOLUME_CHUNKS,
    VOLUME_SHAPE,
    VOLUME_SHARDS,
    read_over_http,
    write_sharded_zarr,
)
from tests.helpers.zarr_nodes import as_array
from zarrchive.cli import app
from zarrchive.client import ApiClient
from zarrchive.client.store import open_store
from zarrchive.services.runtime import Archive
from zarrchive.services.views import arrays
from zarrchive.services.views.shard_index import (
    ByteRange,
    IndexLayout,
    coalesce,
    encode_index,
    group_by_shard,
    parse_index,
)
from zarrchive.services.views.thumbnail import NoThumbnail, plan_slice, stretch, thumbnail_step


def cli(args: list[str], env: dict[str, str]) -> Any:
    result = CliRunner().invoke(app, args, env=env)
    assert result.exit_code == 0, (result.stdout, result.stderr)
    return result


def files_of(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def png_values(png: bytes) -> list[list[int]]:
    picture = Image.open(io.BytesIO(png))
    assert picture.mode == "L"
    values: list[list[int]] = np.asarray(picture).tolist()
    return values


@pytest.mark.settings(multipart_threshold=THRESHOLD)
def test_sharded_zarr_round_trip(
    tmp_path: Path,
    client: ApiClient,
    client_env: dict[str, str],
    dandiset: str,
    archive: Archive,
    anon: httpx.Client,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    source = tmp_path / "sharded.zarr"
    values = write_sharded_zarr(source, big_shard=True)
    assert values.big is not None
    local = files_of(source)
    assert len(local["big/c/0/0/0"]) > THRESHOLD  # this shard goes up in parts
    shards = [p for p in local if p.startswith("volume/c/")]
    # several shards of several inner chunks; the shard of zeros is not stored
    grid = [math.ceil(n / s) for n, s in zip(VOLUME_SHAPE, VOLUME_SHARDS, strict=True)]
    assert len(shards) == math.prod(grid) - 1 and "volume/c/0/1/1" not in local
    assert len([p for p in local if p.startswith("plane/c/")]) == 4

    # upload (the CLI), the Dandi Zarr checksum exactly as zarr-checksum computes it
    cli(["upload", str(source), "--dandiset", dandiset, "--jobs", "4"], client_env)
    found = client.find_zarr(dandiset, "sharded.zarr")
    assert found is not None
    zarr_id = found.zarr_id
    remote = client.get_zarr(zarr_id)
    assert remote.checksum == zarr_checksum_of(source)
    assert remote.file_count == len(local)
    # the big shard was assembled from its parts (S3's ETag says so; the tree has its md5)
    head = archive.store.head(f"zarr/{zarr_id}/big/c/0/0/0")
    assert head is not None and head.etag.endswith("-2"), head

    # download (the CLI): every file byte-identical, nothing more
    dest = tmp_path / "back.zarr"
    cli(["download", zarr_id, str(dest), "--jobs", "4"], client_env)
    assert files_of(dest) == local

    # open_store: zarr-python reads what numpy wrote, whole and in part (ranges of shards)
    with open_store(zarr_id, api_url=client_env["ZARRCHIVE_URL"]) as store:
        group = zarr.open_group(store, mode="r")
        np.testing.assert_array_equal(as_array(group["volume"])[...], values.volume)
        np.testing.assert_array_equal(
            as_array(group["volume"])[2:4, 10:50, 33:71], values.volume[2:4, 10:50, 33:71]
        )
        np.testing.assert_array_equal(as_array(group["plane"])[...], values.plane)
        np.testing.assert_array_equal(
            as_array(group["big"])[0, 1000:1200, 1000:1100], values.big[0, 1000:1200, 1000:1100]
        )
        assert (
            as_array(group["volume"]).shards == VOLUME_SHARDS
            and as_array(group["volume"]).chunks == VOLUME_CHUNKS
        )

    # plain HTTP from the public bucket: stock zarr-python over fsspec, no zarrchive code
    read = read_over_http(remote.s3_url, tmp_path)
    assert read["title"] == "sharded"
    assert read["volume"] == values.volume.tolist()
    assert read["volume_part"] == values.volume[2:4, 10:50, 33:71].tolist()
    assert read["plane"] == values.plane.tolist()
    assert (tuple(read["shards"]), tuple(read["chunks"])) == (VOLUME_SHARDS, VOLUME_CHUNKS)

    # the page: shard shape, inner chunk shape, inner codecs, the index
    page = anon.get(f"/zarr/{zarr_id}/volume/").text
    assert 'id="array-shards">3 × 48 × 40<' in page
    assert 'id="array-chunks">1 × 16 × 20<' in page
    assert 'id="array-chunks-per-shard">3 × 3 × 2<' in page
    assert 'id="array-inner-codecs"><code>bytes (endian little)</code>, <code>zstd (level 3' in page
    assert (
        'id="array-shard-index">at the end; <code>bytes (endian little)</code>, <code>crc32c'
        in page
    )
    assert 'id="no-thumbnail"' not in page and 'id="thumbnail"' in page
    plane_page = anon.get(f"/zarr/{zarr_id}/plane/").text
    assert 'id="array-shards">32 × 32<' in plane_page and 'id="array-chunks">8 × 8<' in plane_page
    assert "blosc (" in plane_page and 'id="array-shard-index">at the start;' in plane_page

    # the thumbnail: the middle plane, from the indexes and the inner chunks of that plane
    # (ranges read exactly: none joined across the other planes' inner chunks)
    monkeypatch.setattr(arrays, "RANGE_GAP", 0)
    drawing = arrays.draw(archive.store, zarr_id, "volume")
    middle = VOLUME_SHAPE[0] // 2
    step = thumbnail_step(*VOLUME_SHAPE[1:])
    assert png_values(drawing.png) == stretch(values.volume[middle, ::step, ::step]).tolist()
    assert drawing.reads.objects == 0  # no whole shard
    plan = plan_slice(VOLUME_SHAPE, VOLUME_CHUNKS, 2, max_chunks=10**6)
    layout = IndexLayout(
        tuple(s // c for s, c in zip(VOLUME_SHARDS, VOLUME_CHUNKS, strict=True)), False, True
    )
    touched = group_by_shard(plan.chunks, layout)
    touched_bytes, needed, runs = 0, 0, 0
    for shard_read in touched:
        body = local["volume/c/" + "/".join(map(str, shard_read.shard))]
        entries = parse_index(layout, body[-layout.nbytes :], len(body), len(body))
        ranges = [e for p, _ in shard_read.chunks if (e := entries[p]) is not None]
        needed += sum(e.length for e in ranges)
        runs += len(coalesce(ranges, 0))
        touched_bytes += len(body)
    # one range for each index, one for each run of adjacent inner chunks needed
    assert drawing.reads.ranges == len(touched) + runs
    assert drawing.reads.range_bytes == needed + layout.nbytes * len(touched)
    assert drawing.reads.range_bytes < touched_bytes / 2
    monkeypatch.setattr(arrays, "MAX_RANGE_READS", drawing.reads.ranges - len(touched) - 1)
    with pytest.raises(NoThumbnail, match=r"need \d+ range reads; a thumbnail makes at most"):
        arrays.draw(archive.store, zarr_id, "volume")
    monkeypatch.undo()
    # close inner chunks joined into fewer ranges: the same picture
    joined = arrays.draw(archive.store, zarr_id, "volume")
    assert joined.png == drawing.png and joined.reads.ranges <= drawing.reads.ranges
    # served as the page shows it
    response = anon.get(f"/thumbnail/zarr/{zarr_id}/volume")
    assert response.status_code == 200 and response.content == drawing.png
    # index at the start, no checksum, blosc inner chunks, an empty inner chunk
    plane = arrays.draw(archive.store, zarr_id, "plane")
    assert png_values(plane.png) == stretch(values.plane).tolist()
    assert plane.reads.objects == 0 and plane.reads.ranges >= 2 * 4


# -- hostile shards -------------------------------------------------------------------------
INNER = (16, 16)
INNER_BYTES = 16 * 16 * 2


def write_hostile(root: Path, name: str, shard: Callable[[IndexLayout], bytes]) -> None:
    """An array *name* of one 32 x 32 int16 shard of 2 x 2 zstd inner chunks (zarr-python's
    metadata), whose one shard is *shard* (built from its index layout)."""
    group = zarr.open_group(root, mode="a", zarr_format=3)
    group.create_array(
        name, shape=(32, 32), chunks=INNER, shards=(32, 32), dtype="int16", fill_value=0
    )
    (root / name / "c" / "0").mkdir(parents=True, exist_ok=True)
    (root / name / "c" / "0" / "0").write_bytes(shard(IndexLayout((2, 2), False, True)))


def good_chunk() -> bytes:
    return bytes(numcodecs.Zstd(level=1).encode(np.arange(256, dtype="<i2").tobytes()))


def past_the_end(layout: IndexLayout) -> bytes:
    data = good_chunk()
    return data + encode_index(layout, [ByteRange(0, len(data) + 100), None, None, None])


def huge_length(layout: IndexLayout) -> bytes:
    data = good_chunk()
    return data + encode_index(layout, [ByteRange(0, len(data)), ByteRange(0, 2**62), None, None])


def bomb(layout: IndexLayout) -> bytes:
    # a zstd frame of 64 MiB of zeros (a few KiB): an inner chunk may hold 512 bytes
    data = bytes(numcodecs.Zstd(level=1).encode(b"\0" * (64 * 1024 * 1024)))
    assert len(data) < INNER_BYTES + 4096  # within what the index may say of it
    return data + encode_index(layout, [ByteRange(0, len(data)), None, None, None])


def wrong_checksum(layout: IndexLayout) -> bytes:
    data = good_chunk()
    index = bytearray(encode_index(layout, [ByteRange(0, len(data)), None, None, None]))
    index[-1] ^= 0xFF
    return data + bytes(index)


def into_the_index(layout: IndexLayout) -> bytes:
    data = good_chunk()
    return data + encode_index(layout, [ByteRange(len(data), 16), None, None, None])


def oversized(layout: IndexLayout) -> bytes:
    return b"\0" * (1024 * 1024)


HOSTILE = {
    "past_the_end": (past_the_end, "points outside the shard"),
    "huge_length": (huge_length, "is an inner chunk of 4611686018427387904 bytes"),
    "bomb": (bomb, "its zstd data decompresses to more than 512 bytes"),
    "wrong_checksum": (wrong_checksum, "fails its crc32c checksum"),
    "into_the_index": (into_the_index, "points outside the shard"),
    "oversized": (oversized, "is 1048576 bytes; its declared size allows"),
}


def test_hostile_shard_indexes_are_refused_without_large_allocation(
    tmp_path: Path,
    client: ApiClient,
    client_env: dict[str, str],
    dandiset: str,
    archive: Archive,
    anon: httpx.Client,
) -> None:
    source = tmp_path / "hostile.zarr"
    zarr.open_group(source, mode="w", zarr_format=3)
    for name, (shard, _) in HOSTILE.items():
        write_hostile(source, name, shard)
    cli(["upload", str(source), "--dandiset", dandiset, "--jobs", "4"], client_env)
    found = client.find_zarr(dandiset, "hostile.zarr")
    assert found is not None
    for name, (_, reason) in HOSTILE.items():
        tracemalloc.start()
        try:
            with pytest.raises(NoThumbnail, match=reason):
                arrays.draw(archive.store, found.zarr_id, name)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert peak < 4 * 1024 * 1024, (name, peak)
    response = anon.get(f"/thumbnail/zarr/{found.zarr_id}/bomb")
    assert response.status_code == 404 and "decompresses to more than" in response.text
    page = anon.get(f"/zarr/{found.zarr_id}/bomb/").text  # the refusal is remembered
    assert 'id="no-thumbnail">No thumbnail: an inner chunk of shard c/0/0' in page


def test_nested_sharding_is_shown_with_a_note(
    tmp_path: Path, client: ApiClient, client_env: dict[str, str], dandiset: str, anon: httpx.Client
) -> None:
    source = tmp_path / "nested.zarr"
    group = zarr.open_group(source, mode="w", zarr_format=3)
    nested = group.create_array(
        "nested",
        shape=(16, 16),
        chunks=(16, 16),
        dtype="uint8",
        serializer=ShardingCodec(
            chunk_shape=(8, 8),
            codecs=[ShardingCodec(chunk_shape=(4, 4), codecs=[BytesCodec()])],
        ),
        compressors=None,
    )
    nested[:] = np.arange(256, dtype="uint8").reshape(16, 16)
    cli(["upload", str(source), "--dandiset", dandiset, "--jobs", "2"], client_env)
    found = client.find_zarr(dandiset, "nested.zarr")
    assert found is not None
    page = anon.get(f"/zarr/{found.zarr_id}/nested/").text
    assert 'id="nested-sharding"' in page and 'id="array-shards">16 × 16<' in page
    assert 'id="no-thumbnail">No thumbnail: shards within shards' in page
