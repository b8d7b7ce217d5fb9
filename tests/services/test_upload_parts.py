"""The part rule of big files in Zarr batches (pure): S3's limits hold for every size."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from zarrchive.errors import InvalidInput
from zarrchive.services.zarr_engine.uploads.parts import (
    MAX_OBJECT_SIZE,
    MAX_PART_SIZE,
    MAX_PARTS,
    MAX_PARTS_PER_REQUEST,
    MIB,
    MIN_PART_SIZE,
    check_part_numbers,
    missing_or_wrong_parts,
    part_count,
    part_length,
    part_size_for,
)

sizes = st.integers(min_value=0, max_value=MAX_OBJECT_SIZE)
thresholds = st.integers(min_value=MIN_PART_SIZE, max_value=5 * 1024**3)


@given(sizes, thresholds)
def test_every_size_fits_s3s_limits(size: int, threshold: int) -> None:
    part_size = part_size_for(size, threshold)
    count = part_count(size, part_size)
    assert MIN_PART_SIZE <= part_size <= MAX_PART_SIZE
    assert 1 <= count <= MAX_PARTS
    lengths = [part_length(size, part_size, n) for n in (1, count)]
    assert all(0 <= length <= part_size for length in lengths)
    assert (count - 1) * part_size + part_length(size, part_size, count) == size


def test_the_rule_at_its_edges() -> None:
    assert part_size_for(100 * MIB, 8 * MIB) == 8 * MIB  # tests: parts of the threshold
    assert part_size_for(100 * MIB, 1024**3) == 64 * MIB  # default: DANDI's 64 MiB
    assert part_size_for(MAX_OBJECT_SIZE, 1024**3) == 525 * MIB  # 5 TiB in < 10,000 parts
    assert part_count(MAX_OBJECT_SIZE, 525 * MIB) == 9_987
    with pytest.raises(InvalidInput):
        part_size_for(MAX_OBJECT_SIZE + 1, 1024**3)
    with pytest.raises(InvalidInput):
        part_length(10, 5, 3)


@given(st.lists(st.integers(min_value=-3, max_value=12), max_size=20))
def test_part_numbers_are_checked(numbers: list[int]) -> None:
    valid = (
        bool(numbers) and len(set(numbers)) == len(numbers) and all(1 <= n <= 9 for n in numbers)
    )
    if valid:
        assert check_part_numbers("x", numbers, 9) == sorted(numbers)
    else:
        with pytest.raises(InvalidInput):
            check_part_numbers("x", numbers, 9)


def test_too_many_parts_at_once() -> None:
    with pytest.raises(InvalidInput, match="at most 1000"):
        check_part_numbers("x", range(1, MAX_PARTS_PER_REQUEST + 2), MAX_PARTS)


@given(st.integers(min_value=1, max_value=50 * MIB), st.data())
def test_missing_and_wrong_parts(size: int, data: st.DataObject) -> None:
    part_size = MIN_PART_SIZE
    count = part_count(size, part_size)
    held = data.draw(st.sets(st.integers(min_value=1, max_value=count)))
    short = data.draw(st.sets(st.sampled_from(sorted(held)))) if held else set()
    found = {n: part_length(size, part_size, n) - (1 if n in short else 0) for n in held}
    missing, wrong = missing_or_wrong_parts(size, part_size, found)
    assert missing == sorted(set(range(1, count + 1)) - held)
    assert wrong == sorted(n for n in short if found[n] != part_length(size, part_size, n))
