"""DANDI's client against zarrchive: ``dandi upload`` vs ``zarrchive upload`` of the same Zarr
(files/s), and ``dandi upload``/``dandi download`` of an NWB file (MB/s).

Starts ``zarrchive serve`` (embedded SeaweedFS, SQLite) in a temporary data directory on
free ports, creates a user and dandisets through the API, and runs each client as a
subprocess (``dandi`` from ``.venv-dandi``: ``make .venv-dandi``):

- Zarr: ``--files`` chunk files of ``--file-size`` bytes in nested directories, uploaded by
  ``zarrchive upload`` to one dandiset and by ``dandi upload`` to another (first upload, then
  an unchanged re-upload); wall times include each CLI's start-up and local hashing.
- NWB: a file of about ``--nwb-mb`` MB made with pynwb, ``dandi upload`` (DANDI's 64 MiB
  parts) and ``dandi download``.

    .venv/bin/python bench/dandi_bench.py [--files 2000] [--file-size 4096] [--nwb-mb 130]

Prints Markdown tables.  A client that fails prints its error in the table.  The machine may
be shared: figures are noisy.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from zarrchive.storage.seaweedfs import free_port

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
DANDI = REPO / ".venv-dandi" / "bin"


def make_zarr(root: Path, files: int, size: int) -> None:
    """A Zarr v2 array of *files* chunks of *size* bytes, keys ``i/j`` (nested)."""
    side = max(1, int(files**0.5))
    rows = -(-files // side)
    root.mkdir(parents=True)
    (root / ".zgroup").write_text(json.dumps({"zarr_format": 2}))
    array = root / "data"
    array.mkdir()
    meta = {
        "zarr_format": 2,
        "shape": [rows * size, side],
        "chunks": [size, 1],
        "dtype": "|u1",
        "compressor": None,
        "fill_value": 0,
        "filters": None,
        "order": "C",
        "dimension_separator": "/",
    }
    (array / ".zarray").write_text(json.dumps(meta))
    written = 0
    for i in range(rows):
        (array / str(i)).mkdir()
        for j in range(side):
            if written == files:
                return
            (array / str(i) / str(j)).write_bytes(os.urandom(size))
            written += 1


def timed(args: list[str], cwd: Path, env: dict[str, str]) -> tuple[float, str | None]:
    """Wall time of a command, and its error (last stderr line) if it failed."""
    start = time.perf_counter()
    done = subprocess.run(
        args, cwd=cwd, env=env, capture_output=True, text=True, stdin=subprocess.DEVNULL
    )
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        print(
            f"--- {' '.join(args[:2])} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}",
            file=sys.stderr,
        )
        lines = [line for line in (done.stderr or done.stdout).splitlines() if line.strip()]
        return elapsed, (lines[-1] if lines else f"exit {done.returncode}")[:160]
    return elapsed, None


def row(what: str, count: float, unit: str, elapsed: float, error: str | None) -> str:
    if error is not None:
        return f"| {what} | failed: {error} | |"
    return f"| {what} | {elapsed:.1f} s | {count / elapsed:,.1f} {unit}/s |"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--files", type=int, default=2000)
    parser.add_argument("--file-size", type=int, default=4096)
    parser.add_argument("--nwb-mb", type=int, default=130)
    options = parser.parse_args()
    if not (DANDI / "dandi").exists():
        sys.exit("dandi is not installed: run `make .venv-dandi`")
    work = Path(tempfile.mkdtemp(prefix="dandi-bench-"))
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("ZARRCHIVE_")}
    env.update(
        ZARRCHIVE_DATA_DIR=str(work / "data"),
        ZARRCHIVE_PORT=str(port),
        ZARRCHIVE_EMBEDDED_S3_PORT=str(free_port([port])),
    )
    url = f"http://127.0.0.1:{port}"
    server = subprocess.Popen(
        [str(BIN / "zarrchive"), "serve"],
        env=env,
        stdout=open(work / "server.log", "wb"),  # noqa: SIM115 - lives as long as the server
        stderr=subprocess.STDOUT,
        start_new_session=True,  # its embedded SeaweedFS too is stopped with its group
    )
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                if httpx.get(f"{url}/server-info", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline or server.poll() is not None:
                sys.exit(f"zarrchive serve did not start: see {work / 'server.log'}")
            time.sleep(0.2)
        token = subprocess.run(
            [str(BIN / "zarrchive"), "admin", "create-user", "bench"],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split()[-1]
        api = httpx.Client(base_url=url, headers={"Authorization": f"token {token}"}, timeout=60)

        def dandiset(name: str) -> str:
            response = api.post("/api/dandisets/", json={"name": name, "metadata": {}})
            response.raise_for_status()
            return str(response.json()["identifier"])

        client_env = {k: v for k, v in os.environ.items() if not k.startswith("ZARRCHIVE_")}
        client_env.update(
            HOME=str(work / "home"),
            PYTHON_KEYRING_BACKEND="keyring.backends.null.Keyring",
            DANDI_NO_ET="1",
            ZARRCHIVE_URL=url,
            ZARRCHIVE_TOKEN=token,
            **{f"127.0.0.1:{port}_API_KEY": token},
        )
        lines = ["| run | time | rate |", "|---|---:|---:|"]
        # Zarr: zarrchive upload
        source = work / "source.zarr"
        make_zarr(source, options.files, options.file_size)
        count = options.files + 2
        ours = dandiset("zarrchive")
        upload = [str(BIN / "zarrchive"), "upload", str(source), "--dandiset", ours]
        upload += ["--path", "bench.zarr"]
        for label in ("first upload", "unchanged re-upload"):
            elapsed, error = timed(upload, work, client_env)
            lines.append(row(f"zarrchive upload, {label}", count, "files", elapsed, error))
        # Zarr: dandi upload of the same files
        theirs = dandiset("dandi")
        draft = f"{url}/api/dandisets/{theirs}/versions/draft/"
        timed([str(DANDI / "dandi"), "download", draft], work, client_env)
        folder = work / theirs
        shutil.copytree(source, folder / "bench.zarr")
        dandi_upload = [str(DANDI / "dandi"), "upload", "-i", url]
        for label in ("first upload", "unchanged re-upload"):
            elapsed, error = timed(dandi_upload, folder, client_env)
            lines.append(row(f"dandi upload, {label}", count, "files", elapsed, error))
        shutil.rmtree(folder / "bench.zarr")
        # NWB: dandi upload and download
        nwb = folder / "sub-1" / "sub-1_ses-1.nwb"
        nwb.parent.mkdir(parents=True)
        make = [str(DANDI / "python"), str(REPO / "examples" / "make_nwb.py")]
        make += [str(nwb), str(options.nwb_mb * 10**6), "1"]
        subprocess.run(make, check=True, capture_output=True)
        megabytes = nwb.stat().st_size / 1e6
        elapsed, error = timed(dandi_upload, folder, client_env)
        lines.append(row(f"dandi upload, NWB {megabytes:.0f} MB", megabytes, "MB", elapsed, error))
        elapsed, _ = timed(dandi_upload, folder, client_env)
        lines.append(f"| dandi upload, NWB unchanged (nothing sent) | {elapsed:.1f} s | |")
        out = work / "download"
        out.mkdir()
        asset = f"{draft}assets/?path=sub-1/sub-1_ses-1.nwb"  # the NWB alone
        elapsed, error = timed([str(DANDI / "dandi"), "download", asset], out, client_env)
        lines.append(row("dandi download (NWB)", megabytes, "MB", elapsed, error))
        same = (out / "sub-1_ses-1.nwb").read_bytes() == nwb.read_bytes()
        print(f"{options.files} files of {options.file_size} bytes; download identical: {same}")
        print("\n".join(lines))
    finally:
        server.send_signal(signal.SIGINT)  # Ctrl-C: stops the API and its SeaweedFS
        with contextlib.suppress(subprocess.TimeoutExpired):
            server.wait(30)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(server.pid, signal.SIGKILL)  # whatever is left of the group
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
