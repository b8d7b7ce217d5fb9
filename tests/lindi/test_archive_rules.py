"""The pure parts of the archive's LINDI files: where the HDF5 signature may be, the range
file h5py reads blobs through, the bounds of a conversion, the state shown."""

from __future__ import annotations

from pathlib import Path

import h5py
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from zarrchive.db.models import LindiState
from zarrchive.errors import LindiTooLarge
from zarrchive.lindi import ConvertOptions, hdf5_to_rfs
from zarrchive.lindi.blob_task import failure_reason
from zarrchive.lindi.convert import check_bounds
from zarrchive.lindi.rangefile import RangeFile
from zarrchive.services.dandi.lindi_files import (
    HDF5_SIGNATURE,
    LindiStatus,
    is_hdf5,
    signature_offsets,
)


def test_signature_offsets_are_zero_then_powers_of_two_from_512() -> None:
    assert signature_offsets(0) == []
    assert signature_offsets(7) == []
    assert signature_offsets(8) == [0]
    assert signature_offsets(520) == [0, 512]
    assert signature_offsets(10_000) == [0, 512, 1024, 2048, 4096, 8192]
    assert signature_offsets(10**12)[-1] == 64 * 1024 * 1024


@given(
    size=st.integers(0, 70_000),
    where=st.sampled_from([None, 0, 512, 1024, 2048, 4096, 8192, 16384, 32768, 100, 513]),
)
def test_is_hdf5_finds_the_signature_exactly_where_a_user_block_may_end(
    size: int, where: int | None
) -> None:
    data = bytearray(b"\x00" * size)
    placed = where is not None and where + 8 <= size
    if placed:
        assert where is not None
        data[where : where + 8] = HDF5_SIGNATURE
    reads: list[tuple[int, int]] = []

    def read(offset: int, n: int) -> bytes:
        reads.append((offset, n))
        return bytes(data[offset : offset + n])

    expected = placed and where in signature_offsets(size)
    assert is_hdf5(read, size) is expected
    assert len(reads) <= 1 + len(signature_offsets(size))


@given(
    content=st.binary(min_size=0, max_size=5000),
    block=st.integers(1, 700),
    blocks=st.integers(1, 4),
    ops=st.lists(st.tuples(st.integers(0, 5200), st.integers(0, 3000)), max_size=20),
)
def test_a_range_file_reads_what_the_bytes_hold(
    content: bytes, block: int, blocks: int, ops: list[tuple[int, int]]
) -> None:
    f = RangeFile(
        lambda o, n: content[o : o + n], len(content), block_size=block, max_blocks=blocks
    )
    for offset, n in ops:
        f.seek(offset)
        got = f.read(n)
        assert got == content[offset : offset + n]
        assert f.tell() == offset + len(got)
    assert len(f._blocks) <= blocks


def test_h5py_reads_an_hdf5_file_through_a_range_file(tmp_path: Path) -> None:
    path = tmp_path / "f.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("x", data=np.arange(100_000), chunks=(1000,), compression="gzip")
    content = path.read_bytes()
    ranged = RangeFile(lambda o, n: content[o : o + n], len(content), block_size=4096)
    rfs = hdf5_to_rfs(ranged, url="https://example.org/f.h5")
    assert rfs["refs"]["x/.zarray"]["shape"] == [100_000]
    assert ranged.requests < len(content) // 4096  # not the whole file


def _deep(path: Path, depth: int) -> None:
    with h5py.File(path, "w") as f:
        group = f
        for i in range(depth):
            group = group.create_group(f"g{i}")


def test_too_deep_or_too_big_files_fail_saying_so(tmp_path: Path) -> None:
    path = tmp_path / "deep.h5"
    _deep(path, 10)
    with pytest.raises(LindiTooLarge, match="too deep to convert: groups nested more than 5"):
        hdf5_to_rfs(path, options=ConvertOptions(max_depth=5))
    with pytest.raises(LindiTooLarge, match="too big to convert: more than 4 groups"):
        hdf5_to_rfs(path, options=ConvertOptions(max_objects=4))
    hdf5_to_rfs(path, options=ConvertOptions(max_depth=10, max_objects=11))
    with h5py.File(path, "a") as f:
        f.create_dataset("words", data=["w" * 10] * 1000, dtype=h5py.string_dtype())
    with pytest.raises(LindiTooLarge, match="a dataset of 16000 bytes to decode"):
        hdf5_to_rfs(path, options=ConvertOptions(max_decoded_bytes=10_000))
    exc = LindiTooLarge("too deep to convert: groups nested more than 5 levels")
    assert failure_reason(exc) == "too deep to convert: groups nested more than 5 levels"
    assert failure_reason(MemoryError()) == "too big to convert in bounded memory"
    assert failure_reason(OSError("bad superblock")).startswith("not a readable HDF5 file")
    assert len(failure_reason(ValueError("x" * 10_000))) == 500


def test_bounds_are_checked_one_by_one() -> None:
    options = ConvertOptions(max_objects=2, max_depth=3, max_refs=10, max_decoded_bytes=100)
    assert check_bounds(options, objects=2, depth=3, refs=10, decoded_bytes=100) is None
    assert "groups and datasets" in (check_bounds(options, objects=3, depth=0, refs=0) or "")
    assert "nested" in (check_bounds(options, objects=0, depth=4, refs=0) or "")
    assert "LINDI entries" in (check_bounds(options, objects=0, depth=0, refs=11) or "")
    assert check_bounds(ConvertOptions(), objects=10**9, depth=10**9, refs=10**9) is None
    with pytest.raises(Exception, match="max_depth must be >= 1"):
        ConvertOptions(max_depth=0)


def test_the_state_shown() -> None:
    assert LindiStatus(LindiState.PENDING).text == "pending"
    assert LindiStatus(LindiState.READY).text == "ready"
    assert LindiStatus(LindiState.FAILED, "too deep").text == "failed: too deep"
    assert not LindiStatus(LindiState.NOT_HDF5).has_file
