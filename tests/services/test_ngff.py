"""services/views/ngff.py: OME-NGFF multiscales read from a group's attributes, exactly, within
bounds, and never an exception for whatever JSON an uploader stored; services/views/open_with.py:
the viewers' URLs."""

from __future__ import annotations

import json
import urllib.parse
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from zarrchive.services.views import open_with
from zarrchive.services.views.ngff import (
    MAX_AXES,
    MAX_LEVELS,
    Axis,
    InvalidMultiscales,
    Level,
    Multiscale,
    Transform,
    read_multiscales,
)


def image(levels: int = 3, axes: int = 3, **extra: Any) -> dict[str, Any]:
    names = ["c", "z", "y", "x", "t", "a", "b", "d", "e", "f"][:axes]
    return {
        "axes": [
            {"name": n, "type": "channel" if n == "c" else "space", "unit": "micrometer"}
            if n != "c"
            else {"name": n, "type": "channel"}
            for n in names
        ],
        "datasets": [
            {
                "path": str(i),
                "coordinateTransformations": [
                    {"type": "scale", "scale": [1.0] + [0.5 * 2**i] * (axes - 1)},
                    {"type": "translation", "translation": [0] * axes},
                ],
            }
            for i in range(levels)
        ],
        "version": "0.4",
        **extra,
    }


def test_ngff_04_in_a_v2_group() -> None:
    found = read_multiscales(2, {"multiscales": [image(name="cells")], "other": 1})
    assert found == Multiscale(
        version="0.4",
        name="cells",
        axes=(
            Axis("c", "channel", None),
            Axis("z", "space", "micrometer"),
            Axis("y", "space", "micrometer"),
        ),
        levels=tuple(
            Level(
                str(i),
                (
                    Transform("scale", (1.0, 0.5 * 2**i, 0.5 * 2**i), None),
                    Transform("translation", (0, 0, 0), None),
                ),
            )
            for i in range(3)
        ),
        more_levels=0,
        transforms=(),
        more_images=0,
    )
    assert found.levels[2].transform("scale") == Transform("scale", (1.0, 2.0, 2.0), None)
    assert found.levels[2].transform("scale").text == "1.0, 2.0, 2.0"  # type: ignore[union-attr]
    assert found.levels[0].transform("translation").text == "0, 0, 0"  # type: ignore[union-attr]


def test_ngff_05_under_ome_in_a_v3_group() -> None:
    body = image()
    del body["version"]
    found = read_multiscales(3, {"ome": {"version": "0.5", "multiscales": [body, body]}})
    assert isinstance(found, Multiscale)
    assert found.version == "0.5" and found.more_images == 1 and len(found.levels) == 3
    # a v3 group's ome without multiscales (a plate, labels...) is no image
    assert read_multiscales(3, {"ome": {"version": "0.5", "plate": {}}}) is None
    # a 0.5 draft: multiscales at the top of a v3 group's attributes
    assert isinstance(read_multiscales(3, {"multiscales": [image()]}), Multiscale)


def test_no_multiscales() -> None:
    assert read_multiscales(2, {}) is None
    assert read_multiscales(2, {"ome": {"multiscales": [image()]}}) is None  # v3's place only
    assert read_multiscales(3, {"title": "x"}) is None


def test_early_versions() -> None:
    body = image()
    body["version"] = "0.2"
    del body["axes"]
    for dataset in body["datasets"]:
        del dataset["coordinateTransformations"]
    found = read_multiscales(2, {"multiscales": [body]})
    assert isinstance(found, Multiscale)
    assert [a.name for a in found.axes] == ["t", "c", "z", "y", "x"]
    assert found.levels[0] == Level("0", ())
    body = image()
    body["version"] = "0.3"
    body["axes"] = ["z", "y", "x"]
    for dataset in body["datasets"]:
        del dataset["coordinateTransformations"]
    found = read_multiscales(2, {"multiscales": [body]})
    assert isinstance(found, Multiscale) and found.axes[0] == Axis("z", None, None)


def test_path_transforms_and_image_transforms() -> None:
    body = image(coordinateTransformations=[{"type": "scale", "scale": [1, 1, 2]}])
    body["datasets"][0]["coordinateTransformations"] = [{"type": "scale", "path": "s.bin"}]
    found = read_multiscales(2, {"multiscales": [body]})
    assert isinstance(found, Multiscale)
    assert found.levels[0].transforms == (Transform("scale", None, "s.bin"),)
    assert found.levels[0].transforms[0].text == "from s.bin"
    assert found.transforms == (Transform("scale", (1, 1, 2), None),)


def test_levels_beyond_the_bound_are_counted_not_read() -> None:
    found = read_multiscales(2, {"multiscales": [image(levels=MAX_LEVELS + 7)]})
    assert isinstance(found, Multiscale)
    assert len(found.levels) == MAX_LEVELS and found.more_levels == 7


def _broken(change: Any) -> dict[str, Any]:
    body = image()
    change(body)
    return {"multiscales": [body]}


@pytest.mark.parametrize(
    ("attributes", "reason"),
    [
        ({"multiscales": {}}, "multiscales is an object, not a list"),
        ({"multiscales": []}, "multiscales is an empty list"),
        ({"multiscales": [3]}, "multiscales[0] is a number, not an object"),
        (_broken(lambda b: b.pop("axes")), "multiscales[0] has no axes"),
        (_broken(lambda b: b.update(axes="xy")), "multiscales[0].axes is a string, not a list"),
        (_broken(lambda b: b.update(axes=[])), "multiscales[0].axes is an empty list"),
        (
            _broken(lambda b: b.update(axes=[{"name": str(i)} for i in range(MAX_AXES + 1)])),
            f"multiscales[0] declares {MAX_AXES + 1} axes; at most {MAX_AXES} are read",
        ),
        (
            _broken(lambda b: b["axes"][1].update(name=None)),
            "multiscales[0].axes[1].name is null, not a non-empty string",
        ),
        (
            _broken(lambda b: b["axes"][1].update(unit=5)),
            "multiscales[0].axes[1].unit is a number, not a string",
        ),
        (
            _broken(lambda b: b["axes"][2].update(name="z")),
            "multiscales[0].axes name an axis twice",
        ),
        (_broken(lambda b: b.update(version=4)), "multiscales[0].version is a number"),
        (_broken(lambda b: b.update(datasets=None)), "multiscales[0].datasets is null"),
        (_broken(lambda b: b.update(datasets=[])), "multiscales[0].datasets is an empty list"),
        (
            _broken(lambda b: b["datasets"][1].update(path="../../other")),
            "multiscales[0].datasets[1].path: '../../other' has a '..' segment",
        ),
        (
            _broken(lambda b: b["datasets"][1].update(path="/abs")),
            "multiscales[0].datasets[1].path: '/abs' starts with '/'",
        ),
        (_broken(lambda b: b["datasets"][1].update(path="")), "datasets[1].path is empty"),
        (_broken(lambda b: b["datasets"][1].update(path=[1])), "datasets[1].path is a list"),
        (_broken(lambda b: b["datasets"][1].update(path="0")), "datasets name a path twice"),
        (
            _broken(lambda b: b["datasets"][0].pop("coordinateTransformations")),
            "multiscales[0].datasets[0] has no coordinateTransformations",
        ),
        (
            _broken(lambda b: b["datasets"][0]["coordinateTransformations"].reverse()),
            "datasets[0].coordinateTransformations[0].type is translation; NGFF wants 'scale'",
        ),
        (
            _broken(lambda b: b["datasets"][0]["coordinateTransformations"].append({})),
            "coordinateTransformations has 3 transformations; NGFF wants a scale",
        ),
        (
            _broken(lambda b: b["datasets"][0].update(coordinateTransformations=[])),
            "coordinateTransformations has 0 transformations",
        ),
        (
            _broken(
                lambda b: b["datasets"][0].update(
                    coordinateTransformations=[{"type": "scale", "scale": [1, 2]}]
                )
            ),
            "coordinateTransformations[0].scale has 2 values for 3 axes",
        ),
        (
            _broken(
                lambda b: b["datasets"][0].update(
                    coordinateTransformations=[{"type": "scale", "scale": [1, True, 2]}]
                )
            ),
            "coordinateTransformations[0].scale holds a boolean, not a number",
        ),
        (
            _broken(
                lambda b: b["datasets"][0].update(
                    coordinateTransformations=[{"type": "scale", "scale": [1, float("nan"), 2]}]
                )
            ),
            "coordinateTransformations[0].scale holds nan, not a finite number",
        ),
        (
            _broken(
                lambda b: b["datasets"][0].update(coordinateTransformations=[{"type": "scale"}])
            ),
            "coordinateTransformations[0] has neither 'scale' values nor a path",
        ),
        ({"ome": "0.5"}, "ome is a string, not an object"),
    ],
)
def test_malformed_multiscales_say_why(attributes: dict[str, Any], reason: str) -> None:
    found = read_multiscales(3 if "ome" in attributes else 2, attributes)
    assert isinstance(found, InvalidMultiscales)
    assert reason in found.reason


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=30,
)
KEYS = st.sampled_from(
    ["axes", "datasets", "path", "coordinateTransformations", "scale", "type", "name", "unit"]
)
#: Documents shaped like multiscales with parts of any JSON kind.
NEAR = st.recursive(
    JSON,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(KEYS, inner, max_size=5),
    max_leaves=40,
)


@settings(max_examples=150, deadline=None)
@given(document=NEAR, zarr_format=st.sampled_from([2, 3]), version=st.none() | JSON)
def test_any_json_is_read_or_refused_never_raised(
    document: Any, zarr_format: int, version: Any
) -> None:
    attributes = {"multiscales": document, "ome": {"version": version, "multiscales": document}}
    found = read_multiscales(zarr_format, attributes)
    assert found is None or isinstance(found, Multiscale | InvalidMultiscales)
    if isinstance(found, Multiscale):
        assert 1 <= len(found.axes) <= MAX_AXES and 1 <= len(found.levels) <= MAX_LEVELS


@settings(max_examples=100, deadline=None)
@given(
    levels=st.integers(1, 3 * MAX_LEVELS),
    axes=st.integers(1, MAX_AXES),
    version=st.sampled_from(["0.4", "0.5"]),
)
def test_well_formed_images_are_read_whole(levels: int, axes: int, version: str) -> None:
    body = image(levels=levels, axes=axes)
    if version == "0.5":
        del body["version"]
        found = read_multiscales(3, {"ome": {"version": "0.5", "multiscales": [body]}})
    else:
        found = read_multiscales(2, {"multiscales": [body]})
    assert isinstance(found, Multiscale) and found.version == version
    assert len(found.axes) == axes
    assert len(found.levels) == min(levels, MAX_LEVELS)
    assert found.more_levels == max(0, levels - MAX_LEVELS)
    assert [lv.path for lv in found.levels] == [str(i) for i in range(len(found.levels))]


# -- open_with ---------------------------------------------------------------------------------
URL = "http://127.0.0.1:8333/public/zarr/0b7c/a%20b.ome"


def _state(url: str) -> Any:
    prefix = open_with.NEUROGLANCER + "#!"
    assert url.startswith(prefix)
    return json.loads(urllib.parse.unquote(url[len(prefix) :]))


def test_neuroglancer_state() -> None:
    for zarr_format, driver in ((2, "zarr2"), (3, "zarr3")):
        state = _state(open_with.neuroglancer_url(URL + "/", zarr_format, "a b"))
        assert state["layers"] == [{"type": "image", "source": f"{URL}/|{driver}:", "name": "a b"}]
        assert state["selectedLayer"] == {"visible": True, "layer": "a b"}


def test_vizarr_and_neurosift() -> None:
    vizarr = open_with.vizarr_url(URL)
    assert vizarr.startswith(open_with.VIZARR + "?source=")
    assert urllib.parse.parse_qs(urllib.parse.urlsplit(vizarr).query) == {"source": [URL]}
    blob = "http://127.0.0.1:8333/public/blobs/abc/def/abcdef?x=1&y=2"
    neurosift = open_with.neurosift_url(blob)
    assert neurosift.startswith("https://neurosift.app/nwb?url=")
    assert urllib.parse.parse_qs(urllib.parse.urlsplit(neurosift).query) == {"url": [blob]}
    assert open_with.is_nwb("sub-1/sub-1_ecephys.NWB") and not open_with.is_nwb("a.nwb.json")


def test_which_viewers() -> None:
    ome = open_with.zarr_viewers(URL, 3, "x", ome=True, plain_array=False)
    assert [v.name for v in ome] == ["Neuroglancer", "vizarr"]
    array = open_with.zarr_viewers(URL, 2, "x", ome=False, plain_array=True)
    assert [v.name for v in array] == ["Neuroglancer"]
    assert open_with.zarr_viewers(URL, 2, "x", ome=False, plain_array=False) == []


@pytest.mark.parametrize(
    ("zarr_format", "dtype", "compressor", "codecs", "reads"),
    [
        (2, "uint16", "blosc", [], True),
        (2, "uint16", None, [], True),
        (2, "float32", "zstd", [], True),
        (2, "float64", "blosc", [], False),
        (2, "uint16", "lz4", [], False),
        (2, "uint16", "blosc", ["delta"], False),
        (3, "uint8", None, ["sharding_indexed", "bytes", "zstd", "bytes", "crc32c"], True),
        (3, "int32", None, ["transpose", "bytes", "gzip"], True),
        (3, "uint8", None, ["bytes", "bz2"], False),
        (3, "uint8", None, ["bytes", None], False),
        (3, "complex64", None, ["bytes"], False),
    ],
)
def test_what_neuroglancer_reads(
    zarr_format: int, dtype: str, compressor: str | None, codecs: list[str | None], reads: bool
) -> None:
    assert open_with.neuroglancer_reads(zarr_format, dtype, compressor, codecs) is reads
