"""The pure slice and contrast maths of thumbnails."""

from __future__ import annotations

import numpy as np
import pytest

from zarrchive.services.thumbnail import NoThumbnail, plan_slice, stretch, thumbnail_step


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
