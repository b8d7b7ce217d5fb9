"""The fsspec reference file writer (pure): what fsspec reads back is exactly what was given."""

from __future__ import annotations

import base64
import io
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from zarrchive.references import (
    MAX_INLINE_BYTES,
    Reference,
    inline_value,
    is_metadata,
    should_inline,
    write_reference_file,
)

BASE = "https://s3.example/bucket/zarr/0b5e/"


def expand(document: dict[str, object]) -> dict[str, bytes | str]:
    """What fsspec's reference filesystem makes of a file (simple templates)."""
    templates = document["templates"]
    assert isinstance(templates, dict)
    refs = document["refs"]
    assert isinstance(refs, dict)
    out: dict[str, bytes | str] = {}
    for key, value in refs.items():
        if isinstance(value, str):
            if value.startswith("base64:"):
                out[key] = base64.b64decode(value[7:])
            else:
                out[key] = value.encode("utf-8")
        else:
            (url,) = value
            out[key] = url.replace("{{", "{").replace("}}", "}").format(**templates)
    return out


paths = st.text(
    st.characters(exclude_categories=["Cs"], exclude_characters="/\x00"), min_size=1
).map(lambda s: "d/" + s)
urls = st.text("abcdefghijklmnopqrstuvwxyz0123456789-._~%/?=&:").map(lambda s: "https://h/" + s)


@given(
    st.dictionaries(paths, st.one_of(st.binary(max_size=200), urls), max_size=30),
    st.sampled_from([BASE, "https://h/", "https://other/"]),
)
def test_fsspec_reads_back_every_reference_exactly(
    given_refs: dict[str, bytes | str], base: str
) -> None:
    references = [
        Reference(p, content=v) if isinstance(v, bytes) else Reference(p, url=v)
        for p, v in given_refs.items()
    ]
    sink = io.BytesIO()
    assert write_reference_file(references, sink, base) == len(references)
    document = json.loads(sink.getvalue())
    assert document["version"] == 1
    assert expand(document) == given_refs


def test_urls_under_the_base_use_the_template() -> None:
    sink = io.BytesIO()
    write_reference_file(
        [Reference("a/0", url=BASE + "a/0?versionId=x%2By"), Reference("b", url="https://o/b")],
        sink,
        BASE,
    )
    refs = json.loads(sink.getvalue())["refs"]
    assert refs == {"a/0": ["{{u}}a/0?versionId=x%2By"], "b": ["https://o/b"]}


def test_inline_values() -> None:
    assert inline_value(b'{"zarr_format": 2}') == '{"zarr_format": 2}'
    assert inline_value(b"\xff\x00") == "base64:/wA="
    # text that fsspec would take for base64 is written as base64
    assert inline_value(b"base64:abc") == "base64:" + base64.b64encode(b"base64:abc").decode()


def test_what_goes_inline() -> None:
    for name in (".zarray", ".zgroup", ".zattrs", ".zmetadata", "zarr.json"):
        assert is_metadata(name) and is_metadata("a/b/" + name)
        assert should_inline(name, MAX_INLINE_BYTES)
        assert not should_inline(name, MAX_INLINE_BYTES + 1)
    for name in ("0.0", "c/0/0", "a/.zarray.bak", "zarr.json/0"):
        assert not is_metadata(name)
        assert not should_inline(name, 10)


def test_bad_references_are_refused() -> None:
    with pytest.raises(ValueError):
        Reference("a")
    with pytest.raises(ValueError):
        Reference("a", url="https://h/a", content=b"x")
    with pytest.raises(ValueError):
        Reference("a", url="https://h/{a}")
    with pytest.raises(ValueError):
        write_reference_file([], io.BytesIO(), "https://h/{u}/")
