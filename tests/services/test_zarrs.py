"""Zarr ids (``services.zarr_engine.zarrs.parse_zarr_id``): canonical ASCII UUIDs, or not found."""

from __future__ import annotations

import pytest

from zarrchive.errors import NotFound
from zarrchive.services.zarr_engine.zarrs import parse_zarr_id

ZARR_ID = "0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d"


def test_zarr_ids_are_canonical_uuids() -> None:
    assert parse_zarr_id(ZARR_ID) == ZARR_ID
    assert parse_zarr_id(ZARR_ID.upper()) == ZARR_ID
    assert parse_zarr_id(ZARR_ID.replace("-", "")) == ZARR_ID


@pytest.mark.parametrize(
    "bad",
    ["", "not-a-uuid", ZARR_ID[:-1], ZARR_ID.replace("3", "\u0663")],  # Arabic-Indic three
)
def test_anything_else_is_not_found(bad: str) -> None:
    with pytest.raises(NotFound, match="Zarr ids are UUIDs"):
        parse_zarr_id(bad)
