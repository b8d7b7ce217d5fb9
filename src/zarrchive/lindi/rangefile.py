"""A read-only, seekable binary file over ranged reads, with a bounded block cache.

h5py opens it through its file-object driver: an HDF5 file in S3 is converted reading only
the blocks its metadata and small datasets live in, never the whole object, and memory
stays within ``block_size * max_blocks`` whatever the file's size.
"""

from __future__ import annotations

import io
from collections import OrderedDict
from collections.abc import Callable

from zarrchive.errors import InvalidInput

#: ``read_range(offset, size)``: exactly *size* bytes at *offset* (fewer only at the end).
ReadRange = Callable[[int, int], bytes]


class RangeFile(io.RawIOBase):
    """The *size* bytes that *read_range* reads, as a file (``requests`` counts its reads)."""

    def __init__(
        self,
        read_range: ReadRange,
        size: int,
        *,
        block_size: int = 256 * 1024,
        max_blocks: int = 64,
    ) -> None:
        super().__init__()
        if size < 0 or block_size < 1 or max_blocks < 1:
            raise InvalidInput("a range file needs size >= 0, block_size >= 1, max_blocks >= 1")
        self._read_range = read_range
        self._size = size
        self._block_size = block_size
        self._max_blocks = max_blocks
        self._blocks: OrderedDict[int, bytes] = OrderedDict()
        self._pos = 0
        self.requests = 0

    @property
    def size(self) -> int:
        return self._size

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self._size}.get(whence)
        if base is None:
            raise InvalidInput(f"unknown whence {whence}")
        position = base + offset
        if position < 0:
            raise OSError("negative seek position")
        self._pos = position
        return position

    def _block(self, index: int) -> bytes:
        data = self._blocks.get(index)
        if data is not None:
            self._blocks.move_to_end(index)
            return data
        start = index * self._block_size
        want = min(self._block_size, self._size - start)
        data = self._read_range(start, want) if want > 0 else b""
        self.requests += 1
        if len(data) != want:
            raise OSError(f"short read at {start}: {len(data)} of {want} bytes")
        self._blocks[index] = data
        while len(self._blocks) > self._max_blocks:
            self._blocks.popitem(last=False)
        return data

    def readinto(self, buffer: memoryview | bytearray) -> int:  # type: ignore[override]
        view = memoryview(buffer).cast("B")
        end = min(self._pos + len(view), self._size)
        if end <= self._pos:
            return 0
        # one request for a large read past the cache (chunk data), blocks for small ones
        if end - self._pos > self._block_size * 2:
            data = self._read_range(self._pos, end - self._pos)
            self.requests += 1
            if len(data) != end - self._pos:
                raise OSError(f"short read at {self._pos}")
            view[: len(data)] = data
            self._pos = end
            return len(data)
        done = 0
        while self._pos < end:
            index, within = divmod(self._pos, self._block_size)
            block = self._block(index)
            take = min(len(block) - within, end - self._pos)
            view[done : done + take] = block[within : within + take]
            done += take
            self._pos += take
        return done
