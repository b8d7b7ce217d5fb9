"""Races: 4 clients open/PUT/complete/cancel/delete at random on one Zarr, through the API
and presigned URLs.  After every round the tree, the database and S3 agree, no batch is
stuck and no request got a 5xx."""

from __future__ import annotations

import os
import random
import threading
from typing import Any

import httpx

from tests.conftest import Users
from tests.helpers.consistency import assert_consistent
from tests.helpers.reliability import budget, count, note
from tests.helpers.zarr_client import (
    authed,
    create_dandiset,
    create_zarr,
    expect,
    md5,
    put_presigned,
)
from zarrchive.services.runtime import Archive

PART = "races"
CLIENTS = 4
PATHS = [f"{d}/{i}" for d in ("a", "a/deep", "b") for i in range(4)] + [".zattrs"]
#: What a client may be answered when other clients got there first.
EXPECTED = {200, 204, 400, 404, 409}


class Client:
    """One racing client: its own HTTP connection, its own random stream."""

    def __init__(self, base_url: str, token: str, zarr_id: str, seed: int, shared: dict[str, Any]):
        self.api = authed(base_url, token)
        self.s3 = httpx.Client(timeout=60)
        self.zarr_id = zarr_id
        self.random = random.Random(seed)
        self.shared = shared
        self.statuses: list[tuple[str, int, str]] = []

    def call(self, what: str, method: str, url: str, **kw: Any) -> httpx.Response:
        response = self.api.request(method, url, **kw)
        self.statuses.append((what, response.status_code, response.text[:300]))
        return response

    def batch(self) -> None:
        z = f"/api/zarr/{self.zarr_id}"
        paths = self.random.sample(PATHS, self.random.randint(1, 4))
        files = {p: os.urandom(self.random.randint(0, 64)) + p.encode() for p in paths}
        body = [{"path": p, "etag": md5(b)} for p, b in files.items()]
        response = self.call("open", "POST", f"{z}/upload/", json=body)
        if response.status_code != 200:
            return
        # the batch may be another client's too: PUT only this client's files
        urls = [u for u in response.json() if u["path"] in files]
        for item in urls:
            put_presigned(self.s3, item["upload_url"], files[item["path"]])
        end = self.random.random()
        if end < 0.7:
            self.call("complete", "POST", f"{z}/upload/complete/")
        elif end < 0.9:
            cancelled = self.call("cancel", "DELETE", f"{z}/upload/").status_code == 204
            if cancelled and urls:
                first = urls[0]
                with self.shared["lock"]:
                    self.shared["cancelled"].append((first["upload_url"], files[first["path"]]))

    def step(self) -> None:
        z = f"/api/zarr/{self.zarr_id}"
        r = self.random.random()
        if r < 0.45:
            self.batch()
        elif r < 0.6:
            paths = self.random.sample(PATHS, self.random.randint(1, 2))
            self.call("delete", "DELETE", f"{z}/files/", json=[{"path": p} for p in paths])
        elif r < 0.72:
            self.call("complete", "POST", f"{z}/upload/complete/")
        elif r < 0.84:
            self.call("cancel", "DELETE", f"{z}/upload/")
        else:
            self.call("read", "GET", f"{z}/")
            self.call("list", "GET", f"{z}.zarr/a/")

    def close(self) -> None:
        self.api.close()
        self.s3.close()


def test_four_clients_race_on_one_zarr(
    api: httpx.Client, archive: Archive, users: Users, s3: Any
) -> None:
    operations, rounds = budget(40, 240), budget(2, 6)
    zarr_id = create_zarr(api, create_dandiset(api, "races"))
    bucket = archive.settings.s3_bucket
    shared: dict[str, Any] = {"lock": threading.Lock(), "cancelled": []}
    seed = random.randrange(2**32)
    note(PART, f"seed {seed}")
    clients = [
        Client(str(api.base_url), users.owner, zarr_id, seed + i, shared) for i in range(CLIENTS)
    ]
    per_round = max(1, operations // (rounds * CLIENTS))
    done = 0
    try:
        for _ in range(rounds):
            threads = [
                threading.Thread(target=lambda c=c: [c.step() for _ in range(per_round)])
                for c in clients
            ]
            for t in threads:
                t.start()
            for t in threads:
                t.join(600)
            done += per_round * CLIENTS
            statuses = [s for c in clients for s in c.statuses]
            for c in clients:
                c.statuses.clear()
            errors = [s for s in statuses if s[1] >= 500]
            count(PART, cases=len(statuses), server_errors=len(errors))
            assert not errors, errors[:5]
            assert {s[1] for s in statuses} <= EXPECTED, statuses
            # no batch is stuck: an open one can be cancelled
            if api.get(f"/api/zarr/{zarr_id}/upload/").status_code == 204:
                expect(api.delete(f"/api/zarr/{zarr_id}/upload/"), 204)
            assert expect(api.get(f"/api/zarr/{zarr_id}/"))["upload_in_progress"] is False
            assert_consistent(archive, api, s3, bucket, zarr_id)
            # clients replay presigned URLs of batches that ended (one cancelled here for
            # sure, and those the racing clients cancelled): nothing may change
            body = os.urandom(16)
            (item,) = expect(
                api.post(f"/api/zarr/{zarr_id}/upload/", json=[{"path": "a/0", "etag": md5(body)}])
            )
            expect(api.delete(f"/api/zarr/{zarr_id}/upload/"), 204)
            shared["cancelled"].append((item["upload_url"], body))
            with httpx.Client(timeout=60) as raw:
                for url, content in shared["cancelled"]:
                    count(PART, faults=1)
                    put_presigned(raw, url, content)
            shared["cancelled"].clear()
            assert_consistent(archive, api, s3, bucket, zarr_id)
    finally:
        for c in clients:
            c.close()
    assert done >= operations - CLIENTS * rounds


def test_races_budget_is_at_least_200_when_full() -> None:
    from tests.helpers import reliability

    if reliability.FULL:
        assert budget(40, 240) >= 200
