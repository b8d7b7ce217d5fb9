"""PURE: which 2-D slice of an array a thumbnail shows, which chunks it needs, and the
contrast stretch that turns its values into 8-bit grey levels.

No I/O here: :mod:`zarrchive.services.views.arrays` reads the chunks this module names.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

#: The longest side of a thumbnail, pixels.
MAX_SIDE = 256
#: Most stored objects (chunks, or shards) one thumbnail may read, whatever their size.
MAX_CHUNKS = 64
#: Most chunks one thumbnail may read when they are small: all of them together hold at
#: most :data:`SMALL_CHUNKS_BYTES` decoded (a 100 x 100 array in 10 x 10 chunks is 100 of
#: 400 bytes).  The bound is then on bytes, the count only bounds the requests.
MAX_SMALL_CHUNKS = 256
SMALL_CHUNKS_BYTES = 16 * 1024 * 1024
#: Most inner chunks of shards one thumbnail may read (each by a range of its shard; those
#: of a shard that lie close together are read as one range).
MAX_INNER_CHUNKS = 1024
#: Most bytes the chunks one thumbnail reads may hold once decoded.
MAX_DECODED_BYTES = 128 * 1024 * 1024
#: Percentiles of the contrast stretch: the darkest and brightest 1% saturate.
LOW_PERCENTILE, HIGH_PERCENTILE = 1.0, 99.0


class NoThumbnail(Exception):
    """Why an array gets no thumbnail (a reason to show, not an error)."""


@dataclass(frozen=True)
class SlicePlan:
    """A 2-D slice: the last two dimensions whole, sampled every *step* elements, every
    other dimension at its middle index."""

    #: The index of each leading dimension, then ``(start, stop, step)`` of the last two.
    leading: tuple[int, ...]
    step: int
    #: Grid coordinates of every stored object (chunk or shard) the slice touches.
    chunks: list[tuple[int, ...]]
    #: Rows and columns of the thumbnail.
    height: int
    width: int

    def selection(self) -> tuple[int | slice, ...]:
        return (*self.leading, slice(None, None, self.step), slice(None, None, self.step))


def thumbnail_step(height: int, width: int, max_side: int = MAX_SIDE) -> int:
    """The sampling step that brings the longest side down to *max_side* at most."""
    return max(1, math.ceil(max(height, width) / max_side))


def plan_slice(
    shape: tuple[int, ...],
    chunk_shape: tuple[int, ...],
    itemsize: int,
    *,
    max_side: int = MAX_SIDE,
    max_chunks: int = MAX_CHUNKS,
    max_decoded_bytes: int = MAX_DECODED_BYTES,
    max_small_chunks: int = MAX_SMALL_CHUNKS,
    small_chunks_bytes: int = SMALL_CHUNKS_BYTES,
) -> SlicePlan:
    """The slice a thumbnail of an array of *shape* shows, stored in objects of
    *chunk_shape*; :class:`NoThumbnail` when it can't be drawn within the bounds: at most
    *max_chunks* objects, or *max_small_chunks* when together they hold at most
    *small_chunks_bytes* decoded, and never more than *max_decoded_bytes*."""
    if len(shape) < 2:
        raise NoThumbnail(f"the array has {len(shape)} dimension(s): a picture needs 2")
    if len(chunk_shape) != len(shape) or any(c < 1 for c in chunk_shape):
        raise NoThumbnail(f"chunk shape {chunk_shape} does not fit shape {shape}")
    height, width = shape[-2], shape[-1]
    if height == 0 or width == 0 or any(n == 0 for n in shape):
        raise NoThumbnail("the array is empty")
    leading = tuple(n // 2 for n in shape[:-2])
    step = thumbnail_step(height, width, max_side)
    rows = _touched(height, chunk_shape[-2], step)
    cols = _touched(width, chunk_shape[-1], step)
    fixed = [(i // c,) for i, c in zip(leading, chunk_shape[:-2], strict=True)]
    count = len(rows) * len(cols)
    decoded = count * math.prod(chunk_shape) * itemsize
    small = max_small_chunks > max_chunks
    limit = max_small_chunks if small and decoded <= small_chunks_bytes else max_chunks
    if count > limit:
        also = (
            f" ({max_small_chunks} when they hold at most {small_chunks_bytes} bytes decoded)"
            if small
            else ""
        )
        raise NoThumbnail(
            f"the slice touches {count} chunks; a thumbnail reads at most {max_chunks}{also}"
        )
    if decoded > max_decoded_bytes:
        raise NoThumbnail(
            f"the slice's chunks hold {decoded} bytes decoded; a thumbnail reads at most "
            f"{max_decoded_bytes}"
        )
    chunks = [
        (*lead, r, c) for lead in itertools.product(*[f for f in fixed]) for r in rows for c in cols
    ]
    return SlicePlan(
        leading=leading,
        step=step,
        chunks=[tuple(int(x) for x in chunk) for chunk in chunks],
        height=math.ceil(height / step),
        width=math.ceil(width / step),
    )


def _touched(length: int, chunk: int, step: int) -> list[int]:
    """The chunk indices along one dimension that indices ``0, step, 2*step, ...`` fall in."""
    return sorted({i // chunk for i in range(0, length, step)})


def stretch(values: npt.NDArray[np.generic]) -> npt.NDArray[np.uint8]:
    """A 2-D array as grey levels: the 1st..99th percentile of its finite values mapped
    linearly onto 0..255 (clipped); a constant image is mid-grey; NaN and infinities are
    black. Booleans are black and white; complex numbers show their magnitude."""
    if values.ndim != 2:
        raise ValueError(f"stretch needs a 2-D array, not {values.ndim}-D")
    if values.dtype == np.bool_:
        return np.where(values, 255, 0).astype(np.uint8)
    if values.dtype.kind == "c":
        values = np.abs(values)
    if values.dtype.kind not in "biuf":
        raise NoThumbnail(f"values of type {values.dtype} have no grey level")
    data = values.astype(np.float64)
    finite = np.isfinite(data)
    out = np.zeros(data.shape, dtype=np.uint8)
    if not finite.any():
        return out
    low, high = np.percentile(data[finite], [LOW_PERCENTILE, HIGH_PERCENTILE])
    if high <= low:
        out[finite] = 128
        return out
    scaled = (data[finite] - low) * (255.0 / (high - low))
    out[finite] = np.clip(np.rint(scaled), 0, 255).astype(np.uint8)
    return out
