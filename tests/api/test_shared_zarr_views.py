"""One Zarr in several dandisets (#39 item 2), snapshot mode, part 3: B's asset names the
pinned view of the state it reads, so whatever reads a Zarr by id reads that state, never A's
live Zarr: DANDI's flat listing and its ``download=true`` redirects (what dandi-cli reads),
the Zarr's info, ``zarrchive download B/PATH`` (and ``verify``).  Every write through the view
is refused and changes nothing; the view is read as A's Zarr is (anyone, for a public one).
A's own published versions name the view of the state they pin too (immutability once
published), while A's draft names A's live Zarr; ``zarrchive download`` of a view reads its
manifest once and the pinned versions straight from the bucket.

On SeaweedFS (the pinned state's files are read through their versioned URLs)."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
from sqlalchemy import select
from typer.testing import CliRunner

from tests.conftest import LiveServer, Users
from tests.helpers.api_uploads import upload
from tests.helpers.assets import assets_url, client_for, ok
from tests.helpers.databases import SQLITE_ONLY
from tests.helpers.shared_zarrs import FIRST, SHARED_PATH, publish, published_zarr, share
from tests.helpers.snapshots import oracle
from tests.helpers.zarr_client import (
    create_dandiset,
    create_zarr,
    delete_files,
    md5,
    wait_at_rest,
)
from zarrchive.cli import app
from zarrchive.client.api import ApiClient
from zarrchive.client.download import HttpFetcher
from zarrchive.client.remote import RemoteFile
from zarrchive.client.snapshot import SnapshotDownloader
from zarrchive.config import PublishedZarrs
from zarrchive.db.models import Version, ZarrPin, pinned_view_id
from zarrchive.services.runtime import Archive
from zarrchive.services.zarr_engine.snapshots import prepare_manifest

pytestmark = [SQLITE_ONLY, pytest.mark.settings(published_zarrs=PublishedZarrs.SNAPSHOT)]

#: What A's draft does after its publication: a file changed, one deleted, one added.
CHANGED = {"x/0": b"changed in A's draft", "y/0": b"new in A's draft"}


def a_moves_on(api: httpx.Client, zarr_id: str) -> str:
    """A's draft changes its Zarr (not published): its live checksum, not the pinned one."""
    upload(api, zarr_id, CHANGED)
    delete_files(api, zarr_id, ["x/1"])
    live = str(wait_at_rest(api, zarr_id)["checksum"])
    assert live != oracle(FIRST)
    return live


def dandi_listing(client: httpx.Client, zarr: str) -> dict[str, dict[str, Any]]:
    """DANDI's flat listing of a Zarr as dandi-cli pages it (``next`` URLs): key -> entry."""
    found: dict[str, dict[str, Any]] = {}
    url: str | None = f"/api/zarr/{zarr}/files/?limit=2"
    while url:
        page = ok(client.get(url))
        found.update((entry["Key"], entry) for entry in page["results"])
        url = page["next"]
    return found


def dandi_reads(client: httpx.Client, zarr: str) -> dict[str, bytes]:
    """Every file as dandi-cli downloads it: the listing, then ``?download=true`` per file."""
    files: dict[str, bytes] = {}
    with httpx.Client(timeout=60, follow_redirects=True) as plain:
        for key, entry in dandi_listing(client, zarr).items():
            where = client.get(f"/api/zarr/{zarr}/files/", params={"prefix": key, "download": 1})
            assert where.status_code == 302, where.text
            response = plain.get(where.headers["location"])
            assert response.status_code == 200, (key, response.status_code)
            assert (md5(response.content), len(response.content)) == (entry["ETag"], entry["Size"])
            files[key] = response.content
    return files


def zarrchive(args: list[str], live_server: LiveServer, token: str, state: Path) -> Any:
    env = {
        "ZARRCHIVE_URL": live_server.url,
        "ZARRCHIVE_TOKEN": token,
        "ZARRCHIVE_STATE_DIR": str(state),
    }
    return CliRunner().invoke(app, args, env=env)


def local_files(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()}


class RecordingFetcher(HttpFetcher):
    """The download's fetcher, keeping the URL of every file it GETs."""

    def __init__(self) -> None:
        super().__init__(max_connections=4)
        self.urls: list[str] = []

    def fetch(self, file: RemoteFile, write: Any) -> None:
        self.urls.append(file.url)
        super().fetch(file, write)


def client_download(live_server: LiveServer, token: str, ref: str, dest: Path) -> list[str]:
    """``zarrchive download REF`` as the CLI makes it (:class:`SnapshotDownloader`): the URLs
    of the files it fetched (each checked to be the bucket's, no API redirect)."""
    fetcher = RecordingFetcher()
    with (
        ApiClient(live_server.url, token) as client,
        SnapshotDownloader(client, fetcher=fetcher) as downloader,
    ):
        downloader.download(ref, dest)
    assert fetcher.urls, "nothing fetched"
    for url in fetcher.urls:
        assert not url.startswith(live_server.url) and "versionId=" in url, url
    return fetcher.urls


def content_url_reads(client: httpx.Client, metadata: dict[str, Any], view: str) -> bool:
    """Whether a published asset's ``contentUrl`` names the view's ``read/`` route (not the
    Zarr's S3 prefix, which serves the live draft), and a path appended to it reads the
    pinned bytes."""
    api_route, where = metadata["contentUrl"]
    assert api_route.endswith("/download/") and "/api/assets/" in api_route
    route = urlsplit(where).path
    assert route == f"/api/zarr/{view}/read/", where
    found = client.get(route + "x/1")
    assert found.status_code == 302, found.text
    with httpx.Client(timeout=60) as plain:
        return plain.get(found.headers["location"]).content == FIRST["x/1"]


def published_in_a(api: httpx.Client, files: dict[str, bytes]) -> tuple[str, str, str]:
    """Dandiset A with a Zarr asset holding *files* at ``shared.zarr``, published: (A, the
    Zarr's id, the version)."""
    dandiset = create_dandiset(api, "A")
    zarr_id = create_zarr(api, dandiset, "shared.zarr")
    upload(api, zarr_id, files)
    ok(
        api.post(
            assets_url(dandiset), json={"metadata": {"path": "shared.zarr"}, "zarr_id": zarr_id}
        )
    )
    return dandiset, zarr_id, publish(api, dandiset)


def test_b_s_zarr_reads_the_pinned_state_by_id(
    api: httpx.Client, anon: httpx.Client, live_server: LiveServer, users: Users, tmp_path: Path
) -> None:
    _, zarr_id, _ = published_zarr(api, FIRST)
    pinned = oracle(FIRST)
    live = a_moves_on(api, zarr_id)
    b = create_dandiset(api, "B")
    shared = share(api, b, zarr_id)
    asset_id = shared["asset_id"]

    # B's asset names the view of the state, in every DANDI route; shared_zarr names A's Zarr
    view = shared["zarr"]
    assert view != zarr_id and shared["zarr_id"] == view
    assert shared["shared_zarr"]["zarr_id"] == zarr_id
    listed = ok(api.get(assets_url(b)))["results"]
    assert [(a["asset_id"], a["zarr"]) for a in listed] == [(asset_id, view)]
    assert ok(api.get(f"/api/assets/{asset_id}/info/"))["zarr"] == view
    assert ok(api.get(f"{assets_url(b)}{asset_id}/info/"))["zarr"] == view

    # the view's info: the pinned state, at rest for ever
    info = ok(anon.get(f"/api/zarr/{view}/"))
    assert (info["zarr_id"], info["view_of"], info["checksum"]) == (view, zarr_id, pinned)
    assert (info["file_count"], info["size"]) == (len(FIRST), sum(map(len, FIRST.values())))
    assert (info["status"], info["upload_in_progress"]) == ("Complete", False)
    assert ok(api.get(f"/api/zarr/{zarr_id}/"))["checksum"] == live  # A's own is live
    # what dandi-cli reads: the listing and each file's redirect, the pinned bytes
    assert dandi_reads(anon, view) == FIRST
    assert set(dandi_listing(anon, zarr_id)) == {".zattrs", "x/0", "y/0"}  # (A's live one)
    # the directory pages, a file, the reference file
    root = ok(anon.get(f"/api/zarr/{view}.zarr/"))
    assert (root["digest"], [d["path"] for d in root["directories"]]) == (pinned, ["x"])
    assert ok(anon.get(f"/api/zarr/{view}/x/1"))["md5"] == md5(FIRST["x/1"])
    assert anon.get(f"/api/zarr/{view}/y/0").status_code == 404
    assert anon.get(f"/api/zarr/{view}/refs.json").status_code == 200

    # `zarrchive download B/PATH` and `verify`: the pinned bytes, and their checksum
    dest = tmp_path / "b.zarr"
    ref = f"{b}/{SHARED_PATH}"
    done = zarrchive(["download", ref, str(dest)], live_server, users.owner, tmp_path / "s")
    assert done.exit_code == 0, done.output
    assert local_files(dest) == FIRST and pinned in done.output
    checked = zarrchive(["verify", ref, str(dest)], live_server, users.owner, tmp_path / "s")
    assert checked.exit_code == 0, checked.output

    # dandi-cli sends the asset's `zarr` back when it changes metadata: the same state
    body = {"metadata": {"path": SHARED_PATH, "description": "x"}, "zarr_id": view}
    again = ok(api.put(f"{assets_url(b)}{asset_id}/", json=body))
    assert again["zarr"] == view and again["shared_zarr"]["checksum"] == pinned
    refused = api.put(
        f"{assets_url(b)}{asset_id}/", json={**body, "zarr_checksum": live}
    )  # a view and another state
    assert refused.status_code == 400, refused.text

    # B publishes: its version's asset names the same view, and reads the same bytes
    version = publish(api, b)
    (copy,) = ok(api.get(assets_url(b, version)))["results"]
    assert copy["zarr"] == view
    assert content_url_reads(
        anon, ok(api.get(f"{assets_url(b, version)}{copy['asset_id']}/")), view
    )
    published = tmp_path / "published.zarr"
    ref = f"{b}@{version}/{SHARED_PATH}"
    done = zarrchive(["download", ref, str(published)], live_server, users.owner, tmp_path / "s")
    assert done.exit_code == 0, done.output
    assert local_files(published) == FIRST


def test_writes_through_the_view_are_refused_and_change_nothing(
    api: httpx.Client, live_server: LiveServer, users: Users, tmp_path: Path
) -> None:
    _, zarr_id, _ = published_zarr(api, FIRST)
    live = a_moves_on(api, zarr_id)
    b = create_dandiset(api, "B")
    view = share(api, b, zarr_id)["zarr"]
    change = [{"path": "x/0", "etag": md5(b"through the view")}]
    writes = [
        api.post(f"/api/zarr/{view}/upload/", json=change),
        api.post(f"/api/zarr/{view}/files/", json=[{"path": "x/0", "base64md5": "AAAA"}]),
        api.post(f"/api/zarr/{view}/finalize/"),
        api.post(f"/api/zarr/{view}/upload/complete/"),
        api.delete(f"/api/zarr/{view}/upload/"),
        api.request("DELETE", f"/api/zarr/{view}/files/", json=[{"path": "x/0"}]),
        api.post(f"/api/zarr/{view}/restore/", json={"checksum": live}),
    ]
    for response in writes:
        assert response.status_code == 409, (response.request.url, response.text)
        assert "read-only" in response.json()["detail"] and zarr_id in response.json()["detail"]
    assert api.get(f"/api/zarr/{view}/upload/").status_code == 404  # no batch, ever
    # nor through the client: `zarrchive rm B/PATH` names the view
    rm = ["rm", f"{b}/{SHARED_PATH}", "x/0", "--yes"]
    assert zarrchive(rm, live_server, users.owner, tmp_path / "s").exit_code != 0
    assert wait_at_rest(api, zarr_id)["checksum"] == live  # A's Zarr: untouched
    assert ok(api.get(f"/api/zarr/{view}/"))["checksum"] == oracle(FIRST)
    assert dandi_reads(api, view) == FIRST

    # the view is read as A's Zarr is: a public one by anyone; an unknown view is 404
    with client_for(api, users.other) as other:
        assert dandi_reads(other, view) == FIRST
        assert other.post(f"/api/zarr/{view}/upload/", json=change).status_code == 409
    unknown = "00000000-0000-5000-8000-000000000000"
    assert api.get(f"/api/zarr/{unknown}/").status_code == 404
    assert api.post(f"/api/zarr/{unknown}/upload/", json=change).status_code == 404
    # DANDI's HEAD of a file: the pinned version too
    head = api.head(f"/api/zarr/{view}/files/", params={"prefix": "x/1"})
    assert head.status_code == 302 and "versionId=" in head.headers["location"]


def test_a_view_is_read_as_its_zarr_is(
    api: httpx.Client, anon: httpx.Client, archive: Archive, users: Users
) -> None:
    """An embargoed Zarr's view (a state pinned before: embargoed dandisets do not publish,
    so the pin is written here) answers as the Zarr does: 401 anonymous, 404 to a stranger,
    the state to its owner; its writes are refused like any view's."""
    secret = create_dandiset(api, "secret", embargo=True)
    zarr_id = create_zarr(api, secret, "s.zarr")
    upload(api, zarr_id, FIRST)
    checksum = oracle(FIRST)
    prepare_manifest(archive, zarr_id)  # as a publication would
    with archive.db.write_session() as session:
        draft = session.scalars(select(Version).where(Version.dandiset_id == int(secret))).one()
        session.add(ZarrPin(zarr_id=zarr_id, version_id=draft.id, checksum=checksum, frozen=False))
    view = pinned_view_id(zarr_id, checksum)
    with archive.db.session() as session:  # the pin names its view
        assert session.scalars(select(ZarrPin.view_id)).all() == [view]
    assert anon.get(f"/api/zarr/{view}/").status_code == 401
    assert anon.get(f"/api/zarr/{view}/files/").status_code == 401
    with client_for(api, users.other) as other:
        for response in (
            other.get(f"/api/zarr/{view}/"),
            other.get(f"/api/zarr/{view}/files/"),
            other.post(f"/api/zarr/{view}/upload/", json=[{"path": "a", "etag": md5(b"a")}]),
        ):
            assert response.status_code == 404, response.text
            assert zarr_id not in response.text  # nothing of the Zarr shows
    info = ok(api.get(f"/api/zarr/{view}/"))
    assert (info["checksum"], info["view_of"], info["dandiset"]) == (checksum, zarr_id, secret)
    urls = ok(api.post(f"/api/zarr/{view}/download/", json=[{"path": p} for p in sorted(FIRST)]))
    with httpx.Client(timeout=60) as plain:  # presigned URLs of the pinned versions
        assert {u["path"]: plain.get(u["url"]).content for u in urls} == FIRST
        # a HEAD of a file (DANDI's, and read/'s): the pinned version's headers, not a
        # redirect to a URL presigned for GET (S3 refuses it a HEAD)
        for route, params in (
            (f"/api/zarr/{view}/files/", {"prefix": "x/1"}),
            (f"/api/zarr/{view}/read/x/1", {}),
        ):
            head = api.head(route, params=params)
            if head.is_redirect:
                head = plain.head(head.headers["location"])
            assert head.status_code == 200, (route, head.status_code)
            assert head.headers["content-length"] == str(len(FIRST["x/1"]))
            assert head.headers["etag"].strip('"') == md5(FIRST["x/1"])
        assert api.head(f"/api/zarr/{view}/files/", params={"prefix": "y/0"}).status_code == 404
    assert api.delete(f"/api/zarr/{view}/upload/").status_code == 409


def test_a_s_published_version_names_the_view_of_its_state(
    api: httpx.Client, anon: httpx.Client, live_server: LiveServer, users: Users, tmp_path: Path
) -> None:
    """Immutability once published: A's published Zarr asset names the view of the state
    the version pins (what dandi-cli and `zarrchive download` read by id), A's draft its live
    Zarr; the view's files come from the bucket at their pinned versions."""
    a, zarr_id, version = published_in_a(api, FIRST)
    pinned = oracle(FIRST)
    live = a_moves_on(api, zarr_id)
    view = pinned_view_id(zarr_id, pinned)

    (copy,) = ok(api.get(assets_url(a, version)))["results"]
    assert (copy["zarr"], copy["zarr_id"], copy["shared_zarr"]) == (view, view, None)
    for route in (
        f"/api/assets/{copy['asset_id']}/info/",
        f"{assets_url(a, version)}{copy['asset_id']}/info/",
    ):
        assert ok(anon.get(route))["zarr"] == view
    (draft,) = ok(api.get(assets_url(a)))["results"]
    assert (draft["zarr"], draft["zarr_id"]) == (zarr_id, zarr_id)
    assert ok(anon.get(f"/api/zarr/{view}/"))["checksum"] == pinned
    assert ok(anon.get(f"/api/zarr/{zarr_id}/"))["checksum"] == live
    assert dandi_reads(anon, view) == FIRST  # what dandi-cli reads of the published version
    published = ok(anon.get(f"{assets_url(a, version)}{copy['asset_id']}/"))
    assert content_url_reads(anon, published, view)

    # `zarrchive download A@VERSION/PATH` (and of the view by id): the manifest once, then
    # the pinned versions from the bucket, no API request per file
    urls = client_download(live_server, users.owner, f"{a}@{version}/shared.zarr", tmp_path / "v")
    assert local_files(tmp_path / "v") == FIRST and len(urls) == len(FIRST)
    client_download(live_server, users.other, view, tmp_path / "by-id")
    assert local_files(tmp_path / "by-id") == FIRST
    # the draft reads A's live Zarr
    done = zarrchive(
        ["download", f"{a}/shared.zarr", str(tmp_path / "d")],
        live_server,
        users.owner,
        tmp_path / "s",
    )
    assert done.exit_code == 0, done.output
    assert local_files(tmp_path / "d") == {".zattrs": FIRST[".zattrs"], **CHANGED}


def test_b_s_draft_downloads_the_view_from_the_bucket(
    api: httpx.Client, live_server: LiveServer, users: Users, tmp_path: Path
) -> None:
    """`zarrchive download B/PATH` of B's shared snapshot: the view's manifest once, then
    each file from the bucket at its pinned version (no API redirect per file)."""
    _, zarr_id, _ = published_zarr(api, FIRST)
    a_moves_on(api, zarr_id)
    b = create_dandiset(api, "B")
    share(api, b, zarr_id)
    client_download(live_server, users.owner, f"{b}/{SHARED_PATH}", tmp_path / "b")
    assert local_files(tmp_path / "b") == FIRST
