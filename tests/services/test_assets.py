"""Asset ids (``services.dandi.assets.parse_asset_id``): canonical ASCII UUIDs, or not found."""

from __future__ import annotations

import pytest

from zarrchive.errors import NotFound
from zarrchive.services.dandi.assets import parse_asset_id

ASSET_ID = "0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d"


def test_asset_ids_are_canonical_uuids() -> None:
    assert parse_asset_id(ASSET_ID) == ASSET_ID
    assert parse_asset_id(ASSET_ID.upper()) == ASSET_ID


@pytest.mark.parametrize(
    "bad",
    ["", "x", ASSET_ID[:-1], ASSET_ID.replace("3", "\u0663")],  # Arabic-Indic three
)
def test_anything_else_is_not_found(bad: str) -> None:
    """A Unicode digit would otherwise name another asset (``uuid.UUID`` takes it)."""
    with pytest.raises(NotFound, match="asset ids are UUIDs"):
        parse_asset_id(bad)
