"""DANDI's flat listing of a Zarr of many directories (issue #35, item 4).

A throwaway archive (:mod:`local_archive`: its own SeaweedFS, SQLite, the API in a thread)
gets a Zarr in Zarr v3's ``c/i/0`` layout (``--directories`` directories of one file, plus
``zarr.json``) through the real upload path.  Then, ``--repeat`` times each, one page of
``--limit`` entries (``GET /api/zarr/{id}/files/?limit=N``, anonymous, over HTTP) with the
API's caches cold and warm, in two states of the records: changes only (no manifest yet)
and a manifest written.  Beside it, in the same run, the old path
(:func:`~zarrchive.services.zarr_engine.zarrs.walked_objects`: the ``.checksum`` nodes walked and each
directory listed in S3), called in the process, cold and warm.  Each figure is the median
wall time; ``s3`` is the number of S3 requests one page sent (counted on the store's
botocore client as they are sent).

Command (from the repository root):
``.venv/bin/python bench/listing_bench.py --directories 1000 --repeat 5``
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from local_archive import local_archive


def _put_all(urls: list[dict[str, Any]], files: dict[str, bytes]) -> set[int]:
    """PUT each of *urls* its file over one connection of its own (a thread's share)."""
    statuses = set()
    with httpx.Client(timeout=120) as s3:
        for url in urls:
            body = files[url["path"]]
            headers = {"Content-MD5": base64.b64encode(hashlib.md5(body).digest()).decode()}
            if url.get("content_type"):  # the type the URL signs, if it signs one
                headers["Content-Type"] = url["content_type"]
            statuses.add(s3.put(url["upload_url"], content=body, headers=headers).status_code)
    return statuses


def _upload(api: httpx.Client, zarr_id: str, files: dict[str, bytes]) -> None:
    items = list(files.items())
    with ThreadPoolExecutor(16) as pool:
        for start in range(0, len(items), 500):
            batch = dict(items[start : start + 500])
            body = [{"path": p, "etag": hashlib.md5(b).hexdigest()} for p, b in batch.items()]
            urls = api.post(f"/api/zarr/{zarr_id}/upload/", json=body).json()
            shares = [urls[i::16] for i in range(16)]
            sent = pool.map(lambda share, chosen=batch: _put_all(share, chosen), shares)
            assert set().union(*sent) == {200}
            done = api.post(f"/api/zarr/{zarr_id}/upload/complete/")
            assert done.status_code == 200, done.text
            while api.get(f"/api/zarr/{zarr_id}/").json().get("upload_state") == "applying":
                time.sleep(0.1)


class RequestCounter:
    """S3 requests sent by a botocore client (its ``before-send`` event)."""

    def __init__(self, client: Any) -> None:
        self.count = 0
        client.meta.events.register("before-send.s3", self._sent)

    def _sent(self, **_kwargs: Any) -> None:
        self.count += 1


def _measure(
    repeat: int, page: Callable[[], int], counter: RequestCounter, *, cold: bool
) -> dict[str, Any]:
    from zarrchive.services.zarr_engine.node_cache import NODE_CACHE
    from zarrchive.services.zarr_engine.recorded_listing import MANIFEST_CACHE

    times, requests, rows = [], [], 0
    page()  # (warms the process: imports, connections)
    for _ in range(repeat):
        if cold:
            NODE_CACHE.clear()
            MANIFEST_CACHE.clear()
        before = counter.count
        started = time.perf_counter()
        rows = page()
        times.append(time.perf_counter() - started)
        requests.append(counter.count - before)
    return {
        "median_s": round(statistics.median(times), 4),
        "max_s": round(max(times), 4),
        "s3": max(requests),
        "rows": rows,
    }


def run(directories: int, limit: int, repeat: int) -> dict[str, Any]:
    from zarrchive.services.identity.auth import create_user
    from zarrchive.services.zarr_engine import zarrs
    from zarrchive.services.zarr_engine.manifests import write_manifest

    files = {"zarr.json": b'{"zarr_format": 3}'}
    files.update({f"c/{i}/0": f"chunk {i}".encode() for i in range(directories)})
    with local_archive("listing-bench-") as (archive, url, _work):
        with archive.db.session() as session:
            token = create_user(session, "bench")[1]
        api = httpx.Client(base_url=url, headers={"Authorization": f"token {token}"}, timeout=600)
        anon = httpx.Client(base_url=url, timeout=600)
        dandiset = api.post("/api/dandisets/", json={"name": "bench"}).json()["identifier"]
        zarr_id = api.post("/api/zarr/", json={"name": "b.zarr", "dandiset": dandiset}).json()[
            "zarr_id"
        ]
        started = time.monotonic()
        _upload(api, zarr_id, files)
        upload_seconds = time.monotonic() - started
        counter = RequestCounter(archive.store.client)
        with archive.db.session() as session:
            ref = zarrs.ZarrRef.of(zarrs.get_zarr(session, None, zarr_id))

        def ours() -> int:
            answer = anon.get(f"/api/zarr/{zarr_id}/files/", params={"limit": limit})
            assert answer.status_code == 200, answer.text
            return len(answer.json()["results"])

        def old() -> int:
            return len(zarrs.walked_objects(archive, ref, prefix="", after="", limit=limit)[0])

        result: dict[str, Any] = {
            "directories": directories,
            "limit": limit,
            "repeat": repeat,
            "upload_s": round(upload_seconds, 1),
        }
        for state in ("records only", "manifest"):
            if state == "manifest":
                write_manifest(archive, zarr_id)
            result[state] = {
                "ours_cold": _measure(repeat, ours, counter, cold=True),
                "ours_warm": _measure(repeat, ours, counter, cold=False),
                "old_cold": _measure(repeat, old, counter, cold=True),
                "old_warm": _measure(repeat, old, counter, cold=False),
            }
        result["load_average"] = [round(x, 1) for x in os.getloadavg()]
        return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--directories", type=int, default=1000)
    parser.add_argument("--limit", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    result = run(args.directories, args.limit, args.repeat)
    print(json.dumps(result, indent=2))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
