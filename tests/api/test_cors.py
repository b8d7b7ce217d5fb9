"""Cross-origin access (CORS): the API answers reads to every origin and changes only to the
configured ones; the public bucket answers range reads to every origin."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.helpers.api_uploads import upload
from tests.helpers.databases import SQLITE_ONLY
from tests.helpers.s3 import on_s3
from zarrchive.api.cors import ALLOWED_HEADERS, CorsPolicy
from zarrchive.config import Settings
from zarrchive.errors import ConfigurationError
from zarrchive.services.runtime import Archive
from zarrchive.storage.bucket_cors import BUCKET_CORS

pytestmark = SQLITE_ONLY

VIEWER = "https://viewer.example"
LAB = "https://lab.example"


def dandiset_count(client: httpx.Client) -> int:
    count: int = client.get("/api/dandisets/").json()["count"]
    return count


def test_reads_are_open_to_every_origin(
    api: httpx.Client, anon: httpx.Client, zarr_id: str
) -> None:
    upload(api, zarr_id, {".zgroup": b'{"zarr_format": 2}'})
    for url in ("/server-info", "/api/dandisets/", f"/api/zarr/{zarr_id}/", "/openapi.json"):
        response = anon.get(url, headers={"Origin": VIEWER})
        assert response.status_code == 200, url
        assert response.headers["access-control-allow-origin"] == "*"
        assert "ETag" in response.headers["access-control-expose-headers"]
        assert "access-control-allow-credentials" not in response.headers
    # a preflight for a read with a token
    preflight = anon.options(
        f"/api/zarr/{zarr_id}/",
        headers={
            "Origin": VIEWER,
            "Access-Control-Request-Method": "GET",
            "Access-Control-Request-Headers": "authorization",
        },
    )
    assert preflight.status_code == 204
    assert preflight.headers["access-control-allow-origin"] == "*"
    assert "Authorization" in preflight.headers["access-control-allow-headers"]
    assert "access-control-allow-credentials" not in preflight.headers
    # errors are readable cross-origin too (the guard's 401 included)
    bad = anon.get("/api/dandisets/", headers={"Origin": VIEWER, "Authorization": "token nope"})
    assert bad.status_code == 401 and bad.headers["access-control-allow-origin"] == "*"
    # the HTML pages are not an API: no CORS there
    page = anon.get("/", headers={"Origin": VIEWER})
    assert "access-control-allow-origin" not in page.headers


def test_changes_from_other_origins_are_refused_and_change_nothing(
    api: httpx.Client, live_server: Any
) -> None:
    before = dandiset_count(api)
    refused = api.post("/api/dandisets/", json={"name": "x"}, headers={"Origin": VIEWER})
    assert refused.status_code == 403
    assert "ZARRCHIVE_CORS_ORIGINS" in refused.json()["detail"]
    preflight = api.options(
        "/api/dandisets/",
        headers={"Origin": VIEWER, "Access-Control-Request-Method": "POST"},
    )
    assert preflight.status_code == 403
    assert "access-control-allow-origin" not in preflight.headers
    assert dandiset_count(api) == before
    # the archive's own pages (same origin, e.g. /docs) may change things
    same = api.post("/api/dandisets/", json={"name": "y"}, headers={"Origin": live_server.url})
    assert same.status_code == 200, same.text
    assert dandiset_count(api) == before + 1


@pytest.mark.settings(cors_origins=(LAB,))
def test_configured_origins_read_and_change_others_do_not(api: httpx.Client) -> None:
    before = dandiset_count(api)
    preflight = api.options(
        "/api/dandisets/",
        headers={
            "Origin": LAB,
            "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "authorization, content-type",
        },
    )
    assert preflight.status_code == 204
    assert preflight.headers["access-control-allow-origin"] == LAB
    assert "POST" in preflight.headers["access-control-allow-methods"]
    created = api.post("/api/dandisets/", json={"name": "z"}, headers={"Origin": LAB})
    assert created.status_code == 200
    assert created.headers["access-control-allow-origin"] == LAB
    assert "Origin" in created.headers["vary"]
    assert dandiset_count(api) == before + 1
    # reads are restricted to the list as well
    assert api.get("/api/dandisets/", headers={"Origin": VIEWER}).status_code == 403
    assert api.get("/api/dandisets/", headers={"Origin": LAB}).status_code == 200


def test_policy() -> None:
    open_policy = CorsPolicy()
    own = "http://127.0.0.1:8000"
    assert open_policy.allows(VIEWER, "GET", own) and open_policy.allows(VIEWER, "HEAD", own)
    for method in ("POST", "PUT", "PATCH", "DELETE", "OPTIONS"):
        assert not open_policy.allows(VIEWER, method, own)
        assert open_policy.allows(own, method, own)
    assert open_policy.allow_origin_value(VIEWER, "GET") == "*"
    listed = CorsPolicy([LAB + "/"])
    assert listed.allows(LAB, "DELETE", own) and not listed.allows(VIEWER, "GET", own)
    assert listed.allow_origin_value(LAB, "GET") == LAB
    assert "Authorization" in ALLOWED_HEADERS


def test_cors_origins_setting() -> None:
    def origins(value: str) -> tuple[str, ...]:
        return Settings.from_env({"ZARRCHIVE_CORS_ORIGINS": value}).cors_origins

    assert Settings.from_env({}).cors_origins == ()
    assert origins(f" {LAB}/ , http://localhost:3000,") == (LAB, "http://localhost:3000")
    for bad in ("*", "lab.example", "https://lab.example/path", "ftp://x"):
        with pytest.raises(ConfigurationError, match="ZARRCHIVE_CORS_ORIGINS"):
            origins(bad)


def test_buckets_answer_range_reads_to_every_origin(
    api: httpx.Client, archive: Archive, zarr_id: str, embargoed: tuple[str, str]
) -> None:
    upload(api, zarr_id, {"arr/0": b"0123456789"})
    upload(api, embargoed[1], {"arr/0": b"0123456789"})
    public = archive.store.public_url(f"zarr/{zarr_id}/arr/0")
    signed = api.get(f"/api/zarr/{embargoed[1]}/read/arr/0").headers["location"]
    for url in (public, signed):
        check_range_read_cors(url)
    assert (
        on_s3(archive.store).client.get_bucket_cors(Bucket=archive.store.bucket)["CORSRules"]
        == (BUCKET_CORS["CORSRules"])
    )
    # set once: a second start finds the rules in place
    assert archive.store.ensure_cors(BUCKET_CORS)


def check_range_read_cors(url: str) -> None:
    preflight = httpx.options(
        url,
        headers={
            "Origin": VIEWER,
            "Access-Control-Request-Method": "GET",
            "Access-Control-Request-Headers": "range",
        },
    )
    assert preflight.status_code in (200, 204)
    assert preflight.headers["access-control-allow-origin"] in ("*", VIEWER)
    assert "range" in preflight.headers["access-control-allow-headers"].lower()
    ranged = httpx.get(url, headers={"Origin": VIEWER, "Range": "bytes=2-5"})
    assert ranged.status_code == 206 and ranged.content == b"2345"
    assert ranged.headers["access-control-allow-origin"] in ("*", VIEWER)
    exposed = ranged.headers["access-control-expose-headers"].lower()
    for header in ("etag", "content-length", "content-range", "accept-ranges"):
        assert header in exposed, header
