"""Property tests: LINDI's selection maths against numpy's own indexing (the oracle).

A LINDI dataset is read chunk by chunk: :class:`Selection` normalises the index,
``per_chunk`` says which chunks it touches and :func:`piece_selections` where each
chunk's values go. Here the "chunks" are cut from a numpy array of distinct values, the
pieces are assembled exactly as ``Dataset._read`` does, and the result must equal numpy
indexing the whole array: per dimension, one axis at a time (h5py's orthogonal indexing),
and numpy's plain ``arr[index]`` wherever numpy's semantics are the same. Errors too:
what numpy refuses with ``IndexError``, the selection refuses with ``IndexError``.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from zarrchive.lindi.selection import Selection, piece_selections

PADDING = -2  # values of a chunk beyond the array's edge: never part of a result
UNWRITTEN = -1  # output elements no chunk wrote


@dataclass(frozen=True)
class Case:
    shape: tuple[int, ...]
    chunks: tuple[int, ...]
    dims: tuple[Any, ...]  # one index per dimension
    args: Any  # what __getitem__ gets: a bare index, a tuple, with an ellipsis or shortened


# -- strategies -------------------------------------------------------------------------
def _index(draw: st.DrawFn, n: int) -> Any:
    kinds = ["slice", "full", "array", "mask"] + (["int", "npint"] if n else [])
    kind = draw(st.sampled_from(kinds))
    bound = st.one_of(st.none(), st.integers(-n - 3, n + 3))
    if kind == "full":
        return slice(None)
    if kind == "slice":
        step = draw(st.one_of(st.none(), st.integers(1, 4)))
        return slice(draw(bound), draw(bound), step)
    if kind == "int":
        return draw(st.integers(-n, n - 1))
    if kind == "npint":
        return np.int64(draw(st.integers(-n, n - 1)))
    if kind == "mask":
        return np.array(draw(st.lists(st.booleans(), min_size=n, max_size=n)), dtype=bool)
    # unsorted, repeated, negative coordinates; empty arrays too
    values = draw(st.lists(st.integers(-n, n - 1), max_size=6)) if n else []
    as_list = draw(st.booleans())
    return values if as_list and values else np.array(values, dtype=np.int64)


@st.composite
def cases(draw: st.DrawFn) -> Case:
    ndim = draw(st.integers(1, 4))  # LINDI writes scalars as shape (1,) with _SCALAR
    shape = tuple(draw(st.lists(st.integers(0, 7), min_size=ndim, max_size=ndim)))
    chunks = tuple(draw(st.lists(st.integers(1, 4), min_size=ndim, max_size=ndim)))
    dims = [_index(draw, n) for n in shape]
    form = draw(st.sampled_from(["tuple", "bare", "ellipsis", "short"]))
    if form == "bare" and ndim == 1:
        args: Any = dims[0]
    elif form in ("ellipsis", "short"):
        # a run of dimensions [a, b) left out (an ellipsis in its place, or at the end)
        a = draw(st.integers(0, ndim))
        b = ndim if form == "short" else draw(st.integers(a, ndim))
        for i in range(a, b):
            dims[i] = slice(None)
        args = tuple(dims[:a]) + ((Ellipsis,) if form == "ellipsis" else ()) + tuple(dims[b:])
    else:
        args = tuple(dims)
    return Case(shape, chunks, tuple(dims), args)


# -- the oracle and the assembly ----------------------------------------------------------
def orthogonal(arr: np.ndarray, dims: tuple[Any, ...]) -> np.ndarray:
    """numpy indexing one dimension at a time: h5py's semantics."""
    axis = 0
    for index in dims:
        arr = arr[(slice(None),) * axis + (index,)]
        if not isinstance(index, int | np.integer):
            axis += 1
    return arr


def numpy_agrees(dims: tuple[Any, ...]) -> bool:
    """Whether numpy's ``arr[index]`` means the same as orthogonal indexing here."""
    arrays = sum(1 for d in dims if not isinstance(d, slice | int | np.integer))
    ints = sum(1 for d in dims if isinstance(d, int | np.integer))
    return arrays == 0 or (arrays == 1 and ints == 0)


def chunk_of(arr: np.ndarray, coords: tuple[int, ...], chunks: tuple[int, ...]) -> np.ndarray:
    """Chunk *coords* of *arr*, full-sized as a decoded chunk is (padded at the edges)."""
    out = np.full(chunks, PADDING, dtype=arr.dtype)
    region = tuple(slice(k * c, (k + 1) * c) for k, c in zip(coords, chunks, strict=True))
    part = arr[region]
    out[tuple(slice(0, n) for n in part.shape)] = part
    return out


def assemble(arr: np.ndarray, sel: Selection, chunks: tuple[int, ...]) -> np.ndarray:
    """The selection read chunk by chunk, as ``Dataset._read`` does."""
    out = np.full(sel.shape, UNWRITTEN, dtype=arr.dtype)
    parts = sel.per_chunk(chunks) if 0 not in sel.shape else []
    for combo in itertools.product(*parts) if parts else []:
        coords = tuple(p[0] for p in combo)
        osel, csel = piece_selections(combo, sel.simple)
        out[osel] = chunk_of(arr, coords, chunks)[csel]
    if any(sel.drop):
        out = out.reshape(sel.final_shape)
    return out


def data(shape: tuple[int, ...]) -> np.ndarray:
    return np.arange(math.prod(shape), dtype=np.int64).reshape(shape)


# -- properties ---------------------------------------------------------------------------
@settings(max_examples=1500, deadline=None)
@given(cases())
def test_reading_by_chunks_equals_numpy(case: Case) -> None:
    arr = data(case.shape)
    expected = orthogonal(arr, case.dims)
    if numpy_agrees(case.dims):
        direct = arr[case.args]
        assert direct.shape == expected.shape and np.array_equal(direct, expected)

    sel = Selection(case.args, case.shape)
    assert sel.final_shape == expected.shape
    got = assemble(arr, sel, case.chunks)
    assert got.shape == expected.shape
    assert np.array_equal(got, expected)  # so nothing unwritten, no padding read


@settings(max_examples=800, deadline=None)
@given(cases())
def test_only_the_chunks_holding_selected_values_are_read(case: Case) -> None:
    sel = Selection(case.args, case.shape)
    if 0 in sel.shape:
        return
    parts = sel.per_chunk(case.chunks)
    for dim, (index, n, c) in enumerate(zip(sel.dims, case.shape, case.chunks, strict=True)):
        coords = (
            np.arange(n)[index] if isinstance(index, slice) else np.asarray(index, dtype=np.int64)
        )
        wanted = sorted({int(i) // c for i in coords})
        got = [p[0] for p in parts[dim]]
        assert got == wanted, f"dimension {dim}"  # each chunk once, in order, none idle
    assert sel.simple == all(isinstance(d, slice) for d in sel.dims)


@st.composite
def bad_cases(draw: st.DrawFn) -> tuple[tuple[int, ...], Any]:
    """An index numpy refuses with IndexError: out of range, wrong mask, too many, two '...'."""
    ndim = draw(st.integers(1, 3))
    shape = tuple(draw(st.lists(st.integers(1, 6), min_size=ndim, max_size=ndim)))
    dims: list[Any] = [slice(None)] * ndim
    what = draw(st.sampled_from(["int", "array", "mask", "too_many", "two_ellipses"]))
    i = draw(st.integers(0, ndim - 1))
    n = shape[i]
    out_of_range = st.one_of(st.integers(n, n + 5), st.integers(-n - 5, -n - 1))
    if what == "int":
        dims[i] = draw(out_of_range)
    elif what == "array":
        dims[i] = np.array([0, draw(out_of_range)], dtype=np.int64)
    elif what == "mask":
        # (numpy takes an empty boolean array as an empty list of coordinates)
        length = draw(st.integers(1, n + 3).filter(lambda m: m != n))
        dims[i] = np.ones(length, dtype=bool)
    elif what == "too_many":
        dims += [0] * draw(st.integers(1, 2))
    else:
        dims[i:i] = [Ellipsis, Ellipsis]
    return shape, tuple(dims)


@settings(max_examples=500, deadline=None)
@given(bad_cases())
def test_what_numpy_refuses_is_refused(case: tuple[tuple[int, ...], Any]) -> None:
    shape, args = case
    with pytest.raises(IndexError):
        data(shape)[args]
    with pytest.raises(IndexError):
        Selection(args, shape)


@given(st.integers(1, 8), st.integers(-4, -1))
def test_negative_steps_are_refused_as_h5py_does(n: int, step: int) -> None:
    with pytest.raises(ValueError, match="Step must be >= 1"):
        Selection(slice(None, None, step), (n,))


def test_float_and_2d_indices_are_refused() -> None:
    with pytest.raises(TypeError):
        Selection(np.array([0.5]), (3,))
    with pytest.raises(TypeError):
        Selection(np.zeros((1, 1), dtype=np.int64), (3,))
