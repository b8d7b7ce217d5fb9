"""``zarrchive publish``: refuses without confirmation, warns, publishes with --yes or "y"."""

from __future__ import annotations

import os
import pty
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from tests.conftest import LiveServer, Users
from tests.helpers.api_uploads import upload
from tests.helpers.assets import add_zarr_asset, md5, ok

ZARRCHIVE = [sys.executable, "-m", "zarrchive.cli", "publish"]


@pytest.fixture
def database_url(tmp_path: Path) -> str:
    """SQLite only: the command is the subject here, not the database."""
    return f"sqlite:///{tmp_path / 'zarrchive.sqlite3'}"


def _env(live_server: LiveServer, token: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ZARRCHIVE_")}
    env.update(ZARRCHIVE_URL=live_server.url, ZARRCHIVE_TOKEN=token, COLUMNS="200")
    return env


def _versions(api: httpx.Client, ident: str) -> list[str]:
    page = ok(api.get(f"/api/dandisets/{ident}/versions/"))
    return [v["version"] for v in page["results"]]


def test_refuses_without_a_terminal(
    api: httpx.Client,
    dandiset: str,
    zarr_id: str,
    live_server: LiveServer,
    users: Users,
) -> None:
    upload(api, zarr_id, {"first": b"file"})
    add_zarr_asset(api, dandiset, zarr_id, "data.zarr")
    result = subprocess.run(
        [*ZARRCHIVE, dandiset],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        env=_env(live_server, users.owner),
        timeout=60,
    )
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr == (
        f"zarrchive publish: not publishing dandiset {dandiset}: 1 Zarr(s) would become "
        "immutable and stdin is not a terminal to confirm; rerun with --yes\n"
    )
    assert _versions(api, dandiset) == ["draft"]
    upload(api, zarr_id, {"still/writable": b"yes"})


def test_yes_publishes_and_warns(
    api: httpx.Client,
    dandiset: str,
    zarr_id: str,
    live_server: LiveServer,
    users: Users,
) -> None:
    upload(api, zarr_id, {"a": b"abc"})
    add_zarr_asset(api, dandiset, zarr_id, "sub/data.zarr")
    result = subprocess.run(
        [*ZARRCHIVE, dandiset, "--yes"],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        env=_env(live_server, users.owner),
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    (published,) = _versions(api, dandiset)[:-1]
    assert result.stdout == f"published dandiset {dandiset} as version {published}\n"
    assert f"publishing dandiset {dandiset} makes 1 Zarr(s) IMMUTABLE" in result.stderr
    assert "sub/data.zarr" in result.stderr and zarr_id in result.stderr
    response = api.post(f"/api/zarr/{zarr_id}/upload/", json=[{"path": "b", "etag": md5(b"b")}])
    assert response.status_code == 403
    # errors of the API are one line too: a stranger may not publish
    result = subprocess.run(
        [*ZARRCHIVE, dandiset, "--yes"],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        env=_env(live_server, users.other),
        timeout=60,
    )
    assert result.returncode == 2
    assert result.stderr.splitlines()[-1] == (
        f"zarrchive publish: POST /api/dandisets/{dandiset}/versions/draft/publish/ failed: "
        f"403: user 'other' does not own dandiset {dandiset}: only its owners may change it"
    )


@pytest.mark.parametrize("answer", ["n", "y"])
def test_asks_on_a_terminal(
    api: httpx.Client,
    dandiset: str,
    zarr_id: str,
    live_server: LiveServer,
    users: Users,
    answer: str,
) -> None:
    upload(api, zarr_id, {"first": b"file"})
    add_zarr_asset(api, dandiset, zarr_id, "data.zarr")
    controller, terminal = pty.openpty()
    try:
        process = subprocess.Popen(
            [*ZARRCHIVE, dandiset],
            stdin=terminal,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=_env(live_server, users.owner),
        )
        os.write(controller, f"{answer}\n".encode())
        stdout, stderr = process.communicate(timeout=60)
    finally:
        os.close(controller)
        os.close(terminal)
    assert "IMMUTABLE" in stderr and "data.zarr" in stderr
    assert f"Publish dandiset {dandiset} now?" in stderr
    if answer == "n":
        assert process.returncode == 1
        assert stderr.endswith("zarrchive publish: not published\n")
        assert _versions(api, dandiset) == ["draft"]
    else:
        assert process.returncode == 0, stderr
        assert stdout.startswith(f"published dandiset {dandiset} as version 0.")
        assert len(_versions(api, dandiset)) == 2
