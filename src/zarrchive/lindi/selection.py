"""PURE: numpy-style selections of a chunked array, and the chunks they touch.

:class:`Selection` normalises what ``Dataset.__getitem__`` is given (integers, slices with
a positive step, integer or boolean arrays, one ellipsis) against a shape; indexing is
orthogonal, as h5py's (each array indexes its own dimension). :meth:`Selection.per_chunk`
splits it by chunk and :func:`piece_selections` gives, for one chunk, where its values go
in the output and which of them to take. No I/O here: ``tests/lindi/test_selection.py``
checks it all against numpy's own indexing.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

#: one chunk of one dimension: ``(chunk index, output selection, chunk selection)``
ChunkPart = tuple[int, Any, Any]


class Selection:
    """A numpy-style selection normalised against a shape."""

    def __init__(self, args: Any, shape: tuple[int, ...]) -> None:
        if not isinstance(args, tuple):
            args = (args,)
        n_ellipsis = sum(1 for a in args if a is Ellipsis)
        if n_ellipsis > 1:
            raise IndexError("an index can only have a single ellipsis ('...')")
        if n_ellipsis:
            i = next(i for i, a in enumerate(args) if a is Ellipsis)
            fill = len(shape) - (len(args) - 1)
            args = args[:i] + (slice(None),) * max(0, fill) + args[i + 1 :]
        if len(args) > len(shape):
            raise IndexError(
                f"too many indices: the dataset has {len(shape)} dimensions, got {len(args)}"
            )
        args = args + (slice(None),) * (len(shape) - len(args))
        #: per dimension: a slice (start, stop, step normalised) or an array of coordinates
        self.dims: list[slice | np.ndarray] = []
        self.drop: list[bool] = []
        for arg, n in zip(args, shape, strict=True):
            if isinstance(arg, int | np.integer) and not isinstance(arg, bool | np.bool_):
                i = int(arg)
                if i < -n or i >= n:
                    raise IndexError(f"index {i} is out of range for a dimension of size {n}")
                i %= n
                self.dims.append(slice(i, i + 1, 1))
                self.drop.append(True)
            elif isinstance(arg, slice):
                start, stop, step = arg.indices(n)
                if step < 1:
                    raise ValueError(f"Step must be >= 1 (got {step})")
                stop = max(start, stop)
                self.dims.append(slice(start, stop, step))
                self.drop.append(False)
            else:
                arr = np.asarray(arg)
                if arr.dtype == bool:
                    if arr.shape != (n,):
                        raise IndexError(
                            f"a boolean index must have the length of its dimension ({n})"
                        )
                    arr = np.nonzero(arr)[0]
                elif arr.ndim != 1 or (arr.size and arr.dtype.kind not in "iu"):
                    raise TypeError(f"unsupported index {arg!r:.60}")
                arr = arr.astype(np.int64)
                if arr.size and (arr.min() < -n or arr.max() >= n):
                    raise IndexError(f"index out of range for a dimension of size {n}")
                self.dims.append(np.where(arr < 0, arr + n, arr))
                self.drop.append(False)

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(
            len(range(d.start, d.stop, d.step)) if isinstance(d, slice) else len(d)
            for d in self.dims
        )

    @property
    def final_shape(self) -> tuple[int, ...]:
        return tuple(n for n, drop in zip(self.shape, self.drop, strict=True) if not drop)

    def per_chunk(self, chunks: Sequence[int]) -> list[list[ChunkPart]]:
        """For each dimension: ``(chunk index, output selection, chunk selection)``."""
        out: list[list[ChunkPart]] = []
        for sel, c in zip(self.dims, chunks, strict=True):
            parts: list[ChunkPart] = []
            if isinstance(sel, slice):
                start, stop, step = sel.start, sel.stop, sel.step
                if stop > start:
                    for k in range(start // c, (stop - 1) // c + 1):
                        lo = max(start, k * c)
                        first = start + -(-(lo - start) // step) * step
                        hi = min(stop, (k + 1) * c)
                        if first >= hi:
                            continue
                        count = len(range(first, hi, step))
                        o = (first - start) // step
                        parts.append(
                            (
                                k,
                                slice(o, o + count),
                                slice(first - k * c, first - k * c + (count - 1) * step + 1, step),
                            )
                        )
            else:
                ids = sel // c
                for k in np.unique(ids):
                    pos = np.nonzero(ids == k)[0]
                    parts.append((int(k), pos, sel[pos] - int(k) * c))
            out.append(parts)
        return out

    @property
    def simple(self) -> bool:
        """Whether every dimension is a slice (then chunks are cut by basic indexing)."""
        return all(isinstance(d, slice) for d in self.dims)


def piece_selections(combo: Sequence[ChunkPart], simple: bool) -> tuple[Any, Any]:
    """``(output selection, chunk selection)`` of one chunk, given its part in each dimension.

    *simple* is :attr:`Selection.simple`; otherwise the per-dimension selections are
    combined orthogonally (``np.ix_``).
    """
    osel: Any = tuple([p[1] for p in combo])
    csel: Any = tuple([p[2] for p in combo])
    if not simple:
        osel = np.ix_(*(_as_index(s) for s in osel))
        csel = np.ix_(*(_as_index(s) for s in csel))
    return osel, csel


def _as_index(sel: Any) -> np.ndarray:
    if isinstance(sel, slice):
        return np.arange(sel.start, sel.stop, sel.step or 1)
    return np.asarray(sel)
