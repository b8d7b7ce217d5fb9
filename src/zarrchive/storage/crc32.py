"""S3's CRC32 checksums: their base64 form, and the md5 and CRC32s of a copy read once.

A big Zarr object the archive writes by a multipart copy carries S3's *full-object* CRC32
(``ChecksumAlgorithm=CRC32``, ``ChecksumType=FULL_OBJECT``): each ``UploadPartCopy``
answers the CRC32 S3 computed of the part, and ``CompleteMultipartUpload`` is given every
part's and the whole object's, which S3 checks against its own (a wrong one: ``BadDigest``,
nothing written).  A ``HEAD`` with ``x-amz-checksum-mode: ENABLED`` then answers it, and a
client checks a download with ``zlib.crc32`` (several GB/s) instead of md5.

The archive reads every byte of such an object while copying it (the md5 it verifies):
:class:`CopyDigest` computes, in that one pass over the bytes in memory, the md5, the CRC32
of each part and the whole object's CRC32 (``zlib.crc32`` runs at several GB/s: the two
CRC32s cost about a tenth of the md5).
"""

from __future__ import annotations

import base64
import hashlib
import zlib


def crc32_base64(crc: int) -> str:
    """S3's form of a CRC32: base64 of its four big-endian bytes (``x-amz-checksum-crc32``)."""
    return base64.b64encode((crc & 0xFFFFFFFF).to_bytes(4, "big")).decode("ascii")


def crc32_value(encoded: str) -> int:
    """The CRC32 of S3's base64 form (:func:`crc32_base64`'s inverse)."""
    raw = base64.b64decode(encoded, validate=True)
    if len(raw) != 4:
        raise ValueError(f"not a base64 CRC32: {encoded!r}")
    return int.from_bytes(raw, "big")


class CopyDigest:
    """The md5, the CRC32 of each part of *part_size* bytes and the whole object's CRC32 of
    content fed in order (chunks of any size) to :meth:`update`."""

    def __init__(self, part_size: int) -> None:
        if part_size < 1:
            raise ValueError(f"a part size is positive, not {part_size}")
        self.part_size = part_size
        self._md5 = hashlib.md5()
        self._parts: list[tuple[int, int]] = []  # (crc, length) of each part read whole
        self._crc = 0  # of the part being read
        self._length = 0  # of the part being read
        self._whole = 0  # the CRC32 of everything fed

    def update(self, chunk: bytes | memoryview) -> None:
        self._md5.update(chunk)
        self._whole = zlib.crc32(chunk, self._whole)
        view = memoryview(chunk)
        while len(view):
            room = self.part_size - self._length
            piece, view = view[:room], view[room:]
            self._crc = zlib.crc32(piece, self._crc)
            self._length += len(piece)
            if self._length == self.part_size:
                self._parts.append((self._crc, self._length))
                self._crc = self._length = 0

    def _all_parts(self) -> list[tuple[int, int]]:
        if self._length or not self._parts:  # (an empty object: one empty part)
            return [*self._parts, (self._crc, self._length)]
        return list(self._parts)

    @property
    def md5(self) -> str:
        """The md5 (hex) of everything fed so far."""
        return self._md5.hexdigest()

    @property
    def part_crc32s(self) -> list[str]:
        """The CRC32 (S3's base64 form) of each part, part 1 first."""
        return [crc32_base64(crc) for crc, _length in self._all_parts()]

    @property
    def crc32(self) -> str:
        """The CRC32 (S3's base64 form) of everything fed so far: the full-object checksum."""
        return crc32_base64(self._whole)


__all__ = ["CopyDigest", "crc32_base64", "crc32_value"]
