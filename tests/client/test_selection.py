"""The --include/--exclude globs (pure): every answer checked against a brute-force matcher."""

from __future__ import annotations

from fnmatch import fnmatchcase

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from zarrchive.client.selection import Selection
from zarrchive.errors import InvalidInput

NAMES = ["a", "b", "ab", "0", "1", ".zattrs", "zarr.json", ".zarray", "c.json"]
PATTERN_SEGMENTS = [*NAMES, "*", "?", "**", "a*", "*b", "[ab]", "[!a]", "*.json", ".z*"]

names = st.sampled_from(NAMES)
paths = st.lists(names, min_size=1, max_size=5).map("/".join)
patterns = st.lists(st.sampled_from(PATTERN_SEGMENTS), min_size=1, max_size=4).map("/".join)


def _matches(pattern: list[str], segments: list[str]) -> bool:
    """The glob rules by brute force: ``**`` takes any number of whole segments."""
    if not pattern:
        return not segments
    head, rest = pattern[0], pattern[1:]
    if head == "**":
        return any(_matches(rest, segments[i:]) for i in range(len(segments) + 1))
    return bool(segments) and fnmatchcase(segments[0], head) and _matches(rest, segments[1:])


def _selects_path(pattern: str, path: str) -> bool:
    """A pattern selects a file if it matches its path or one of its directories' (the
    root included)."""
    parts = pattern.rstrip("/").split("/")
    segments = path.split("/")
    return any(_matches(parts, segments[:i]) for i in range(len(segments) + 1))


def reference(includes: list[str], excludes: list[str], path: str) -> bool:
    included = not includes or any(_selects_path(p, path) for p in includes)
    return included and not any(_selects_path(p, path) for p in excludes)


@settings(max_examples=200, deadline=None)
@given(
    includes=st.lists(patterns, max_size=3),
    excludes=st.lists(patterns, max_size=2),
    path=paths,
)
def test_selects_as_the_rules_say(includes: list[str], excludes: list[str], path: str) -> None:
    selection = Selection.parse(includes, excludes)
    assert selection.selects(path) == reference(includes, excludes, path)


@settings(max_examples=200, deadline=None)
@given(
    includes=st.lists(patterns, max_size=3),
    excludes=st.lists(patterns, max_size=2),
    directory=st.lists(names, max_size=3),
    below=st.lists(st.lists(names, min_size=1, max_size=3), min_size=1, max_size=6),
)
def test_prune_and_everything_are_sound(
    includes: list[str], excludes: list[str], directory: list[str], below: list[list[str]]
) -> None:
    """A pruned directory holds no selected file; an "everything" one only selected ones:
    the walk may skip the first and not check files in the second."""
    selection = Selection.parse(includes, excludes)
    node = selection.directory("/".join(directory))
    for rest in below:
        path = "/".join([*directory, *rest])
        expected = reference(includes, excludes, path)
        if node.prune:
            assert not expected, path
        if node.everything:
            assert expected, path
        # the walk's way: down through child(), then one name
        walked = node
        for name in rest[:-1]:
            walked = walked.child(name)
        assert walked.selects(rest[-1]) == expected


def test_examples() -> None:
    metadata = Selection.parse(["**/.zattrs", "**/zarr.json"])
    assert metadata.selects(".zattrs") and metadata.selects("arr/0/zarr.json")
    assert not metadata.selects("arr/0/0") and not metadata.selects("arr/.zarray")
    chunk_dir = metadata.directory("arr/0")
    assert not chunk_dir.prune and not chunk_dir.everything  # walked, files checked by name

    subtree = Selection.parse(["arr/0/**"])
    assert subtree.directory("arr/1").prune and subtree.directory("other").prune
    assert not subtree.directory("arr").prune and subtree.directory("arr/0").everything
    assert subtree.selects("arr/0/a/b") and not subtree.selects("arr/1/a")
    assert Selection.parse(["arr/0"]).selects("arr/0/a/b")  # a directory selects its files
    assert Selection.parse(["arr/0/"]).selects("arr/0/a")

    assert not Selection.parse(["*.json"]).selects("a/b.json")  # '*' never crosses '/'
    assert Selection.parse(["*.json"]).selects("b.json")
    excluded = Selection.parse([], ["arr/1/**"])
    assert excluded.directory("arr/1").prune and excluded.selects("arr/0/x")
    assert Selection.parse(["arr/**"], ["arr/1"]).directory("arr/1/x").prune
    assert Selection().is_everything and Selection().root().everything


@pytest.mark.parametrize(
    ("pattern", "said"),
    [
        ("", "empty"),
        ("/arr/**", "no leading '/'"),
        ("arr//x", "empty segment"),
        ("../x", "'..' segment"),
        ("./x", "'.' segment"),
        ("a**b", "'**' must be a whole segment"),
        ("arr\\0", "not '\\'"),
    ],
)
def test_bad_patterns_are_refused(pattern: str, said: str) -> None:
    with pytest.raises(InvalidInput) as info:
        Selection.parse([pattern])
    assert said in info.value.message and "--include" in info.value.message
    with pytest.raises(InvalidInput, match="--exclude"):
        Selection.parse([], [pattern])
