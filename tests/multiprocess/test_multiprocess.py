"""More than one process on one PostgreSQL, Redis and SeaweedFS: API server A
(``zarrchive serve --workers 2``: two processes behind one port), API server B (``zarrchive
serve``) and two ``zarrchive worker`` processes.  Clients upload concurrently through both
APIs (a batch opened through one is often completed through the other) to several Zarrs and
to one Zarr shared by every client; then every invariant holds for every Zarr (fsck, the
database root, a fresh checksum of the S3 listing, the API's listing), no batch is left open,
no request got a 5xx, and every Zarr's final checksum has a manifest, and every manifest is
unique (one row, one S3 object with one version) and hashes to its checksum.  Batches are
completed both ways: applied by the workers (the default) and at once (``wait=true``).
"""

from __future__ import annotations

import random
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from redis import Redis
from tests.helpers.consistency import assert_consistent
from tests.helpers.presigned import put_headers
from tests.helpers.reliability import budget
from tests.helpers.rq_workers import REDIS_URL
from tests.helpers.server_process import ServerProcess, zarrchive_command
from tests.helpers.zarr_client import authed, create_dandiset, create_zarr, expect, md5

from zarrchive.config import Settings
from zarrchive.services.identity.auth import create_user
from zarrchive.services.runtime import Archive

pytestmark = [pytest.mark.postgres, pytest.mark.redis, pytest.mark.slow]

CLIENTS = 4
#: rounds of each client (``make test`` runs a small budget; ``ZARRCHIVE_RELIABILITY=full``
#: the full one, see tests/helpers/reliability.py)
ROUNDS = budget(2, 4)
SHARED_ROUNDS = budget(2, 3)


@pytest.fixture
def redis_url() -> Iterator[str]:
    conn = Redis.from_url(REDIS_URL, socket_connect_timeout=2)
    try:
        conn.ping()
    except Exception as exc:
        pytest.skip(
            f"Redis is not reachable at {REDIS_URL} ({exc}): several processes share their "
            "jobs through Redis; set ZARRCHIVE_TEST_REDIS_URL"
        )
    yield REDIS_URL
    conn.close()


@pytest.fixture
def queue_name(redis_url: str) -> Iterator[str]:
    name = f"zarrchive-mp-{uuid.uuid4().hex}"
    yield name
    conn = Redis.from_url(redis_url)
    for key in conn.scan_iter(f"*{name}*"):
        conn.delete(key)
    conn.close()


class Deployment:
    """Two API servers (one with two worker processes) and two job workers."""

    def __init__(self, settings: Settings, tmp: Path) -> None:
        self.settings = settings
        self.api_a = ServerProcess(settings, tmp / "api-a.log", args=("--workers", "2"))
        self.api_b = ServerProcess(settings, tmp / "api-b.log")
        self.workers: list[subprocess.Popen[bytes]] = []
        self.tmp = tmp

    def start(self) -> None:
        self.api_a.start(timeout=120)
        self.api_b.start(timeout=120)
        env = self.api_b.environment()
        for i in range(2):
            log = (self.tmp / f"worker-{i}.log").open("ab")
            self.workers.append(
                subprocess.Popen(
                    [*zarrchive_command(), "worker", "--log-level", "WARNING"],
                    env=env,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                )
            )

    def stop(self) -> None:
        for process in self.workers:
            process.terminate()
        for process in self.workers:
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(10)
        self.api_a.stop()
        self.api_b.stop()

    def logs(self) -> str:
        return "\n".join(
            f"--- {p.name}\n{p.read_text(errors='replace')[-2000:]}"
            for p in sorted(self.tmp.glob("*.log"))
        )


class Client:
    """One client: a batch opened through one API may be completed through the other."""

    def __init__(self, apis: list[httpx.Client], seed: int) -> None:
        self.apis = apis
        self.rng = random.Random(seed)
        self.server_errors: list[str] = []
        #: (zarr_id, checksum) after each change this client made.
        self.checksums: list[tuple[str, str]] = []

    def api(self) -> httpx.Client:
        return self.rng.choice(self.apis)

    def call(self, method: str, url: str, **kwargs: Any) -> httpx.Response:
        """A request through either API; 409 (another client's batch is open) is retried."""
        deadline = time.monotonic() + 120
        while True:
            response = self.api().request(method, url, **kwargs)
            if response.status_code >= 500:
                self.server_errors.append(f"{method} {url}: {response.status_code} {response.text}")
                if response.status_code != 503:
                    return response
            elif response.status_code != 409:
                return response
            assert time.monotonic() < deadline, f"{method} {url} refused for 120 s"
            time.sleep(self.rng.uniform(0.02, 0.2))

    def upload(self, zarr_id: str, files: dict[str, bytes]) -> None:
        """Open a batch, PUT, complete: retried from the start when another client's batch
        was open (409) or ours was cancelled by nobody (never here)."""
        while True:
            opened = self.call(
                "POST",
                f"/api/zarr/{zarr_id}/upload/",
                json=[{"path": p, "etag": md5(b)} for p, b in files.items()],
            )
            urls = expect(opened)
            with httpx.Client(timeout=60) as s3:
                for item in urls:
                    body = files[item["path"]]
                    expect(
                        s3.put(
                            item["upload_url"],
                            content=body,
                            headers=put_headers(item["upload_url"], body),
                        )
                    )
            # applied by the workers (in order, one batch at a time per Zarr), or at once
            wait = self.rng.random() < 0.3
            done = self.call(
                "POST",
                f"/api/zarr/{zarr_id}/upload/complete/",
                params={"wait": "true"} if wait else {},
            )
            if done.status_code == 200:
                self.checksums.append((zarr_id, done.json()["checksum"]))
                return
            raise AssertionError(f"complete: {done.status_code} {done.text}")

    def delete(self, zarr_id: str, paths: list[str]) -> None:
        response = self.call(
            "DELETE", f"/api/zarr/{zarr_id}/files/", json=[{"path": p} for p in paths]
        )
        if response.status_code == 400:  # another client deleted one of them first
            return
        expect(response, 204)
        self.checksums.append(
            (zarr_id, expect(self.call("GET", f"/api/zarr/{zarr_id}/"))["checksum"])
        )

    def run(self, own: str, shared: str, name: str) -> None:
        for r in range(ROUNDS):
            files = {
                f"arr/{r}/{i}/{j}": f"{name}-{r}-{i}-{j}-{self.rng.random()}".encode()
                for i in range(3)
                for j in range(self.rng.randint(1, 6))
            }
            self.upload(own, files)
            if r == 1:
                self.delete(own, [f"arr/0/0/{j}" for j in range(1)])
        for r in range(SHARED_ROUNDS):
            files = {
                f"{name}/{r}/{j}": f"{name}-{r}-{j}".encode() for j in range(self.rng.randint(1, 8))
            }
            # the same paths too: concurrent clients overwrite each other's files
            files[f"common/{r}"] = f"{name}-{r}".encode()
            self.upload(shared, files)


@pytest.mark.parametrize("database_url", ["postgresql"], indirect=True)
def test_two_apis_and_two_workers_keep_every_invariant(
    seaweedfs: Any,
    bucket: str,
    embargo_bucket: str,
    database_url: str,
    redis_url: str,
    queue_name: str,
    tmp_path: Path,
    s3: Any,
) -> None:
    settings = Settings.from_env({}).with_overrides(
        data_dir=tmp_path,
        database_url=database_url,
        s3_endpoint_url=seaweedfs.endpoint_url,
        s3_bucket=bucket,
        s3_embargo_bucket=embargo_bucket,
        s3_access_key_id=seaweedfs.access_key_id,
        s3_secret_access_key=seaweedfs.secret_access_key,
        redis_url=redis_url,
        redis_queue=queue_name,
    )
    archive = Archive.from_settings(settings)  # migrates; the test's own view of the state
    with archive.db.session() as session:
        _, token = create_user(session, "owner")
    deployment = Deployment(settings, tmp_path)
    try:
        deployment.start()
        apis = [authed(deployment.api_a.url, token), authed(deployment.api_b.url, token)]
        dandiset = create_dandiset(apis[0], "multiprocess")
        shared = create_zarr(apis[1], dandiset, "shared.zarr")
        own = [create_zarr(apis[i % 2], dandiset, f"own-{i}.zarr") for i in range(CLIENTS)]
        clients = [Client(apis, seed) for seed in range(CLIENTS)]
        errors: list[BaseException] = []

        def work(i: int) -> None:
            try:
                clients[i].run(own[i], shared, f"c{i}")
            except BaseException as exc:  # reported below, with the servers' logs
                errors.append(exc)

        threads = [threading.Thread(target=work, args=(i,)) for i in range(CLIENTS)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(600)
        assert not errors, (errors, deployment.logs())
        assert not [e for c in clients for e in c.server_errors if " 503 " not in e], (
            deployment.logs()
        )

        zarrs = [shared, *own]
        deadline = time.monotonic() + 180
        while not all(
            expect(apis[0].get(f"/api/zarr/{z}/"))["upload_state"] == "at_rest" for z in zarrs
        ):  # the workers apply the last batches
            assert time.monotonic() < deadline, deployment.logs()
            time.sleep(0.5)
        finals: dict[str, str] = {}
        for zarr_id in zarrs:
            assert_consistent(archive, apis[0], s3, bucket, zarr_id)
            assert_consistent(archive, apis[1], s3, bucket, zarr_id)
            finals[zarr_id] = expect(apis[1].get(f"/api/zarr/{zarr_id}/"))["checksum"]

        # the workers write the manifest of every Zarr's resting checksum, once
        deadline = time.monotonic() + 180
        while True:
            manifests = {z: expect(apis[0].get(f"/api/zarr/{z}/manifests/")) for z in zarrs}
            if all(any(m["checksum"] == finals[z] for m in manifests[z]) for z in zarrs):
                break
            assert time.monotonic() < deadline, (manifests, finals, deployment.logs())
            time.sleep(0.5)
        for zarr_id, rows in manifests.items():
            checksums = [m["checksum"] for m in rows]
            assert len(checksums) == len(set(checksums)), rows  # one row per checksum
            for row in rows:
                # the Zarr's objects hashed to that checksum when it was written: a state the
                # Zarr was really at (and no mismatch alarm)
                assert row["listing_checksum"] == row["checksum"], row
                key = f"zarr-manifest/{zarr_id}/{row['checksum']}.json"
                versions = s3.list_object_versions(Bucket=bucket, Prefix=key).get("Versions", [])
                assert [v["Key"] for v in versions] == [key], versions  # written once
            listed = s3.list_objects_v2(Bucket=bucket, Prefix=f"zarr-manifest/{zarr_id}/")
            assert sorted(o["Key"] for o in listed.get("Contents", [])) == sorted(
                f"zarr-manifest/{zarr_id}/{c}.json" for c in checksums
            )
        for api in apis:
            api.close()
    finally:
        deployment.stop()
        archive.close()
