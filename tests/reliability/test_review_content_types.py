"""Issue #35 item 6: uploaders do not choose the ``Content-Type`` the public bucket serves.

Every presigned PUT of the archive's own flows signs the type (``application/json`` for Zarr
metadata documents, ``application/octet-stream`` otherwise): real SeaweedFS refuses a
``text/html`` PUT, or one without a type (which SeaweedFS would sniff).  Part URLs sign none:
S3 takes an assembled object's type from ``CreateMultipartUpload`` (the archive's), whatever
the parts carried.  DANDI's routes sign none either (dandi-cli sends ``application/json``
for metadata files that parse, nothing otherwise, exactly as for dandi-archive): their
staging objects are readable by nobody but the archive, and the copy into the Zarr writes
the archive's type (``MetadataDirective=REPLACE``).  What readers get is checked twice: the
object's stored type and what an anonymous GET of its public URL answers.
"""

from __future__ import annotations

import json
import os
import re
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.conftest import PUBLIC_BUCKET_PREFIX, Users, _new_bucket, make_settings
from tests.helpers.api_uploads import open_batch
from tests.helpers.browser import chromium_browser
from tests.helpers.dandi_zarr import announce, wait_complete
from tests.helpers.databases import SQLITE_ONLY
from tests.helpers.multipart import THRESHOLD, ask_parts, big_bytes, cut, open_sized
from tests.helpers.presigned import put_headers, signed_headers
from tests.helpers.s3 import on_s3
from tests.helpers.web_forms import form_token
from tests.helpers.zarr_client import expect, md5
from zarrchive.checksum.dandi_etag import dandi_etag
from zarrchive.config import Settings
from zarrchive.content_types import BINARY, JSON
from zarrchive.services.runtime import Archive
from zarrchive.storage.embedded import SEPARATE_HOSTS, can_listen_on, embedded_s3, embedded_s3_host
from zarrchive.storage.keys import STAGING_ROOT, blob_key, zarr_object_key
from zarrchive.storage.seaweedfs import LOOPBACK, SeaweedFS, free_port, public_bucket_policy
from zarrchive.web.render import SESSION_COOKIE
from zarrchive.web.signin import SIGNIN_COOKIE

pytestmark = SQLITE_ONLY

#: What an attacker would have the archive's S3 origin serve.
PAGE = b"<!doctype html><html><script>document.title = 'pwned'</script></html>"
HOSTILE = "text/html"
#: Zarr entries of each kind, named as a browser would render them by extension.
FILES = {
    ".zattrs": b'{"note": "<script>alert(1)</script>"}',
    "arr/zarr.json": b'{"zarr_format": 3, "node_type": "group"}',
    "arr/0.html": PAGE,
    "arr/1.svg": b'<svg xmlns="http://www.w3.org/2000/svg"><script>alert(1)</script></svg>',
    "arr/2": PAGE,
}
EXPECTED = {
    ".zattrs": JSON,
    "arr/zarr.json": JSON,
    "arr/0.html": BINARY,
    "arr/1.svg": BINARY,
    "arr/2": BINARY,
}


@pytest.fixture(scope="module")
def policed_bucket(seaweedfs: SeaweedFS) -> str:
    """A public bucket with the embedded default's bucket policy (what ``zarrchive serve``
    puts on its public bucket at every start)."""
    name = _new_bucket(seaweedfs, PUBLIC_BUCKET_PREFIX)  # (its embargo twin: the archive's)
    seaweedfs.keep_multipart_listings_private(name)
    return name


@pytest.fixture
def settings(
    seaweedfs: SeaweedFS, policed_bucket: str, database_url: str, tmp_path: Path
) -> Settings:
    return make_settings(
        seaweedfs, policed_bucket, database_url, tmp_path, multipart_threshold=THRESHOLD
    )


def stored_type(archive: Archive, key: str) -> str:
    head = on_s3(archive.store).client.head_object(Bucket=archive.store.bucket, Key=key)
    return str(head["ContentType"])


def served_type(archive: Archive, key: str) -> str:
    """What an anonymous reader's GET of *key*'s public URL is answered as."""
    response = httpx.get(archive.store.public_url(key), timeout=30)
    assert response.status_code == 200, (key, response.status_code, response.text[:200])
    return response.headers["content-type"]


def staged(archive: Archive, zarr_id: str) -> list[str]:
    return [o.key for o in archive.store.iter_objects(f"{STAGING_ROOT}{zarr_id}/")]


def assert_in_place_with_the_archives_types(archive: Archive, zarr_id: str) -> None:
    for path, expected in EXPECTED.items():
        key = zarr_object_key(zarr_id, path)
        assert archive.store.get(key) == FILES[path]
        assert stored_type(archive, key) == expected, path
        assert served_type(archive, key).split(";")[0] == expected, path


def test_batch_targets_sign_the_archives_type_and_s3_refuses_any_other(
    api: httpx.Client, archive: Archive, zarr_id: str
) -> None:
    targets = {item["path"]: item for item in open_batch(api, zarr_id, FILES)}
    with httpx.Client(timeout=60) as s3:
        for path, body in FILES.items():
            url = targets[path]["upload_url"]
            assert targets[path]["content_type"] == EXPECTED[path]
            assert "content-type" in signed_headers(url)
            content_md5 = put_headers(url, body)["Content-MD5"]
            for sent in ({"Content-Type": HOSTILE}, {}):  # another type, or none (sniffed)
                refused = s3.put(url, content=body, headers={"Content-MD5": content_md5, **sent})
                assert refused.status_code == 403, (path, sent, refused.text[:300])
            assert staged(archive, zarr_id) == []  # S3 stored nothing of the refused PUTs
        for path, body in FILES.items():
            url = targets[path]["upload_url"]
            accepted = s3.put(url, content=body, headers=put_headers(url, body))
            assert accepted.status_code == 200, (path, accepted.text[:300])
    expect(api.post(f"/api/zarr/{zarr_id}/upload/complete/", params={"wait": "true"}))
    assert_in_place_with_the_archives_types(archive, zarr_id)


def test_a_big_files_parts_carry_no_type_into_the_object(
    api: httpx.Client, archive: Archive, zarr_id: str
) -> None:
    """Part URLs sign no type: S3 keeps ``CreateMultipartUpload``'s (the archive's), and
    the copy into place writes it again."""
    data = PAGE + big_bytes(THRESHOLD + 1000 - len(PAGE))
    path = "big/0.html"
    (target,) = expect(open_sized(api, zarr_id, {path: data}))
    parts = cut(data, target["part_size"])
    answer = expect(ask_parts(api, zarr_id, path, parts))
    with httpx.Client(timeout=60) as s3:
        for item in answer["parts"]:
            url = item["upload_url"]
            assert "content-type" not in signed_headers(url)
            body = parts[item["part_number"]]
            headers = {**put_headers(url, body), "Content-Type": HOSTILE}
            assert s3.put(url, content=body, headers=headers).status_code == 200
    expect(api.post(f"/api/zarr/{zarr_id}/upload/complete/", params={"wait": "true"}))
    key = zarr_object_key(zarr_id, path)
    assert md5(archive.store.get(key) or b"") == md5(data)
    assert stored_type(archive, key) == BINARY
    assert served_type(archive, key).split(";")[0] == BINARY


def test_a_blobs_single_put_signs_its_type(
    api: httpx.Client, archive: Archive, dandiset: str
) -> None:
    body = {"size": len(PAGE), "md5": md5(PAGE), "dandiset": dandiset}
    plan = expect(api.post("/api/uploads/initialize/", json=body))
    assert plan["multipart"] is False
    (part,) = plan["parts"]
    url = part["upload_url"]
    assert "content-type" in signed_headers(url)
    content_md5 = put_headers(url, PAGE)["Content-MD5"]
    with httpx.Client(timeout=60) as s3:
        for sent in ({"Content-Type": HOSTILE}, {}):
            refused = s3.put(url, content=PAGE, headers={"Content-MD5": content_md5, **sent})
            assert refused.status_code == 403, (sent, refused.text[:300])
        assert archive.store.head(blob_key(plan["upload_id"])) is None
        assert s3.put(url, content=PAGE, headers=put_headers(url, PAGE)).status_code == 200
    blob = expect(api.post(f"/api/uploads/{plan['upload_id']}/validate/"))
    key = blob_key(blob["blob_id"])
    assert stored_type(archive, key) == BINARY
    assert served_type(archive, key).split(";")[0] == BINARY


def test_dandis_blob_parts_carry_no_type_into_the_blob(
    api: httpx.Client, archive: Archive, dandiset: str
) -> None:
    """DANDI's blob parts are PUT by dandi-cli without a type and their URLs sign none (as
    dandi-archive's): a part sent as ``text/html`` still makes an ``octet-stream`` blob."""
    data = PAGE + os.urandom(100)
    announced = {
        "contentSize": len(data),
        "digest": {"algorithm": "dandi:dandi-etag", "value": dandi_etag(data)},
        "dandiset": dandiset,
    }
    plan = expect(api.post("/api/uploads/initialize/", json=announced))
    parts = []
    with httpx.Client(timeout=60) as s3:
        (part,) = plan["parts"]
        put = s3.put(part["upload_url"], content=data, headers={"Content-Type": HOSTILE})
        assert put.status_code == 200, put.text
        parts.append({"part_number": 1, "size": len(data), "etag": put.headers["etag"]})
        done = expect(
            api.post(f"/api/uploads/{plan['upload_id']}/complete/", json={"parts": parts})
        )
        assert s3.post(done["complete_url"], content=done["body"]).status_code == 200
    blob = expect(api.post(f"/api/uploads/{plan['upload_id']}/validate/"))
    key = blob_key(blob["blob_id"])
    assert archive.store.get(key) == data
    assert stored_type(archive, key) == BINARY
    assert served_type(archive, key).split(";")[0] == BINARY


def test_dandis_zarr_puts_stay_unread_and_land_with_the_archives_type(
    api: httpx.Client, archive: Archive, zarr_id: str
) -> None:
    """DANDI's Zarr route: its URLs sign no type (dandi-cli sends one only for metadata files
    that parse as JSON), so S3 stores what the uploader sent; nobody can read the staging
    object, and the Zarr's object has the archive's type."""
    urls = announce(api, zarr_id, FILES)
    with httpx.Client(timeout=60) as s3:
        for url, (path, body) in zip(urls, FILES.items(), strict=True):
            assert "content-type" not in signed_headers(url)
            headers = {**put_headers(url, body), "Content-Type": HOSTILE}
            assert s3.put(url, content=body, headers=headers).status_code == 200, path
        keys = staged(archive, zarr_id)
        assert len(keys) == len(FILES)
        for key in keys:
            assert stored_type(archive, key) == HOSTILE  # what S3 holds: the uploader's
            public = archive.store.public_url(key)
            assert s3.get(public).status_code == 403, key  # ...served to nobody
            assert s3.head(public).status_code == 403, key
    expect(api.post(f"/api/zarr/{zarr_id}/finalize/"))
    wait_complete(api, zarr_id)
    assert_in_place_with_the_archives_types(archive, zarr_id)


def test_the_embedded_policy_denies_anonymous_reads_of_staging_only() -> None:
    policy = public_bucket_policy("pub")
    statements = policy["Statement"]
    assert isinstance(statements, list)
    (staging,) = [s for s in statements if s["Sid"] == "NoAnonymousStagingReads"]
    assert staging["Effect"] == "Deny"
    assert staging["Resource"] == [f"arn:aws:s3:::pub/{STAGING_ROOT}*"]
    assert staging["Condition"] == {"Null": {"aws:username": "true"}}
    json.dumps(policy)


# -- the pages and S3 are two sites ----------------------------------------------------------
# Whatever S3 stores, SeaweedFS serves any object as ``text/html`` to an anonymous GET that
# asks (``?response-content-type=text/html``), so a script can always run on S3's origin.
# Cookies ignore ports: on the pages' host, it could plant a session cookie of its choosing in
# the pages (a victim then browses signed in as the attacker).  The embedded S3 listens on a
# loopback address of its own: another host, another site.
ATTACK = b"""<!doctype html><title>hosted by S3</title><script>
document.cookie = "zarrchive_session=planted; path=/";
document.cookie = "zarrchive_signin=planted; path=/signin";
document.title = "planted";
</script>"""


@given(
    pages=st.sampled_from(["127.0.0.1", "127.0.0.2", "127.0.0.3", "0.0.0.0", "localhost"]),
    usable=st.sets(st.sampled_from(SEPARATE_HOSTS)),
)
def test_the_embedded_s3_takes_a_loopback_address_other_than_the_pages(
    pages: str, usable: set[str]
) -> None:
    host = embedded_s3_host(pages, None, usable.__contains__)
    choices = [h for h in SEPARATE_HOSTS if h in usable and h != pages]
    assert host == (choices[0] if choices else LOOPBACK)
    assert embedded_s3_host(pages, "127.9.9.9", usable.__contains__) == "127.9.9.9"


@pytest.fixture(scope="module")
def embedded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Settings]:
    """The embedded default's S3 (as ``zarrchive serve`` starts it), and its settings."""
    data_dir = tmp_path_factory.mktemp("embedded") / "data"
    settings = Settings.from_env({"ZARRCHIVE_DATA_DIR": str(data_dir)})
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("ZARRCHIVE_EMBEDDED_S3_PORT", str(free_port()))
        patch.delenv("ZARRCHIVE_EMBEDDED_S3_HOST", raising=False)
        with embedded_s3(settings) as resolved:
            yield resolved


def test_the_embedded_s3_is_another_site_than_the_pages(embedded: Settings) -> None:
    assert embedded.s3_endpoint_url is not None
    s3_host = urllib.parse.urlsplit(embedded.s3_endpoint_url).hostname
    assert embedded.host == LOOPBACK  # the pages' default address
    if not can_listen_on(SEPARATE_HOSTS[0]):
        pytest.skip(f"{SEPARATE_HOSTS[0]} is not a loopback address here (not Linux)")
    assert s3_host == SEPARATE_HOSTS[0]
    assert httpx.get(embedded.s3_endpoint_url, timeout=10).status_code < 500  # it answers there


def test_a_script_served_by_s3_cannot_plant_a_session_in_the_pages(
    embedded: Settings, live_server: Any
) -> None:
    """In a real browser: an object served by S3 as a page runs its script on S3's origin;
    the cookies it sets belong to S3's host, never reach the pages."""
    archive = Archive.from_settings(embedded)
    previous = live_server.app.state.archive
    live_server.app.state.archive = archive
    try:
        key = "zarr/attacker/page"
        archive.store.put(key, ATTACK)
        hosted = archive.store.public_url(key) + "?response-content-type=text/html"
        with chromium_browser() as chromium:
            context = chromium.new_context()
            try:
                page = context.new_page()
                page.goto(hosted)
                # S3 served it as a page: the script ran, on S3's origin
                assert page.title() == "planted"
                assert "zarrchive_session=planted" in page.evaluate("document.cookie")
                page.goto(live_server.url + "/")
                reached = {c["name"] for c in context.cookies(live_server.url + "/signin")}
            finally:
                context.close()
    finally:
        live_server.app.state.archive = previous
        archive.close()
    assert "zarrchive_session" not in reached and "zarrchive_signin" not in reached, reached


def test_over_https_only_a_host_only_session_cookie_signs_in(
    api: httpx.Client, live_server: Any, archive: Archive, users: Users
) -> None:
    """A deployment whose S3 is another host of the pages' site (``s3.archive.example``)
    could have a cookie planted with ``Domain=archive.example``: over https the session
    cookie is ``__Host-`` (browsers take it only from this host, Secure, ``Path=/``), and a
    session id under the plain name signs nobody in."""
    proxied = {"X-Forwarded-Proto": "https"}  # TLS ended by a proxy (uvicorn trusts 127.0.0.1)
    https = live_server.url.replace("http://", "https://")
    with httpx.Client(base_url=live_server.url, timeout=60, headers=proxied) as client:
        csrf = form_token(client.get("/signin").text)
        sent = {"Cookie": f"{SIGNIN_COOKIE}={csrf}", "Origin": https}
        signed = client.post(
            "/signin", data={"token": users.owner, "csrf_token": csrf}, headers=sent
        )
        assert signed.status_code == 303, signed.text
        (cookie,) = [c for c in signed.headers.get_list("set-cookie") if SESSION_COOKIE in c]
        name, _, rest = cookie.partition("=")
        assert name == "__Host-zarrchive_session"
        attributes = {a.strip().split("=")[0].lower() for a in rest.split(";")[1:]}
        assert {"secure", "httponly", "path"} <= attributes and "domain" not in attributes
        session_id = rest.split(";")[0]

        def who(cookie_header: str) -> str | None:
            page = client.get("/", headers={"Cookie": cookie_header})
            found = re.search(r'id="signed-in-user">([^<]*)<', page.text)
            return found.group(1) if found else None

        assert who(f"__Host-zarrchive_session={session_id}") == "owner"
        assert who(f"zarrchive_session={session_id}") is None  # as a sibling host plants it
