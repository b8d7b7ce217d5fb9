"""``admin usage`` over 10^6 objects (issue #38), beside the floor: one full listing of the
buckets' versions and one sum over the blobs' rows, measured in the same run.

    .venv/bin/python bench/usage_bench.py --objects 1000000

The archive is seeded cheaply: SQLite rows inserted in bulk, objects written straight into the
in-memory object store (:mod:`zarrchive.storage.memory`; S3's own listing speed is not what
is measured): half the objects are blobs (an asset in a draft each, one in 10 orphaned, one
in 100 written twice: a noncurrent version), half are the files of 10 Zarrs (an asset each;
one file in 10 written twice), each Zarr with the manifest of its current state.
"""

from __future__ import annotations

import argparse
import hashlib
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

ZARRS = 10


def _archive(work: Path) -> Any:
    from zarrchive.config import Settings
    from zarrchive.db.session import Database
    from zarrchive.services.runtime import Archive
    from zarrchive.storage.memory import MemoryObjectStore

    public = MemoryObjectStore("bench")
    embargo = MemoryObjectStore("bench-embargo", public_read=False)
    settings = Settings.from_env({}).with_overrides(
        data_dir=work,
        database_url=f"sqlite:///{work / 'bench.sqlite3'}",
        s3_endpoint_url="http://127.0.0.1:9",
        s3_bucket=public.bucket,
        s3_embargo_bucket=embargo.bucket,
        s3_access_key_id="bench",
        s3_secret_access_key="bench-secret",
    )
    db = Database(settings.database_url)
    db.migrate()
    return Archive(settings=settings, db=db, store=public, embargo_store=embargo)  # type: ignore[arg-type]


def seed(archive: Any, objects: int) -> None:
    from sqlalchemy import insert, select

    from zarrchive.db.models import Asset, Blob, Version, Zarr
    from zarrchive.services.dandi.dandisets import create_dandiset
    from zarrchive.services.identity.auth import Caller, create_user
    from zarrchive.services.zarr_engine.manifests import write_manifest
    from zarrchive.services.zarr_engine.tree_updater import apply_changes
    from zarrchive.services.zarr_engine.zarrs import create_zarr
    from zarrchive.storage.keys import blob_key, zarr_object_key

    store = archive.store
    blobs = objects // 2
    per_zarr = (objects - blobs) // ZARRS
    with archive.db.write_session() as session:
        user, _ = create_user(session, "owner")
        caller = Caller.of(user)
        dandisets = [create_dandiset(session, caller, f"d{i}").id for i in range(ZARRS)]
        session.flush()
        drafts = {
            d: v
            for d, v in session.execute(
                select(Version.dandiset_id, Version.id).where(Version.version == "draft")
            )
        }
        zarr_ids = []
        for i, d in enumerate(dandisets):
            zarr = create_zarr(session, caller, f"z{i}.zarr", f"{d:06d}")
            zarr_ids.append(zarr.id)
            session.add(
                Asset(
                    id=str(uuid.uuid4()), version_id=drafts[d], path=f"z{i}.zarr", zarr_id=zarr.id
                )
            )
    blob_rows, asset_rows = [], []
    for n in range(blobs):
        body = b"blob %d" % n
        blob_id = str(uuid.uuid4())
        key = blob_key(blob_id)
        blob_rows.append(
            {"id": blob_id, "md5": hashlib.md5(body).hexdigest(), "size": len(body), "key": key}
        )
        store.put(key, body)
        if n % 100 == 0:
            store.put(key, body)
        if n % 10:
            d = dandisets[n % ZARRS]
            asset_rows.append(
                {
                    "id": str(uuid.uuid4()),
                    "version_id": drafts[d],
                    "path": f"b/{n}",
                    "blob_id": blob_id,
                }
            )
    with archive.db.write_session() as session:
        for start in range(0, len(blob_rows), 50_000):
            session.execute(insert(Blob), blob_rows[start : start + 50_000])
        for start in range(0, len(asset_rows), 50_000):
            session.execute(insert(Asset), asset_rows[start : start + 50_000])
    for zarr_id in zarr_ids:
        changes = {}
        for n in range(per_zarr):
            body = b"chunk %d" % n
            path = f"{n // 1000}/{n % 1000}"
            if n % 10 == 0:
                store.put(zarr_object_key(zarr_id, path), b"old " + body)
            store.put(zarr_object_key(zarr_id, path), body)
            changes[path] = (hashlib.md5(body).hexdigest(), len(body))
        with archive.db.write_session() as session:  # the tree, in one update
            zarr = session.get(Zarr, zarr_id)
            state = apply_changes(store, zarr_id, changes)
            zarr.checksum, zarr.file_count, zarr.size = state.checksum, state.file_count, state.size
        write_manifest(archive, zarr_id)


def measure(archive: Any) -> dict[str, float | int]:
    from sqlalchemy import func, select

    from zarrchive.db.models import Blob
    from zarrchive.services.dandi.usage import usage_report

    def timed(fn: Any) -> tuple[Any, float, float]:
        wall, cpu = time.perf_counter(), time.process_time()
        result = fn()
        return result, time.perf_counter() - wall, time.process_time() - cpu

    report, usage_s, usage_cpu = timed(lambda: usage_report(archive))
    stores = (archive.store, archive.embargo_store)
    listed, listing_s, listing_cpu = timed(
        lambda: sum(v.size for s in stores for v in s.iter_versions(""))
    )

    def blob_sum() -> None:
        with archive.db.session() as session:
            session.scalar(select(func.sum(Blob.size)))

    _, sum_s, sum_cpu = timed(blob_sum)
    return {
        "usage_s": usage_s,
        "usage_cpu": usage_cpu,
        "listing_s": listing_s,
        "listing_cpu": listing_cpu,
        "blob_sum_s": sum_s,
        "blob_sum_cpu": sum_cpu,
        "listed_bytes": listed,
        "noncurrent_versions": report.unneeded_versions,
        "orphaned_blobs": report.orphaned_blobs,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--objects", type=int, default=1_000_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="usage-bench-") as work:
        archive = _archive(Path(work))
        started = time.perf_counter()
        seed(archive, args.objects)
        print(f"seeded {args.objects} objects in {time.perf_counter() - started:.1f} s wall")
        figures = measure(archive)
        archive.close()
    for name, what in (
        ("usage", "admin usage (the whole report)"),
        ("listing", "floor: one listing of every version"),
        ("blob_sum", "floor: SUM(size) over the blobs' rows"),
    ):
        print(f"{what:40} {figures[name + '_s']:8.2f} s wall {figures[name + '_cpu']:8.2f} s CPU")
    print(
        f"(noncurrent versions nothing needs: {figures['noncurrent_versions']}, "
        f"orphaned blobs: {figures['orphaned_blobs']})"
    )


if __name__ == "__main__":
    main()
