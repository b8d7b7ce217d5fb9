"""Behind an institution's proxy: the client's API requests and its S3 PUTs and GETs go
through ``HTTP_PROXY`` (``HTTPS_PROXY`` for https), and ``NO_PROXY`` hosts bypass it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit

import httpx

from tests.conftest import LiveServer, Users
from tests.helpers.forward_proxy import forward_proxy
from zarrchive.services.runtime import Archive

FILES = {".zgroup": b'{"zarr_format": 2}', "a/.zarray": b"{}", "a/0": b"zero", "a/1": b"one"}


def write(root: Path) -> None:
    for path, body in FILES.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_bytes(body)


def cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "zarrchive.cli", *args],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )


def test_upload_and_download_go_through_the_proxy_unless_no_proxy(
    api: httpx.Client,
    archive: Archive,
    dandiset: str,
    live_server: LiveServer,
    users: Users,
    tmp_path: Path,
) -> None:
    local = tmp_path / "data.zarr"
    write(local)
    api_host = urlsplit(live_server.url).netloc
    s3_host = urlsplit(archive.store.public_url("x")).netloc
    base = {k: v for k, v in os.environ.items() if "proxy" not in k.lower()}
    base = {k: v for k, v in base.items() if not k.startswith("ZARRCHIVE_")}
    base.update(
        ZARRCHIVE_URL=live_server.url,
        ZARRCHIVE_TOKEN=users.owner,
        ZARRCHIVE_STATE_DIR=str(tmp_path / "state"),
    )
    with forward_proxy() as proxy:
        env = {**base, "HTTP_PROXY": proxy.url, "HTTPS_PROXY": proxy.url}
        done = cli(env, "upload", str(local), "--dandiset", dandiset)
        assert done.returncode == 0, done.stderr
        uploaded = list(proxy.seen)
        assert ("PUT", s3_host) in uploaded  # the presigned PUTs to S3
        assert any(host == api_host and method == "POST" for method, host in uploaded)
        proxy.seen.clear()
        done = cli(env, "download", f"{dandiset}/data.zarr", str(tmp_path / "copy"))
        assert done.returncode == 0, done.stderr
        assert ("GET", s3_host) in proxy.seen and ("GET", api_host) in proxy.seen
        assert {
            p.relative_to(tmp_path / "copy").as_posix(): p.read_bytes()
            for p in (tmp_path / "copy").rglob("*")
            if p.is_file()
        } == FILES
        # NO_PROXY: straight to both
        proxy.seen.clear()
        bypass = {**env, "NO_PROXY": "127.0.0.1,localhost"}
        done = cli(bypass, "download", f"{dandiset}/data.zarr", str(tmp_path / "copy2"))
        assert done.returncode == 0, done.stderr
        assert proxy.seen == []
