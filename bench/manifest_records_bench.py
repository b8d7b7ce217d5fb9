"""Manifests from records (issue #23 item 1) beside listing the same state.

1. Merge, pure, at ``--entries`` (default 10^6): the previous manifest (a file on disk, read
   streamed), merged with a ``--changes``-file change set (half overwrites spread over the
   Zarr, 40% new files, 10% deletions), written as the new manifest; in its own process, for
   its wall time and peak RSS.  The output is checked byte for byte against the manifest
   generated directly from the new state.
2. End to end on SeaweedFS at ``--s3`` objects (default 20,000; SQLite): the Zarr seeded and
   its first manifest listed; a ``--changes``-file batch applied as the apply engine does
   (copies, answers recorded: ``tests/helpers/recorded_apply.py``); then ``write_manifest``
   from records, beside ``write_manifest(force=True)`` (a listing) of the same state, each in
   its own process; both files must be identical.

Command (from the repository root):
``.venv/bin/python bench/manifest_records_bench.py --entries 1000000 --changes 500 --s3 20000``
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from zarrchive.manifest import (
    ManifestChange,
    ManifestEntry,
    generate_manifest,
    merge_changes,
    read_manifest,
)

T0 = datetime(2024, 5, 1, tzinfo=UTC)
T1 = datetime(2026, 11, 26, tzinfo=UTC)


def listing(n: int) -> Iterator[ManifestEntry]:
    """*n* synthetic entries ``arr/{a}/{b}/{c}``, sorted by key as S3 lists them."""
    names = sorted(str(i) for i in range(100))
    tops = sorted(str(i) for i in range((n + 9999) // 10000))
    i = 0
    for a in tops:
        for b in names:
            for c in names:
                if i == n:
                    return
                yield ManifestEntry(
                    f"arr/{a}/{b}/{c}",
                    f"{i:032x}"[::-1],
                    T0 + timedelta(seconds=i),
                    1_000_000 + i % 4096,
                    f"{i:032x}",
                )
                i += 1


def change_set(n: int, changes: int) -> list[ManifestChange]:
    """Overwrites and deletions spread over the *n* entries, new files in a new directory."""
    step = max(1, n // changes)
    overwrite: list[str] = []
    delete: list[str] = []
    for i, entry in enumerate(listing(n)):  # streamed: the child's peak RSS is the merge's
        if i % step == 0 and len(overwrite) < changes // 2:
            overwrite.append(entry.path)
        elif i % step == step // 2 and len(delete) < changes // 10:
            delete.append(entry.path)
    new = [f"arr/new/{i}" for i in range(changes - len(overwrite) - len(delete))]
    result = [ManifestChange(p, None) for p in delete]
    for i, path in enumerate(overwrite + new):
        result.append(ManifestChange(path, ManifestEntry(path, f"new{i}", T1, 7, f"{i:032x}")))
    return sorted(result, key=lambda c: c.path)


def new_state(n: int, changes: list[ManifestChange]) -> Iterator[ManifestEntry]:
    by_path = {c.path: c.entry for c in changes}
    state = {e.path: e for e in listing(n) if e.path not in by_path}
    state.update({p: e for p, e in by_path.items() if e is not None})
    for path in sorted(state):
        yield state[path]


def peak_rss_mib() -> float:
    """This process's peak RSS (VmHWM: unlike ru_maxrss, not inherited across exec from the
    forking parent)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def merge_child(base: str, n: int, changes: int, out: str) -> None:
    delta = change_set(n, changes)
    start = time.perf_counter()
    with open(base, "rb") as f, tempfile.SpooledTemporaryFile(max_size=16 << 20) as body:
        merged = merge_changes(read_manifest(f, verify=False).entries, delta)
        manifest = generate_manifest(merged, body)
        with open(out, "wb") as target:
            manifest.write_to(target)
    seconds = time.perf_counter() - start
    peak = peak_rss_mib()
    print(json.dumps({"seconds": seconds, "peak_rss_mib": peak}))


def merge_run(n: int, changes: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        base, out, expected = (Path(tmp) / name for name in ("base", "out", "expected"))
        with base.open("wb") as f, tempfile.SpooledTemporaryFile(max_size=16 << 20) as body:
            generate_manifest(listing(n), body).write_to(f)
        proc = subprocess.run(
            [sys.executable, __file__, "--merge-child", str(base), str(n), str(changes), str(out)],
            capture_output=True,
            text=True,
            check=True,
        )
        r = json.loads(proc.stdout.strip().splitlines()[-1])
        with expected.open("wb") as f, tempfile.SpooledTemporaryFile(max_size=16 << 20) as body:
            generate_manifest(new_state(n, change_set(n, changes)), body).write_to(f)
        same = _sha(out) == _sha(expected)
        assert same, "the merged manifest differs from the new state's"
        print(
            f"merge: {n} entries + {changes} changes: {r['seconds']:.1f} s, "
            f"peak RSS {r['peak_rss_mib']:.1f} MiB, {base.stat().st_size / 2**20:.1f} MiB file, "
            f"byte-identical to the new state's manifest: {same}",
            flush=True,
        )


def _sha(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def s3_child(mode: str) -> None:
    from zarrchive.config import Settings
    from zarrchive.manifest import manifest_key
    from zarrchive.services.manifests import write_manifest
    from zarrchive.services.runtime import Archive

    archive = Archive.from_settings(Settings.from_env(), migrate=False)
    zarr_id = os.environ["BENCH_ZARR_ID"]
    start = time.perf_counter()
    outcome = write_manifest(archive, zarr_id, force=mode == "listing")
    seconds = time.perf_counter() - start
    peak = peak_rss_mib()
    data = archive.store.get(manifest_key(zarr_id, outcome.checksum)) or b""
    print(
        json.dumps(
            {
                "status": str(outcome.status),
                "source": str(outcome.source),
                "mismatch": outcome.mismatch,
                "seconds": seconds,
                "peak_rss_mib": peak,
                "sha": hashlib.sha256(data).hexdigest(),
            }
        )
    )


def s3_run(n: int, changes: int) -> None:
    import uuid

    from tests.helpers.recorded_apply import apply_recorded_batch

    from zarrchive.config import Settings
    from zarrchive.db.models import Dandiset, Zarr
    from zarrchive.services.manifests import write_manifest
    from zarrchive.services.runtime import Archive
    from zarrchive.storage.seaweedfs import SeaweedFS

    with tempfile.TemporaryDirectory() as tmp:
        server = SeaweedFS(Path(tmp) / "s3", "bench", "bench-secret")
        server.start()
        try:
            env = {
                **os.environ,
                "ZARRCHIVE_DATA_DIR": tmp,
                "ZARRCHIVE_DATABASE_URL": f"sqlite:///{tmp}/bench.sqlite3",
                "ZARRCHIVE_S3_ENDPOINT_URL": server.endpoint_url,
                "ZARRCHIVE_S3_ACCESS_KEY_ID": "bench",
                "ZARRCHIVE_S3_SECRET_ACCESS_KEY": "bench-secret",
            }
            archive = Archive.from_settings(Settings.from_env(env))
            zarr_id = str(uuid.uuid4())
            with archive.db.write_session() as session:
                dandiset = Dandiset(name="bench")
                session.add(dandiset)
                session.flush()
                session.add(Zarr(id=zarr_id, name="z", dandiset_id=dandiset.id))
            start = time.perf_counter()
            files = {e.path: e.path.encode() for e in listing(n)}
            for i in range(0, n, 5000):  # seeded as recorded batches: a tree and a checksum
                chunk = dict(list(files.items())[i : i + 5000])
                apply_recorded_batch(archive, zarr_id, chunk)
            first = write_manifest(archive, zarr_id, force=True)
            print(
                f"seeded {n} objects and listed the first manifest in "
                f"{time.perf_counter() - start:.0f} s ({first.source})",
                flush=True,
            )
            delta = change_set(n, changes)
            apply_recorded_batch(
                archive,
                zarr_id,
                {c.path: b"changed " + c.path.encode() for c in delta if c.entry is not None},
            )
            apply_recorded_batch(archive, zarr_id, {}, [c.path for c in delta if c.entry is None])
            archive.close()
            results = {}
            for mode in ("records", "listing"):
                proc = subprocess.run(
                    [sys.executable, __file__, "--s3-child", mode],
                    env={**env, "BENCH_ZARR_ID": zarr_id},
                    capture_output=True,
                    text=True,
                    check=True,
                )
                r = json.loads(proc.stdout.strip().splitlines()[-1])
                assert r["status"] == "written" and not r["mismatch"] and r["source"] == mode, r
                results[mode] = r
                print(
                    f"S3 {n} objects, {changes} changes, write_manifest from {mode}: "
                    f"{r['seconds']:.2f} s, peak RSS {r['peak_rss_mib']:.1f} MiB",
                    flush=True,
                )
            assert results["records"]["sha"] == results["listing"]["sha"], "files differ"
            print("the two manifest files are identical", flush=True)
        finally:
            server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--entries", type=int, default=1_000_000)
    parser.add_argument("--changes", type=int, default=500)
    parser.add_argument("--s3", type=int, default=20_000, help="objects on SeaweedFS (0: skip)")
    parser.add_argument("--merge-child", nargs=4, help=argparse.SUPPRESS)
    parser.add_argument("--s3-child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.merge_child:
        base, n, changes, out = args.merge_child
        merge_child(base, int(n), int(changes), out)
        return
    if args.s3_child:
        s3_child(args.s3_child)
        return
    if args.entries:
        merge_run(args.entries, args.changes)
    if args.s3:
        s3_run(args.s3, args.changes)


if __name__ == "__main__":
    main()
