"""Writers: the ``.lindi.json`` file and a self-contained Zarr directory."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import zarrchive.lindi.annotations as ann
import zarrchive.lindi.refs as rfs_mod
from zarrchive.errors import InvalidInput, InvalidLindiFile, InvalidPath
from zarrchive.lindi.store import RangeReader
from zarrchive.paths import validate_path

#: Chunks copied per batch when writing a Zarr directory (bounded memory).
_BATCH = 64


def check_lindi_json_name(path: str | os.PathLike[str]) -> Path:
    """*path* as a ``Path`` if its name ends with ``.lindi.json``, else :class:`InvalidInput`."""
    target = Path(path)
    if not target.name.endswith(".lindi.json"):
        raise InvalidInput(f"{target}: a LINDI file name must end with .lindi.json")
    return target


def write_lindi_json(rfs: Mapping[str, Any], path: str | os.PathLike[str]) -> Path:
    """Write *rfs* as a ``.lindi.json`` file (sorted keys, atomically replaced)."""
    target = check_lindi_json_name(path)
    rfs_mod.validate(dict(rfs))
    tmp = target.with_name(target.name + ".tmp")
    with tmp.open("w", encoding="utf-8") as fh:
        # one line (json's C encoder: indentation would use its slow pure-Python path)
        fh.write(json.dumps(rfs, sort_keys=True, allow_nan=False))
        fh.write("\n")
    tmp.replace(target)
    return target


def load_lindi_json(location: str | os.PathLike[str]) -> dict[str, Any]:
    """The reference file system of a ``.lindi.json`` file (local path or http(s) URL)."""
    text = os.fspath(location)
    if rfs_mod.is_remote(text):
        from zarrchive.lindi.store import shared_client

        resp = shared_client().get(text, timeout=120)
        if resp.status_code != 200:
            raise InvalidInput(f"cannot read {text}: HTTP {resp.status_code}")
        return rfs_mod.load_json_text(resp.content, source=text)
    path = Path(text)
    if not path.is_file():
        raise InvalidInput(f"{text}: no such file")
    return rfs_mod.load_json_text(path.read_bytes(), source=text)


def write_zarr_directory(
    rfs: Mapping[str, Any],
    out_dir: str | os.PathLike[str],
    *,
    base: str | None = None,
    reader: RangeReader | None = None,
) -> Path:
    """Write the hierarchy of *rfs* as a Zarr v2 directory, copying every chunk's bytes.

    The result is self-contained: it needs neither the HDF5 file nor the LINDI
    file.  Datasets that are ``_EXTERNAL_ARRAY_LINK``s have no chunks to copy:
    convert with ``external_array_link_threshold=None`` first.
    """
    rfs = rfs_mod.validate(dict(rfs))
    refs: dict[str, Any] = rfs["refs"]
    for key, value in refs.items():
        if key.endswith(".zattrs") and isinstance(value, dict) and ann.EXTERNAL_ARRAY_LINK in value:
            raise InvalidLindiFile(
                f"/{rfs_mod.split_key(key)[0]} is an external array link: a Zarr directory must hold"
                " its chunks; convert with external_array_link_threshold=None"
            )
    root = Path(out_dir)
    if root.exists() and any(root.iterdir()):
        raise InvalidInput(f"{root} exists and is not empty: give a new directory")
    root.mkdir(parents=True, exist_ok=True)
    templates = dict(rfs.get("templates") or {})
    own_reader = reader is None
    reader = reader or RangeReader()
    try:
        pending: list[tuple[str, rfs_mod.ByteRange]] = []

        def flush() -> None:
            datas = reader.read_many([r for _, r in pending])
            for (k, _), data in zip(pending, datas, strict=True):
                _write(root, k, data)
            pending.clear()

        for key, value in refs.items():
            if isinstance(value, dict):
                _write(
                    root, key, json.dumps(value, indent=1, sort_keys=True, allow_nan=False).encode()
                )
            elif isinstance(value, str):
                _write(root, key, rfs_mod.decode_inline(value))
            else:
                pending.append((key, rfs_mod.byte_range(value, templates, base)))
                if len(pending) >= _BATCH:
                    flush()
        if pending:
            flush()
    finally:
        if own_reader:
            reader.close()
    return root


def _write(root: Path, key: str, data: bytes) -> None:
    try:
        validate_path(key)
    except InvalidPath as exc:
        raise InvalidLindiFile(
            f"the Zarr entry {key!r} cannot be stored in the archive ({exc.message}):"
            " rename the HDF5 object"
        ) from exc
    target = root / key
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(data)
