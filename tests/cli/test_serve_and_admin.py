"""`zarrchive serve` (the embedded default) and `zarrchive admin` as a user runs them."""

from __future__ import annotations

import contextlib
import hashlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from tests.helpers.presigned import put_headers
from tests.helpers.serve_child import default_stop_signals
from tests.helpers.waiting import EVENT_TIMEOUT, wait_until

from zarrchive.db.session import Database
from zarrchive.storage.embedded import embedded_s3_host
from zarrchive.storage.seaweedfs import free_port

ZARRCHIVE = [sys.executable, "-m", "zarrchive.cli"]
#: Deadlines (seconds) generous for a loaded machine (issue #41): serve's start (SQLite
#: migrations, SeaweedFS), one request, serve's stop after Ctrl-C.  None is a speed target.
START_TIMEOUT = 300.0
HTTP_TIMEOUT = 60.0
STOP_TIMEOUT = 180.0


def _weed_pids(data_dir: Path) -> list[int]:
    out = subprocess.run(
        ["pgrep", "-f", "--", f"-dir={data_dir / 's3'}"], capture_output=True, text=True
    )
    return [int(p) for p in out.stdout.split()]


def _env(data_dir: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ZARRCHIVE_")}
    env.update(
        ZARRCHIVE_DATA_DIR=str(data_dir),
        ZARRCHIVE_EMBEDDED_S3_PORT=str(free_port()),
        PYTHONUNBUFFERED="1",
    )
    return env


def _wait_for(url: str, process: subprocess.Popen[Any], timeout: float = START_TIMEOUT) -> None:
    """Wait until serve answers *url* (or exits: its output in the failure)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            output = process.stdout.read() if process.stdout is not None else ""
            raise AssertionError(f"serve exited with {process.returncode}: {output[-2000:]}")
        try:
            if httpx.get(url, timeout=HTTP_TIMEOUT).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    process.kill()
    output = ""
    with contextlib.suppress(subprocess.TimeoutExpired):  # its weed may hold the pipe open
        output, _ = process.communicate(timeout=10)
    raise AssertionError(f"serve did not answer {url} within {timeout:.0f} s: {output[-2000:]}")


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[str], str, Path, dict[str, str]]]:
    data_dir = tmp_path / "data"
    env = _env(data_dir)
    port = free_port()
    process = subprocess.Popen(
        [*ZARRCHIVE, "serve", "--port", str(port)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        preexec_fn=default_stop_signals,  # Ctrl-C works even when the test run is nohup'ed
    )
    try:
        _wait_for(f"http://127.0.0.1:{port}/api/info/", process)
        yield process, f"http://127.0.0.1:{port}", data_dir, env
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        for pid in _weed_pids(data_dir):
            os.kill(pid, signal.SIGKILL)


def test_serve_embedded_default_and_ctrl_c(served: Any) -> None:
    process, url, data_dir, env = served
    info = httpx.get(f"{url}/api/info/", timeout=HTTP_TIMEOUT).json()
    assert info["bucket"] == "zarrchive" and info["max_batch_files"] == 500
    # S3 on a loopback address of its own: another site than the pages (issue #35 item 6)
    assert info["s3_endpoint_url"].startswith(f"http://{embedded_s3_host('127.0.0.1', None)}:")
    assert (data_dir / "zarrchive.sqlite3").exists()
    assert (data_dir / "s3").is_dir()
    assert len(_weed_pids(data_dir)) == 1
    # admin create-user works against the same data directory while serve runs
    token = subprocess.run(
        [*ZARRCHIVE, "admin", "create-user", "alice"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert len(token) == 40
    response = httpx.post(
        f"{url}/api/dandisets/",
        json={"name": "d"},
        headers={"Authorization": f"token {token}"},
        timeout=HTTP_TIMEOUT,
    )
    assert response.status_code == 200 and response.json()["identifier"] == "000001"
    # admin fsck uses the running embedded S3 (not a second weed on the same files)
    headers = {"Authorization": f"token {token}"}
    zarr_id = httpx.post(
        f"{url}/api/zarr/",
        json={"name": "z", "dandiset": "000001"},
        headers=headers,
        timeout=HTTP_TIMEOUT,
    ).json()["zarr_id"]
    body = b"chunk"
    (item,) = httpx.post(
        f"{url}/api/zarr/{zarr_id}/upload/",
        json=[{"path": "a/0", "etag": hashlib.md5(body).hexdigest()}],
        headers=headers,
        timeout=HTTP_TIMEOUT,
    ).json()
    assert (
        httpx.put(
            item["upload_url"],
            content=body,
            headers=put_headers(item["upload_url"], body),
            timeout=HTTP_TIMEOUT,
        ).status_code
        == 200
    )
    done = httpx.post(
        f"{url}/api/zarr/{zarr_id}/upload/complete/", headers=headers, timeout=HTTP_TIMEOUT
    )
    assert done.status_code == 200, done.text
    fsck = subprocess.run(
        [*ZARRCHIVE, "admin", "fsck", "--all"], env=env, capture_output=True, text=True
    )
    assert fsck.returncode == 0, fsck.stderr
    assert f"ok {zarr_id}" in fsck.stderr
    assert len(_weed_pids(data_dir)) == 1
    # Ctrl-C stops both
    process.send_signal(signal.SIGINT)
    output, _ = process.communicate(timeout=STOP_TIMEOUT)
    assert process.returncode == 0, output
    assert "API listening on http://127.0.0.1:" in output
    s3_host = embedded_s3_host("127.0.0.1", None)
    assert f"embedded S3 (SeaweedFS) listening on http://{s3_host}:" in output
    assert _weed_pids(data_dir) == []


def test_no_orphan_weed_when_serve_is_killed(served: Any) -> None:
    process, _url, data_dir, _env = served
    assert len(_weed_pids(data_dir)) == 1
    process.kill()
    process.wait()
    wait_until(lambda: not _weed_pids(data_dir), "the killed serve's weed to exit", EVENT_TIMEOUT)


def test_admin_errors_are_one_line(tmp_path: Path) -> None:
    env = _env(tmp_path / "data")
    (tmp_path / "data").mkdir()  # an archive `serve` made (admin commands create none)
    database = Database(f"sqlite:///{tmp_path / 'data' / 'zarrchive.sqlite3'}")
    database.migrate()
    database.dispose()
    subprocess.run(
        [*ZARRCHIVE, "admin", "create-user", "bob"], env=env, check=True, capture_output=True
    )
    again = subprocess.run(
        [*ZARRCHIVE, "admin", "create-user", "bob"], env=env, capture_output=True, text=True
    )
    assert again.returncode == 2
    assert again.stderr.strip() == "zarrchive: a user named 'bob' already exists"
    bad = subprocess.run([*ZARRCHIVE, "admin", "fsck"], env=env, capture_output=True, text=True)
    assert bad.returncode == 2 and "--all" in bad.stderr
