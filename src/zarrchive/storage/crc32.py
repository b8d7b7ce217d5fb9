"""S3's CRC32 checksums: their base64 form, and the md5 and CRC32s of a copy read once.

A big Zarr object the archive writes by a multipart copy carries S3's *full-object* CRC32
(``ChecksumAlgorithm=CRC32``, ``ChecksumType=FULL_OBJECT``): each ``UploadPartCopy``
answers the CRC32 S3 computed of the part, and ``CompleteMultipartUpload`` is given every
part's and the whole object's, which S3 checks against its own (a wrong one: ``BadDigest``,
nothing written).  A ``HEAD`` with ``x-amz-checksum-mode: ENABLED`` then answers it, and a
client checks a download with ``zlib.crc32`` (several GB/s) instead of md5.

The archive reads every byte of such an object while copying it (the md5 it verifies):
:class:`CopyDigest` computes, in that one pass, the md5 and the CRC32 of each part (one
``zlib.crc32`` over each byte); the whole object's CRC32 is combined from the parts'
(:func:`crc32_combine`, a few hundred operations a part), so it costs no second pass.
"""

from __future__ import annotations

import base64
import hashlib
import zlib

#: The CRC-32 polynomial (reflected), as zlib's ``crc32``.
_POLY = 0xEDB88320


def crc32_base64(crc: int) -> str:
    """S3's form of a CRC32: base64 of its four big-endian bytes (``x-amz-checksum-crc32``)."""
    return base64.b64encode((crc & 0xFFFFFFFF).to_bytes(4, "big")).decode("ascii")


def crc32_value(encoded: str) -> int:
    """The CRC32 of S3's base64 form (:func:`crc32_base64`'s inverse)."""
    raw = base64.b64decode(encoded, validate=True)
    if len(raw) != 4:
        raise ValueError(f"not a base64 CRC32: {encoded!r}")
    return int.from_bytes(raw, "big")


def _multmodp(a: int, b: int) -> int:
    """``a * b`` modulo the CRC polynomial (zlib's ``multmodp``; bit 31 is x^0)."""
    m = 1 << 31
    p = 0
    while True:
        if a & m:
            p ^= b
            if a & (m - 1) == 0:
                return p
        m >>= 1
        b = (b >> 1) ^ _POLY if b & 1 else b >> 1


def _x2n_table() -> list[int]:
    table = []
    p = 1 << 30  # x^1
    table.append(p)
    for _ in range(1, 32):
        p = _multmodp(p, p)
        table.append(p)
    return table


_X2N = _x2n_table()


def _x8nmodp(length: int) -> int:
    """``x^(8 * length)`` modulo the polynomial (zlib's ``x2nmodp(length, 3)``)."""
    p = 1 << 31  # x^0
    k = 3
    while length:
        if length & 1:
            p = _multmodp(_X2N[k & 31], p)
        length >>= 1
        k += 1
    return p


def crc32_combine(crc1: int, crc2: int, length2: int) -> int:
    """The CRC32 of ``A + B`` from ``crc32(A)``, ``crc32(B)`` and ``len(B)`` (zlib's
    ``crc32_combine``, which Python's :mod:`zlib` does not expose)."""
    return _multmodp(_x8nmodp(length2), crc1) ^ (crc2 & 0xFFFFFFFF)


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

    def update(self, chunk: bytes | memoryview) -> None:
        self._md5.update(chunk)
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
        whole = 0
        for crc, length in self._all_parts():
            whole = crc32_combine(whole, crc, length)
        return crc32_base64(whole)


__all__ = ["CopyDigest", "crc32_base64", "crc32_combine", "crc32_value"]
