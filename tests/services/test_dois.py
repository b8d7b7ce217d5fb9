"""DOIs at DataCite (issue #37), against the DataCite stand-in (tests/helpers/datacite_standin.py,
a real HTTP server enforcing DataCite's rules); against DataCite's test instance with
``ZARRCHIVE_DATACITE_TEST_URL``, ``_PREFIX``, ``_USER``, ``_PASSWORD`` (skipped otherwise)."""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner

from tests.conftest import make_settings
from tests.helpers.assets import add_blob_asset, ok
from tests.helpers.dandi import run_dandi, show
from tests.helpers.datacite_standin import DataCiteStandIn
from tests.helpers.jobs import HeldJobQueue
from tests.helpers.metadata import dandiset_metadata
from tests.helpers.snapshots import admin_env
from tests.helpers.web_forms import sign_in
from zarrchive.cli import app
from zarrchive.config import DoiSettings, Settings
from zarrchive.db.models import Doi, DoiState
from zarrchive.jobs import InProcessJobQueue
from zarrchive.services.dandi import dois
from zarrchive.services.runtime import Archive, set_current_archive
from zarrchive.storage.seaweedfs import SeaweedFS

REAL = os.environ.get("ZARRCHIVE_DATACITE_TEST_URL")


@pytest.fixture
def standin() -> Iterator[DataCiteStandIn]:
    server = DataCiteStandIn()
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def doi_settings(standin: DataCiteStandIn) -> DoiSettings:
    if REAL:  # DataCite's test instance: the same tests, real rules
        return DoiSettings(
            api_url=REAL,
            prefix=os.environ["ZARRCHIVE_DATACITE_TEST_PREFIX"],
            user=os.environ["ZARRCHIVE_DATACITE_TEST_USER"],
            password=os.environ["ZARRCHIVE_DATACITE_TEST_PASSWORD"],
            publish=True,
        )
    return DoiSettings(
        api_url=standin.url,
        prefix=standin.prefix,
        user=standin.user,
        password=standin.password,
        publish=True,
    )


@pytest.fixture
def settings(
    request: pytest.FixtureRequest,
    seaweedfs: SeaweedFS,
    bucket: str,
    embargo_bucket: str,
    database_url: str,
    tmp_path: Path,
    doi_settings: DoiSettings,
) -> Settings:
    marker = request.node.get_closest_marker("settings")
    overrides: dict[str, Any] = {"doi": doi_settings, **(marker.kwargs if marker else {})}
    return make_settings(seaweedfs, bucket, database_url, tmp_path, **overrides)


class Remote:
    """What DataCite holds: the stand-in's store, or DataCite's test instance over HTTP."""

    def __init__(self, standin: DataCiteStandIn, settings: DoiSettings) -> None:
        self.standin, self.settings = standin, settings

    def _get(self, doi: str) -> dict[str, Any] | None:
        with httpx.Client(auth=(self.settings.user, self.settings.password), timeout=60) as http:
            response = http.get(f"{self.settings.api_url}/dois/{doi}")
        if response.status_code == 404:
            return None
        response.raise_for_status()
        attributes: dict[str, Any] = response.json()["data"]["attributes"]
        return attributes

    def state(self, doi: str) -> str | None:
        if not REAL:
            return self.standin.state(doi)
        found = self._get(doi)
        return None if found is None else str(found["state"])

    def attributes(self, doi: str) -> dict[str, Any]:
        found = self.standin.attributes(doi) if not REAL else self._get(doi)
        assert found is not None
        return found


@pytest.fixture
def remote(standin: DataCiteStandIn, doi_settings: DoiSettings) -> Remote:
    return Remote(standin, doi_settings)


@pytest.fixture
def prefix(doi_settings: DoiSettings) -> str:
    return doi_settings.prefix


def _publish(api: httpx.Client, dandiset: str) -> str:
    add_blob_asset(api, dandiset, b"data of a file", "sub-1/file.bin")
    version: str = ok(api.post(f"/api/dandisets/{dandiset}/versions/draft/publish/"))["version"]
    return version


def _new(api: httpx.Client, **metadata: Any) -> str:
    body = {"name": "A valid dandiset", "metadata": dandiset_metadata(**metadata)}
    identifier: str = ok(api.post("/api/dandisets/", json=body))["identifier"]
    return identifier


def _row(archive: Archive, doi: str) -> Doi | None:
    with archive.db.session() as session:
        row = session.get(Doi, doi)
        if row is not None:
            session.expunge(row)
        return row


def _wait(what: str, check: Callable[[], bool], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"waited {timeout} s for {what}")
        time.sleep(0.05)


def _skip_real() -> None:
    if REAL:
        pytest.skip("drives the stand-in (its outage, its stored state)")


# -- the lifecycle ----------------------------------------------------------------------------
def test_lifecycle_draft_then_findable_with_versions(
    api: httpx.Client,
    archive: Archive,
    held: HeldJobQueue,
    standin: DataCiteStandIn,
    remote: Remote,
    prefix: str,
) -> None:
    dandiset = _new(api)
    concept = f"{prefix}/dandi.{dandiset}"
    assert held.queued("doi:") == [f"doi:{concept}"]
    held.run("doi:")
    assert remote.state(concept) == "draft"
    secret = ok(api.post("/api/dandisets/", json={"name": "secret", "embargo": True}))
    held.run("doi:")
    unembargoed = f"{prefix}/dandi.{secret['identifier']}"
    assert _row(archive, unembargoed) is None  # until its unembargo
    ok(api.post(f"/api/dandisets/{secret['identifier']}/unembargo/"))
    held.run()  # the unembargo, then the DOI job it queues
    assert remote.state(unembargoed) == "draft"

    version = _publish(api, dandiset)
    versioned = f"{concept}/{version}"
    metadata = ok(api.get(f"/api/dandisets/{dandiset}/versions/{version}/"))
    assert metadata["doi"] == versioned
    assert f"https://doi.org/{versioned}" in metadata["citation"]
    held.run("doi:")
    assert remote.state(concept) == "findable" and remote.state(versioned) == "findable"
    assert {
        "relatedIdentifier": concept,
        "relatedIdentifierType": "DOI",
        "relationType": "IsVersionOf",
    } in remote.attributes(versioned)["relatedIdentifiers"]
    assert {
        "relatedIdentifier": versioned,
        "relatedIdentifierType": "DOI",
        "relationType": "HasVersion",
    } in remote.attributes(concept)["relatedIdentifiers"]
    if not REAL:
        assert (standin.created(concept), standin.created(versioned)) == (1, 1)
    page = api.get(f"/dandiset/{dandiset}")
    assert f'href="https://doi.org/{versioned}"' in page.text and "(findable)" in page.text
    # every publication sends the dandiset's metadata again: HasVersion each version
    second = ok(api.post(f"/api/dandisets/{dandiset}/versions/draft/publish/"))["version"]
    held.run("doi:")
    related = remote.attributes(concept)["relatedIdentifiers"]
    assert {r["relatedIdentifier"] for r in related if r["relationType"] == "HasVersion"} == {
        versioned,
        f"{concept}/{second}",
    }


def test_dandi_clis_dandiset_yaml_carries_the_doi(
    api: httpx.Client, held: HeldJobQueue, prefix: str, tmp_path: Path, live_server: Any
) -> None:
    """DANDI's client writes the version's metadata to ``dandiset.yaml``: its DOI with it."""
    dandiset = _new(api)
    version = _publish(api, dandiset)
    url = f"{live_server.url}/api/dandisets/{dandiset}/versions/{version}/"
    done = run_dandi(
        ["download", "--download", "dandiset.yaml", url], cwd=tmp_path, home=tmp_path / "home"
    )
    assert done.returncode == 0, show(done)
    yaml = (tmp_path / dandiset / "dandiset.yaml").read_text()
    assert f"doi: {prefix}/dandi.{dandiset}/{version}" in yaml


def test_deleting_a_dandiset_deletes_its_draft_doi_and_hides_a_findable_one(
    api: httpx.Client, archive: Archive, held: HeldJobQueue, standin: DataCiteStandIn, prefix: str
) -> None:
    _skip_real()
    draft, findable = _new(api), _new(api)
    held.run("doi:")
    gone, hidden = f"{prefix}/dandi.{draft}", f"{prefix}/dandi.{findable}"
    # made Findable at DataCite meanwhile (Fabrica): DataCite can't delete it
    standin.dois[hidden].state = "findable"
    for identifier in (draft, findable):
        assert api.delete(f"/api/dandisets/{identifier}/").status_code == 204
    held.run("doi:")
    assert standin.state(gone) is None and standin.state(hidden) == "registered"
    assert ("DELETE", f"/dois/{hidden}", 405) not in standin.calls  # never tried
    assert [_row(archive, d).state for d in (gone, hidden)] == ["deleted", "registered"]  # type: ignore[union-attr]


# -- DataCite down, then up -------------------------------------------------------------------
def test_publication_while_datacite_is_down_gets_one_doi_when_it_is_back(
    api: httpx.Client,
    archive: Archive,
    standin: DataCiteStandIn,
    prefix: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The outage outlasts the queue's own retries (none here): the DOI job comes back by
    itself, with a growing delay (10 s doubled up to 10 min; shortened here), until DataCite
    answers."""
    _skip_real()
    monkeypatch.setattr(dois, "RETRY_FIRST", 0.1)
    monkeypatch.setattr(dois, "RETRY_MOST", 0.3)
    queue = InProcessJobQueue(threads=1, max_retries=0)
    archive.jobs = queue
    set_current_archive(archive)
    try:
        standin.stop()
        dandiset = _new(api)
        version = _publish(api, dandiset)  # not blocked, not failed
        versioned = f"{prefix}/dandi.{dandiset}/{version}"
        metadata = ok(api.get(f"/api/dandisets/{dandiset}/versions/{version}/"))
        assert metadata["doi"] == versioned
        _wait(
            "two failed calls", lambda: (_row(archive, versioned) or Doi(attempts=0)).attempts >= 2
        )
        row = _row(archive, versioned)
        assert row is not None and row.state == "pending" and row.refused_status is None
        page = api.get(f"/dandiset/{dandiset}/{version}")
        assert "DataCite has not registered it yet" in page.text
        standin.start()
        _wait("the DOI at DataCite", lambda: standin.state(versioned) == "findable")
        _wait("the row", lambda: getattr(_row(archive, versioned), "state", "") == "findable")
        assert standin.created(versioned) == 1
    finally:
        queue.close(wait=False)
        archive.jobs = None
        set_current_archive(None)


def test_a_retried_create_updates_the_doi_datacite_has(
    api: httpx.Client, archive: Archive, held: HeldJobQueue, standin: DataCiteStandIn, prefix: str
) -> None:
    """The answer of a POST was lost: DataCite has the DOI, the archive thinks it pending."""
    _skip_real()
    dandiset = _new(api)
    concept = f"{prefix}/dandi.{dandiset}"
    held.run("doi:")
    with archive.db.write_session() as session:
        row = session.get(Doi, concept)
        assert row is not None
        row.state = DoiState.PENDING.value
    assert dois.queue_pending(archive) == 1  # what a restarted server does
    assert held.queued("doi:") == [f"doi:{concept}"]
    held.run("doi:")
    assert ("POST", "/dois", 422) in standin.calls and standin.created(concept) == 1
    assert getattr(_row(archive, concept), "state", "") == "draft"


# -- refusals ---------------------------------------------------------------------------------
def test_a_refusal_is_recorded_and_shown_to_admins(
    api: httpx.Client,
    archive: Archive,
    held: HeldJobQueue,
    standin: DataCiteStandIn,
    prefix: str,
    users: Any,
    live_server: Any,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # published without contributors (publish_requires_valid off): no creator for DataCite
    dandiset = _new(api, contributor=[])
    version = _publish(api, dandiset)
    versioned = f"{prefix}/dandi.{dandiset}/{version}"
    held.run("doi:")
    row = _row(archive, versioned)
    assert row is not None and row.refused_status == 422 and row.state == "pending"
    assert row.last_error is not None and "creators" in row.last_error
    with httpx.Client(base_url=live_server.url, timeout=60) as admin:
        sign_in(admin, users.admin)
        shown = admin.get(f"/dandiset/{dandiset}/{version}").text
    assert "DataCite refused it (422)" in shown and "creators" in shown
    assert "DataCite refused it" not in api.get(f"/dandiset/{dandiset}/{version}").text  # owner
    statuses = dois.sync_all(archive, dandiset)
    lines = [dois.describe(s) for s in statuses]
    assert any(line.startswith(versioned) and "refused 422" in line for line in lines), lines


def test_doi_sync_sends_the_metadata_again(
    api: httpx.Client,
    archive: Archive,
    held: HeldJobQueue,
    standin: DataCiteStandIn,
    doi_settings: DoiSettings,
) -> None:
    dandiset = _new(api)
    version = _publish(api, dandiset)
    held.run("doi:")
    before = len(standin.calls)
    env = {
        **admin_env(archive.settings),
        "ZARRCHIVE_DOI_API_URL": doi_settings.api_url,
        "ZARRCHIVE_DOI_PREFIX": doi_settings.prefix,
        "ZARRCHIVE_DOI_USER": doi_settings.user,
        "ZARRCHIVE_DOI_PASSWORD": doi_settings.password,
        "ZARRCHIVE_DOI_PUBLISH": "true",
    }
    result = CliRunner().invoke(app, ["admin", "doi", "sync", dandiset], env=env)
    assert result.exit_code == 0, result.output
    concept = f"{doi_settings.prefix}/dandi.{dandiset}"
    assert result.output.splitlines() == [
        f"{concept}  findable",
        f"{concept}/{version}  findable",
    ]
    if not REAL:
        assert [(m, s) for m, _, s in standin.calls[before:]] == [("PUT", 200), ("PUT", 200)]
    refused = CliRunner().invoke(app, ["admin", "doi", "sync", "../1"], env=env)
    assert refused.exit_code != 0 and "not a dandiset identifier" in refused.output


# -- off: no DOI, no call -------------------------------------------------------------------
@pytest.mark.settings(doi=None)
def test_unset_settings_make_no_call(
    api: httpx.Client,
    archive: Archive,
    held: HeldJobQueue,
    standin: DataCiteStandIn,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _skip_real()
    opened: list[object] = []
    real_connect = socket.socket.connect
    # the archive's own: its API (the test's requests) and S3; anything else is a call out
    own = {httpx.URL(str(api.base_url)).port, httpx.URL(str(archive.settings.s3_endpoint_url)).port}

    def connect(self: socket.socket, address: Any) -> None:
        if self.type == socket.SOCK_STREAM and (
            not isinstance(address, tuple) or address[1] not in own
        ):
            opened.append(address)
        real_connect(self, address)

    monkeypatch.setattr(socket.socket, "connect", connect)
    dandiset = _new(api)
    version = _publish(api, dandiset)
    ok(api.delete(f"/api/dandisets/{_new(api)}/"), 204)
    assert held.queued("doi:") == []
    held.run()
    assert opened == [] and standin.calls == []
    with archive.db.session() as session:
        assert session.query(Doi).count() == 0
    metadata = ok(api.get(f"/api/dandisets/{dandiset}/versions/{version}/"))
    assert "doi" not in metadata
    assert "doi.org" not in api.get(f"/dandiset/{dandiset}").text
    assert dois.sync_all(archive) == []
