"""The conversion of an uploaded blob to its LINDI file, as a task of the sandbox
(:mod:`zarrchive.sandbox`): the child reads the blob through a short-lived presigned URL
(no S3 keys), converts it within the bounds it is given, and answers the LINDI JSON.

Before the wall goes up, :func:`prepare` resolves the URL's host and converts a small HDF5
file made in memory, so that every module the conversion needs is imported while files may
still be read.
"""

from __future__ import annotations

import io
import json
from dataclasses import dataclass, field
from typing import Any

import h5py
import numpy as np

from zarrchive.errors import LindiTooLarge, ZarrchiveError
from zarrchive.lindi.convert import ConvertOptions
from zarrchive.lindi.h5source import hdf5_to_rfs
from zarrchive.lindi.rangefile import RangeFile
from zarrchive.lindi.refs import validate
from zarrchive.sandbox.url_ranges import UrlRanges

#: The longest failure reason (it is shown on pages).
MAX_REASON = 500


def failure_reason(exc: BaseException) -> str:
    """What a failed conversion says (bounded: it is shown on pages)."""
    if isinstance(exc, MemoryError):
        text = "too big to convert in bounded memory"
    elif isinstance(exc, ZarrchiveError):  # unsupported by LINDI, too big or too deep
        text = str(exc)
    else:  # what h5py says of a file it cannot read
        detail = exc.args[0] if isinstance(exc, KeyError) and exc.args else exc
        text = f"not a readable HDF5 file ({type(exc).__name__}: {detail})"
    return text[:MAX_REASON]


def encode_rfs(rfs: dict[str, Any], max_bytes: int | None) -> bytes:
    """The LINDI file's bytes, refused past *max_bytes*."""
    validate(rfs)
    data = json.dumps(rfs, sort_keys=True, allow_nan=False).encode("utf-8")
    if max_bytes is not None and len(data) > max_bytes:
        raise LindiTooLarge(
            f"too big to convert: the LINDI file would be {len(data)} bytes (at most {max_bytes})"
        )
    return data


@dataclass
class BlobConversion:
    """One blob to convert (see :func:`prepare` for the arguments)."""

    reader: UrlRanges
    size: int
    url: str
    metadata: dict[str, Any]
    options: ConvertOptions
    max_bytes: int | None
    read_only: list[str] = field(default_factory=list)
    connect_ports: list[int] = field(default_factory=list)

    def run(self) -> bytes:
        try:
            with RangeFile(self.reader, self.size) as fileobj:
                rfs = hdf5_to_rfs(
                    fileobj, url=self.url, options=self.options, generation_metadata=self.metadata
                )
        except Exception as exc:
            if self.reader.failure is not None:  # h5py's OSError of an S3 failure
                raise self.reader.failure from exc
            raise
        return encode_rfs(rfs, self.max_bytes)

    def reason(self, exc: BaseException) -> str:
        return failure_reason(exc)


def prepare(args: dict[str, Any]) -> BlobConversion:
    """Arguments: ``source`` (the blob's presigned URL), ``size``, ``url`` (written into the
    references), ``metadata`` (``generationMetadata``), ``options`` (the fields of
    :class:`ConvertOptions`), ``max_bytes`` (of the LINDI file)."""
    reader = UrlRanges(str(args["source"]))
    warm_up()
    return BlobConversion(
        reader=reader,
        size=int(args["size"]),
        url=str(args["url"]),
        metadata=dict(args.get("metadata") or {}),
        options=ConvertOptions(**dict(args.get("options") or {})),
        max_bytes=None if args.get("max_bytes") is None else int(args["max_bytes"]),
        read_only=list(reader.read_only),
        connect_ports=[reader.port],
    )


def warm_up() -> None:
    """Convert a small file of every kind of object, in memory: what the conversion imports
    lazily is imported now."""
    buffer = io.BytesIO()
    with h5py.File(buffer, "w") as f:
        f.attrs["object_id"] = "root"
        f.attrs["numbers"] = np.arange(3)
        f.attrs["words"] = np.array(["a", "b"], dtype=h5py.string_dtype())
        group = f.create_group("g")
        group.attrs["x"] = 1.5
        small = group.create_dataset("small", data=np.arange(4, dtype="i2"))
        f.create_dataset("big", data=np.arange(3000.0))
        f.create_dataset(
            "zipped",
            data=np.arange(5000, dtype="i4"),
            chunks=(1000,),
            compression="gzip",
            shuffle=True,
            fletcher32=True,
        )
        f.create_dataset("fixed", data=np.array([b"ab", b"cd"]))
        f.create_dataset("text", data=["x", "yz"], dtype=h5py.string_dtype())
        f.create_dataset("scalar", data="s", dtype=h5py.string_dtype())
        f.create_dataset("refs", data=[small.ref, group.ref], dtype=h5py.ref_dtype)
        compound = np.dtype([("a", "i4"), ("r", h5py.ref_dtype), ("s", h5py.string_dtype())])
        f.create_dataset("table", data=np.array([(1, small.ref, "t")], dtype=compound))
        f.attrs["target"] = small.ref
        f["soft"] = h5py.SoftLink("/g")
    buffer.seek(0)
    rfs = hdf5_to_rfs(buffer, url="https://warm-up.invalid/f.h5", generation_metadata={})
    encode_rfs(rfs, None)
