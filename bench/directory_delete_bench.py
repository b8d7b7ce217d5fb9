"""Deleting a directory of N files (``DELETE /api/zarr/{id}/files/`` with one directory):
the request's time, the time until the Zarr is at rest again, and the process's peak RSS
while it happens.

A throwaway archive (:mod:`local_archive`: its own SeaweedFS, SQLite, the API in a thread)
with the in-process job queue of ``zarrchive serve``.  The Zarr holds ``big/{i}/{j}`` (N
files, 100 per directory) and two files beside it, written straight into S3 and the tree (no
upload batches: the bench is about the deletion).  Peak RSS is this process's ``VmHWM``
(server, job thread and client together; the Zarr is written by a child process), reset
(``/proc/self/clear_refs``) before the request; the RSS before the request is printed too.

    .venv/bin/python bench/directory_delete_bench.py --files 100000 [--json FILE]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import multiprocessing
import os
import time
from pathlib import Path
from typing import Any

import httpx
from local_archive import local_archive


def _status_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


def _reset_peak() -> None:
    Path("/proc/self/clear_refs").write_text("5")


def _seed(settings: Any, zarr_id: str, files: int) -> None:
    """``big/{i}/{j}`` and two files beside it, objects PUT in parallel, the tree at once (in
    a child process: its memory is not the measured process's)."""
    from zarrchive.services.runtime import Archive
    from zarrchive.services.zarr_engine.tree_updater import FileChange, apply_changes
    from zarrchive.services.zarr_engine.zarrs import get_zarr
    from zarrchive.storage.keys import zarr_object_key

    archive = Archive.from_settings(settings, migrate=False)
    store = archive.store
    bodies = {f"big/{n // 100}/{n % 100}": f"chunk {n}".encode() for n in range(files)}
    bodies.update({".zgroup": b"{}", "kept/0": b"kept"})
    store.map(lambda item: store.put(zarr_object_key(zarr_id, item[0]), item[1]), bodies.items())
    changes: dict[str, FileChange] = {
        p: (hashlib.md5(b).hexdigest(), len(b)) for p, b in bodies.items()
    }
    with archive.db.write_session() as session:
        zarr = get_zarr(session, None, zarr_id, lock=True, check_read=False)
        state = apply_changes(store, zarr_id, changes)
        zarr.checksum, zarr.file_count, zarr.size = state.checksum, state.file_count, state.size
    archive.close()


def run(files: int) -> dict[str, Any]:
    from zarrchive.jobs.inprocess import InProcessJobQueue
    from zarrchive.services.identity.auth import create_user
    from zarrchive.services.runtime import set_current_archive

    with local_archive("rmdir-bench-") as (archive, url, _work):
        archive.jobs = InProcessJobQueue()
        set_current_archive(archive)
        with archive.db.session() as session:
            token = create_user(session, "bench")[1]
        api = httpx.Client(base_url=url, headers={"Authorization": f"token {token}"}, timeout=600)
        dandiset = api.post("/api/dandisets/", json={"name": "bench"}).json()["identifier"]
        zarr_id = api.post("/api/zarr/", json={"name": "b.zarr", "dandiset": dandiset}).json()[
            "zarr_id"
        ]
        started = time.monotonic()
        child = multiprocessing.get_context("spawn").Process(
            target=_seed, args=(archive.settings, zarr_id, files)
        )
        child.start()
        child.join()
        assert child.exitcode == 0
        seed_seconds = time.monotonic() - started
        assert api.get(f"/api/zarr/{zarr_id}/").json()["file_count"] == files + 2
        rss_before = _status_kib("VmRSS") / 1024
        _reset_peak()
        started = time.monotonic()
        response = api.request("DELETE", f"/api/zarr/{zarr_id}/files/", json=[{"path": "big"}])
        request_seconds = time.monotonic() - started
        assert response.status_code in (202, 204), response.text
        while True:
            info = api.get(f"/api/zarr/{zarr_id}/").json()
            if info["upload_state"] != "applying":
                break
            time.sleep(0.2)
        total_seconds = time.monotonic() - started
        peak = _status_kib("VmHWM") / 1024
        assert info["file_count"] == 2, info
        archive.jobs.close()
        return {
            "files": files,
            "status": response.status_code,
            "request_s": round(request_seconds, 3),
            "total_s": round(total_seconds, 1),
            "files_per_s": round(files / total_seconds),
            "rss_before_mib": round(rss_before, 1),
            "peak_rss_mib": round(peak, 1),
            "seed_s": round(seed_seconds, 1),
            "load_average": os.getloadavg(),
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", type=int, default=100_000)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    result = run(args.files)
    print(json.dumps(result))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
