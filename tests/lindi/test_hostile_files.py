"""The first wall of a conversion (issue #35): the rules that refuse an HDF5 file pointing
outside itself, the bounds of a whole file, and object references resolved through the
survey's address map (never by h5py's name search).  ``zarrchive lindi convert`` applies
the same rules to a local file."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from typer.testing import CliRunner

from tests.helpers import hostile_hdf5
from zarrchive.cli.lindi import app
from zarrchive.errors import LindiTooLarge, PointsOutsideFile
from zarrchive.lindi import ConvertOptions, hdf5_to_rfs
from zarrchive.lindi.convert import (
    KNOWN_FILTERS,
    check_file_bounds,
    check_inline_bytes,
    storage_refusal,
)
from zarrchive.lindi.refs import decode_inline


@given(
    external=st.integers(0, 3),
    virtual=st.booleans(),
    filters=st.lists(st.integers(0, 65535), max_size=4),
)
def test_a_dataset_is_refused_exactly_when_it_points_outside_its_file(
    external: int, virtual: bool, filters: list[int]
) -> None:
    why = storage_refusal("/d", external_files=external, virtual=virtual, filter_ids=filters)
    unknown = [f for f in filters if f not in KNOWN_FILTERS]
    assert (why is None) == (external == 0 and not virtual and not unknown)
    if external:
        assert why is not None and "external files" in why
    elif virtual:
        assert why is not None and "virtual dataset" in why
    elif unknown:
        assert why is not None and f"filter {min(unknown)}" in why


@given(stored=st.integers(0, 10**9), adding=st.integers(0, 10**9), limit=st.integers(1, 10**9))
def test_the_inline_bound_is_of_the_whole_file(stored: int, adding: int, limit: int) -> None:
    why = check_inline_bytes(
        ConvertOptions(max_inline_bytes=limit), stored=stored, adding=adding, label="d"
    )
    assert (why is None) == (stored + adding <= limit)
    assert check_inline_bytes(ConvertOptions(), stored=stored, adding=adding, label="d") is None


def test_file_bounds_of_attributes_and_references() -> None:
    options = ConvertOptions(max_attributes=5, max_object_references=7)
    assert check_file_bounds(options, attributes=5, object_references=7) is None
    assert "more than 5 attributes" in (check_file_bounds(options, attributes=6) or "")
    assert "7 object references" in (check_file_bounds(options, object_references=8) or "")


@pytest.mark.parametrize("kind", ["string", "numeric", "compound", "vlen"])
def test_external_storage_of_any_dataset_is_refused_before_it_is_read(
    kind: str, tmp_path: Path
) -> None:
    secret = tmp_path / "secret.json"
    secret.write_bytes(b"x" * 96)
    path = tmp_path / "f.h5"
    path.write_bytes(hostile_hdf5.external_storage(secret, kind))
    secret.unlink()  # a read would fail differently: the refusal comes before any read
    with pytest.raises(PointsOutsideFile, match="/leak keeps its data in external files"):
        hdf5_to_rfs(path)


def test_an_unknown_filter_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "f.h5"
    path.write_bytes(hostile_hdf5.unknown_filter())
    with pytest.raises(PointsOutsideFile, match="user-defined HDF5 filter 32099"):
        hdf5_to_rfs(path)


def test_the_cli_refuses_a_file_that_points_outside_it(tmp_path: Path) -> None:
    secret = tmp_path / "secret.json"
    secret.write_bytes(b"s" * 64)
    path = tmp_path / "f.h5"
    path.write_bytes(hostile_hdf5.external_storage(secret, "string"))
    out = tmp_path / "f.lindi.json"
    result = CliRunner().invoke(app, ["convert", str(path), str(out)])
    assert result.exit_code != 0
    assert "/leak keeps its data in external files" in result.output
    assert not out.exists()


def test_many_datasets_each_within_the_dataset_bound_pass_the_file_bound(tmp_path: Path) -> None:
    path = tmp_path / "f.h5"
    with h5py.File(path, "w") as f:
        for i in range(8):
            f.create_dataset(f"s{i}", data=np.full(1000, b"0123456789abcdef", dtype="S16"))
    options = ConvertOptions(max_decoded_bytes=16_000, max_inline_bytes=100_000)
    with pytest.raises(LindiTooLarge, match="more than 100000 bytes of data stored inline"):
        hdf5_to_rfs(path, options=options)
    hdf5_to_rfs(path, options=ConvertOptions(max_decoded_bytes=16_000, max_inline_bytes=128_000))


def test_too_many_attributes_fail_before_they_are_read(tmp_path: Path) -> None:
    path = tmp_path / "f.h5"
    with h5py.File(path, "w") as f:
        for i in range(20):
            f.create_group(f"g{i}").attrs["a"] = i
    with pytest.raises(LindiTooLarge, match="more than 10 attributes"):
        hdf5_to_rfs(path, options=ConvertOptions(max_attributes=10))


def test_object_references_resolve_without_searching_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """h5py's ``.name`` of a dereferenced object is ``H5Iget_name``, which searches the file:
    3,000 references to 3,000 groups took minutes of CPU.  None is asked for now."""
    path = tmp_path / "refs.h5"
    path.write_bytes(hostile_hdf5.many_references(300))
    with h5py.File(path, "a") as f:
        f["g00007"].attrs["object_id"] = "seven"
        f["g00001/hard"] = f["g00002"]  # a second path to one object: the first one walked
    calls: list[Any] = []
    real = h5py.h5i.get_name

    def counted(*args: Any) -> Any:
        calls.append(args)
        return real(*args)

    monkeypatch.setattr(h5py.h5i, "get_name", counted)
    rfs = hdf5_to_rfs(path, options=ConvertOptions(max_object_references=300))
    assert calls == []
    values = json.loads(decode_inline(rfs["refs"]["refs/0"]))[:-2]
    assert [v["_REFERENCE"]["path"] for v in values] == [f"/g{i:05d}" for i in range(300)]
    assert values[7]["_REFERENCE"]["object_id"] == "seven"
    with pytest.raises(LindiTooLarge, match="more than 299 object references"):
        hdf5_to_rfs(path, options=ConvertOptions(max_object_references=299))
