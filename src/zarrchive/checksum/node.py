"""A directory's checksum listing and the ``.checksum`` node codec.

A directory's digest is the md5 of the JSON object
``{"directories":[...],"files":[...]}`` whose lists hold
``{"digest":...,"name":...,"size":...}`` objects sorted by name, serialised
without spaces and with every non-ASCII character escaped; followed by the
number of files and the total size below the directory:
``{md5}-{count}--{size}``.

The ``.checksum`` node stored in S3 is ``{"checksums":<that listing>,"digest":<digest>}``.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterator
from json.encoder import encode_basestring_ascii
from typing import Any, NamedTuple

from zarrchive.checksum.digest import ZarrDigest, is_md5
from zarrchive.errors import InvalidChecksumNode, InvalidDigest

_quote: Any = encode_basestring_ascii


class ChildDigest(NamedTuple):
    """The digest and size of one child (file or directory) of a directory."""

    digest: str
    size: int


#: (name, digest, size): the sortable form of a child.
ChildRow = tuple[str, str, int]


# Names made only of these characters need no JSON escaping: printable ASCII but '"' and '\\'.
_NEEDS_ESCAPE = re.compile(r"[^ !#-\[\]-~]")


def _rows_json(rows: list[ChildRow]) -> str:
    if not rows:
        return ""
    if _NEEDS_ESCAPE.search("".join([row[0] for row in rows])) is None:
        return ",".join(
            [
                f'{{"digest":"{digest}","name":"{name}","size":{size}}}'
                for name, digest, size in rows
            ]
        )
    return ",".join(
        [
            f'{{"digest":"{digest}","name":{_quote(name)},"size":{size}}}'
            for name, digest, size in rows
        ]
    )


def listing_json(directories: list[ChildRow], files: list[ChildRow]) -> str:
    """The exact JSON that is hashed for a directory; both lists sorted by name."""
    return f'{{"directories":[{_rows_json(directories)}],"files":[{_rows_json(files)}]}}'


def directory_digest(
    directories: list[ChildRow], files: list[ChildRow], count: int, size: int
) -> tuple[str, str]:
    """Return ``(listing_json, checksum)`` of a directory from its name-sorted children.

    *count* and *size* are the totals below the directory (the caller keeps them
    while it gathers the children, so they are not recomputed here).
    """
    listing = listing_json(directories, files)
    md5 = hashlib.md5(listing.encode("ascii"), usedforsecurity=False).hexdigest()
    return listing, f"{md5}-{count}--{size}"


def node_json(listing: str, digest: str) -> str:
    """The ``.checksum`` document for a directory's listing and digest."""
    return '{"checksums":' + listing + ',"digest":"' + digest + '"}'


class ChecksumNode:
    """One directory's children with their digests: the content of a ``.checksum`` file.

    Supports the incremental operations the server's updater needs: set (add or
    replace) and remove files and subdirectories, then read the new digest.
    """

    __slots__ = ("_cache", "directories", "files")

    def __init__(
        self,
        files: dict[str, ChildDigest] | None = None,
        directories: dict[str, ChildDigest] | None = None,
    ) -> None:
        self.files: dict[str, ChildDigest] = dict(files or {})
        self.directories: dict[str, ChildDigest] = dict(directories or {})
        self._cache: tuple[str, str] | None = None

    # -- incremental operations -------------------------------------------------
    def set_file(self, name: str, md5: str, size: int) -> None:
        """Add or replace the file *name*."""
        if not is_md5(md5):
            raise InvalidDigest(f"file {name!r}: {md5!r} is not an md5 digest")
        if size < 0:
            raise InvalidChecksumNode(f"file {name!r}: size {size} is negative")
        _check_name(name)
        self.files[name] = ChildDigest(md5, size)
        self._cache = None

    def remove_file(self, name: str) -> None:
        """Remove the file *name* (``KeyError`` if absent)."""
        del self.files[name]
        self._cache = None

    def discard_file(self, name: str) -> None:
        """Remove the file *name* if present."""
        if self.files.pop(name, None) is not None:
            self._cache = None

    def discard_directory(self, name: str) -> None:
        """Remove the subdirectory *name* if present."""
        if self.directories.pop(name, None) is not None:
            self._cache = None

    def set_directory(self, name: str, checksum: str) -> None:
        """Add or replace the subdirectory *name* with its Zarr checksum."""
        _check_name(name)
        parsed = ZarrDigest.parse(checksum)
        self.directories[name] = ChildDigest(checksum, parsed.size)
        self._cache = None

    def remove_directory(self, name: str) -> None:
        """Remove the subdirectory *name* (``KeyError`` if absent)."""
        del self.directories[name]
        self._cache = None

    # -- derived values -------------------------------------------------------
    @property
    def is_empty(self) -> bool:
        return not self.files and not self.directories

    @property
    def count(self) -> int:
        """Number of files below this directory."""
        return len(self.files) + sum(
            ZarrDigest.parse(d.digest).count for d in self.directories.values()
        )

    @property
    def size(self) -> int:
        """Total size of the files below this directory."""
        return sum(f.size for f in self.files.values()) + sum(
            d.size for d in self.directories.values()
        )

    def _computed(self) -> tuple[str, str]:
        if self._cache is None:
            dirs = sorted((n, c.digest, c.size) for n, c in self.directories.items())
            files = sorted((n, c.digest, c.size) for n, c in self.files.items())
            self._cache = directory_digest(dirs, files, self.count, self.size)
        return self._cache

    @property
    def digest(self) -> str:
        """The directory's Dandi Zarr checksum."""
        return self._computed()[1]

    def iter_children(self) -> Iterator[tuple[str, bool, ChildDigest]]:
        """Children in listing order: directories first, then files, each by name."""
        for name in sorted(self.directories):
            yield name, True, self.directories[name]
        for name in sorted(self.files):
            yield name, False, self.files[name]

    # -- codec ------------------------------------------------------------------
    def to_json(self) -> bytes:
        """The exact bytes of the ``.checksum`` file."""
        listing, digest = self._computed()
        return node_json(listing, digest).encode("ascii")

    @classmethod
    def from_json(cls, data: bytes | str) -> ChecksumNode:
        """Parse a ``.checksum`` document, checking its structure and its digest.

        A document in canonical form (what :meth:`to_json` writes) is checked by
        hashing its listing bytes as they are, without re-serialising them; any
        other form is re-serialised and must hash to the digest it states.
        """
        raw = data.encode("utf-8") if isinstance(data, str) else data
        try:
            doc = json.loads(raw)
        except (ValueError, UnicodeDecodeError) as exc:
            raise InvalidChecksumNode(f".checksum node is not valid JSON: {exc}") from exc
        except RecursionError as exc:
            raise InvalidChecksumNode(
                ".checksum node is not valid JSON: nested too deeply"
            ) from exc
        if not isinstance(doc, dict) or set(doc) != {"checksums", "digest"}:
            raise InvalidChecksumNode(
                '.checksum node must be an object with exactly the keys "checksums" and "digest"'
            )
        checksums = doc["checksums"]
        if not isinstance(checksums, dict) or set(checksums) != {"directories", "files"}:
            raise InvalidChecksumNode(
                '"checksums" must be an object with exactly the keys "directories" and "files"'
            )
        node = cls()
        try:
            canonical = node._fill(checksums)
        except InvalidDigest as exc:
            # A corrupt node is a corrupt node, whichever field is wrong.
            raise InvalidChecksumNode(f".checksum node: {exc.message}") from exc
        stated = doc["digest"]
        listing = _canonical_listing(raw, stated) if canonical else None
        if listing is not None:
            expected = f"{stated.partition('-')[0]}-{node.count}--{node.size}"
            if stated == expected:
                node._cache = (listing, stated)
                return node
        if stated != node.digest:
            raise InvalidChecksumNode(
                f".checksum node says digest {stated!r} but its listing hashes to {node.digest!r}"
            )
        return node

    def _fill(self, checksums: dict[str, Any]) -> bool:
        """Add the rows of a decoded ``checksums`` object, checking each.

        Returns whether both lists were sorted by name with keys in canonical order.
        """
        canonical = True
        for kind, singular, target in (
            ("files", "file", self.files),
            ("directories", "directory", self.directories),
        ):
            rows = checksums[kind]
            if not isinstance(rows, list):
                raise InvalidChecksumNode(f'"checksums.{kind}" must be a list')
            previous = None
            is_file = kind == "files"
            for row in rows:
                name, digest, size = _parse_row(row, kind)
                if name in target:
                    raise InvalidChecksumNode(f"duplicate {singular} {name!r} in .checksum node")
                if not name or "/" in name:
                    raise InvalidChecksumNode(
                        f"{name!r} is not a valid entry name (non-empty, no '/')"
                    )
                if size < 0:
                    raise InvalidChecksumNode(f"{singular} {name!r}: size {size} is negative")
                if is_file:
                    if not is_md5(digest):
                        raise InvalidDigest(f"file {name!r}: {digest!r} is not an md5 digest")
                elif ZarrDigest.parse(digest).size != size:
                    raise InvalidChecksumNode(
                        f"directory {name!r}: size {size} disagrees with its digest {digest}"
                    )
                if previous is not None and not previous < name:
                    canonical = False
                previous = name
                target[name] = ChildDigest(digest, size)
        self._cache = None
        return canonical

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ChecksumNode):
            return NotImplemented
        return self.files == other.files and self.directories == other.directories

    def __repr__(self) -> str:
        return f"ChecksumNode(digest={self.digest!r}, files={len(self.files)}, dirs={len(self.directories)})"


def _check_name(name: str) -> None:
    if not isinstance(name, str) or not name or "/" in name:
        raise InvalidChecksumNode(f"{name!r} is not a valid entry name (non-empty, no '/')")


_ROW_KEYS = ("digest", "name", "size")


def _canonical_listing(raw: bytes, stated: object) -> str | None:
    """The listing part of a canonical node document, if its md5 is the stated digest's."""
    head, tail = b'{"checksums":', b',"digest":"'
    if not isinstance(stated, str) or not raw.startswith(head):
        return None
    if not raw.endswith(tail + stated.encode("ascii", "replace") + b'"}'):
        return None
    listing = raw[len(head) : len(raw) - len(tail) - len(stated) - 2]
    md5 = hashlib.md5(listing, usedforsecurity=False).hexdigest()
    if not stated.startswith(md5 + "-"):
        return None
    try:
        return listing.decode("ascii")
    except UnicodeDecodeError:
        return None


def _parse_row(row: object, kind: str) -> ChildRow:
    if not isinstance(row, dict) or tuple(row) != _ROW_KEYS:
        raise InvalidChecksumNode(
            f'each entry of "checksums.{kind}" must be an object with the keys '
            '"digest", "name", "size" in that order'
        )
    name, digest, size = row["name"], row["digest"], row["size"]
    if not isinstance(name, str) or not isinstance(digest, str):
        raise InvalidChecksumNode(f"entry {row!r}: name and digest must be strings")
    if not isinstance(size, int) or isinstance(size, bool):
        raise InvalidChecksumNode(f"entry {name!r}: size must be an integer")
    return name, digest, size
