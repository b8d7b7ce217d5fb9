"""Bad input: every kind is a 4xx with a clear message and changes nothing (API and S3)."""

from __future__ import annotations

import base64
import uuid
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest

from tests.helpers.reliability import count
from tests.helpers.state import snapshot
from tests.helpers.zarr_client import create_dandiset, create_zarr, expect, md5, upload
from zarrchive.services.runtime import Archive

PART = "bad input"
FILES = {"arr/.zarray": b'{"shape":[2]}', "arr/0": b"zero", "arr/1": b"one", "top": b"t"}
HARDENING = "branch hardening"
UPLOAD_PATH = "branch upload-path"


@dataclass
class World:
    dandiset: str
    zarr_id: str
    max_batch: int


@dataclass
class Case:
    name: str
    method: str
    url: str
    #: keyword arguments of httpx's request (json=, content=, params=, headers=)
    kwargs: dict[str, Any] = field(default_factory=dict)
    #: a failure on this branch that another engineer fixes: (what, branch)
    broken: tuple[str, str] | None = None
    #: only on this database (None: on every one)
    broken_on: str | None = None
    #: the exact status expected (None: any 4xx)
    status: int | None = None


def _unicode_digit_twin(zarr_id: str) -> str:
    """*zarr_id* with its first ASCII digit replaced by the same Arabic-Indic digit (which
    ``uuid.UUID`` reads as that digit): the same id to a careless parser."""
    for i, c in enumerate(zarr_id):
        if c.isdigit():
            return zarr_id[:i] + chr(0x0660 + int(c)) + zarr_id[i + 1 :]
    return zarr_id + "\u0663"  # (the placeholder worlds that only name the cases)


def _entry(path: str, data: bytes = b"x") -> dict[str, str]:
    return {"path": path, "etag": md5(data)}


def cases(w: World) -> list[Case]:
    z, d = f"/api/zarr/{w.zarr_id}", w.dandiset
    up = f"{z}/upload/"
    unknown = str(uuid.uuid4())
    json_hdr = {"Content-Type": "application/json"}
    return [
        Case("malformed JSON", "POST", "/api/zarr/", {"content": b"{", "headers": json_hdr}),
        Case("JSON of the wrong shape", "POST", "/api/zarr/", {"json": ["a"]}),
        Case("wrong type of field", "POST", "/api/zarr/", {"json": {"name": 3, "dandiset": d}}),
        Case("missing field", "POST", "/api/zarr/", {"json": {"name": "x.zarr"}}),
        Case(
            "unknown dandiset", "POST", "/api/zarr/", {"json": {"name": "x", "dandiset": "999999"}}
        ),
        Case(
            "Unicode digits in a dandiset id (body)",
            "POST",
            "/api/zarr/",
            {"json": {"name": "x", "dandiset": "00000\u00b2"}},
        ),
        Case(
            "Unicode digits in a dandiset id (path)",
            "GET",
            "/api/dandisets/00000\u00b2/",
        ),
        Case(
            "Unicode digits in a dandiset id (query)",
            "GET",
            "/api/zarr/",
            {"params": {"dandiset": "00000\u00b2"}},
        ),
        Case(
            "non-JSON content type",
            "POST",
            up,
            {"content": b"path=a", "headers": {"Content-Type": "text/plain"}},
        ),
        Case("batch is not a list", "POST", up, {"json": {"path": "a", "etag": md5(b"a")}}),
        Case("empty batch", "POST", up, {"json": []}),
        Case("path ../x", "POST", up, {"json": [_entry("../x")]}),
        Case("path a//b", "POST", up, {"json": [_entry("a//b")]}),
        Case("absolute path", "POST", up, {"json": [_entry("/a")]}),
        Case("path with a . segment", "POST", up, {"json": [_entry("a/./b")]}),
        Case("backslash in a path", "POST", up, {"json": [_entry("a\\b")]}),
        Case("empty path", "POST", up, {"json": [_entry("")]}),
        Case(
            "a file named .checksum",
            "POST",
            up,
            {"json": [_entry("arr/.checksum")]},
        ),
        Case(
            "a directory named .checksum",
            "POST",
            up,
            {"json": [_entry(".checksum/x")]},
        ),
        Case(
            "NUL in a path",
            "POST",
            up,
            {"json": [_entry("a\x00b")]},
        ),
        Case(
            "over-long path (derived keys over 1024 bytes)",
            "POST",
            up,
            {"json": [_entry("/".join(["d" * 200] * 5) + "/f")]},
        ),
        Case(
            "duplicate paths in a batch",
            "POST",
            up,
            {"json": [_entry("dup", b"1"), _entry("dup", b"2")]},
        ),
        Case("bad md5 (not hex)", "POST", up, {"json": [{"path": "a", "etag": "z" * 32}]}),
        Case("bad md5 (short)", "POST", up, {"json": [{"path": "a", "etag": "a" * 31}]}),
        Case("md5 of the wrong type", "POST", up, {"json": [{"path": "a", "etag": 12}]}),
        Case(
            "batch over max_batch_files",
            "POST",
            up,
            {"json": [_entry(f"many/{i}") for i in range(w.max_batch + 1)]},
        ),
        Case(
            "a file under an existing file",
            "POST",
            up,
            {"json": [_entry("top/under")]},
        ),
        Case(
            "a file where a directory is",
            "POST",
            up,
            {"json": [_entry("arr")]},
        ),
        Case("complete without a batch", "POST", f"{z}/upload/complete/"),
        Case("cancel without a batch", "DELETE", up),
        Case("unknown Zarr id", "GET", f"/api/zarr/{unknown}/"),
        Case("malformed Zarr id", "GET", "/api/zarr/not-a-uuid/"),
        Case(
            "Zarr id with Unicode digits",
            "POST",
            f"/api/zarr/{_unicode_digit_twin(w.zarr_id)}/upload/",
            {"json": [_entry("a")]},
        ),
        Case(
            "delete a missing file",
            "DELETE",
            f"{z}/files/",
            {"json": [{"path": "nope"}]},
            status=404,
        ),
        Case("delete ../x", "DELETE", f"{z}/files/", {"json": [{"path": "../x"}]}),
        Case("garbage cursor", "GET", f"{z}.zarr/", {"params": {"cursor": "garbage!"}}),
        Case(
            "cursor of 1000 nested [",
            "GET",
            f"{z}.zarr/",
            {"params": {"cursor": base64.urlsafe_b64encode(b"[" * 1000).decode()}},
        ),
        Case(
            "NUL in a query parameter",
            "GET",
            f"{z}/files/",
            {"params": {"prefix": "arr\x00"}},
        ),
        Case(
            "NUL in a Zarr name",
            "POST",
            "/api/zarr/",
            {"json": {"name": "a\x00b.zarr", "dandiset": d}},
        ),
        Case(
            "NUL in a dandiset name",
            "POST",
            "/api/dandisets/",
            {"json": {"name": "a\x00b"}},
        ),
        Case("page_size 0", "GET", f"{z}.zarr/", {"params": {"page_size": 0}}),
        Case("page_size not a number", "GET", f"{z}.zarr/", {"params": {"page_size": "x"}}),
        Case("listing prefix ../", "GET", f"{z}/files/", {"params": {"prefix": "../arr"}}),
        Case("download: no paths", "POST", f"{z}/download/", {"json": []}),
        Case("download: bad path", "POST", f"{z}/download/", {"json": [{"path": "a//b"}]}),
        Case(
            "blob: negative size",
            "POST",
            "/api/uploads/initialize/",
            {"json": {"size": -1, "md5": md5(b""), "dandiset": d}},
        ),
        Case(
            "blob: bad md5",
            "POST",
            "/api/uploads/initialize/",
            {"json": {"size": 1, "md5": "nope", "dandiset": d}},
        ),
        Case("blob: unknown upload", "POST", f"/api/uploads/{unknown}/validate/"),
        Case("unknown version", "GET", f"/api/dandisets/{d}/versions/0.999999.9999/"),
        Case(
            "version metadata not an object",
            "PUT",
            f"/api/dandisets/{d}/versions/draft/",
            {"json": {"metadata": [1, 2]}},
        ),
        Case(
            "asset with both blob and Zarr",
            "POST",
            f"/api/dandisets/{d}/versions/draft/assets/",
            {"json": {"metadata": {"path": "a"}, "blob_id": unknown, "zarr_id": w.zarr_id}},
        ),
        Case(
            "request body over the cap (32 MB)",
            "POST",
            up,
            {"content": b"[" + b" " * (32 * 1024 * 1024) + b"]", "headers": json_hdr},
            status=413,
        ),
    ]


def _case_names() -> list[str]:
    return [c.name for c in cases(World("000000", "z", 1))]


_worlds: dict[str, World] = {}


@pytest.fixture
def world(module_api: httpx.Client, module_archive: Archive) -> World:
    """One dandiset and Zarr per archive: every case must leave them as they are."""
    key = module_archive.settings.database_url
    if key not in _worlds:
        dandiset = create_dandiset(module_api, "bad input")
        zarr_id = create_zarr(module_api, dandiset)
        upload(module_api, zarr_id, FILES)
        _worlds[key] = World(dandiset, zarr_id, module_archive.settings.max_batch_files)
    return _worlds[key]


def _params() -> list[Any]:
    return [pytest.param(c.name, id=c.name.replace(" ", "-")) for c in cases(World("0", "z", 1))]


def _clear(detail: Any) -> bool:
    if isinstance(detail, str):
        return len(detail.strip()) >= 5
    if isinstance(detail, dict):
        return _clear(detail.get("message"))
    if isinstance(detail, list):
        return bool(detail) and all("msg" in d for d in detail if isinstance(d, dict))
    return False


@pytest.mark.parametrize("name", _params())
def test_bad_input_is_refused_and_changes_nothing(
    name: str,
    module_api: httpx.Client,
    module_archive: Archive,
    module_database_url: str,
    world: World,
    s3: Any,
    request: pytest.FixtureRequest,
) -> None:
    api = module_api
    (case,) = [c for c in cases(world) if c.name == name]
    database = "sqlite" if module_database_url.startswith("sqlite") else "postgresql"
    if case.broken is not None and case.broken_on in (None, database):
        what, branch = case.broken
        reason = f"issue 11: {what}; fixed on {branch}"
        request.applymarker(pytest.mark.xfail(strict=True, reason=reason))
    buckets = [module_archive.settings.s3_bucket]
    if api.get(f"/api/zarr/{world.zarr_id}/upload/").status_code == 204:
        expect(api.delete(f"/api/zarr/{world.zarr_id}/upload/"), 204)  # an earlier case's
    before = snapshot(api, s3, buckets, world.dandiset, world.zarr_id)
    response = api.request(case.method, case.url, **case.kwargs)
    count(PART, cases=1, server_errors=int(response.status_code >= 500))
    assert 400 <= response.status_code < 500, (case.name, response.status_code, response.text)
    if case.status is not None:
        assert response.status_code == case.status, (case.name, response.text)
    assert _clear(response.json().get("detail")), (case.name, response.text)
    after = snapshot(api, s3, buckets, world.dandiset, world.zarr_id)
    assert after == before, case.name


def test_at_least_thirty_kinds() -> None:
    assert len(set(_case_names())) >= 30
