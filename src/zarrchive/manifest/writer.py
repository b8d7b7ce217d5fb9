"""Streaming generation of manifest files.

The file's ``statistics`` precede its ``entries``, but are known only once the
last entry is seen.  So the writer streams the ``entries`` object (the *body*)
into a binary sink the caller gives (a :class:`tempfile.SpooledTemporaryFile`
in practice) while it counts, sums and tree-hashes, and then produces the
*header*; the file is ``header + body + footer``.  Memory is bounded by the
depth and the widest directory (one set of names per open directory, and the
tree hasher's frames), never by the number of entries.

Layout (the proof of concept's, so files diff well): one-space indentation,
entry arrays and ``fields`` on one line without spaces, ASCII with ``\\uXXXX``
escapes, no trailing newline.
"""

from __future__ import annotations

import io
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from json.encoder import encode_basestring_ascii
from typing import IO, Any

from zarrchive.checksum import TreeHasher
from zarrchive.errors import InvalidManifest, InvalidPath, UngroupedEntries
from zarrchive.manifest.model import (
    FIELDS,
    SCHEMA_VERSION,
    ManifestEntry,
    ManifestStatistics,
    format_timestamp,
)
from zarrchive.paths import validate_path

_quote: Any = encode_basestring_ascii

#: The bytes that close the document after the body.
FOOTER = b"\n}"

_FIELDS_JSON = "[" + ",".join(_quote(name) for name in FIELDS) + "]"
_FLUSH_CHARS = 1 << 16
_COPY_CHUNK = 1 << 20


class ManifestWriter:
    """Writes the ``entries`` body of a manifest into *body* as entries arrive.

    Entries must be grouped by directory (every path below a directory
    contiguous), as an S3 listing sorted by key is; each is written in the
    order given.  Call :meth:`add` for every entry, then :meth:`finish`.  After
    an exception the writer (and the body written so far) must be discarded.
    """

    def __init__(
        self,
        body: IO[bytes],
        *,
        database_checksum: str | None = None,
        include_mismatch_field: bool = True,
    ) -> None:
        self._body = body
        self._database_checksum = database_checksum
        self._include_mismatch_field = include_mismatch_field
        self._hasher = TreeHasher()
        self._dir = ""
        self._parts: list[str] = []
        # names used in each open directory (root first): True for a directory
        self._names: list[dict[str, bool]] = [{}]
        self._buf: list[str] = ["{"]
        self._buf_chars = 1
        self._written = 0
        self._last_dt: datetime | None = None
        self._last_ts = ""
        self._statistics: ManifestStatistics | None = None
        #: the newest ``lastModified`` of the entries added rendered (without ``+00:00``)
        self._newest_rendered = ""
        self.entries = 0
        self.total_size = 0
        self.depth = 0
        self.last_modified: datetime | None = None

    # -- input -------------------------------------------------------------------
    def add(self, entry: ManifestEntry) -> None:
        """Add one entry (path relative to the Zarr root)."""
        if self._statistics is not None:
            raise InvalidManifest("the manifest is finished: no entry can be added after finish()")
        path, version_id, last_modified, size, etag = entry
        validate_path(path)
        directory, _, name = path.rpartition("/")
        if directory != self._dir:
            self._enter(directory, path)
        names = self._names[-1]
        kind = names.get(name)
        if kind is not None:
            if kind:
                raise InvalidManifest(
                    f"{path!r} is both a file and a directory in the listing: a manifest "
                    "cannot represent both; remove one of them from the Zarr"
                )
            raise InvalidPath(f"{path!r} appears more than once in the listing")
        if not isinstance(etag, str):
            raise InvalidManifest(f"{path!r}: the ETag must be a string, got {etag!r}")
        if etag[:1] == '"':
            etag = etag.strip('"')
        if not isinstance(size, int) or isinstance(size, bool):
            raise InvalidManifest(f"{path!r}: the size must be an integer, got {size!r}")
        if not isinstance(version_id, str):
            raise InvalidManifest(f"{path!r}: the version ID must be a string, got {version_id!r}")
        self._hasher.add(path, size, etag)  # validates the md5 and the size
        if last_modified is not self._last_dt and last_modified != self._last_dt:
            self._last_ts = format_timestamp(last_modified)
            self._last_dt = last_modified
        if self.last_modified is None or last_modified > self.last_modified:
            self.last_modified = last_modified
        self.entries += 1
        self.total_size += size
        depth = len(self._parts)
        if depth > self.depth:
            self.depth = depth
        line = (
            ("\n" if not names else ",\n")
            + " " * (depth + 2)
            + _quote(name)
            + ": ["
            + _quote(version_id)
            + ',"'
            + self._last_ts
            + '",'
            + str(size)
            + ","
            + _quote(etag)
            + "]"
        )
        names[name] = False
        self._emit(line)

    def add_rendered(self, directory: str, run: list[tuple[str, str, int, str, str]]) -> None:
        """Add entries of one *directory* already rendered as this writer renders them, as
        read from a manifest this writer wrote (see
        :func:`~zarrchive.manifest.merge.merge_manifest`): each ``(name, line, size, etag,
        timestamp)``, the *line* without its indentation and comma (``"name": [...]``), the
        *timestamp* the ``lastModified`` without its ``+00:00``.  The tree hash, statistics
        and checks are those of :meth:`add` (the path's syntax was checked when the line was
        written), at a fraction of the cost."""
        if not run:
            return
        if self._statistics is not None:
            raise InvalidManifest("the manifest is finished: no entry can be added after finish()")
        if directory != self._dir:
            first = run[0][0]
            self._enter(directory, f"{directory}/{first}" if directory else first)
        names = self._names[-1]
        before = len(names)
        for item in run:
            names[item[0]] = False
        if len(names) != before + len(run) or any(not i[0] or i[0] in (".", "..") for i in run):
            self._refuse_run(directory, run, names)
        depth = len(self._parts)
        indent = " " * (depth + 2)
        self._emit(
            ("\n" if not before else ",\n")
            + indent
            + (",\n" + indent).join([item[1] for item in run])
        )
        self._hasher.add_files(directory, [(n, etag, size) for n, _l, size, etag, _t in run])
        self.entries += len(run)
        self.total_size += sum([item[2] for item in run])
        newest = max([item[4] for item in run])
        if newest > self._newest_rendered:
            self._newest_rendered = newest
        if depth > self.depth:
            self.depth = depth

    def _refuse_run(
        self, directory: str, run: list[tuple[str, str, int, str, str]], names: dict[str, bool]
    ) -> None:
        seen: set[str] = set()
        for name, *_rest in run:
            path = f"{directory}/{name}" if directory else name
            if not name or name in (".", ".."):
                raise InvalidPath(f"{path!r} is not a valid entry name")
            if name in seen:
                raise InvalidPath(f"{path!r} appears more than once in the listing")
            seen.add(name)
        raise InvalidManifest(
            f"an entry of {directory!r} is both a file and a directory, or appears twice in "
            "the listing: a manifest cannot represent it"
        )

    def add_all(self, entries: Iterable[ManifestEntry]) -> None:
        """Add every entry of *entries*."""
        add = self.add
        for entry in entries:
            add(entry)

    def _enter(self, directory: str, path: str) -> None:
        new_parts = directory.split("/") if directory else []
        old_parts = self._parts
        common = 0
        for old, new in zip(old_parts, new_parts, strict=False):
            if old != new:
                break
            common += 1
        while len(self._parts) > common:
            self._close_dir()
        for segment in new_parts[common:]:
            names = self._names[-1]
            kind = names.get(segment)
            if kind is not None:
                where = "/".join([*self._parts, segment])
                if kind:
                    raise UngroupedEntries(
                        f"{path!r} arrived after the listing left the directory {where!r}: "
                        "entries must be grouped by directory, as S3 lists them (sorted by key)"
                    )
                raise InvalidManifest(
                    f"{where!r} is both a file and a directory in the listing: a manifest "
                    "cannot represent both; remove one of them from the Zarr"
                )
            self._emit(
                ("\n" if not names else ",\n")
                + " " * (len(self._parts) + 2)
                + _quote(segment)
                + ": {"
            )
            names[segment] = True
            self._parts.append(segment)
            self._names.append({})
        self._dir = directory

    def _close_dir(self) -> None:
        self._names.pop()
        self._parts.pop()
        self._emit("\n" + " " * (len(self._parts) + 2) + "}")

    def _emit(self, text: str) -> None:
        self._buf.append(text)
        self._buf_chars += len(text)
        if self._buf_chars >= _FLUSH_CHARS:
            self._flush()

    def _flush(self) -> None:
        if self._buf:
            data = "".join(self._buf).encode("ascii")
            self._body.write(data)
            self._written += len(data)
            self._buf.clear()
            self._buf_chars = 0

    # -- output ------------------------------------------------------------------
    def finish(self) -> ManifestStatistics:
        """Close the body (flushed, not closed) and return the statistics."""
        if self._statistics is not None:
            return self._statistics
        while self._parts:
            self._close_dir()
        self._emit("\n }" if self._names[0] else "}")
        self._flush()
        checksum = self._hasher.finish().digest
        database = self._database_checksum
        if self._newest_rendered:
            newest = datetime.fromisoformat(self._newest_rendered + "+00:00")
            if self.last_modified is None or newest > self.last_modified:
                self.last_modified = newest
        self._statistics = ManifestStatistics(
            entries=self.entries,
            depth=self.depth,
            total_size=self.total_size,
            last_modified=self.last_modified,
            zarr_checksum=checksum,
            zarr_checksum_mismatch=database
            if database is not None and database != checksum
            else None,
            has_mismatch_field=self._include_mismatch_field,
        )
        return self._statistics

    @property
    def body_size(self) -> int:
        """Bytes written to the body so far."""
        return self._written


def render_header(statistics: ManifestStatistics) -> bytes:
    """The bytes of the document up to (and including) ``"entries": ``."""
    last = statistics.last_modified
    lines = [
        "{",
        f' "schemaVersion": {SCHEMA_VERSION},',
        f' "fields": {_FIELDS_JSON},',
        ' "statistics": {',
        f'  "entries": {statistics.entries},',
        f'  "depth": {statistics.depth},',
        f'  "totalSize": {statistics.total_size},',
        f'  "lastModified": {"null" if last is None else _quote(format_timestamp(last))},',
    ]
    checksum = f'  "zarrChecksum": {_quote(statistics.zarr_checksum)}'
    if statistics.has_mismatch_field:
        lines.append(checksum + ",")
        mismatch = statistics.zarr_checksum_mismatch
        lines.append(
            f'  "zarrChecksumMismatch": {"null" if mismatch is None else _quote(mismatch)}'
        )
    else:
        lines.append(checksum)
    lines.append(" },")
    lines.append(' "entries": ')
    return "\n".join(lines).encode("ascii")


@dataclass
class GeneratedManifest:
    """A generated manifest: ``header + body + footer``.

    The body lives in the sink given to :func:`generate_manifest`; the object
    reads it from the start each time it is streamed, so the sink must stay
    open (and is not closed here).
    """

    statistics: ManifestStatistics
    header: bytes
    body: IO[bytes]
    body_size: int
    footer: bytes = field(default=FOOTER)

    @property
    def size(self) -> int:
        """The file's length in bytes (for ``Content-Length``)."""
        return len(self.header) + self.body_size + len(self.footer)

    def iter_bytes(self, chunk_size: int = _COPY_CHUNK) -> Iterator[bytes]:
        """The file's bytes in chunks of at most about *chunk_size*."""
        yield self.header
        self.body.seek(0)
        remaining = self.body_size
        while remaining > 0:
            chunk = self.body.read(min(chunk_size, remaining))
            if not chunk:
                raise InvalidManifest(
                    f"the manifest body sink ended {remaining} bytes early: it must stay open "
                    "and unmodified until the manifest is uploaded"
                )
            remaining -= len(chunk)
            yield chunk
        yield self.footer

    def open(self) -> io.BufferedReader:
        """A readable binary file object over the file's bytes (e.g. for ``upload_fileobj``)."""
        return io.BufferedReader(_ChunkReader(self.iter_bytes()), buffer_size=_COPY_CHUNK)

    def write_to(self, out: IO[bytes]) -> int:
        """Write the whole file into *out*; return the number of bytes written."""
        total = 0
        for chunk in self.iter_bytes():
            out.write(chunk)
            total += len(chunk)
        return total

    def getvalue(self) -> bytes:
        """The whole file in memory (for tests and small Zarrs)."""
        return b"".join(self.iter_bytes())


def chunk_stream(chunks: Iterator[bytes]) -> io.BufferedReader:
    """A readable binary file object over an iterator of byte chunks (e.g. a streamed GET).

    It holds one chunk at a time (the next is taken once the last is read through, never
    copied: the memory of a streamed read is its chunk size, whatever the file's size)."""
    return io.BufferedReader(_ChunkReader(chunks), buffer_size=_COPY_CHUNK)


class _ChunkReader(io.RawIOBase):
    """A raw, read-only stream over an iterator of byte chunks."""

    def __init__(self, chunks: Iterator[bytes]) -> None:
        self._chunks = chunks
        self._pending = memoryview(b"")
        self._offset = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        while self._offset >= len(self._pending):
            self._pending.release()
            self._pending, self._offset = memoryview(b""), 0  # the last chunk let go first
            try:
                self._pending = memoryview(next(self._chunks)).cast("B")
            except StopIteration:
                return 0
        n = min(len(view), len(self._pending) - self._offset)
        view[:n] = self._pending[self._offset : self._offset + n]
        self._offset += n
        return n


def generate_manifest(
    entries: Iterable[ManifestEntry],
    body: IO[bytes],
    *,
    database_checksum: str | None = None,
    include_mismatch_field: bool = True,
) -> GeneratedManifest:
    """Stream *entries* (grouped by directory, as S3 lists them) into a manifest.

    The ``entries`` body is written into *body* (a binary, seekable sink, e.g.
    ``tempfile.SpooledTemporaryFile()``, positioned at its start); the result
    streams ``header + body + footer`` for the upload.  ``zarrChecksum`` is the
    tree hash of *entries*; when *database_checksum* is given and differs, it is
    recorded as ``zarrChecksumMismatch``.
    """
    writer = ManifestWriter(
        body, database_checksum=database_checksum, include_mismatch_field=include_mismatch_field
    )
    writer.add_all(entries)
    statistics = writer.finish()
    return GeneratedManifest(statistics, render_header(statistics), body, writer.body_size)


def write_manifest(
    entries: Iterable[ManifestEntry],
    out: IO[bytes],
    *,
    database_checksum: str | None = None,
    include_mismatch_field: bool = True,
    spool_max_size: int = 8 << 20,
) -> ManifestStatistics:
    """Generate a manifest into the binary file *out*, spooling the body meanwhile."""
    with tempfile.SpooledTemporaryFile(max_size=spool_max_size) as body:
        manifest = generate_manifest(
            entries,
            body,
            database_checksum=database_checksum,
            include_mismatch_field=include_mismatch_field,
        )
        manifest.write_to(out)
    return manifest.statistics


def manifest_bytes(
    entries: Iterable[ManifestEntry],
    *,
    database_checksum: str | None = None,
    include_mismatch_field: bool = True,
) -> bytes:
    """The whole manifest file in memory (tests, small Zarrs)."""
    out = io.BytesIO()
    write_manifest(
        entries,
        out,
        database_checksum=database_checksum,
        include_mismatch_field=include_mismatch_field,
    )
    return out.getvalue()
