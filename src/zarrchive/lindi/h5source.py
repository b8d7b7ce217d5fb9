"""The HDF5 edge: open a local or remote HDF5 file with h5py and convert it.

Everything that touches h5py lives here; the decisions are the pure rules of
:mod:`zarrchive.lindi.convert`, :mod:`zarrchive.lindi.codecs` and
:mod:`zarrchive.lindi.annotations`.
"""

from __future__ import annotations

import io
import math
import os
from collections.abc import Callable, Iterator
from contextlib import ExitStack, closing, contextmanager
from pathlib import Path
from typing import IO, Any

import h5py
import numpy as np

import zarrchive.lindi.annotations as ann
import zarrchive.lindi.convert as rules
import zarrchive.lindi.refs as rfs_mod
from zarrchive.errors import (
    InvalidInput,
    LindiTooLarge,
    PointsOutsideFile,
    UnsupportedDatatype,
    UnsupportedLink,
    UnsupportedReference,
)
from zarrchive.lindi.codecs import H5Filter, filters_to_codecs

_LAYOUT_COMPACT = 0
_LAYOUT_CONTIGUOUS = 1
_LAYOUT_CHUNKED = 2


def location_of(source: str | os.PathLike[str]) -> str:
    """The location written into references: the URL, or the absolute local path."""
    text = os.fspath(source)
    if rfs_mod.is_remote(text):
        return text
    return os.path.abspath(text)


def forget_plugin_paths() -> None:
    """Empty HDF5's list of filter plugin paths in this process: a file that names an
    unknown filter can't make HDF5 load code (the archive's filters are built in or
    registered by h5py)."""
    while h5py.h5pl.size() > 0:
        h5py.h5pl.remove(0)


@contextmanager
def open_hdf5(source: str | os.PathLike[str] | IO[bytes] | io.RawIOBase) -> Iterator[h5py.File]:
    """An h5py file for a local path, an http(s) URL (read with range requests) or a
    seekable binary file object (read through h5py's file-object driver)."""
    forget_plugin_paths()
    if not isinstance(source, str | os.PathLike):
        try:
            h5 = h5py.File(source, "r")
        except OSError as exc:
            raise InvalidInput(f"not a readable HDF5 file: {exc}") from exc
        with h5:
            yield h5
        return
    text = os.fspath(source)
    with ExitStack() as stack:
        if rfs_mod.is_remote(text):
            import remfile

            try:
                remote = stack.enter_context(closing(remfile.File(text, verbose=False)))
                h5 = stack.enter_context(h5py.File(remote, "r"))
            except Exception as exc:
                raise InvalidInput(f"cannot open {text} as a remote HDF5 file: {exc}") from exc
        else:
            if not Path(text).is_file():
                raise InvalidInput(f"{text}: no such HDF5 file")
            try:
                h5 = stack.enter_context(h5py.File(text, "r"))
            except OSError as exc:
                raise InvalidInput(f"{text} is not a readable HDF5 file: {exc}") from exc
        yield h5


def hdf5_to_rfs(
    source: str | os.PathLike[str] | IO[bytes] | io.RawIOBase,
    *,
    options: rules.ConvertOptions | None = None,
    url: str | None = None,
    generation_metadata: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The LINDI reference file system of the HDF5 file at *source* (path, URL or a
    seekable binary file object).

    *url* is the location written into the references (default: *source*, made
    absolute if local; required for a file object).  *generation_metadata* becomes
    ``generationMetadata``.
    """
    options = options or rules.ConvertOptions()
    if url is None:
        if not isinstance(source, str | os.PathLike):
            raise InvalidInput("give the url to write into the references of a file object")
        url = location_of(source)
    with open_hdf5(source) as h5:
        converter = _Converter(h5, url=url, options=options)
        refs = converter.run()
    rfs: dict[str, Any] = {"version": 1, "refs": refs}
    if generation_metadata is not None:
        rfs["generationMetadata"] = generation_metadata
    if options.use_templates:
        rfs = rfs_mod.apply_templates(rfs)
    return rfs


def _text(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, bytes | np.bytes_):
        return bytes(value).decode("utf-8", errors="replace")
    return str(value)


class _Converter:
    def __init__(self, h5: h5py.File, *, url: str, options: rules.ConvertOptions) -> None:
        self.h5 = h5
        self.url = url
        self.options = options
        self.refs: dict[str, Any] = {}
        self.root_object_id = _text(h5.attrs.get("object_id")) if "object_id" in h5.attrs else None
        self._ref_cache: dict[int, dict[str, Any]] = {}
        self.objects = 0
        #: The path of every object linked in the file, by its address (filled by the survey).
        self.paths: dict[int, str] = {}
        self.object_references = 0
        self.inline_bytes = 0

    def bound(self, *, depth: int = 0, decoded_bytes: int = 0) -> None:
        """Raise :class:`LindiTooLarge` past a bound of the options."""
        self.objects += 1
        why = rules.check_bounds(
            self.options,
            objects=self.objects,
            depth=depth,
            refs=len(self.refs),
            decoded_bytes=decoded_bytes,
        )
        if why is not None:
            raise LindiTooLarge(why)

    def run(self) -> dict[str, Any]:
        self.survey()
        self.objects = 0
        self._group("", self.h5, ())
        return self.refs

    # -- the survey: before any data is read -------------------------------------------
    def survey(self) -> None:
        """Walk every object once, reading metadata only: refuse a file that points outside
        itself (external links, external storage, virtual datasets, unknown filters) or
        passes the bounds of objects, depth and attributes, and record each object's path
        by its address (object references resolve through it, never by a search)."""
        attributes = 0

        def count_attributes(n: int) -> None:
            nonlocal attributes
            attributes += n
            why = rules.check_file_bounds(self.options, attributes=attributes)
            if why is not None:
                raise LindiTooLarge(why)

        root = h5py.h5o.get_info(self.h5.id)
        self.paths[root.addr] = "/"
        todo: list[tuple[str, h5py.Group, int]] = [("", self.h5, 0)]
        while todo:
            path, group, depth = todo.pop()
            self.bound(depth=depth)
            count_attributes(h5py.h5o.get_info(group.id).num_attrs)
            found: list[tuple[str, h5py.Group, int]] = []
            for name in group:
                child_path = f"{path}/{name}" if path else name
                link = group.get(name, getlink=True)
                if isinstance(link, h5py.ExternalLink):
                    raise UnsupportedLink(
                        f"/{child_path} is an external link to {link.path} in {link.filename}:"
                        " the archive never follows links out of the uploaded file; copy the"
                        " target into the file first"
                    )
                if isinstance(link, h5py.SoftLink):
                    continue  # a path within the file, written as such, never followed
                child = group.get(name)
                info = h5py.h5o.get_info(child.id)
                if info.addr in self.paths:
                    continue  # a second hard link: walked once
                self.paths[info.addr] = "/" + child_path
                if isinstance(child, h5py.Group):
                    found.append((child_path, child, depth + 1))
                elif isinstance(child, h5py.Dataset):
                    self.bound()
                    count_attributes(info.num_attrs)
                    self._refuse_outside(child, "/" + child_path)
            todo.extend(reversed(found))

    @staticmethod
    def _refuse_outside(ds: h5py.Dataset, label: str) -> None:
        dcpl = ds.id.get_create_plist()
        why = rules.storage_refusal(
            label,
            external_files=dcpl.get_external_count(),
            virtual=dcpl.get_layout() not in (_LAYOUT_COMPACT, _LAYOUT_CONTIGUOUS, _LAYOUT_CHUNKED),
            filter_ids=[dcpl.get_filter(i)[0] for i in range(dcpl.get_nfilters())],
        )
        if why is not None:
            raise PointsOutsideFile(why)

    def room_inline(self, nbytes: int, label: str) -> None:
        """Refuse the file if *nbytes* more stored inline would pass its bound."""
        why = rules.check_inline_bytes(
            self.options, stored=self.inline_bytes, adding=nbytes, label=label
        )
        if why is not None:
            raise LindiTooLarge(why)

    def add_inline(self, nbytes: int, label: str) -> None:
        """Count *nbytes* more stored inline, refusing past the file's bound."""
        self.room_inline(nbytes, label)
        self.inline_bytes += nbytes

    # -- references -----------------------------------------------------------
    def encode_ref(self, value: Any) -> dict[str, Any] | None:
        if not isinstance(value, h5py.Reference):
            return None
        if isinstance(value, h5py.RegionReference):
            raise UnsupportedReference(
                "the file contains an HDF5 region reference: LINDI supports object references only"
            )
        if not value:
            raise UnsupportedReference("the file contains a null HDF5 object reference")
        self.object_references += 1
        why = rules.check_file_bounds(self.options, object_references=self.object_references)
        if why is not None:
            raise LindiTooLarge(why)
        try:
            target = self.h5[value]
            address = int(h5py.h5o.get_info(target.id).addr)
        except Exception as exc:
            raise UnsupportedReference(
                f"an HDF5 object reference cannot be resolved: {exc}"
            ) from exc
        cached = self._ref_cache.get(address)
        if cached is not None:
            return dict(cached)
        # by the survey's map: h5py's .name searches the whole file for each object
        name = self.paths.get(address)
        if name is None:
            raise UnsupportedReference(
                "an HDF5 object reference points to an object not linked in the file"
            )
        object_id = _text(target.attrs.get("object_id")) if "object_id" in target.attrs else None
        value = ann.reference_json(name, object_id, self.root_object_id)
        self._ref_cache[address] = value
        return dict(value)

    # -- attributes -------------------------------------------------------------
    def attrs(self, obj: h5py.HLObject, label: str) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name in obj.attrs:
            if name in ann.SPECIAL_KEYS:
                raise UnsupportedDatatype(
                    f"{label} has an attribute named {name}, which LINDI reserves"
                )
            try:
                value = obj.attrs[name]
            except (OSError, TypeError) as exc:
                raise UnsupportedDatatype(
                    f"attribute {name!r} of {label} cannot be read: {exc}"
                ) from exc
            out[name] = ann.encode_attribute(
                value, label=f"{name!r} of {label}", encode_ref=self.encode_ref
            )
        return out

    def _put_meta(self, path: str, name: str, value: dict[str, Any]) -> None:
        self.refs[f"{path}/{name}" if path else name] = value

    def _put_array_meta(self, path: str, zarray: dict[str, Any], attrs: dict[str, Any]) -> None:
        """An array's ``.zarray``, then its ``.zattrs`` when it has attributes."""
        self._put_meta(path, ".zarray", zarray)
        if attrs:
            self._put_meta(path, ".zattrs", attrs)

    def _put_one_chunk_meta(
        self,
        path: str,
        shape: tuple[int, ...],
        attrs: dict[str, Any],
        dtype: str,
        *,
        fill_value: Any = None,
        filters: list[dict[str, Any]] | None = None,
    ) -> tuple[int, ...]:
        """The metadata of an array stored as one chunk (a scalar as shape ``(1,)`` with
        ``_SCALAR``); returns the stored shape."""
        stored = shape or (1,)
        if shape == ():
            attrs[ann.SCALAR] = True
        zarray = rules.zarray(
            stored,
            rules.zarr_chunks(stored, None),
            dtype,
            fill_value=fill_value,
            filters=filters,
        )
        self._put_array_meta(path, zarray, attrs)
        return stored

    # -- groups -----------------------------------------------------------------
    def _group(self, path: str, group: h5py.Group, ancestors: tuple[Any, ...]) -> None:
        label = "/" + path
        self.bound(depth=len(ancestors))
        self._put_meta(path, ".zgroup", dict(rules.ZGROUP))
        attrs = self.attrs(group, f"group {label}")
        if attrs:
            self._put_meta(path, ".zattrs", attrs)
        ancestors = (*ancestors, group.id)
        for name in group:
            child_path = f"{path}/{name}" if path else name
            link = group.get(name, getlink=True)
            if isinstance(link, h5py.ExternalLink):
                raise UnsupportedLink(
                    f"/{child_path} is an external link to {link.path} in {link.filename}:"
                    " LINDI cannot represent external links; copy the target into the file first"
                )
            if isinstance(link, h5py.SoftLink):
                target = ann.join_path(label, link.path)
                self._put_meta(child_path, ".zgroup", dict(rules.ZGROUP))
                self._put_meta(child_path, ".zattrs", ann.soft_link_attrs(target))
                continue
            child = group.get(name)
            if isinstance(child, h5py.Group):
                if child.id in ancestors:
                    raise UnsupportedLink(
                        f"/{child_path} is a hard link to one of its own ancestors: LINDI cannot"
                        " represent cycles; replace it with a soft link"
                    )
                self._group(child_path, child, ancestors)
            elif isinstance(child, h5py.Dataset):
                self._dataset(child_path, child)
            else:
                raise UnsupportedDatatype(
                    f"/{child_path} is a committed datatype or unknown object"
                )

    # -- datasets ---------------------------------------------------------------
    def _dataset(self, path: str, ds: h5py.Dataset) -> None:
        label = "/" + path
        attrs = self.attrs(ds, f"dataset {label}")
        if ds.shape is None:
            raise UnsupportedDatatype(f"dataset {label} has a null dataspace (h5py.Empty)")
        dtype: np.dtype[Any] = ds.dtype
        shape = tuple(int(s) for s in ds.shape)
        # what the JSON would hold decoded (vlen items at least their 16-byte handle)
        decoded = 0 if rules.is_numeric(dtype) else math.prod(shape) * max(dtype.itemsize, 16)
        self.bound(decoded_bytes=decoded)
        self._refuse_outside(ds, label)  # the survey did, for all; again before any read
        if rules.is_numeric(dtype):
            self._numeric(path, ds, shape, dtype, attrs)
        elif dtype.kind == "S":
            self._inline_array(path, shape, dtype, attrs, lambda: ds[()])
        else:
            self.room_inline(decoded, f"dataset {label}")  # at least this much: before reading
            self._json_dataset(path, ds, shape, dtype, attrs, label)

    def _inline_array(
        self,
        path: str,
        shape: tuple[int, ...],
        dtype: np.dtype[Any],
        attrs: dict[str, Any],
        read: Callable[[], Any],
        *,
        fill_value: Any = None,
    ) -> None:
        """A dataset stored as one inline chunk (a scalar as shape ``(1,)`` with ``_SCALAR``);
        *read* gives its values, read only when there are any."""
        stored = self._put_one_chunk_meta(path, shape, attrs, dtype.str, fill_value=fill_value)
        if math.prod(stored) > 0:
            self.add_inline(math.prod(stored) * dtype.itemsize, f"dataset /{path}")
            data = np.asarray(read(), dtype=dtype).reshape(stored)
            self.refs[rules.chunk_key(path, (0,) * len(stored))] = rfs_mod.encode_inline(
                rules.numeric_chunk_bytes(data)
            )

    def _numeric(
        self,
        path: str,
        ds: h5py.Dataset,
        shape: tuple[int, ...],
        dtype: np.dtype[Any],
        attrs: dict[str, Any],
    ) -> None:
        label = "/" + path
        opts = self.options
        dcpl = ds.id.get_create_plist()
        layout = dcpl.get_layout()
        fill = rules.fill_value_json(ds.fillvalue, dtype)
        # small datasets are inline, unless their filters are not available to read them here
        readable = all(
            h5py.h5z.filter_avail(dcpl.get_filter(i)[0]) for i in range(dcpl.get_nfilters())
        )
        # a chunked dataset with more chunks than the threshold is a link, however small
        # (as lindi does): the link rule comes before the inline rule
        linked = layout == _LAYOUT_CHUNKED and rules.needs_external_link(
            shape, tuple(int(c) for c in ds.chunks), opts.external_array_link_threshold
        )
        if (
            shape == ()
            or layout == _LAYOUT_COMPACT
            or (
                readable
                and not linked
                and rules.is_inline_numeric(shape, inline_max_elements=opts.inline_max_elements)
            )
        ):
            self._inline_array(path, shape, dtype, attrs, lambda: ds[()], fill_value=fill)
            return
        pipeline = [
            H5Filter(int(code), tuple(int(v) for v in values), _text(name) or "")
            for code, _flags, values, name in (
                dcpl.get_filter(i) for i in range(dcpl.get_nfilters())
            )
        ]
        codecs = filters_to_codecs(pipeline, itemsize=dtype.itemsize, dataset=label)
        if layout == _LAYOUT_CHUNKED:
            chunks = tuple(int(c) for c in ds.chunks)
            zchunks = rules.zarr_chunks(shape, chunks)
            if linked:
                attrs[ann.EXTERNAL_ARRAY_LINK] = ann.external_array_link(self.url, path)
            self._put_array_meta(
                path,
                rules.zarray(shape, zchunks, dtype.str, fill_value=fill, filters=codecs),
                attrs,
            )
            if linked or math.prod(shape) == 0:
                return
            infos: list[Any] = []
            ds.id.chunk_iter(infos.append)
            for info in infos:
                coords = rules.chunk_coords(info.chunk_offset, chunks)
                key = rules.chunk_key(path, coords)
                if info.filter_mask:
                    self.add_inline(math.prod(chunks) * dtype.itemsize, f"dataset {label}")
                    self.refs[key] = self._reencoded_chunk(ds, info.chunk_offset, chunks, codecs)
                else:
                    self.refs[key] = [self.url, int(info.byte_offset), int(info.size)]
            return
        # contiguous
        offset = ds.id.get_offset()
        nbytes = int(ds.id.get_storage_size())
        zchunks, pieces = rules.split_contiguous(
            shape, dtype.itemsize, int(offset or 0), nbytes, opts.contiguous_max_chunk_bytes
        )
        self._put_array_meta(
            path, rules.zarray(shape, zchunks, dtype.str, fill_value=fill, filters=codecs), attrs
        )
        if offset is None or math.prod(shape) == 0:
            return  # never written: reads as the fill value
        for piece in pieces:
            self.refs[rules.chunk_key(path, piece.coords)] = [self.url, piece.offset, piece.size]

    def _reencoded_chunk(
        self,
        ds: h5py.Dataset,
        offset: tuple[int, ...],
        chunks: tuple[int, ...],
        codecs: list[dict[str, Any]],
    ) -> str:
        """A chunk stored with some filters skipped (filter mask): decode and re-encode it inline."""
        from zarrchive.lindi.codecs import get_codec

        sel = tuple(
            slice(o, min(o + c, s)) for o, c, s in zip(offset, chunks, ds.shape, strict=True)
        )
        full = np.full(chunks, ds.fillvalue, dtype=ds.dtype)
        part = ds[sel]
        full[tuple(slice(0, n) for n in part.shape)] = part
        data: Any = full.tobytes()
        for config in codecs:
            data = get_codec(config).encode(data)
        return rfs_mod.encode_inline(bytes(data))

    def _json_dataset(
        self,
        path: str,
        ds: h5py.Dataset,
        shape: tuple[int, ...],
        dtype: np.dtype[Any],
        attrs: dict[str, Any],
        label: str,
    ) -> None:
        ref_kind = h5py.check_dtype(ref=dtype)
        vlen = h5py.check_dtype(vlen=dtype)
        if ref_kind is h5py.RegionReference:
            raise UnsupportedReference(
                f"dataset {label} holds region references: LINDI supports object references only"
            )
        data = ds[()]
        flat = np.asarray(data, dtype=dtype).reshape(-1)

        def is_ref(field: np.dtype[Any]) -> bool:
            kind = h5py.check_dtype(ref=field)
            if kind is h5py.RegionReference:
                raise UnsupportedReference(
                    f"compound dataset {label} holds region references: LINDI supports object references only"
                )
            return kind is h5py.Reference

        items: list[Any]
        if dtype.names is not None:
            attrs[ann.COMPOUND_DTYPE] = ann.compound_dtype_json(dtype, is_ref, label=label)
            names = dtype.names
            items = [
                [
                    ann.encode_compound_value(
                        rec[name], dtype[name], label=label, encode_ref=self.encode_ref
                    )
                    for name in names
                ]
                for rec in flat
            ]
        elif ref_kind is h5py.Reference:
            items = [self.encode_ref(v) for v in flat]
        elif vlen in (str, bytes):
            items = []
            for v in flat:
                if isinstance(v, bytes):
                    try:
                        v = v.decode("utf-8")
                    except UnicodeDecodeError as exc:
                        raise UnsupportedDatatype(
                            f"dataset {label} holds a string that is not UTF-8; LINDI stores text as UTF-8"
                        ) from exc
                items.append(v)
        else:
            raise UnsupportedDatatype(
                f"dataset {label} has the type {dtype} (opaque, enum of strings, variable-length"
                " sequences or arrays are not supported by LINDI)"
            )
        stored = self._put_one_chunk_meta(
            path, shape, attrs, "|O", filters=[dict(rules.JSON_CODEC)]
        )
        if items:
            chunk = rules.object_chunk_bytes(rules.nest(items, stored), stored)
            self.add_inline(len(chunk), f"dataset {label}")
            self.refs[rules.chunk_key(path, (0,) * len(stored))] = rfs_mod.encode_inline(chunk)
