"""File digests (md5) and Dandi Zarr checksums (``{md5}-{count}--{size}``)."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

from zarrchive.errors import InvalidDigest

_MD5_RE = re.compile(r"[0-9a-f]{32}")
_ZARR_DIGEST_RE = re.compile(r"([0-9a-f]{32})-(0|[1-9][0-9]*)--(0|[1-9][0-9]*)")

#: md5 of ``{"directories":[],"files":[]}``: the checksum of an empty Zarr.
EMPTY_CHECKSUM = "481a2f77ab786a0f45aafd5db0971caa-0--0"


def is_md5(value: object) -> bool:
    """True if *value* is a lowercase hexadecimal md5 digest."""
    return isinstance(value, str) and _MD5_RE.fullmatch(value) is not None


def validate_md5(value: object) -> str:
    """Return *value* if it is a lowercase hex md5, else raise :class:`InvalidDigest`.

    ETags quoted the way S3 returns them (``"..."``) are accepted and unquoted.
    """
    if isinstance(value, str) and len(value) == 34 and value[0] == value[-1] == '"':
        value = value[1:-1]
    if not is_md5(value):
        raise InvalidDigest(
            f"{value!r} is not an md5 digest: expected 32 lowercase hexadecimal characters"
        )
    assert isinstance(value, str)
    return value


@dataclass(frozen=True, slots=True)
class ZarrDigest:
    """A parsed Dandi Zarr checksum: ``{md5}-{count}--{size}``."""

    md5: str
    count: int
    size: int

    @classmethod
    def parse(cls, checksum: object) -> ZarrDigest:
        """Parse and validate a Zarr checksum string."""
        match = _ZARR_DIGEST_RE.fullmatch(checksum) if isinstance(checksum, str) else None
        if match is None:
            raise InvalidDigest(
                f"{checksum!r} is not a Dandi Zarr checksum: expected "
                "'{32 lowercase hex md5}-{file count}--{total size}'"
            )
        md5, count, size = match.groups()
        return cls(md5, int(count), int(size))

    @classmethod
    def totals(cls, checksum: object) -> tuple[int, int]:
        """``(file count, size)`` of a checksum, ``(0, 0)`` if it is not one (for display
        of what a version's metadata recorded)."""
        try:
            digest = cls.parse(checksum)
        except InvalidDigest:
            return 0, 0
        return digest.count, digest.size

    def __str__(self) -> str:
        return f"{self.md5}-{self.count}--{self.size}"


def is_zarr_checksum(value: object) -> bool:
    """True if *value* is a well-formed Dandi Zarr checksum string."""
    return isinstance(value, str) and _ZARR_DIGEST_RE.fullmatch(value) is not None


def md5_hex(data: bytes) -> str:
    """The lowercase hex md5 of *data* (what S3 reports as the ETag of a single PUT)."""
    return hashlib.md5(data, usedforsecurity=False).hexdigest()
