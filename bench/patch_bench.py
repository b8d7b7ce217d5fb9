"""A metadata-only ``zarrchive upload --patch`` of a big Zarr: the whole CLI process, timed.

The archive is a throwaway one (``local_archive``: its own SeaweedFS, SQLite, the API in a
thread of this process).  The Zarr has ``--files`` chunk files plus metadata:

- ``nested`` (default): Zarr v3-like, ``zarr.json`` and ``.zattrs`` at the root and in each of
  ``--arrays`` arrays ``s{a}``, chunks ``s{a}/c/{i}/{j}`` (100 per leaf directory);
- ``flat``: Zarr v2-like, ``.zgroup``/``.zattrs`` at the root and in one array ``arr``
  (``.zarray``, ``.zattrs``) whose chunks ``arr/{i}.{j}`` are all in one directory.

Seeding is cheap: every file is written locally, hashed once, and the archive's side is
written directly as its ``.checksum`` nodes (in S3) and root checksum (in the database), as
``bench/complete_bench.py`` does: a patch reads only the ``.checksum`` nodes of the
directories it touches (each whole, in one request: the flat layout's ``arr`` is one node of
10^5 entries) and never the other objects, so those are not put in S3 (the manifest job afterwards notes
the difference in the server's log; it does not change the figure).

Then, ``--repeat`` times: the metadata files are rewritten (new content each time) and the
command below is run as a child process, timed from start to exit (its own Python start
included, wall and CPU time), with Python's bytecode cached (as an installed package runs)
and, when this process has ``PYTHONDONTWRITEBYTECODE=1``, also so (then every start compiles
every module it imports); its exit status is checked (exit 1 would be a checksum mismatch).
The same patch through the library, in this process, gives the time per phase.  ``--full`` also times a plain ``zarrchive upload`` of the same kind of change
(the whole tree compared, with the digest cache warm) for comparison.

    zarrchive upload LOCAL --dandiset D --patch --include '**/.zattrs' --include '**/zarr.json'
        [--include '**/.zarray' --include '**/.zgroup' in the flat layout]

    .venv/bin/python bench/patch_bench.py [--files 100000] [--layout nested|flat]
        [--arrays 4] [--repeat 3] [--full]
"""

from __future__ import annotations

import argparse
import hashlib
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from local_archive import local_archive


def nested_paths(files: int, arrays: int) -> Iterator[str]:
    yield "zarr.json"
    yield ".zattrs"
    per_array = -(-files // arrays)
    for a in range(arrays):
        yield f"s{a}/zarr.json"
        yield f"s{a}/.zattrs"
        for n in range(min(per_array, files - a * per_array)):
            yield f"s{a}/c/{n // 100}/{n % 100}"


def flat_paths(files: int) -> Iterator[str]:
    yield from (".zgroup", ".zattrs", "arr/.zarray", "arr/.zattrs")
    side = int(files**0.5) + 1
    for n in range(files):
        yield f"arr/{n // side}.{n % side}"


METADATA = (".zattrs", "zarr.json", ".zarray", ".zgroup")


def write_tree(root: Path, paths: list[str], size: int) -> None:
    made: set[Path] = set()
    for path in paths:
        target = root / path
        if target.parent not in made:
            target.parent.mkdir(parents=True, exist_ok=True)
            made.add(target.parent)
        seed = hashlib.sha256(path.encode()).digest()
        target.write_bytes((seed * (size // len(seed) + 1))[:size])


def seed_archive(archive: object, zarr_id: str, root: Path) -> tuple[int, str]:
    """Write the Zarr's ``.checksum`` nodes and root checksum from the local tree's md5s;
    ``(nodes, checksum)``."""
    from sqlalchemy import select

    from zarrchive.checksum import iter_directory_digests
    from zarrchive.client.local import hash_local
    from zarrchive.db.models import Zarr
    from zarrchive.storage.keys import checksum_node_key

    store = archive.store  # type: ignore[attr-defined]
    entries = hash_local(str(root), jobs=4, cache=None)
    nodes: list[tuple[str, bytes]] = []
    top = None
    for directory in iter_directory_digests(entries, grouped=True, with_nodes=True):
        assert directory.node_json is not None
        nodes.append((checksum_node_key(zarr_id, directory.path), directory.node_json.encode()))
        if directory.path == "":
            top = directory
    store.map(lambda kv: store.put(kv[0], kv[1], "application/json"), nodes)
    assert top is not None
    with archive.db.session() as session:  # type: ignore[attr-defined]
        zarr = session.scalar(select(Zarr).where(Zarr.id == zarr_id))
        assert zarr is not None
        zarr.checksum, zarr.file_count, zarr.size = top.digest, top.count, top.size
    return len(nodes), top.digest


def zarrchive_command() -> list[str]:
    script = Path(sys.executable).with_name("zarrchive")
    return [str(script)] if script.exists() else [sys.executable, "-m", "zarrchive.cli"]


def run(command: list[str], env: dict[str, str]) -> tuple[float, float, str]:
    """Run *command*; ``(wall seconds, CPU seconds (user + system), last line of stdout)``."""
    started = time.perf_counter()
    process = subprocess.Popen(
        command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    out, err = process.communicate()
    seconds = time.perf_counter() - started
    if process.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} exited {process.returncode}:\n{out}\n{err}")
    return seconds, _cpu(process.pid), out.strip().splitlines()[-1]


_children_cpu = [0.0]


def _cpu(pid: int) -> float:
    """CPU of the last child reaped (the difference of this process's children's totals)."""
    import resource

    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    total = usage.ru_utime + usage.ru_stime
    spent, _children_cpu[0] = total - _children_cpu[0], total
    return spent


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--files", type=int, default=100_000, help="chunk files")
    parser.add_argument("--file-size", type=int, default=256)
    parser.add_argument("--layout", choices=["nested", "flat"], default="nested")
    parser.add_argument("--arrays", type=int, default=4, help="arrays (nested layout)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--full", action="store_true", help="also time a plain upload")
    args = parser.parse_args()

    from zarrchive.services.identity.auth import create_user

    print(f"load average at start: {os.getloadavg()}", flush=True)
    with local_archive("patch-bench-") as (archive, url, work):
        with archive.db.session() as session:
            _, token = create_user(session, "bench")
        import httpx

        api = httpx.Client(base_url=url, headers={"Authorization": f"token {token}"}, timeout=300)
        dandiset = api.post("/api/dandisets/", json={"name": "patch bench"}).json()["identifier"]
        zarr_id = api.post("/api/zarr/", json={"name": "big.zarr", "dandiset": dandiset}).json()[
            "zarr_id"
        ]
        if args.layout == "nested":
            paths = list(nested_paths(args.files, args.arrays))
        else:
            paths = list(flat_paths(args.files))
        local = work / "local" / "big.zarr"
        t0 = time.perf_counter()
        write_tree(local, paths, args.file_size)
        written = time.perf_counter() - t0
        t0 = time.perf_counter()
        nodes, checksum = seed_archive(archive, zarr_id, local)
        print(
            f"{len(paths)} files ({args.layout}) written in {written:.1f} s; archive seeded "
            f"({nodes} directories) in {time.perf_counter() - t0:.1f} s; checksum {checksum}",
            flush=True,
        )
        metadata = [p for p in paths if p.rpartition("/")[2] in METADATA]
        env = {k: v for k, v in os.environ.items() if not k.startswith("ZARRCHIVE_")}
        cache = tempfile.mkdtemp(prefix="patch-bench-cache-", dir=work)
        env.update(ZARRCHIVE_URL=url, ZARRCHIVE_TOKEN=token, ZARRCHIVE_CACHE_DIR=cache)
        # Two ways to start Python: with its bytecode cached (an installed package: the
        # modules' .pyc files, here under a prefix in the work directory, filled by a warm-up
        # run), and as this process's environment says (PYTHONDONTWRITEBYTECODE=1 makes
        # every start compile every module it imports from source).
        envs = {
            "bytecode cached": {
                **{k: v for k, v in env.items() if k != "PYTHONDONTWRITEBYTECODE"},
                "PYTHONPYCACHEPREFIX": str(work / "pycache"),
            },
        }
        if os.environ.get("PYTHONDONTWRITEBYTECODE"):
            envs["PYTHONDONTWRITEBYTECODE=1"] = env
        cli = [*zarrchive_command(), "upload", str(local), "--dandiset", dandiset]
        patch = [*cli, "--patch"]
        for name in METADATA:
            patch += ["--include", f"**/{name}"]

        def edit(round_: int) -> None:
            for path in metadata:
                (local / path).write_text(f'{{"round": {round_}, "path": "{path}"}}')

        edit(-1)
        seconds, cpu, last = run(patch, envs["bytecode cached"])  # warm-up: compiles, asset
        print(f"  warm-up (compiles the bytecode, creates the asset): {seconds:.2f} s  {last}")
        times: dict[str, list[tuple[float, float]]] = {name: [] for name in envs}
        for round_ in range(args.repeat):
            for i, (name, child_env) in enumerate(envs.items()):  # alternately
                edit(len(envs) * round_ + i)  # new content every time
                load = os.getloadavg()[0]
                seconds, cpu, last = run(patch, child_env)
                times[name].append((seconds, cpu))
                print(
                    f"  --patch, metadata only, {name}: {seconds:6.2f} s wall, {cpu:5.2f} s CPU "
                    f"(load {load:.1f})",
                    flush=True,
                )
        print(f"last output: {last}")
        for name, figures in times.items():
            walls = [w for w, _ in figures]
            cpus = [c for _, c in figures]
            print(
                f"--patch metadata-only update of {len(paths)} files ({len(metadata)} metadata "
                f"files), {name}: wall median {statistics.median(walls):.2f} s, best "
                f"{min(walls):.2f} s; CPU best {min(cpus):.2f} s (target < 5 s)",
                flush=True,
            )
        print(f"load average at the end: {os.getloadavg()}")
        # where the time goes: the same patch through the library, in this process
        from zarrchive.client import ApiClient, Uploader
        from zarrchive.client.selection import Selection

        edit(50)
        selection = Selection.parse([f"**/{name}" for name in METADATA])
        with ApiClient(url, token) as client:
            t0 = time.perf_counter()
            result = Uploader(client).upload(
                local, dandiset=dandiset, patch=True, selection=selection
            )
            total = time.perf_counter() - t0
        assert result.ok, result
        phases = ", ".join(f"{k} {v:.2f}" for k, v in result.timings.items())
        print(f"  in-process: {total:.2f} s ({phases}; {result.listed} directories listed)")
        if args.full:
            full_env = envs["bytecode cached"]
            run(cli, full_env)  # fills the digest cache
            time.sleep(3.5)  # settled: the cache keeps files not changed in the last 3 s
            for round_ in range(args.repeat):
                edit(100 + round_)
                load = os.getloadavg()[0]
                seconds, cpu, last = run(cli, full_env)
                print(
                    f"  plain upload (whole tree compared, digest cache warm), same change: "
                    f"{seconds:6.2f} s wall, {cpu:5.2f} s CPU (load {load:.1f})  {last}",
                    flush=True,
                )


if __name__ == "__main__":
    main()
