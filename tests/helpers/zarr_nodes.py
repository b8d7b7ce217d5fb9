"""A Zarr node asserted to be what a test expects (``zarr.open`` and ``Group[...]`` answer an
array or a group; the tests know which)."""

from __future__ import annotations

from typing import Any

import zarr


def as_array(node: object) -> zarr.Array[Any]:
    """*node*, which must be a Zarr array."""
    assert isinstance(node, zarr.Array), f"not an array: {node!r}"
    return node


def as_group(node: object) -> zarr.Group:
    """*node*, which must be a Zarr group."""
    assert isinstance(node, zarr.Group), f"not a group: {node!r}"
    return node
