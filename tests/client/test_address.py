"""``DANDISET@VERSION/PATH`` addresses (pure)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from zarrchive.client.address import VersionedAddress, is_versioned_address, parse_address
from zarrchive.errors import InvalidInput


def test_parse() -> None:
    assert parse_address("000001@0.261124.1530/data/brain.zarr") == VersionedAddress(
        "000001", "0.261124.1530", "data/brain.zarr"
    )
    assert parse_address(" 000001@draft/x.zarr/ ").is_draft
    assert str(parse_address("000001@0.261124.1530/a")) == "000001@0.261124.1530/a"


@pytest.mark.parametrize(
    "ref",
    [
        "000001/x.zarr",
        "000001@0.261124.1530",
        "000001@0.261124.1530/",
        "1@draft/x",
        "000001@latest/x",
        "000001@0.261124/x",
        "000001@draft/a/../b",
        "000001@draft/a//b",
        "@draft/x",
    ],
)
def test_refused(ref: str) -> None:
    with pytest.raises(InvalidInput):
        parse_address(ref)


def test_recognised() -> None:
    assert is_versioned_address("000001@0.261124.1530/x")
    assert not is_versioned_address("000001/x@y")
    assert not is_versioned_address("https://user@host/api/zarr/x/")
    assert not is_versioned_address("3e45ec1a-f722-49fb-8f6c-21e2b8e65a50")


@given(
    st.from_regex(r"[0-9]{6}", fullmatch=True),
    st.from_regex(r"0\.[0-9]{6}\.[0-9]{4}", fullmatch=True),
    st.lists(st.from_regex(r"[A-Za-z0-9_.-]{1,8}", fullmatch=True), min_size=1, max_size=4),
)
def test_round_trip(dandiset: str, version: str, parts: list[str]) -> None:
    path = "/".join(parts)
    ref = f"{dandiset}@{version}/{path}"
    if any(p in (".", "..") for p in parts):
        with pytest.raises(InvalidInput):
            parse_address(ref)
        return
    address = parse_address(ref)
    assert (address.dandiset, address.version, address.path) == (dandiset, version, path)
    assert str(address) == ref and is_versioned_address(ref)
