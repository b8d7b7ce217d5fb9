"""Parsed ``.checksum`` nodes (``services.zarr_engine.node_cache``): pages by bisection cover a listing."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from zarrchive.checksum import ChecksumNode
from zarrchive.services.zarr_engine.node_cache import DIRECTORY, FILE, NodeView

NAMES = st.text("abc0", min_size=1, max_size=4)


@settings(max_examples=200)
@given(
    st.sets(NAMES, max_size=12),
    st.sets(NAMES, max_size=12),
    st.integers(1, 5),
)
def test_pages_cover_the_listing_in_order_exactly_once(
    directories: set[str], files: set[str], limit: int
) -> None:
    node = ChecksumNode()
    for name in directories:
        node.set_directory(name, "d41d8cd98f00b204e9800998ecf8427e-1--1")
    for name in files - directories:
        node.set_file(name, "0" * 32, 1)
    view = NodeView.of(node)
    expected = [(DIRECTORY if d else FILE, n) for n, d, _ in node.iter_children()]
    seen: list[tuple[int, str]] = []
    after = None
    while True:
        rows, more = view.page(after, limit)
        assert len(rows) <= limit
        seen.extend((k, n) for k, n, _ in rows)
        if not more:
            break
        after = (rows[-1][0], rows[-1][1])
    assert seen == expected
