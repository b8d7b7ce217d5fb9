"""PURE: "Open with" links: web viewers that read public data straight from the bucket.

- Neuroglancer reads an OME-Zarr multiscale group, or a plain Zarr array whose data type and
  codecs it knows (:func:`neuroglancer_reads`); its state (one image layer) is JSON in the
  URL's fragment, the source in its pipeline syntax ``{directory URL}/|zarr2:`` (or
  ``zarr3:``);
- vizarr reads OME-Zarr images: ``?source={group URL}``;
- Neurosift reads NWB files: ``nwb?url={file URL}``, as DANDI's web app links it.

The pages offer them only for public data (the viewers run in the reader's browser and
fetch the objects anonymously); an embargoed Zarr's or asset's page offers none.
"""

from __future__ import annotations

import json
import urllib.parse
from collections.abc import Iterable
from dataclasses import dataclass

NEUROGLANCER = "https://neuroglancer-demo.appspot.com/"
VIZARR = "https://hms-dbmi.github.io/vizarr/"
NEUROSIFT = "https://neurosift.app/nwb"

#: The data types Neuroglancer's zarr data source reads (either byte order).
NEUROGLANCER_DTYPES = frozenset(
    {"uint8", "int8", "uint16", "int16", "uint32", "int32", "uint64", "float32"}
)
#: Zarr v2: the compressors it decodes (``None``: raw); it reads no filters.
NEUROGLANCER_V2_COMPRESSORS = frozenset({None, "blosc", "gzip", "zlib", "zstd"})
#: Zarr v3: the codecs it decodes (those inside shards included).
NEUROGLANCER_V3_CODECS = frozenset(
    {"bytes", "transpose", "gzip", "blosc", "zstd", "crc32c", "sharding_indexed"}
)


@dataclass(frozen=True)
class Viewer:
    name: str
    url: str


def _quoted(url: str) -> str:
    return urllib.parse.quote(url, safe="")


def neuroglancer_url(directory_url: str, zarr_format: int, name: str) -> str:
    """Neuroglancer showing the Zarr array or OME-Zarr group at *directory_url* as one
    image layer called *name*."""
    driver = "zarr3" if zarr_format == 3 else "zarr2"
    source = f"{directory_url.rstrip('/')}/|{driver}:"
    state = {
        "layers": [{"type": "image", "source": source, "name": name}],
        "selectedLayer": {"visible": True, "layer": name},
        "layout": "4panel",
    }
    return NEUROGLANCER + "#!" + _quoted(json.dumps(state, separators=(",", ":")))


def vizarr_url(group_url: str) -> str:
    return f"{VIZARR}?source={_quoted(group_url.rstrip('/'))}"


def neurosift_url(file_url: str) -> str:
    return f"{NEUROSIFT}?url={_quoted(file_url)}"


def is_nwb(path: str) -> bool:
    """An NWB file, by its name (as DANDI's web app tells them)."""
    return path.lower().endswith(".nwb")


def neuroglancer_reads(
    zarr_format: int, dtype: str, compressor: str | None, codecs: Iterable[str | None]
) -> bool:
    """Whether Neuroglancer reads an array of *dtype* (numpy's name, e.g. ``uint16``)
    encoded with *compressor* and the filters or codecs *codecs* (v2: the filters' ids,
    which it does not read at all; v3: every codec's name)."""
    if dtype not in NEUROGLANCER_DTYPES:
        return False
    names = list(codecs)
    if zarr_format == 2:
        return compressor in NEUROGLANCER_V2_COMPRESSORS and not names
    return all(name in NEUROGLANCER_V3_CODECS for name in names)


def zarr_viewers(
    directory_url: str, zarr_format: int, name: str, *, ome: bool, plain_array: bool
) -> list[Viewer]:
    """The viewers for a public Zarr directory: an OME-Zarr multiscale group (*ome*), or an
    array Neuroglancer reads (*plain_array*); none for anything else."""
    if ome:
        return [
            Viewer("Neuroglancer", neuroglancer_url(directory_url, zarr_format, name)),
            Viewer("vizarr", vizarr_url(directory_url)),
        ]
    if plain_array:
        return [Viewer("Neuroglancer", neuroglancer_url(directory_url, zarr_format, name))]
    return []
