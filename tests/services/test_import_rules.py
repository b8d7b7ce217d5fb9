"""The pure rules of server-side imports (:mod:`zarrchive.services.zarr_engine.uploads.import_rules`):
what the archive may read, for any bucket, prefix and path."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from zarrchive.services.zarr_engine.uploads.import_rules import (
    ImportRefused,
    check_source,
    normalize_prefix,
    plain_md5,
    source_key,
    within,
)

OWN = ("zarrchive", "zarrchive-embargoed")
segments = st.text(alphabet="ab.-_", min_size=1, max_size=4)
prefixes = st.lists(segments, max_size=4).map("/".join)
buckets = st.sampled_from(["zarrchive", "zarrchive-embargoed", "src", "src2", "srcx"])


@given(
    bucket=buckets,
    prefix=prefixes,
    allowed=st.lists(
        st.sampled_from(
            ["src", "src/a", "src/a.b", "zarrchive", "zarrchive-embargoed/x", "src2/ab/a"]
        ),
        max_size=3,
    ),
)
def test_only_allowed_buckets_and_prefixes_are_read(
    bucket: str, prefix: str, allowed: list[str]
) -> None:
    try:
        normalized = check_source(bucket, prefix, allowed, OWN)
    except ImportRefused as refused:
        if bucket in OWN or not allowed:
            assert refused.forbidden
        return
    assert bucket not in OWN
    segments_of = normalized.split("/") if normalized else []
    assert ".." not in segments_of and "." not in segments_of
    # some entry of that bucket holds the prefix, segment by segment
    held = []
    for entry in allowed:
        entry_bucket, _, entry_prefix = entry.partition("/")
        wanted = entry_prefix.split("/") if entry_prefix else []
        held.append(entry_bucket == bucket and segments_of[: len(wanted)] == wanted)
    assert any(held)


@given(prefix=prefixes, path=st.lists(segments, min_size=1, max_size=3).map("/".join))
def test_a_files_key_is_below_its_prefix(prefix: str, path: str) -> None:
    try:
        normalized = normalize_prefix(prefix)
    except ImportRefused:
        return
    key = source_key(normalized, path)
    assert key == path if not normalized else key.startswith(normalized + "/")


def test_prefixes_end_at_a_segment() -> None:
    assert within("data/x", "data") and within("data", "data") and within("x", "")
    assert not within("database", "data") and not within("dat", "data")


@pytest.mark.parametrize("prefix", ["a/../b", "./a", "a//b", "a\\b"])
def test_bad_prefixes_are_400(prefix: str) -> None:
    with pytest.raises(ImportRefused) as refused:
        check_source("src", prefix, ["src"], OWN)
    assert not refused.value.forbidden


def test_etags() -> None:
    assert plain_md5('"D41D8CD98F00B204E9800998ECF8427E"') == "d41d8cd98f00b204e9800998ecf8427e"
    assert plain_md5('"6ce7e4c627476b689b7984d70bb65435-2"') is None
