"""zarrchive.paths: the validation of Zarr entry paths."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from zarrchive.errors import InvalidInput, InvalidPath
from zarrchive.paths import (
    MAX_PATH_BYTES,
    MAX_SEGMENT_BYTES,
    find_file_directory_clashes,
    normalize_path,
    parent_directories,
    split_path,
    validate_directory_path,
    validate_path,
)
from zarrchive.storage.keys import MAX_KEY_BYTES, longest_derived_key_bytes

#: Exactly MAX_PATH_BYTES (941) bytes: 3 x 255 + 170 + 3 slashes + "/bb".
LONGEST = "/".join(["a" * 255] * 3 + ["a" * 170]) + "/bb"


@pytest.mark.parametrize(
    "path",
    [
        "a",
        "a/b/c",
        ".zarray",
        "a/.zattrs",
        "0/0.0.1",
        "c/0/0/0",
        "...",
        "a/.../b",
        ".a/..b/b..",
        "é/\U0001f600/\uffff/\U00010000",
        "with space/ and-dash_underscore",
        "zero\u200bwidth/\ufeffbom/\u2028line-separator",
        "x" * MAX_SEGMENT_BYTES,
        "é" * 127 + "a",  # 255 bytes in 128 characters
        LONGEST,
    ],
)
def test_valid_paths(path: str) -> None:
    assert validate_path(path) == path
    assert validate_path(path.encode("utf-8")) == path
    assert normalize_path(path) == path


def test_limits() -> None:
    assert (MAX_PATH_BYTES, MAX_SEGMENT_BYTES) == (941, 255)
    assert len(LONGEST.encode()) == 941


def test_every_key_derived_from_the_longest_path_fits_s3() -> None:
    """S3 refuses keys over 1024 bytes: the object, its staging object and every parent's
    ``.checksum`` node must fit, or a batch could never be applied."""
    assert longest_derived_key_bytes(LONGEST) == MAX_KEY_BYTES == 1024
    directory_path = LONGEST.rpartition("/")[0] + "/" + "x" * 200
    with pytest.raises(InvalidPath):
        validate_path(directory_path)


@settings(max_examples=300)
@given(st.lists(st.text("ab/", min_size=1, max_size=6), max_size=8))
def test_clashes_are_the_files_that_are_also_directories(paths: list[str]) -> None:
    clashes = find_file_directory_clashes(paths)
    directories = {p.rsplit("/", i)[0] for p in paths for i in range(1, p.count("/") + 1)}
    assert clashes == sorted(set(paths) & directories)


def test_clash_examples() -> None:
    assert find_file_directory_clashes(["a", "a/b"]) == ["a"]
    assert find_file_directory_clashes(["a/b/c", "a/b", "x"]) == ["a/b"]
    assert find_file_directory_clashes(["a/b", "ab", "a/bc"]) == []


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("", "the path is empty: give the entry's path relative to the Zarr root"),
        (b"", "the path is empty: give the entry's path relative to the Zarr root"),
        (None, "a path must be a string, got NoneType"),
        (42, "a path must be a string, got int"),
        (["a"], "a path must be a string, got list"),
        ("/a/b", "'/a/b' starts with '/': paths are relative to the Zarr root"),
        ("/", "'/' starts with '/': paths are relative to the Zarr root"),
        ("a\\b", "'a\\\\b' contains a backslash: separate directories with '/'"),
        ("\\a", "'\\\\a' contains a backslash: separate directories with '/'"),
        ("a\x00b", "'a\\x00b' contains the control character U+0000"),
        ("a\nb", "'a\\nb' contains the control character U+000A"),
        ("a\tb", "'a\\tb' contains the control character U+0009"),
        ("\x1f", "'\\x1f' contains the control character U+001F"),
        ("a\x7f", "'a\\x7f' contains the control character U+007F"),
        ("a/\x85", "'a/\\x85' contains the control character U+0085"),
        ("\x9f", "'\\x9f' contains the control character U+009F"),
        ("a//b", "'a//b' has an empty segment ('//' or a trailing '/')"),
        ("a/", "'a/' has an empty segment ('//' or a trailing '/')"),
        (".", "'.' has a '.' segment: give a plain path"),
        ("..", "'..' has a '..' segment: give a plain path"),
        ("a/./b", "'a/./b' has a '.' segment: give a plain path"),
        ("../a", "'../a' has a '..' segment: give a plain path"),
        ("a/..", "'a/..' has a '..' segment: give a plain path"),
        ("a" * 256, f"{'a' * 256!r} has a segment longer than 255 bytes"),
        ("b/" + "é" * 128, f"{'b/' + 'é' * 128!r} has a segment longer than 255 bytes"),
        (
            LONGEST + "b",
            f"{'a' * 40!r}... is 942 bytes long: at most 941 are allowed",
        ),
        (
            "/".join(["é" * 100] * 6),
            f"{'é' * 40!r}... is 1205 bytes long: at most 941 are allowed",
        ),
        (
            ".checksum",
            "'.checksum' has a segment named '.checksum': the archive keeps its tree hash "
            "in files of that name, so no entry may be called so",
        ),
        (
            "a/.checksum/b",
            "'a/.checksum/b' has a segment named '.checksum': the archive keeps its tree hash "
            "in files of that name, so no entry may be called so",
        ),
        (b"a\xffb", "b'a\\xffb' is not valid UTF-8: invalid start byte"),
        (b"a/\xc3", "b'a/\\xc3' is not valid UTF-8: unexpected end of data"),
        (b"\xed\xa0\x80", "b'\\xed\\xa0\\x80' is not valid UTF-8: invalid continuation byte"),
        ("a\ud800", "'a\\ud800' is not valid Unicode (lone surrogate)"),
        ("a/\udcff", "'a/\\udcff' is not valid Unicode (lone surrogate)"),
    ],
)
def test_invalid_paths(path: object, message: str) -> None:
    with pytest.raises(InvalidPath) as info:
        validate_path(path)
    assert info.value.message == message
    assert str(info.value) == message
    assert isinstance(info.value, InvalidInput)
    with pytest.raises(InvalidPath):
        normalize_path(path)


def test_normalize_path() -> None:
    assert normalize_path("./a/b") == "a/b"
    assert normalize_path("././a") == "a"
    assert normalize_path(b"a/b") == "a/b"
    with pytest.raises(InvalidPath, match="the path is empty"):
        normalize_path("./")
    with pytest.raises(InvalidPath, match=re.escape("'a/./b' has a '.' segment")):
        normalize_path("a/./b")
    with pytest.raises(InvalidPath, match="starts with '/'"):
        normalize_path("/a")


def test_validate_directory_path() -> None:
    assert validate_directory_path("") == ""
    assert validate_directory_path("/") == ""
    assert validate_directory_path("a/b/") == "a/b"
    assert validate_directory_path("a/b") == "a/b"
    with pytest.raises(InvalidPath, match="'a/' has an empty segment"):
        validate_directory_path("a//")
    with pytest.raises(InvalidPath, match="starts with '/'"):
        validate_directory_path("/a")
    with pytest.raises(InvalidPath, match=re.escape("has a '..' segment")):
        validate_directory_path("../")


def test_parent_directories_and_split_path() -> None:
    assert parent_directories("a/b/c") == ["a/b", "a", ""]
    assert parent_directories("c") == [""]
    assert split_path("a/b/c") == ("a/b", "c")
    assert split_path("c") == ("", "c")


# -- properties --------------------------------------------------------------------------
def _is_valid(path: str) -> bool:
    """An independent statement of the rules."""
    if not path or path.startswith("/") or "\\" in path:
        return False
    if any(0xD800 <= ord(c) <= 0xDFFF or ord(c) < 0x20 or 0x7F <= ord(c) <= 0x9F for c in path):
        return False
    if len(path.encode()) > 941:
        return False
    segments = path.split("/")
    return all(s not in ("", ".", "..", ".checksum") and len(s.encode()) <= 255 for s in segments)


SEGMENT_CHARS = st.characters(blacklist_categories=("Cs", "Cc"), blacklist_characters="/\\")
SEGMENTS = st.text(SEGMENT_CHARS, min_size=1, max_size=20).filter(
    lambda s: s not in (".", "..", ".checksum") and len(s.encode()) <= 255
)
VALID = (
    st.lists(SEGMENTS, min_size=1, max_size=10)
    .map("/".join)
    .filter(lambda p: len(p.encode()) <= 941)
)
TRICKY = st.lists(
    st.sampled_from(
        [
            "a",
            "é",
            "/",
            ".",
            "\\",
            "\x00",
            "\x1f",
            "\x7f",
            "\x9f",
            "\ud800",
            "\U0001f600",
            ".checksum",
        ]
    ),
    max_size=12,
).map("".join)


@settings(max_examples=300)
@given(VALID)
def test_valid_paths_round_trip(path: str) -> None:
    assert validate_path(path) == path
    assert validate_path(path.encode()) == path
    assert normalize_path("./" + path) == path
    assert validate_directory_path(path + "/") == path
    directory, name = split_path(path)
    assert (directory + "/" + name if directory else name) == path
    assert parent_directories(path)[0] == directory
    assert parent_directories(path)[-1] == ""


@settings(max_examples=500)
@given(st.one_of(TRICKY, st.text(max_size=8), VALID))
def test_validate_path_accepts_exactly_the_valid_paths(path: str) -> None:
    try:
        result = validate_path(path)
    except InvalidPath:
        assert not _is_valid(path)
    else:
        assert _is_valid(path)
        assert result == path
