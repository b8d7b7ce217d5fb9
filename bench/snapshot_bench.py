"""Reading a published snapshot vs the draft with zarr-python through ``open_store``.

Starts its own SeaweedFS (``weed mini``) and API server (uvicorn in a thread of this
process, SQLite in a temporary directory, ``ZARRCHIVE_PUBLISHED_ZARRS=snapshot``), uploads
a zarr-python Zarr (one float32 array of ``--size``x``--size`` in ``--chunk``x``--chunk``
chunks), publishes it, then rewrites every chunk in the draft (so the snapshot reads
noncurrent object versions, ``?versionId=``, while the draft reads current ones), and
times, each in its own subprocess (its own GIL), alternating, ``--repeat`` times:

- snapshot: ``zarr.open_array(open_store("DANDISET@VERSION/PATH"))[...]`` (resolution,
  the manifest download and parse included);
- draft: ``zarr.open_array(open_store("DANDISET/PATH"))[...]``.

    .venv/bin/python bench/snapshot_bench.py [--size 4000] [--chunk 100] [--repeat 7]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import numpy as np


def child(address: str) -> None:
    import zarr

    from zarrchive.client.store import open_store

    start = time.perf_counter()
    store = open_store(address)
    try:
        data = zarr.open_array(store, mode="r", path="data")[...]
    finally:
        store.close()
    elapsed = time.perf_counter() - start
    print(json.dumps({"seconds": elapsed, "sum": float(np.asarray(data, dtype="float64").sum())}))


def measure(address: str, env: dict[str, str]) -> tuple[float, float]:
    out = subprocess.run(
        [sys.executable, __file__, "--child", address],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    result = json.loads(out.strip().splitlines()[-1])
    return float(result["seconds"]), float(result["sum"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=4000)
    parser.add_argument("--chunk", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--child")
    args = parser.parse_args()
    if args.child:
        child(args.child)
        return

    import httpx
    import zarr
    from local_archive import local_archive  # (bench/ is the script's first path)

    from zarrchive.client import ApiClient, Uploader
    from zarrchive.client.upload import BatchRecords
    from zarrchive.config import PublishedZarrs
    from zarrchive.services.identity.auth import create_user

    # minimal metadata: the bench measures reads, not validation
    with local_archive(
        "snapshot-bench-", published_zarrs=PublishedZarrs.SNAPSHOT, publish_requires_valid=False
    ) as (
        archive,
        url,
        work,
    ):
        with archive.db.session() as session:
            token = create_user(session, "bench")[1]
        env = {**os.environ, "ZARRCHIVE_URL": url, "ZARRCHIVE_STATE_DIR": str(work / "state")}
        env.pop("ZARRCHIVE_TOKEN", None)  # anonymous reads, as the public would

        local = work / "bench.zarr"
        rng = np.random.default_rng(0)
        shape, chunks = (args.size, args.size), (args.chunk, args.chunk)
        array = zarr.open_group(local, mode="w").create_array(
            "data", shape=shape, chunks=chunks, dtype="float32"
        )
        published = rng.random(shape, dtype="float32")
        array[...] = published
        with ApiClient(url, token=token) as client:
            dandiset = client.create_dandiset("bench")
            uploader = Uploader(client, jobs=16, records=BatchRecords(work / "state"))
            assert uploader.upload(local, dandiset=dandiset).ok
            version = httpx.post(
                f"{url}/api/dandisets/{dandiset}/versions/draft/publish/",
                headers={"Authorization": f"token {token}"},
                timeout=600,
            ).json()["version"]
            draft = published * 2 + 1
            array[...] = draft  # every chunk changes in the draft
            assert uploader.upload(local, dandiset=dandiset).ok
        files = sum(1 for p in local.rglob("*") if p.is_file())
        snapshot_address = f"{dandiset}@{version}/bench.zarr"
        draft_address = f"{dandiset}/bench.zarr"
        snap_times, draft_times = [], []
        for _ in range(args.repeat):
            seconds, total = measure(snapshot_address, env)
            assert abs(total - float(published.astype("float64").sum())) < 1e-3 * total
            snap_times.append(seconds)
            seconds, total = measure(draft_address, env)
            assert abs(total - float(draft.astype("float64").sum())) < 1e-3 * total
            draft_times.append(seconds)
        snap, dr = statistics.median(snap_times), statistics.median(draft_times)
        print(
            f"{files} files ({args.size}x{args.size} float32, {args.chunk}x{args.chunk} chunks): "
            f"snapshot median {snap:.3f} s (min {min(snap_times):.3f}), draft median {dr:.3f} s "
            f"(min {min(draft_times):.3f}); ratio {snap / dr:.3f} (target <= 1.1)"
        )


if __name__ == "__main__":
    main()
