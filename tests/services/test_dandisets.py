"""Dandiset identifiers (``services.dandi.dandisets.parse_identifier``): six ASCII digits."""

from __future__ import annotations

import pytest

from zarrchive.errors import NotFound
from zarrchive.services.dandi.dandisets import parse_identifier


def test_six_digits_name_a_dandiset() -> None:
    assert parse_identifier("000001") == 1
    assert parse_identifier("123456") == 123456


@pytest.mark.parametrize("bad", ["", "1", "00001", "0000001", "00000a", "00000\u0661", " 000001"])
def test_anything_else_is_not_found(bad: str) -> None:
    with pytest.raises(NotFound, match="six digits"):
        parse_identifier(bad)
