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
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

KEY, SECRET = "bench", "bench-secret"


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
    import uvicorn
    import zarr

    from zarrchive.api import create_app
    from zarrchive.client import ApiClient, Uploader
    from zarrchive.client.upload import BatchRecords
    from zarrchive.config import PublishedZarrs, Settings
    from zarrchive.services.auth import create_user
    from zarrchive.services.runtime import Archive
    from zarrchive.storage.seaweedfs import SeaweedFS, free_port

    work = Path(tempfile.mkdtemp(prefix="snapshot-bench-"))
    seaweed = SeaweedFS(work / "seaweedfs", KEY, SECRET, public_read_buckets=["bench*"])
    seaweed.start()
    server: uvicorn.Server | None = None
    try:
        settings = Settings.from_env({}).with_overrides(
            data_dir=work / "data",
            database_url=f"sqlite:///{work / 'bench.sqlite3'}",
            s3_endpoint_url=seaweed.endpoint_url,
            s3_bucket="bench",
            s3_embargo_bucket="bench-embargoed",
            s3_access_key_id=KEY,
            s3_secret_access_key=SECRET,
            published_zarrs=PublishedZarrs.SNAPSHOT,
        )
        (work / "data").mkdir()
        archive = Archive.from_settings(settings)
        with archive.db.session() as session:
            token = create_user(session, "bench")[1]
        server = uvicorn.Server(
            uvicorn.Config(
                create_app(archive), host="127.0.0.1", port=free_port(), log_level="warning"
            )
        )
        threading.Thread(target=server.run, daemon=True).start()
        while not server.started:
            time.sleep(0.05)
        url = f"http://127.0.0.1:{server.config.port}"
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
    finally:
        if server is not None:
            server.should_exit = True
        seaweed.stop()


if __name__ == "__main__":
    main()
