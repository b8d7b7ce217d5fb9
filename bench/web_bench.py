"""Server time of the web pages that must stay fast however large the archive grows.

Starts its own SeaweedFS (``weed mini``) and API server (uvicorn in a thread of this
process, SQLite in a temporary directory), then:

- creates ``--dandisets`` dandisets (through the services), each with 3 blob assets and
  every tenth with a Zarr asset too, and times ``GET /`` (the first page, a middle page
  and a search);
- creates a Zarr with a directory of ``--entries`` entries (one real file uploaded, then its
  ``.checksum`` node rewritten with every entry, as the tree updater would write it) and
  times ``GET /zarr/{id}/wide/`` (the first page, cold: the node's download and parse, then
  warm) and a page deep in the directory (by cursor).

Each figure is the median of ``--repeat`` requests over HTTP on 127.0.0.1 (client overhead
included), target < 300 ms.

    .venv/bin/python bench/web_bench.py [--dandisets 1000] [--entries 100000] [--repeat 15]
"""

from __future__ import annotations

import argparse
import hashlib
import re
import statistics
import time
import uuid
from typing import Any


def upload_one(client: Any, auth: dict[str, str], zarr_id: str, path: str, body: bytes) -> None:
    """One file through the API as a client sends it: a batch, its PUT, complete (applied)."""
    import httpx

    from zarrchive.storage.objects import md5_to_content_md5

    md5 = hashlib.md5(body).hexdigest()
    [item] = client.post(
        f"/api/zarr/{zarr_id}/upload/", json=[{"path": path, "etag": md5}], headers=auth
    ).json()
    httpx.put(
        item["upload_url"],
        content=body,
        headers={"Content-MD5": md5_to_content_md5(md5), "Content-Type": item["content_type"]},
    ).raise_for_status()
    client.post(
        f"/api/zarr/{zarr_id}/upload/complete/", params={"wait": "true"}, headers=auth
    ).raise_for_status()


def timed(client: object, url: str, repeat: int) -> tuple[float, float, int]:
    """(median, first) seconds of GET *url*, and the status of the last answer."""
    import httpx

    assert isinstance(client, httpx.Client)
    times = []
    status = 0
    for _ in range(repeat):
        start = time.perf_counter()
        response = client.get(url)
        times.append(time.perf_counter() - start)
        status = response.status_code
        assert status == 200, (url, status, response.text[:300])
    return statistics.median(times), times[0], status


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dandisets", type=int, default=1000)
    parser.add_argument("--entries", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=15)
    args = parser.parse_args()

    import httpx
    from local_archive import local_archive  # (bench/ is the script's first path)

    from zarrchive.checksum import ChecksumNode
    from zarrchive.db.models import Asset, Blob
    from zarrchive.services.dandi.dandisets import create_dandiset
    from zarrchive.services.dandi.versions import find_version
    from zarrchive.services.identity.auth import Caller, create_user
    from zarrchive.storage.keys import checksum_node_key

    with local_archive("web-bench-") as (archive, url, _work):
        with archive.db.write_session() as session:
            user, token = create_user(session, "bench")
            blob = Blob(id=str(uuid.uuid4()), md5="0" * 32, size=1234, key="blobs/bench")
            session.add(blob)
            for i in range(args.dandisets):
                dandiset = create_dandiset(session, Caller.of(user), f"bench dandiset {i:05d}")
                draft = find_version(session, dandiset, "draft")
                for j in range(3):
                    session.add(
                        Asset(
                            id=str(uuid.uuid4()),
                            version_id=draft.id,
                            path=f"sub-{j}/file.nwb",
                            blob_id=blob.id,
                        )
                    )
        auth = {"Authorization": f"token {token}"}
        with httpx.Client(base_url=url, timeout=120) as client:
            first = client.get("/").text
            assert f"{args.dandisets} dandisets." in first, first[:2000]
            middle = args.dandisets // 50
            results = {
                "dandiset list, page 1": timed(client, "/", args.repeat),
                f"dandiset list, page {middle}": timed(client, f"/?page={middle}", args.repeat),
                "dandiset list, search '00042'": timed(client, "/?search=00042", args.repeat),
            }
            # a Zarr with a wide directory
            dandiset = client.post("/api/dandisets/", json={"name": "wide"}, headers=auth).json()
            zarr_id = client.post(
                "/api/zarr/",
                json={"name": "wide.zarr", "dandiset": dandiset["identifier"]},
                headers=auth,
            ).json()["zarr_id"]
            upload_one(client, auth, zarr_id, "wide/000000", b"0")
            node = ChecksumNode()
            for i in range(args.entries):
                node.set_file(f"{i:06d}", hashlib.md5(str(i).encode()).hexdigest(), i)
            document = node.to_json()
            archive.store.put(checksum_node_key(zarr_id, "wide"), document, "application/json")
            page = f"/zarr/{zarr_id}/wide/"
            cold = timed(client, page, 1)
            results[f"Zarr directory of {args.entries} entries, page 1, cold"] = cold
            results[f"Zarr directory of {args.entries} entries, page 1, warm"] = timed(
                client, page, args.repeat
            )
            # walk to a page deep in the directory with page_size=1000
            deep = page + "?page_size=1000"
            for _ in range(min(args.entries // 1000 - 1, 60)):
                found = re.search(
                    r'id="next-page" rel="next" href="\?([^"]+)"', client.get(deep).text
                )
                assert found is not None
                deep = page + "?" + found.group(1).replace("&amp;", "&")
            results[f"Zarr directory of {args.entries} entries, a deep page of 1000"] = timed(
                client, deep, args.repeat
            )
            # a batch through the API changes the directory: its node is written and handed
            # to the readers' cache, so the next page is not a cold load
            upload_one(client, auth, zarr_id, "wide/zzz", b"new")
            results[f"Zarr directory of {args.entries} entries, page 1, first after a batch"] = (
                timed(client, page, 1)
            )
        print(f"node: {len(document)} bytes; {args.dandisets} dandisets; medians of {args.repeat}")
        for name, (median, first_time, _status) in results.items():
            print(f"{name}: median {median * 1000:.1f} ms (first {first_time * 1000:.1f} ms)")


if __name__ == "__main__":
    main()
