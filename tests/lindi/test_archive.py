"""LINDI files inside the archive: an HDF5 (NWB) blob that becomes an asset gets its LINDI
file from a background job; lindi 0.4.6, pynwb and our reader open it by its URL and read
what h5py reads from the local file; embargoed ones only for owners; non-HDF5 blobs get
none; a corrupt file fails once, with its reason."""

from __future__ import annotations

import json
import os
import urllib.parse
import warnings
from pathlib import Path
from typing import Any

import h5py
import httpx
import numpy as np
import pytest
from typer.testing import CliRunner

from tests.conftest import Users
from tests.helpers.assets import ok
from tests.helpers.blob_uploads import Route, attach, upload_by
from tests.helpers.databases import SQLITE_ONLY
from tests.helpers.jobs import HeldJobQueue
from tests.helpers.lab_nwb import NWB_SUMMARY, datasets, nwb_summary, write_lab_nwb
from tests.helpers.lindi import DUMP, dump, run_oracle
from tests.helpers.snapshots import admin_env
from zarrchive.db.models import LindiFile, LindiState
from zarrchive.lindi import File, RangeReader
from zarrchive.services.dandi import lindi_files
from zarrchive.services.runtime import Archive

pynwb = pytest.importorskip("pynwb")

#: End to end with real NWB files, oracles and jobs: the LINDI rows are plain SQLAlchemy.
pytestmark = SQLITE_ONLY

#: lindi 0.4.6 opens a LINDI file by its URL and dumps every object (the oracle).
LINDI_DUMP = (
    DUMP
    + r"""
import lindi
f = lindi.LindiH5pyFile.from_lindi_file(sys.argv[1])
print(json.dumps(dump(f)))
"""
)

#: pynwb (in lindi's environment) reads the NWB through lindi 0.4.6's h5py-like file.
LINDI_PYNWB = (
    NWB_SUMMARY
    + r"""
import json, os, sys, warnings
import lindi, pynwb
warnings.simplefilter("ignore")
f = lindi.LindiH5pyFile.from_lindi_file(sys.argv[1])
with pynwb.NWBHDF5IO(file=f, mode="r") as io:
    found = nwb_summary(io.read(), compound=False)
print(json.dumps(found), flush=True)  # the last line (lindi prints a warning at exit)
os._exit(0)
"""
)

#: An owner reads an embargoed LINDI file with lindi: the token in a header to the API
#: only (the JSON, and a URL resolver that asks the API where each chunk is), never to S3.
LINDI_OWNER_DUMP = (
    DUMP
    + r"""
import os
import urllib.parse
import requests
import lindi
from lindi.LindiRemfile.additional_url_resolvers import add_additional_url_resolver

auth = {"Authorization": "token " + os.environ["LINDI_TEST_TOKEN"]}
api = sys.argv[2]

def resolve(url):
    if not url.startswith(api):
        return url
    answer = requests.get(url, headers=auth, allow_redirects=False)
    assert answer.status_code == 302, (answer.status_code, answer.text)
    return answer.headers["location"]

add_additional_url_resolver(resolve)
rfs = requests.get(sys.argv[1], headers=auth).json()
f = lindi.LindiH5pyFile.from_reference_file_system(rfs)
print(json.dumps(dump(f)))
"""
)


@pytest.fixture(scope="module")
def lab_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where the module's NWB files are made, once per seed (both databases share them)."""
    return tmp_path_factory.mktemp("lab-nwb")


def _nwb(lab_dir: Path, seed: int) -> tuple[Path, bytes]:
    path = lab_dir / f"lab{seed}.nwb"
    if not path.exists():
        write_lab_nwb(path, seed=seed)
    return path, path.read_bytes()


def _expected(path: Path) -> Any:
    with h5py.File(path) as f:
        return json.loads(json.dumps(dump(f)))


def _pynwb_summary(source: Any) -> dict[str, Any]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if isinstance(source, Path):
            with pynwb.NWBHDF5IO(str(source), "r") as io:
                summary: dict[str, Any] = nwb_summary(io.read())
                return summary
        with pynwb.NWBHDF5IO(file=source, mode="r") as io:
            summary = nwb_summary(io.read())
            return summary


def _same_datasets(ours: File, local: Path) -> None:
    with h5py.File(local) as f:
        expected = datasets(f)
        got = datasets(ours)
        assert sorted(got) == sorted(expected)
        for path, value in expected.items():
            mine = got[path]
            if (
                isinstance(value, np.ndarray)
                and value.dtype.names is None
                and value.dtype.kind != "O"
            ):
                assert mine.dtype == value.dtype, path
                np.testing.assert_array_equal(mine, value, err_msg=path)
            elif isinstance(value, h5py.Reference):
                assert ours[mine].name == f[value].name, path
            elif isinstance(value, np.ndarray) and value.dtype.kind == "O":
                for a, b in zip(mine.reshape(-1), value.reshape(-1), strict=True):
                    if isinstance(b, h5py.Reference):
                        assert ours[a].name == f[b].name, path
                    else:
                        assert a == b, path
            elif isinstance(value, np.ndarray):  # compound
                assert mine.dtype.names == value.dtype.names, path
                for name in value.dtype.names:
                    for a, b in zip(mine[name], value[name], strict=True):
                        if isinstance(b, h5py.Reference):
                            assert ours[a].name == f[b].name, path
                        else:
                            assert a == b, path
            else:
                assert mine == value, path


def _row(archive: Archive, blob_id: str) -> LindiFile | None:
    with archive.db.session() as session:
        row = session.get(LindiFile, blob_id)
        if row is not None:
            session.expunge(row)
        return row


@pytest.mark.parametrize("route", ["md5", "dandi"])
def test_an_nwb_asset_gets_a_lindi_file_that_lindi_pynwb_and_ours_read(
    route: Route,
    api: httpx.Client,
    anon: httpx.Client,
    dandiset: str,
    held: HeldJobQueue,
    archive: Archive,
    lindi_python: str,
    tmp_path: Path,
    lab_dir: Path,
) -> None:
    path, data = _nwb(lab_dir, seed=1 if route == "md5" else 2)
    blob_id = upload_by(route, api, dandiset, data)
    asset = ok(attach(api, dandiset, "sub-1/sub-1_ecephys.nwb", blob_id=blob_id))
    lindi_url = f"{api.base_url}/api/assets/{asset['asset_id']}/lindi.json"
    assert (asset["lindi_state"], asset["lindi_url"]) == ("pending", lindi_url)
    busy = anon.get(lindi_url)
    assert busy.status_code == 503, busy.text
    # the same blob as a second asset: one LINDI file, one job
    other = ok(attach(api, dandiset, "copy.nwb", blob_id=blob_id))
    assert held.queued("lindi:") == [f"lindi:{blob_id}"]
    assert held.run("lindi:") == 1
    for asset_id in (asset["asset_id"], other["asset_id"]):
        info = ok(anon.get(f"/api/assets/{asset_id}/info/"))
        assert info["lindi_state"] == "ready" and info["lindi_error"] is None
    row = _row(archive, blob_id)
    assert row is not None and row.state == LindiState.READY and row.attempts == 1

    # public: a redirect to the bucket; its chunk references are the blob's plain S3 URL
    redirect = anon.get(lindi_url)
    assert redirect.status_code == 302
    rfs = httpx.get(redirect.headers["location"]).json()
    urls = {v[0] for v in rfs["refs"].values() if isinstance(v, list)}
    urls = {rfs.get("templates", {}).get(u[2:-2], u) for u in urls}
    assert urls == {archive.store.public_url(archive_blob_key(archive, blob_id))}

    # the files page links it, and Neurosift opens the public NWB through it
    page = anon.get(f"/dandiset/{dandiset}/draft/files", params={"location": "sub-1"})
    assert page.status_code == 200, page.text
    assert f'href="/api/assets/{asset["asset_id"]}/lindi.json"' in page.text
    quoted = urllib.parse.quote(redirect.headers["location"], safe="")
    assert f"https://neurosift.app/nwb?url={quoted}" in page.text

    theirs = run_oracle(lindi_python, LINDI_DUMP, lindi_url, cwd=tmp_path)
    assert theirs == _expected(path)
    through_lindi = run_oracle(lindi_python, LINDI_PYNWB, lindi_url, cwd=tmp_path)
    # all but the compound column, which lindi 0.4.6 can't slice (its own dump above reads it
    # field by field; our reader and pynwb read it whole below)
    with pynwb.NWBHDF5IO(str(path), "r") as io:
        assert through_lindi == json.loads(json.dumps(nwb_summary(io.read(), compound=False)))
    with File(lindi_url) as ours:
        _same_datasets(ours, path)
        assert _pynwb_summary(ours) == _pynwb_summary(path)


def archive_blob_key(archive: Archive, blob_id: str) -> str:
    from zarrchive.db.models import Blob

    with archive.db.session() as session:
        blob = session.get(Blob, blob_id)
        assert blob is not None
        return blob.key


def test_an_embargoed_nwb_is_read_by_owners_only_and_the_token_never_reaches_s3(
    api: httpx.Client,
    anon: httpx.Client,
    users: Users,
    held: HeldJobQueue,
    archive: Archive,
    lindi_python: str,
    tmp_path: Path,
    lab_dir: Path,
) -> None:
    secret = ok(api.post("/api/dandisets/", json={"name": "secret", "embargo": True}))
    identifier = secret["identifier"]
    path, data = _nwb(lab_dir, seed=3)
    blob_id = upload_by("md5", api, identifier, data)
    asset = ok(attach(api, identifier, "sub-1/secret.nwb", blob_id=blob_id))
    held.run("lindi:")
    lindi_url = asset["lindi_url"]
    data_url = f"{api.base_url}/api/lindi/blobs/{blob_id}/data/"
    # the file lives in the private bucket only
    assert archive.embargo_store.head(lindi_files.lindi_key(blob_id)) is not None
    assert archive.store.head(lindi_files.lindi_key(blob_id)) is None
    assert (
        httpx.get(archive.embargo_store.public_url(lindi_files.lindi_key(blob_id))).status_code
        == 403
    )
    with httpx.Client(headers={"Authorization": f"token {users.other}"}) as other:
        for client, status in ((anon, 401), (other, 404)):
            assert client.get(lindi_url).status_code in (status, 404)
            assert client.get(data_url, follow_redirects=False).status_code in (status, 404)

    # our reader: the token in a header of the API's requests only
    seen: list[tuple[str, bool]] = []

    def record(request: httpx.Request) -> None:
        seen.append((str(request.url), "authorization" in request.headers))

    token = users.owner
    with httpx.Client(
        headers={"Authorization": f"token {token}"},
        follow_redirects=True,
        event_hooks={"request": [record]},
        timeout=60,
    ) as client:
        rfs = client.get(lindi_url).json()
        urls = {v[0] for v in rfs["refs"].values() if isinstance(v, list)}
        urls = {rfs.get("templates", {}).get(u[2:-2], u) for u in urls}
        assert urls == {data_url}
        with File(rfs, reader=RangeReader(http_client=client)) as ours:
            _same_datasets(ours, path)
            assert _pynwb_summary(ours) == _pynwb_summary(path)
    api_base = str(api.base_url)
    to_s3 = [(u, auth) for u, auth in seen if not u.startswith(api_base)]
    assert to_s3 and not any(auth for _, auth in to_s3)
    assert all(token not in u for u, _ in seen)

    # lindi 0.4.6, the same way
    os.environ["LINDI_TEST_TOKEN"] = token  # run_oracle passes the environment on
    try:
        theirs = run_oracle(lindi_python, LINDI_OWNER_DUMP, lindi_url, api_base, cwd=tmp_path)
    finally:
        os.environ.pop("LINDI_TEST_TOKEN", None)
    assert theirs == _expected(path)


def test_unembargo_rewrites_the_lindi_file_for_the_public_url(
    api: httpx.Client,
    anon: httpx.Client,
    held: HeldJobQueue,
    archive: Archive,
    lab_dir: Path,
) -> None:
    secret = ok(api.post("/api/dandisets/", json={"name": "secret", "embargo": True}))
    identifier = secret["identifier"]
    path, data = _nwb(lab_dir, seed=4)
    blob_id = upload_by("md5", api, identifier, data)
    asset = ok(attach(api, identifier, "a.nwb", blob_id=blob_id))
    held.run("lindi:")
    ok(api.post(f"/api/dandisets/{identifier}/unembargo/"))
    held.run()  # the move, then the LINDI file it asks for
    row = _row(archive, blob_id)
    assert row is not None and row.state == LindiState.READY and not row.embargoed
    key = lindi_files.lindi_key(blob_id)
    assert archive.embargo_store.head(key) is None
    redirect = anon.get(asset["lindi_url"])
    assert redirect.status_code == 302
    rfs = httpx.get(redirect.headers["location"]).json()
    urls = {v[0] for v in rfs["refs"].values() if isinstance(v, list)}
    urls = {rfs.get("templates", {}).get(u[2:-2], u) for u in urls}
    assert urls == {archive.store.public_url(archive_blob_key(archive, blob_id))}
    with File(asset["lindi_url"]) as ours:
        _same_datasets(ours, path)


def test_a_non_hdf5_blob_gets_none_and_a_corrupt_one_fails_once_with_its_reason(
    api: httpx.Client,
    anon: httpx.Client,
    dandiset: str,
    held: HeldJobQueue,
    archive: Archive,
    lab_dir: Path,
) -> None:
    text = ok(
        attach(api, dandiset, "notes.nwb", blob_id=upload_by("md5", api, dandiset, b"x" * 4000))
    )
    _, real = _nwb(lab_dir, seed=5)
    corrupt_bytes = real[:4096] + bytes(len(real) - 4096)  # the signature, then zeros
    corrupt = ok(
        attach(api, dandiset, "broken.nwb", blob_id=upload_by("md5", api, dandiset, corrupt_bytes))
    )
    assert held.run("lindi:") == 2
    info = ok(anon.get(f"/api/assets/{text['asset_id']}/info/"))
    assert (info["lindi_state"], info["lindi_url"]) == (None, None)
    assert anon.get(f"/api/assets/{text['asset_id']}/lindi.json").status_code == 404
    assert archive.store.head(lindi_files.lindi_key(text["blob"])) is None
    assert _row(archive, text["blob"]).state == LindiState.NOT_HDF5  # type: ignore[union-attr]

    info = ok(anon.get(f"/api/assets/{corrupt['asset_id']}/info/"))
    assert info["lindi_state"] == "failed"
    assert "not a readable HDF5 file" in info["lindi_error"]
    refused = anon.get(f"/api/assets/{corrupt['asset_id']}/lindi.json")
    assert refused.status_code == 404 and "not a readable HDF5 file" in refused.text
    # no retry storm: nothing queued, running it again does nothing, a new asset neither
    assert held.queued("lindi:") == []
    row = _row(archive, corrupt["blob"])
    assert row is not None and row.attempts == 1
    again = lindi_files.convert_blob(archive, corrupt["blob"])
    assert again is not None and again.state == LindiState.FAILED
    ok(attach(api, dandiset, "broken-again.nwb", blob_id=corrupt["blob"]))
    assert held.queued("lindi:") == []
    assert _row(archive, corrupt["blob"]).attempts == 1  # type: ignore[union-attr]


def test_a_conversion_that_keeps_crashing_fails_after_its_attempts(
    api: httpx.Client,
    dandiset: str,
    held: HeldJobQueue,
    archive: Archive,
    lab_dir: Path,
) -> None:
    _, data = _nwb(lab_dir, seed=6)
    blob_id = upload_by("md5", api, dandiset, data)
    ok(attach(api, dandiset, "a.nwb", blob_id=blob_id))
    with archive.db.write_session() as session:  # as if the worker died that many times
        row = session.get(LindiFile, blob_id)
        assert row is not None
        row.attempts = lindi_files.MAX_ATTEMPTS
    held.run("lindi:")
    row = _row(archive, blob_id)
    assert row is not None and row.state == LindiState.FAILED
    assert row.reason is not None and "gave up after 3 attempts" in row.reason
    assert archive.store.head(lindi_files.lindi_key(blob_id)) is None


def test_backfill_converts_existing_blobs_and_gc_leaves_lindi_files_alone(
    api: httpx.Client,
    dandiset: str,
    zarr_id: str,
    archive: Archive,
    settings: Any,
    lab_dir: Path,
) -> None:
    from zarrchive.cli import app

    _, data = _nwb(lab_dir, seed=7)
    blob_id = upload_by("md5", api, dandiset, data)  # no job queue: the file waits
    asset = ok(attach(api, dandiset, "a.nwb", blob_id=blob_id))
    text = ok(attach(api, dandiset, "b.txt", blob_id=upload_by("md5", api, dandiset, b"hello")))
    assert asset["lindi_state"] == "pending"
    env = admin_env(settings)
    result = CliRunner().invoke(app, ["lindi", "backfill", "--all"], env=env)
    assert result.exit_code == 0, result.output
    assert f"{blob_id}\tready" in result.stdout
    assert f"{text['blob']}\tnot-hdf5" in result.stdout
    assert ok(api.get(f"/api/assets/{asset['asset_id']}/info/"))["lindi_state"] == "ready"
    key = lindi_files.lindi_key(blob_id)
    before = archive.store.head(key)
    assert before is not None
    result = CliRunner().invoke(app, ["admin", "gc", "--apply", "--grace-days", "0"], env=env)
    assert result.exit_code == 0, result.output
    after = archive.store.head(key)
    assert after is not None and after.etag == before.etag
    # a named asset is converted again (a failed one is retried)
    result = CliRunner().invoke(app, ["lindi", "backfill", asset["asset_id"]], env=env)
    assert result.exit_code == 0 and f"{blob_id}\tready" in result.stdout
