"""Issue #36 end to end in Chromium, against a real OpenID Connect provider (oidc-provider on
127.0.0.2: another site than the archive) and ``zarrchive serve``: the sign-in button, the
provider's own login and consent pages, back to the archive signed in; the pending account
refused a key; ``zarrchive admin approve``; a key made on the account page; DANDI's own
client uploading with it; a ``read`` key downloading the embargoed dandiset and refused an
upload; a reviewer reading an embargoed Zarr with zarr-python through ``read/`` and refused
an upload, then refused at once once removed."""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import make_settings
from tests.helpers.dandi import DandiArchive, require_dandi_venv
from tests.helpers.dandi_cli import NWB_PATH, create_dandiset, dandi, fetch_draft_folder
from tests.helpers.dandi_cli import upload as dandi_upload
from tests.helpers.fsspec_oracle import read_with_fsspec, s3fs_python
from tests.helpers.nwb import make_nwb
from tests.helpers.oidc_provider import Providers, require_provider, running_providers
from tests.helpers.s3fs_oracle import local_zarr
from tests.helpers.server_process import ServerProcess, zarrchive_command
from tests.helpers.zarr_client import authed, create_zarr, md5, upload
from zarrchive.config import Settings
from zarrchive.services.identity.auth import create_user
from zarrchive.services.runtime import Archive
from zarrchive.storage.seaweedfs import SeaweedFS


class OidcServer(ServerProcess):
    """``zarrchive serve`` configured with one provider (``ZARRCHIVE_OIDC_*``)."""

    def __init__(self, settings: Settings, log_path: Path) -> None:
        super().__init__(settings, log_path)
        self.oidc: dict[str, str] = {}

    def environment(self) -> dict[str, str]:
        return {**super().environment(), **self.oidc}


@dataclass
class Site:
    server: OidcServer
    providers: Providers
    reviewer: str  # the reviewer's (write) token
    home: Path


@pytest.fixture(scope="module")
def site(
    seaweedfs: SeaweedFS, bucket: str, embargo_bucket: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Site]:
    require_provider()
    require_dandi_venv()
    tmp = tmp_path_factory.mktemp("oidc-site")
    settings = make_settings(seaweedfs, bucket, f"sqlite:///{tmp / 'zarrchive.sqlite3'}", tmp)
    archive = Archive.from_settings(settings)
    with archive.db.session() as session:
        reviewer = create_user(session, "reviewer")[1]
    archive.close()
    server = OidcServer(settings, tmp / "server.log")
    with running_providers(f"{server.url}/signin/oidc/callback", tmp) as providers:
        direct = providers.direct
        server.oidc = {
            "ZARRCHIVE_OIDC_ISSUER": direct.issuer,
            "ZARRCHIVE_OIDC_CLIENT_ID": direct.client_id,
            "ZARRCHIVE_OIDC_CLIENT_SECRET": str(direct.client_secret),
            "ZARRCHIVE_OIDC_NAME": direct.name,
        }
        server.start()
        try:
            yield Site(server, providers, reviewer, tmp / "home")
        finally:
            server.stop()


def _admin(site: Site, *args: str) -> str:
    done = subprocess.run(
        [*zarrchive_command(), "admin", *args],
        env=site.server.environment(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_sign_in_approve_key_dandi_read_key_and_reviewer(
    site: Site, chromium: Any, tmp_path: Path
) -> None:
    python = s3fs_python()  # zarr-python over fsspec: skips saying how to get it
    url = site.server.url
    log = site.server.log_path.read_text()
    assert f"register the redirect URI {url}/signin/oidc/callback" in log, log[-3000:]

    context = chromium.new_context(base_url=url)
    context.set_default_timeout(60_000)
    page = context.new_page()
    # nothing leaves the machine: the provider's development pages ask for a web font, which
    # is refused in the browser before any connection
    stopped: list[str] = []

    def stop(route: Any) -> None:
        stopped.append(route.request.url)
        route.abort()

    context.route(re.compile(r"^(?!http://127\.0\.0\.[12]:\d+/)"), stop)

    # the button, the provider's own pages (another site), back to the archive signed in
    page.goto("/signin")
    page.click("#signin-oidc-default")
    page.wait_for_url(f"{site.providers.direct.issuer}/interaction/**")
    page.fill("input[name=login]", "rosalind")
    page.fill("input[name=password]", "any password")
    page.click("button[type=submit]")
    page.wait_for_selector("text=Continue")  # the provider's consent page
    page.click("button[type=submit]")
    page.wait_for_url(f"{url}/")
    assert "rosalind" in page.inner_text("header")
    assert all(u.startswith("https://fonts.googleapis.com/") for u in stopped), stopped

    # pending: the account page says so, and a key is refused
    page.goto("/account")
    assert page.inner_text("#account-status-value") == "PENDING"
    assert page.locator("#new-key-form").count() == 0
    token = page.locator("input[name=csrf_token]").first.get_attribute("value")
    refused = page.request.post(
        f"{url}/account/keys",
        form={"csrf_token": str(token), "name": "early", "scope": "write"},
        headers={"Origin": url},
    )
    assert refused.status == 403 and "awaits approval" in refused.text(), refused.text()

    # an admin approves it; a key made on the account page
    _admin(site, "approve", "rosalind")
    page.goto("/account")
    assert page.inner_text("#account-status-value") == "APPROVED"
    page.fill("#key-name", "dandi")
    page.select_option("#key-scope", "write")
    page.click("#new-key-form button[type=submit]")
    key = page.inner_text("#new-key-value").strip()
    assert f"export DANDI_API_KEY={key}" in page.inner_text("#new-key-export")
    context.close()

    # DANDI's own client uploads to an embargoed dandiset with it
    archive = DandiArchive(site.server, owner=key, stranger=site.reviewer, home=site.home)
    dandiset = create_dandiset(archive, "signed in with OIDC", embargo=True)
    folder = fetch_draft_folder(archive, dandiset, tmp_path / "up", key)
    nwb = make_nwb(folder / NWB_PATH, 30_000, seed=7)
    code, out = dandi_upload(archive, folder, key)
    assert code == 0, out

    # a read key downloads it, and is refused an upload
    with archive.client(key) as api:
        made = api.post("/api/auth/tokens/", json={"name": "read", "scope": "read"})
        assert made.status_code == 201, made.text
        read_key = made.json()["key"]
    (tmp_path / "down").mkdir()
    version = f"{url}/api/dandisets/{dandiset}/versions/draft/"
    code, out = dandi(archive, ["download", version], tmp_path / "down", read_key)
    assert code == 0, out
    assert (tmp_path / "down" / dandiset / NWB_PATH).read_bytes() == nwb.read_bytes()
    make_nwb(folder / "sub-mouse1/sub-mouse1_ses-2.nwb", 10_000, seed=8)
    code, out = dandi_upload(archive, folder, read_key)
    assert code != 0 and "403" in out, out

    # a reviewer reads an embargoed Zarr with zarr-python through read/, changes nothing
    with authed(url, key) as api:
        zarr_id = create_zarr(api, dandiset, "review.zarr")
        files, expected = local_zarr(python, tmp_path)
        upload(api, zarr_id, files)
        reviewers = f"/api/dandisets/{dandiset}/reviewers/"
        assert api.put(reviewers, json=[{"username": "reviewer"}]).status_code == 200
    read_url = f"{url}/api/zarr/{zarr_id}/read/"
    assert read_with_fsspec(python, "http", read_url, site.reviewer, tmp_path) == expected
    with authed(url, site.reviewer) as reviewer:
        change = reviewer.post(
            f"/api/zarr/{zarr_id}/upload/", json=[{"path": "x", "etag": md5(b"x")}]
        )
        assert change.status_code == 403, change.text
    # removed: refused at once
    with authed(url, key) as api:
        assert api.put(reviewers, json=[]).status_code == 200
    refused_read = read_with_fsspec(python, "http", read_url, site.reviewer, tmp_path)
    assert "error" in refused_read, refused_read
    with authed(url, site.reviewer) as reviewer:
        assert reviewer.get(f"/api/zarr/{zarr_id}/read/.zgroup").status_code == 404
