"""Hostile HDF5 uploads (issue #35 items 1-3): an uploaded file's conversion to its LINDI
file never reads outside the blob, never grows the API server's memory, and is bounded.

- the first wall: a file that points outside itself (external storage of strings,
  compounds, variable-length strings and numbers; external links; virtual datasets; a
  user-defined filter) fails with its reason, and no byte of the file it names reaches a
  LINDI file or an answer;
- the second wall: the conversion's child process can't read the data directory, the
  parent's environment or any other file, write, or connect elsewhere, even when HDF5 itself
  follows the file's pointers (checked by a probe task run under the same wall), and is
  stopped past its time, memory and output limits, saying which;
- bombs: a 1 MB file of 512 MiB of strings fails with its reason while the ``zarrchive
  serve`` process's peak memory stays within 100 MB; a file of 3,000 object references
  converts (references resolve through the survey's map, not by searching the file).
"""

from __future__ import annotations

import base64
import json
import os
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import make_settings
from tests.helpers import hostile_hdf5
from tests.helpers.assets import ok
from tests.helpers.blob_uploads import attach, upload_by
from tests.helpers.databases import SQLITE_ONLY
from tests.helpers.jobs import HeldJobQueue
from tests.helpers.server_process import ServerProcess
from tests.helpers.zarr_client import authed, create_dandiset
from zarrchive.config import make_private_dir
from zarrchive.lindi.refs import decode_inline
from zarrchive.sandbox import Limits, Status, landlock, probe, run_task
from zarrchive.sandbox.runner import CHILD_ENV
from zarrchive.services.dandi import lindi_files
from zarrchive.services.identity.auth import create_user
from zarrchive.services.runtime import Archive
from zarrchive.storage.seaweedfs import SeaweedFS

pytestmark = SQLITE_ONLY

MiB = 1024 * 1024
#: How much a conversion may raise the API server's peak resident memory.
MEMORY_BOUND = 100 * MiB
#: What the data directory's credentials file holds in these tests.
SECRET = b'{"access_key": "LEAKTESTACCESSKEY", "secret_key": "leak-test-secret-0123456789abcdef"}'
MARKERS = (b"LEAKTESTACCESSKEY", b"leak-test-secret")


def _secret_file(data_dir: Path) -> Path:
    make_private_dir(data_dir)
    path = data_dir / "s3-credentials.json"
    path.write_bytes(SECRET)
    path.chmod(0o600)
    return path


def leaks(data: bytes) -> bool:
    """Whether *data* holds the secret, as is or in any base64 of it (inline chunks)."""
    if any(m in data for m in MARKERS):
        return True
    for shift in range(3):
        encoded = base64.b64encode(b"\0" * shift + SECRET)[4:-4]
        if encoded[: len(encoded) // 2] in data:
            return True
    return False


def _hostile(kind: str, secret: Path) -> bytes:
    if kind in ("string", "numeric", "compound", "vlen"):
        return hostile_hdf5.external_storage(secret, kind)
    target = hostile_hdf5.secret_hdf5(secret.with_name("secret.h5"), SECRET)
    if kind == "external-link":
        return hostile_hdf5.external_link(target)
    if kind == "virtual":
        return hostile_hdf5.virtual_dataset(target, len(SECRET))
    assert kind == "filter"
    return hostile_hdf5.unknown_filter()


#: What each file's failed conversion says.
REASONS = {
    "string": "/leak keeps its data in external files (HDF5 external storage)",
    "numeric": "/leak keeps its data in external files (HDF5 external storage)",
    "compound": "/leak keeps its data in external files (HDF5 external storage)",
    "vlen": "/leak keeps its data in external files (HDF5 external storage)",
    "external-link": "/leak is an external link to /x in ",
    "virtual": "/leak is a virtual dataset (its data lives in other files)",
    "filter": "/leak uses the user-defined HDF5 filter 32099",
}


def test_no_byte_outside_the_blob_reaches_a_lindi_file_or_an_answer(
    api: httpx.Client,
    anon: httpx.Client,
    dandiset: str,
    held: HeldJobQueue,
    archive: Archive,
) -> None:
    """One file of each kind, as assets of one dandiset (one archive: make test's budget)."""
    secret = _secret_file(archive.settings.data_dir)
    assets = {}
    for kind in sorted(REASONS):
        blob_id = upload_by("md5", api, dandiset, _hostile(kind, secret))
        assets[kind] = ok(attach(api, dandiset, f"sub-1/{kind}.nwb", blob_id=blob_id))
    assert held.run("lindi:") == len(REASONS)
    for kind, asset in assets.items():
        info = anon.get(f"/api/assets/{asset['asset_id']}/info/")
        assert info.status_code == 200, info.text
        assert info.json()["lindi_state"] == "failed", (kind, info.text)
        assert REASONS[kind] in info.json()["lindi_error"], kind
        refused = anon.get(f"/api/assets/{asset['asset_id']}/lindi.json")
        assert refused.status_code == 404 and REASONS[kind] in refused.text, kind
        assert archive.store.head(lindi_files.lindi_key(asset["blob"])) is None, kind
        # the asset stays, and nothing of the secret is in any answer
        for answer in (info.content, refused.content):
            assert not leaks(answer), kind
    listing = api.get(f"/api/dandisets/{dandiset}/versions/draft/assets/")
    assert listing.status_code == 200 and len(listing.json()["results"]) == len(REASONS)
    assert not leaks(listing.content)


# -- the second wall ------------------------------------------------------------------------
@pytest.fixture
def listening_port() -> Iterator[int]:
    """A loopback TCP port something listens on (that the child must not reach)."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        yield server.getsockname()[1]


def test_the_child_reads_nothing_of_the_data_directory_even_when_hdf5_asks(
    tmp_path: Path, listening_port: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # where the unwalled control writes its file
    data_dir = tmp_path / "data"
    secret = _secret_file(data_dir)
    target = hostile_hdf5.secret_hdf5(data_dir / "secret.h5", SECRET)
    # one file with every pointer out (the probe reads it through HDF5, with no first wall)
    import h5py

    (tmp_path / "upload").mkdir()
    hostile = tmp_path / "upload" / "hostile.h5"
    with h5py.File(hostile, "w") as f:
        f.create_dataset(
            "storage", shape=(len(SECRET),), dtype="S1", external=[(str(secret), 0, len(SECRET))]
        )
        f["link"] = h5py.ExternalLink(str(target), "/x")
        layout = h5py.VirtualLayout(shape=(len(SECRET),), dtype="u1")
        layout[:] = h5py.VirtualSource(str(target), "x", shape=(len(SECRET),))
        f.create_virtual_dataset("virtual", layout)
    os.environ["ZARRCHIVE_PROBE_SECRET"] = SECRET.decode()  # in this process's environment
    try:
        args = {
            "paths": [str(secret), str(target), f"/proc/{os.getpid()}/environ", "/etc/hostname"],
            "ports": [listening_port],
            "hdf5": str(hostile),
        }
        # the control: the same probe without the wall reads the secret every way
        unwalled = json.loads(probe.prepare(args).run())
        assert all(v.startswith("read: ") for v in unwalled["files"].values())
        assert all(v.startswith("read: ") for v in unwalled["hdf5"].values())
        assert unwalled["write"] == "written"
        result = run_task(probe.__name__, args, Limits(seconds=120), forbidden=[data_dir])
    finally:
        del os.environ["ZARRCHIVE_PROBE_SECRET"]
    with result:
        assert result.status == Status.OK, result.reason
        assert result.output is not None
        answer = result.output.read()
    assert not leaks(answer), answer
    found: dict[str, Any] = json.loads(answer)
    assert set(found["environ"]) <= {*CHILD_ENV, "HDF5_PLUGIN_PATH"}  # no credentials
    assert all(v.startswith("denied: ") for v in found["files"].values()), found["files"]
    # HDF5 fails to open what the file names (a virtual dataset then reads its fill value)
    hdf5 = found["hdf5"]
    assert hdf5["storage"].startswith("error: ") and hdf5["link"].startswith("error: "), hdf5
    assert hdf5["virtual"] == "read: " + "\0" * len(SECRET)
    assert found["write"].startswith("denied: ")
    assert found["cwd"].startswith(("denied: ", "listed: ")) and "probe" not in found["cwd"]
    if os.geteuid() == 0:
        assert found["uid"] == 65534 and result.walls["uid"] == 65534
    abi = landlock.abi_version()
    assert result.walls["landlock"] == abi
    if abi >= 4:
        assert found["ports"][str(listening_port)].startswith("denied: ")


@pytest.mark.parametrize(
    ("args", "limits", "reason"),
    [
        ({"forever": True}, Limits(seconds=3), "took longer than its time limit (3 s)"),
        (
            {"allocate": 2 * 1024 * MiB},
            Limits(seconds=120, memory_bytes=512 * MiB),
            "ran out of its memory limit (512 MiB)",
        ),
        (
            {"output": 8 * MiB},
            Limits(seconds=120, output_bytes=MiB),
            f"its result passed {MiB} bytes",
        ),
    ],
    ids=["time", "memory", "output"],
)
def test_a_child_past_a_limit_is_stopped_and_says_which(
    args: dict[str, Any], limits: Limits, reason: str
) -> None:
    with run_task(probe.__name__, args, limits) as result:
        assert (result.status, result.reason) == (Status.LIMIT, reason)
        assert result.output is None


# -- bombs against a `zarrchive serve` process ----------------------------------------------
@pytest.fixture(scope="module")
def server(
    seaweedfs: SeaweedFS, bucket: str, embargo_bucket: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[ServerProcess, str]]:
    """A ``zarrchive serve`` child over SQLite; a token of its user."""
    directory: Path = tmp_path_factory.mktemp("hostile-hdf5")
    settings = make_settings(
        seaweedfs, bucket, f"sqlite:///{directory / 'zarrchive.sqlite3'}", directory
    )
    archive = Archive.from_settings(settings)  # migrates
    with archive.db.session() as session:
        token = create_user(session, "owner", admin=False)[1]
    archive.close()
    server = ServerProcess(settings, directory / "server.log", address_space_limit=8 * 1024 * MiB)
    server.start(timeout=240)
    try:
        yield server, token
    finally:
        server.stop()


def _lindi_state(api: httpx.Client, asset_id: str, timeout: float = 300) -> dict[str, Any]:
    """The asset's info once its conversion has ended (waits up to *timeout* seconds)."""
    deadline = time.monotonic() + timeout
    while True:
        info: dict[str, Any] = ok(api.get(f"/api/assets/{asset_id}/info/"))
        if info["lindi_state"] != "pending":
            return info
        assert time.monotonic() < deadline, f"the conversion of {asset_id} did not end"
        time.sleep(0.2)


@pytest.mark.parametrize(
    ("datasets", "elements", "reason"),
    [
        # the issue's: 8 x 64 MiB of strings, each within the old per-dataset bound
        (8, 4 * MiB, "too big to convert: a dataset of 67108864 bytes to decode"),
        # 64 x 4 MiB: each within the per-dataset bound, the file past the file's bound
        (64, MiB // 4, "more than 16777216 bytes of data stored inline in the LINDI file"),
    ],
    ids=["8x64MiB", "64x4MiB"],
)
def test_a_string_bomb_fails_with_its_reason_and_the_server_memory_stays_flat(
    server: tuple[ServerProcess, str], datasets: int, elements: int, reason: str
) -> None:
    process, token = server
    data = hostile_hdf5.string_bomb(datasets, elements)
    assert len(data) < 2 * MiB
    with authed(process.url, token, timeout=120) as api:
        dandiset = create_dandiset(api, f"bomb {datasets}")
        # a well-formed file first: imports and caches of a conversion are not measured
        warm = ok(
            attach(
                api,
                dandiset,
                "warm.nwb",
                blob_id=upload_by("md5", api, dandiset, hostile_hdf5.many_references(10)),
            )
        )
        assert _lindi_state(api, warm["asset_id"])["lindi_state"] == "ready"
        blob_id = upload_by("md5", api, dandiset, data)

        def convert() -> dict[str, Any]:
            asset = ok(attach(api, dandiset, "bomb.nwb", blob_id=blob_id))
            return _lindi_state(api, asset["asset_id"])

        info, growth = process.peak_growth(convert)
    assert growth < MEMORY_BOUND, f"the server's peak memory grew by {growth / MiB:.0f} MiB"
    assert info["lindi_state"] == "failed"
    assert reason in info["lindi_error"]


def test_three_thousand_object_references_convert_by_the_address_map(
    server: tuple[ServerProcess, str],
) -> None:
    process, token = server
    with authed(process.url, token, timeout=120) as api:
        dandiset = create_dandiset(api)
        blob_id = upload_by("md5", api, dandiset, hostile_hdf5.many_references(3000))
        asset = ok(attach(api, dandiset, "refs.nwb", blob_id=blob_id))
        info, growth = process.peak_growth(lambda: _lindi_state(api, asset["asset_id"]))
        assert info["lindi_state"] == "ready", info
        redirect = api.get(f"/api/assets/{asset['asset_id']}/lindi.json")
        assert redirect.status_code == 302
        rfs = httpx.get(redirect.headers["location"], timeout=60).json()
    assert growth < MEMORY_BOUND
    chunk = rfs["refs"]["refs/0"]
    assert isinstance(chunk, str)
    values = json.loads(decode_inline(chunk))
    paths = [v["_REFERENCE"]["path"] for v in values[:-2]]
    assert paths == [f"/g{i:05d}" for i in range(3000)]
