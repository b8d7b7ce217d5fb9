"""The tree updater's pure part: which directories a batch of paths touches."""

from __future__ import annotations

from zarrchive.services.zarr_engine.tree_updater import affected_directories


def test_every_directory_above_the_paths_and_the_root() -> None:
    assert affected_directories([]) == {""}
    assert affected_directories(["top"]) == {""}
    assert affected_directories(["a/b/c", "a/d", "e/f"]) == {"", "a", "a/b", "e"}
