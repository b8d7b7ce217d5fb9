"""The pure slice and contrast maths of thumbnails."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from zarrchive.services.views.thumbnail import (
    MAX_CHUNKS,
    MAX_DECODED_BYTES,
    MAX_SMALL_CHUNKS,
    SMALL_CHUNKS_BYTES,
    NoThumbnail,
    plan_slice,
    stretch,
    thumbnail_step,
)


def test_a_small_image_is_read_whole_at_full_resolution() -> None:
    plan = plan_slice((40, 60), (16, 16), 2)
    assert plan.leading == () and plan.step == 1
    assert (plan.height, plan.width) == (40, 60)
    assert plan.chunks == [(r, c) for r in range(3) for c in range(4)]
    assert plan.selection() == (slice(None, None, 1), slice(None, None, 1))


def test_leading_dimensions_are_cut_at_their_middle() -> None:
    plan = plan_slice((7, 5, 30, 20), (2, 1, 16, 16), 4)
    assert plan.leading == (3, 2)
    assert plan.chunks == [(1, 2, r, c) for r in range(2) for c in range(2)]
    assert plan.selection()[:2] == (3, 2)


def test_large_images_are_sampled_down_to_the_longest_side() -> None:
    assert thumbnail_step(256, 10) == 1
    assert thumbnail_step(257, 10) == 2
    assert thumbnail_step(1000, 3000) == 12
    plan = plan_slice((1000, 3000), (1000, 1000), 1)
    assert plan.step == 12 and (plan.height, plan.width) == (84, 250)
    assert len(plan.chunks) == 3


def test_sampling_skips_chunks_no_sampled_index_falls_in() -> None:
    # step 4 over rows 0..1023 with 2-row chunks: only even chunks hold a sampled row
    plan = plan_slice((1024, 2), (2, 2), 1, max_chunks=1000)
    assert plan.step == 4
    assert [c[0] for c in plan.chunks] == list(range(0, 512, 2))


@pytest.mark.parametrize(
    ("shape", "chunks", "itemsize", "reason"),
    [
        ((10,), (5,), 1, "1 dimension"),
        ((0, 5), (1, 1), 1, "empty"),
        ((5, 5), (1,), 1, "does not fit"),
        ((5, 5), (0, 1), 1, "does not fit"),
        ((256, 256), (8, 8), 1, "touches 1024 chunks"),
        ((3, 256, 256), (3, 256, 256), 8 * 1024, "bytes decoded"),
    ],
)
def test_what_gets_no_thumbnail(
    shape: tuple[int, ...], chunks: tuple[int, ...], itemsize: int, reason: str
) -> None:
    with pytest.raises(NoThumbnail, match=reason):
        plan_slice(shape, chunks, itemsize)


def test_stretch_maps_the_percentiles_onto_the_grey_levels() -> None:
    values = np.arange(101, dtype=np.int32).reshape(1, 101)
    grey = stretch(values)
    assert grey.dtype == np.uint8
    # the 1st percentile is 1 and the 99th 99: below and above saturate
    assert grey[0, 0] == 0 and grey[0, 1] == 0 and grey[0, 99] == 255 and grey[0, 100] == 255
    assert grey[0, 50] == round((50 - 1) * 255 / 98)


def test_stretch_of_special_values() -> None:
    assert stretch(np.full((2, 3), 7.0)).tolist() == [[128] * 3] * 2
    nan = np.array([[np.nan, np.inf], [0.0, 1.0]])
    assert stretch(nan)[0].tolist() == [0, 0]
    assert stretch(np.array([[np.nan]])).tolist() == [[0]]
    assert stretch(np.array([[True, False]])).tolist() == [[255, 0]]
    assert stretch(np.array([[3 + 4j, 0]])).tolist() == [[255, 0]]
    with pytest.raises(NoThumbnail):
        stretch(np.array([["a", "b"]]))
    with pytest.raises(ValueError, match="2-D"):
        stretch(np.zeros(3))


def test_the_readme_array_small_chunks_are_read_whole() -> None:
    """The README's first Zarr: 100 x 100 float32 in 10 x 10 chunks, 100 chunks of 400 bytes
    (more than MAX_CHUNKS, but small): drawn at full resolution (issue #41)."""
    plan = plan_slice((100, 100), (10, 10), 4)
    assert plan.step == 1 and (plan.height, plan.width) == (100, 100)
    assert len(plan.chunks) == 100


def test_many_large_chunks_are_still_refused() -> None:
    # 100 chunks of 1 MiB: past MAX_CHUNKS, and too big together to count as small
    with pytest.raises(NoThumbnail, match=r"touches 100 chunks; a thumbnail reads at most 64 "):
        plan_slice((2560, 2560), (256, 256), 16)


@settings(max_examples=300, deadline=None)
@given(
    shape=st.tuples(st.integers(1, 5000), st.integers(1, 5000)),
    chunks=st.tuples(st.integers(1, 600), st.integers(1, 600)),
    itemsize=st.sampled_from([1, 2, 4, 8, 16]),
)
def test_plans_stay_within_the_bounds_and_small_arrays_always_get_one(
    shape: tuple[int, int], chunks: tuple[int, int], itemsize: int
) -> None:
    try:
        plan = plan_slice(shape, chunks, itemsize)
    except NoThumbnail:
        plan = None
    if plan is not None:
        decoded = len(plan.chunks) * chunks[0] * chunks[1] * itemsize
        assert len(plan.chunks) <= MAX_SMALL_CHUNKS and decoded <= MAX_DECODED_BYTES
        assert len(plan.chunks) <= MAX_CHUNKS or decoded <= SMALL_CHUNKS_BYTES
        assert max(plan.height, plan.width) <= 256
    # a small array (a slice of at most 256 chunks, 16 MiB together) always gets a picture
    if max(shape) <= 256:  # drawn at full resolution: every chunk of the slice is read
        touched = -(-shape[0] // chunks[0]) * -(-shape[1] // chunks[1])
        small = touched * chunks[0] * chunks[1] * itemsize <= SMALL_CHUNKS_BYTES
        assert (plan is not None) == (touched <= MAX_CHUNKS or (small and touched <= 256))
