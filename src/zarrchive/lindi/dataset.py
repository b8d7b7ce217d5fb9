"""Datasets of a LINDI file: h5py's reading API, numpy-style slicing, chunks decoded in parallel."""

from __future__ import annotations

import itertools
import os
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol

import h5py
import numpy as np

import zarrchive.lindi.annotations as ann
from zarrchive.errors import InvalidInput
from zarrchive.lindi.base import FileView, Node, Reference, read_only
from zarrchive.lindi.codecs import CodecChain, decode_chunk, summarize
from zarrchive.lindi.selection import Selection, piece_selections
from zarrchive.lindi.sources import child_key

_REF_DTYPE: np.dtype[Any] = h5py.ref_dtype
_STR_DTYPE: np.dtype[Any] = h5py.string_dtype("utf-8")


def _decode_fill(value: Any, dtype: np.dtype[Any]) -> Any:
    if dtype.kind == "O" or dtype.names is not None:
        return None
    if value is None:
        return np.zeros((), dtype=dtype)[()]
    if dtype.kind == "S" and isinstance(value, str):
        import base64

        return np.array(base64.b64decode(value), dtype=dtype)[()]
    if dtype.kind == "c" and isinstance(value, list):
        re_, im = (float(ann.decode_special_float(v)) for v in value)  # type: ignore[arg-type]
        return np.array(complex(re_, im), dtype=dtype)[()]
    return np.array(ann.decode_special_float(value), dtype=dtype)[()]


class _LowLevelDataset:
    """The few low-level calls h5py's own ``Dataset`` methods make on ``self.id``.

    Wrappers deriving from ``h5py.Dataset`` that delegate attribute access to
    the dataset they wrap (hdmf's ``StrDataset``) run h5py's methods (``shape``,
    ``dtype``, ``__array__``, ``read_direct``) against this object.
    """

    def __init__(self, ds: Dataset) -> None:
        self._ds = ds
        self.valid = True

    @property
    def shape(self) -> tuple[int, ...]:
        return self._ds.shape

    @property
    def rank(self) -> int:
        return self._ds.ndim

    @property
    def dtype(self) -> np.dtype[Any]:
        return self._ds.dtype

    def get_space(self) -> Any:
        return (
            h5py.h5s.create_simple(self._ds.shape)
            if self._ds.shape
            else h5py.h5s.create(h5py.h5s.SCALAR)
        )

    @staticmethod
    def _box(space: Any, shape: tuple[int, ...]) -> tuple[slice, ...]:
        if space is None or space.get_select_type() == h5py.h5s.SEL_ALL or not shape:
            return tuple(slice(0, n) for n in shape)
        start, end = space.get_select_bounds()
        box = tuple(slice(a, b + 1) for a, b in zip(start, end, strict=True))
        if space.get_select_npoints() != int(np.prod([b.stop - b.start for b in box])):
            raise InvalidInput("only rectangular selections are supported on LINDI datasets")
        return box

    def read(
        self, mspace: Any, fspace: Any, arr: np.ndarray, mtype: Any = None, dxpl: Any = None
    ) -> None:
        data = self._ds[self._box(fspace, self._ds.shape)] if self._ds.shape else self._ds[()]
        target = self._box(mspace, arr.shape)
        arr[target] = np.asarray(data).reshape(arr[target].shape)


class DatasetFile(FileView, Protocol):
    """What a dataset reads through its file: its ``.zarray``, and the HDF5 dataset an
    ``_EXTERNAL_ARRAY_LINK`` names."""

    def zarray(self, path: str) -> dict[str, Any]: ...

    def external_dataset(self, url: str, name: str) -> Any: ...


class Dataset(Node, h5py.Dataset):  # type: ignore[misc]
    """A dataset of a LINDI file: h5py's reading API with numpy-style slicing."""

    _readonly = True
    _dxpl = None
    _file: DatasetFile

    def __init__(self, file: DatasetFile, path: str) -> None:
        self._file = file
        self._path = path
        self._id = _LowLevelDataset(self)
        self._cache_props: dict[str, Any] = {}
        self._meta = file.zarray(path)
        raw = file.raw_attrs(path)
        self._scalar = bool(raw.get(ann.SCALAR, False))
        self._zshape = tuple(int(s) for s in self._meta["shape"])
        self._zchunks = tuple(int(c) for c in self._meta["chunks"])
        zdtype = self._meta["dtype"]
        self._zdtype: np.dtype[Any] = np.dtype(
            [tuple(f) for f in zdtype] if isinstance(zdtype, list) else zdtype
        )
        self._compound: np.dtype[Any] | None = None
        if ann.COMPOUND_DTYPE in raw:
            self._compound = ann.parse_compound_dtype(
                raw[ann.COMPOUND_DTYPE], _REF_DTYPE, _STR_DTYPE
            )
        self._external: tuple[str, str] | None = None
        if ann.EXTERNAL_ARRAY_LINK in raw:
            self._external = ann.parse_external_array_link(raw[ann.EXTERNAL_ARRAY_LINK])
        self._chain: CodecChain | None = None
        self._object_kind: str | None = None

    # -- properties ---------------------------------------------------------------------
    @property
    def shape(self) -> tuple[int, ...]:
        return () if self._scalar else self._zshape

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return int(np.prod(self.shape))

    @property
    def dtype(self) -> np.dtype[Any]:
        if self._compound is not None:
            return self._compound
        if self._zdtype.kind in "OU":  # numpy unicode: written by lindi for strings
            kind = self._kind()
            return _REF_DTYPE if kind == "ref" else _STR_DTYPE
        return self._zdtype

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    @property
    def chunks(self) -> tuple[int, ...] | None:
        return None if self._scalar else self._zchunks

    @property
    def maxshape(self) -> tuple[int, ...]:
        return self.shape

    @property
    def _codec_info(self) -> dict[str, Any]:
        return summarize(self._meta.get("filters") or [], self._meta.get("compressor"))

    @property
    def compression(self) -> str | None:
        return self._codec_info["compression"]  # type: ignore[no-any-return]

    @property
    def compression_opts(self) -> Any:
        return self._codec_info["compression_opts"]

    @property
    def shuffle(self) -> bool:
        return bool(self._codec_info["shuffle"])

    @property
    def fletcher32(self) -> bool:
        return bool(self._codec_info["fletcher32"])

    @property
    def scaleoffset(self) -> None:
        return None

    @property
    def fillvalue(self) -> Any:
        return _decode_fill(self._meta.get("fill_value"), self.dtype)

    @property
    def is_virtual(self) -> bool:
        return False

    @property
    def external(self) -> None:
        return None

    @property
    def is_scale(self) -> bool:
        return False

    @property
    def _is_empty(self) -> bool:
        return False

    @property
    def external_array_link(self) -> tuple[str, str] | None:
        """``(url, name)`` if the data live in an HDF5 file (``_EXTERNAL_ARRAY_LINK``)."""
        return self._external

    def __len__(self) -> int:
        if self._scalar:
            raise TypeError("Attempt to take len() of scalar dataset")
        return self._zshape[0]

    def len(self) -> int:
        return self.__len__()

    def __iter__(self) -> Iterator[Any]:
        if self._scalar:
            raise TypeError("Can't iterate over a scalar dataset")
        for i in range(self._zshape[0]):
            yield self[i]

    def __repr__(self) -> str:
        if not self._file:
            return "<Closed zarrchive.lindi.Dataset>"
        return (
            f'<zarrchive.lindi.Dataset "{self.name}": shape {self.shape}, type "{self.dtype.str}">'
        )

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        arr = np.asarray(self[...])
        return arr.astype(dtype) if dtype is not None else arr

    def asstr(self, encoding: str = "utf-8", errors: str = "strict") -> _View:
        def convert(value: Any) -> Any:
            if isinstance(value, bytes):
                return value.decode(encoding, errors)
            if isinstance(value, np.ndarray):
                out = np.empty(value.shape, dtype=object)
                flat = out.reshape(-1)
                for i, v in enumerate(value.reshape(-1)):
                    flat[i] = v.decode(encoding, errors) if isinstance(v, bytes) else v
                return out
            return value

        return _View(self, convert)

    def astype(self, dtype: Any) -> _View:
        return _View(self, lambda value: np.asarray(value).astype(dtype))

    def fields(self, names: str | Sequence[str]) -> _View:
        names_t = (names,) if isinstance(names, str) else tuple(names)
        return _View(self, lambda value: value, fields=names_t)

    def iter_chunks(self, sel: Any = None) -> Iterator[tuple[slice, ...]]:
        grid = [range(0, n, c) for n, c in zip(self._zshape, self._zchunks, strict=True)]
        for starts in itertools.product(*grid):
            yield tuple(
                slice(s, min(s + c, n))
                for s, c, n in zip(starts, self._zchunks, self._zshape, strict=True)
            )

    def read_direct(self, dest: np.ndarray, source_sel: Any = None, dest_sel: Any = None) -> None:
        data = self[source_sel if source_sel is not None else ...]
        dest[dest_sel if dest_sel is not None else ...] = data

    __setitem__ = read_only
    resize = read_only
    write_direct = read_only

    # -- reading ---------------------------------------------------------------------------
    def _codec_chain(self) -> CodecChain:
        if self._chain is None:
            self._chain = CodecChain.from_zarray(self._meta)
        return self._chain

    def _chunk_key(self, coords: Sequence[int]) -> str:
        sep = self._meta.get("dimension_separator") or "."
        name = sep.join(str(c) for c in coords) if coords else "0"
        return child_key(self._path, name)

    def _kind(self) -> str:
        """For object arrays without ``_COMPOUND_DTYPE``: ``"str"`` or ``"ref"`` (first element)."""
        if self._object_kind is None:
            kind = "str"
            if int(np.prod(self._zshape)):
                key = self._chunk_key((0,) * len(self._zshape))
                data = self._file.source.get_many([key])[key]
                if data is not None:
                    chunk = decode_chunk(
                        data,
                        self._codec_chain(),
                        dtype=self._zdtype,
                        chunk_shape=self._zchunks,
                        label=key,
                    )
                    first = chunk.reshape(-1)[0] if chunk.size else None
                    if ann.parse_reference(first) is not None:
                        kind = "ref"
            self._object_kind = kind
        return self._object_kind

    def _convert_objects(self, chunk: np.ndarray) -> np.ndarray:
        """JSON values of a chunk as h5py returns them (bytes, references, records)."""
        flat = chunk.reshape(-1)
        if self._compound is not None:
            dtype = self._compound
            assert dtype.names is not None
            out = np.zeros(flat.shape, dtype=dtype)
            fields = [(name, dtype[name]) for name in dtype.names]
            for i, rec in enumerate(flat):
                if isinstance(rec, np.void | np.ndarray):
                    rec = list(rec.tolist()) if isinstance(rec, np.void) else list(rec)
                values: list[Any] = []
                for (_name, fdt), v in zip(fields, rec, strict=True):
                    if fdt == _REF_DTYPE:
                        target = ann.parse_reference(v)
                        values.append(Reference(target) if target is not None else None)
                    elif fdt.kind == "O":
                        values.append(v.encode("utf-8") if isinstance(v, str) else v)
                    elif fdt.kind == "S" and isinstance(v, str):
                        values.append(v.encode("utf-8"))
                    else:
                        values.append(ann.decode_special_float(v))
                out[i] = tuple(values)
            return out.reshape(chunk.shape)
        out = np.empty(flat.shape, dtype=object)
        for i, v in enumerate(flat):
            if isinstance(v, str):
                out[i] = v.encode("utf-8")
            elif isinstance(v, dict):
                target = ann.parse_reference(v)
                out[i] = Reference(target) if target is not None else v
            else:
                out[i] = v
        return out.reshape(chunk.shape)

    def _out_dtype(self) -> np.dtype[Any]:
        if self._compound is not None:
            return self._compound
        if self._zdtype.kind in "OU":
            return np.dtype(object)
        return self._zdtype

    def _read(self, sel: Selection) -> np.ndarray:
        dtype = self._out_dtype()
        out_shape = sel.shape
        parts = sel.per_chunk(self._zchunks) if 0 not in out_shape else []
        combos = list(itertools.product(*parts)) if parts else []
        sep = self._meta.get("dimension_separator") or "."
        prefix = f"{self._path}/" if self._path else ""
        names = [{p[0]: str(p[0]) for p in dim} for dim in parts]
        keys = [
            prefix + sep.join([n[p[0]] for n, p in zip(names, combo, strict=True)])
            for combo in combos
        ]
        if not self._zshape:
            # a 0-d array keeps its one value in chunk "0" (zarr's key for no coordinates)
            combos, keys = [()], [prefix + "0"]
        datas = self._file.source.get_many(list(dict.fromkeys(keys))) if keys else {}
        items: list[tuple[Any, Any, str]] = [
            (combo, datas[key], key)
            for combo, key in zip(combos, keys, strict=True)
            if datas.get(key) is not None
        ]
        if len(items) == len(combos) and combos:
            out = np.empty(out_shape, dtype=dtype)  # every element is written below
        else:
            fill = _decode_fill(self._meta.get("fill_value"), self._zdtype)
            if fill is None:
                out = (
                    np.full(out_shape, b"", dtype=object)
                    if dtype.kind == "O"
                    else np.zeros(out_shape, dtype=dtype)
                )
            else:
                out = np.full(out_shape, fill, dtype=dtype)
        chain = self._codec_chain()
        order = str(self._meta.get("order") or "C")
        is_object = self._zdtype.kind in "OU"
        zdtype, zchunks = self._zdtype, self._zchunks
        simple = sel.simple

        def assign(batch: Sequence[tuple[Any, bytes, str]]) -> None:
            for combo, data, key in batch:
                chunk = decode_chunk(
                    data, chain, dtype=zdtype, chunk_shape=zchunks, order=order, label=key
                )
                osel, csel = piece_selections(combo, simple)
                piece = chunk[csel]
                if is_object:
                    piece = self._convert_objects(np.asarray(piece))
                out[osel] = piece

        workers = _decode_workers()
        if is_object or len(items) < _PARALLEL_MIN_CHUNKS or workers < 2:
            assign(items)
        else:
            # chunks write disjoint parts of the output: decode them in parallel
            # (zlib and blosc release the GIL)
            batches = [items[i::workers] for i in range(workers)]
            list(_decode_pool().map(assign, batches))
        return out

    def __getitem__(self, args: Any) -> Any:
        fields: tuple[str, ...] = ()
        if isinstance(args, str):
            fields, args = (args,), ()
        elif isinstance(args, tuple) and any(isinstance(a, str) for a in args):
            fields = tuple(a for a in args if isinstance(a, str))
            args = tuple(a for a in args if not isinstance(a, str))
        if fields and self._compound is None:
            raise ValueError(f"field names {fields} given for {self.name}, which is not compound")
        value = self._get(args)
        if fields:
            value = value[fields[0]] if len(fields) == 1 else value[list(fields)]
            if isinstance(value, np.ndarray):
                value = value.copy()
        return value

    def _get(self, args: Any) -> Any:
        if self._external is not None:
            url, name = self._external
            return self._file.external_dataset(url, name)[args]
        empty = isinstance(args, tuple) and args == ()
        if self._scalar:
            if empty or args is Ellipsis:
                arr = self._read(Selection((), self._zshape)).reshape(())
                return arr[()] if empty else arr
            raise ValueError(f"Illegal slicing argument for scalar dataspace: {args!r}")
        if (
            isinstance(args, np.ndarray)
            and args.dtype == bool
            and args.ndim == len(self._zshape) > 1
        ):
            return self._read(Selection((), self._zshape))[args]
        if empty:
            args = Ellipsis
        sel = Selection(args, self._zshape)
        arr = self._read(sel)
        if any(sel.drop):
            arr = arr.reshape(sel.final_shape)
            if arr.ndim == 0:
                return arr[()]
        return arr


_PARALLEL_MIN_CHUNKS = 32
_POOL: ThreadPoolExecutor | None = None
_POOL_LOCK = threading.Lock()


def _decode_workers() -> int:
    """Threads decoding chunks: half the cores, up to 4 (none on 2-core machines, where
    the thread hand-offs cost more than they win)."""
    return min(4, (os.cpu_count() or 1) // 2)


def _decode_pool() -> ThreadPoolExecutor:
    global _POOL
    with _POOL_LOCK:
        if _POOL is None:
            _POOL = ThreadPoolExecutor(_decode_workers(), thread_name_prefix="lindi-decode")
        return _POOL


class _View:
    """``asstr()``, ``astype()`` and ``fields()`` wrappers of a dataset."""

    def __init__(
        self, ds: Dataset, convert: Callable[[Any], Any], fields: tuple[str, ...] = ()
    ) -> None:
        self._ds = ds
        self._convert = convert
        self._fields = fields

    def __getitem__(self, args: Any) -> Any:
        if self._fields:
            args = (*(args if isinstance(args, tuple) else (args,)), *self._fields)
        return self._convert(self._ds[args])

    def __len__(self) -> int:
        return len(self._ds)

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        arr = np.asarray(self[()])
        return arr.astype(dtype) if dtype is not None else arr
