"""Hostile HDF5 files (issue #35), made in memory: files that point outside themselves at a
secret (external storage of every kind of dataset, external links, virtual datasets, a
user-defined filter), a file whose strings decode to far more than its size, and one whose
object references made h5py search the file for each name."""

from __future__ import annotations

import functools
import io
import zlib
from collections.abc import Callable
from pathlib import Path

import h5py
import numpy as np

MiB = 1024 * 1024


def _file(build: Callable[[h5py.File], None]) -> bytes:
    buffer = io.BytesIO()
    with h5py.File(buffer, "w") as f:
        build(f)
    return buffer.getvalue()


def external_storage(secret: Path, kind: str) -> bytes:
    """A small file with one dataset ``leak`` whose raw data is *secret* (an absolute path:
    HDF5 external storage), of *kind*: ``string`` (``S1``, inlined), ``compound`` (JSON),
    ``vlen`` (variable-length strings, JSON), ``numeric`` (``u1``, inlined)."""
    size = secret.stat().st_size
    dtypes = {
        "string": (np.dtype("S1"), size),
        "numeric": (np.dtype("u1"), size),
        "compound": (np.dtype([("a", "S4"), ("b", "S4")]), size // 8),
        "vlen": (h5py.string_dtype(), size // 16),
    }
    dtype, count = dtypes[kind]
    stored = 16 if kind == "vlen" else dtype.itemsize
    return _file(
        lambda f: f.create_dataset(
            "leak", shape=(count,), dtype=dtype, external=[(str(secret), 0, count * stored)]
        )
    )


def secret_hdf5(path: Path, secret: bytes) -> Path:
    """An HDF5 file at *path* (in the data directory) whose dataset ``x`` holds *secret*."""
    with h5py.File(path, "w") as f:
        f.create_dataset("x", data=np.frombuffer(secret, dtype="u1"))
    return path


def external_link(target: Path) -> bytes:
    """A file whose ``leak`` is an external link to ``/x`` of *target*."""

    def build(f: h5py.File) -> None:
        f["leak"] = h5py.ExternalLink(str(target), "/x")

    return _file(build)


def virtual_dataset(target: Path, size: int) -> bytes:
    """A file whose ``leak`` is a virtual dataset mapping ``/x`` of *target*."""

    def build(f: h5py.File) -> None:
        layout = h5py.VirtualLayout(shape=(size,), dtype="u1")
        layout[:] = h5py.VirtualSource(str(target), "x", shape=(size,))
        f.create_virtual_dataset("leak", layout)

    return _file(build)


def unknown_filter() -> bytes:
    """A file whose small string dataset uses the unregistered filter 32099 (HDF5 would look
    for it as a plugin)."""
    return _file(
        lambda f: f.create_dataset(
            "leak",
            data=np.array([b"abcd"] * 64),
            chunks=(16,),
            compression=32099,
            allow_unknown_filter=True,
        )
    )


@functools.cache
def string_bomb(datasets: int = 8, elements: int = 4 * MiB) -> bytes:
    """*datasets* gzip-9 datasets of *elements* ``S16`` strings: by default the issue's file,
    about 1 MB, 64 MiB decoded per dataset (within the old per-dataset bound), 512 MiB in
    all.  Their chunks (at most 1 Mi elements) are one chunk compressed once."""
    rows = min(MiB, elements)
    chunk = zlib.compress(np.full(rows, b"0123456789abcdef", dtype="S16").tobytes(), 9)

    def build(f: h5py.File) -> None:
        for i in range(datasets):
            ds = f.create_dataset(
                f"s{i}",
                shape=(elements,),
                dtype="S16",
                chunks=(rows,),
                compression="gzip",
                compression_opts=9,
            )
            for start in range(0, elements, rows):  # one chunk compressed once, written raw
                ds.id.write_direct_chunk((start,), chunk)

    return _file(build)


def many_references(groups: int = 3000) -> bytes:
    """*groups* groups and a dataset of one object reference to each (h5py's ``.name`` of
    each dereferenced group searched the file: quadratic)."""

    def build(f: h5py.File) -> None:
        made = [f.create_group(f"g{i:05d}") for i in range(groups)]
        f.create_dataset("refs", data=[g.ref for g in made], dtype=h5py.ref_dtype)

    return _file(build)
