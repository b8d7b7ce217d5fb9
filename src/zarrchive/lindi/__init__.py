"""LINDI: HDF5/NWB files as Zarr, with the LINDI annotations.

- :func:`hdf5_to_rfs` converts an HDF5 file (path or URL) to a LINDI reference
  file system; :func:`convert_to_lindi_json` and :func:`convert_to_zarr` write it;
- :class:`File` reads a LINDI file (or an HDF5 file, a Zarr directory, any
  zarr-python 3 store) with h5py's API, usable by pynwb;
- :class:`LindiReferenceStore` is a read-only zarr-python 3 store over a
  reference file system.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from zarrchive.lindi.base import Reference
from zarrchive.lindi.convert import ConvertOptions
from zarrchive.lindi.dataset import Dataset
from zarrchive.lindi.file import File, HardLink, SoftLink
from zarrchive.lindi.group import Group
from zarrchive.lindi.h5source import hdf5_to_rfs
from zarrchive.lindi.store import LindiReferenceStore, RangeReader
from zarrchive.lindi.writers import (
    check_lindi_json_name,
    load_lindi_json,
    write_lindi_json,
    write_zarr_directory,
)

__all__ = [
    "ConvertOptions",
    "Dataset",
    "File",
    "Group",
    "HardLink",
    "LindiReferenceStore",
    "RangeReader",
    "Reference",
    "SoftLink",
    "convert_to_lindi_json",
    "convert_to_zarr",
    "hdf5_to_rfs",
    "load_lindi_json",
    "write_lindi_json",
    "write_zarr_directory",
]


def convert_to_lindi_json(
    source: str | os.PathLike[str],
    output: str | os.PathLike[str],
    *,
    options: ConvertOptions | None = None,
    url: str | None = None,
    generation_metadata: dict[str, Any] | None = None,
) -> Path:
    """Convert the HDF5 file at *source* (path or URL) to the ``.lindi.json`` file *output*."""
    check_lindi_json_name(output)  # before the work
    rfs = hdf5_to_rfs(source, options=options, url=url, generation_metadata=generation_metadata)
    return write_lindi_json(rfs, output)


def convert_to_zarr(
    source: str | os.PathLike[str],
    out_dir: str | os.PathLike[str],
    *,
    options: ConvertOptions | None = None,
) -> Path:
    """Convert the HDF5 file at *source* (path or URL) to a self-contained Zarr directory."""
    opts = options or ConvertOptions()
    opts = ConvertOptions(
        external_array_link_threshold=None,
        contiguous_max_chunk_bytes=opts.contiguous_max_chunk_bytes,
        inline_max_elements=opts.inline_max_elements,
        use_templates=False,
    )
    rfs = hdf5_to_rfs(source, options=opts)
    return write_zarr_directory(rfs, out_dir)
