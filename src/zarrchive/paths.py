"""Validation and normalisation of Zarr entry paths (pure).

An entry path is relative to the Zarr root, ``/``-separated, with no leading
``/``, no empty, ``.`` or ``..`` segment, no backslash, no NUL or other control
character, no segment named ``.checksum`` (the name of the tree hash's nodes), valid UTF-8,
at most :data:`MAX_PATH_BYTES` bytes in all and :data:`MAX_SEGMENT_BYTES` bytes per segment.
"""

from __future__ import annotations

import re

from zarrchive.errors import InvalidPath

#: S3 keys are at most 1024 bytes, and the longest key derived from a path is its upload
#: staging key ``zarr-staging/{36-char zarr id}/{32-char batch uid}/{path}``: 83 bytes more.
MAX_PATH_BYTES = 1024 - 83
#: The name of the tree hash's node files: no entry may have it (its node would collide).
CHECKSUM_NODE_NAME = ".checksum"
MAX_SEGMENT_BYTES = 255

_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def validate_path(path: object) -> str:
    """Return *path* if it is a valid entry path, else raise :class:`InvalidPath`.

    *path* may be ``bytes`` (it must then be UTF-8); the result is always ``str``.
    A trailing ``/`` is refused: entries are files, S3 has no directories.
    """
    if isinstance(path, bytes):
        try:
            path = path.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InvalidPath(f"{path!r} is not valid UTF-8: {exc.reason}") from exc
    if not isinstance(path, str):
        raise InvalidPath(f"a path must be a string, got {type(path).__name__}")
    if not path:
        raise InvalidPath("the path is empty: give the entry's path relative to the Zarr root")
    try:
        encoded = path.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidPath(f"{path!r} is not valid Unicode (lone surrogate)") from exc
    if path.startswith("/"):
        raise InvalidPath(f"{path!r} starts with '/': paths are relative to the Zarr root")
    if "\\" in path:
        raise InvalidPath(f"{path!r} contains a backslash: separate directories with '/'")
    match = _CONTROL.search(path)
    if match is not None:
        raise InvalidPath(f"{path!r} contains the control character U+{ord(match.group()):04X}")
    if len(encoded) > MAX_PATH_BYTES:
        raise InvalidPath(
            f"{path[:40]!r}... is {len(encoded)} bytes long: at most {MAX_PATH_BYTES} are allowed"
        )
    for segment in path.split("/"):
        if segment == "":
            raise InvalidPath(f"{path!r} has an empty segment ('//' or a trailing '/')")
        if segment in (".", ".."):
            raise InvalidPath(f"{path!r} has a {segment!r} segment: give a plain path")
        if segment == CHECKSUM_NODE_NAME:
            raise InvalidPath(
                f"{path!r} has a segment named {CHECKSUM_NODE_NAME!r}: the archive keeps its "
                "tree hash in files of that name, so no entry may be called so"
            )
        if len(segment.encode("utf-8")) > MAX_SEGMENT_BYTES:
            raise InvalidPath(f"{path!r} has a segment longer than {MAX_SEGMENT_BYTES} bytes")
    return path


def normalize_path(path: object) -> str:
    """Normalise a user-given path, then validate it.

    Turns OS separators into ``/`` and strips a leading ``./``; everything else
    that is wrong is refused rather than guessed at.
    """
    if isinstance(path, str):
        import os

        if os.sep != "/":  # pragma: no cover - Windows clients
            path = path.replace(os.sep, "/")
        while path.startswith("./"):
            path = path[2:]
    return validate_path(path)


def validate_directory_path(path: object) -> str:
    """Validate a directory path; ``""`` (the root) is allowed, a trailing ``/`` is dropped."""
    if isinstance(path, str) and path in ("", "/"):
        return ""
    if isinstance(path, str) and path.endswith("/"):
        path = path[:-1]
    return validate_path(path)


def parent_directories(path: str) -> list[str]:
    """The directories containing *path*, deepest first, ending with the root ``""``."""
    parts = path.split("/")[:-1]
    return ["/".join(parts[:i]) for i in range(len(parts), -1, -1)]


def split_path(path: str) -> tuple[str, str]:
    """``(directory, name)`` of an entry path (directory ``""`` for top-level entries)."""
    directory, _, name = path.rpartition("/")
    return directory, name


def find_file_directory_clashes(paths: list[str]) -> list[str]:
    """Paths of *paths* that are also a directory of another path of *paths* (``a`` beside
    ``a/b``): a Zarr can't hold both a file and a directory of one name.  Pure."""
    files = set(paths)
    clashes = set()
    for path in paths:
        parts = path.split("/")
        for i in range(1, len(parts)):
            directory = "/".join(parts[:i])
            if directory in files:
                clashes.add(directory)
    return sorted(clashes)
