"""The upload command's output: a summary on stdout, notes on stderr."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from tests.helpers.local_zarr import zarr_checksum_of
from zarrchive.cli import app
from zarrchive.client import ApiClient


def test_cli_upload_summary_and_dry_run(
    tmp_path: Path,
    client: ApiClient,
    client_env: dict[str, str],
    dandiset: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    local = tmp_path / "cli.zarr"
    (local / "arr").mkdir(parents=True)
    (local / "zarr.json").write_bytes(b"{}")
    (local / "arr" / "0").write_bytes(b"0" * 100)
    args = ["upload", str(local), "--dandiset", dandiset, "--jobs", "2"]
    asked: list[str] = []  # the API requests the command sends
    request = ApiClient.request

    def recorded(self: ApiClient, method: str, path: str, **kwargs: Any) -> Any:
        asked.append(f"{method} {path}")
        return request(self, method, path, **kwargs)

    monkeypatch.setattr(ApiClient, "request", recorded)
    result = CliRunner().invoke(app, args, env=client_env)
    assert result.exit_code == 0, result.stderr
    # the archive's info (its batch limit, what publishing does to Zarrs) is asked for once
    assert asked.count("GET /api/info/") == 1, asked
    zarr = client.find_zarr(dandiset, "cli.zarr")
    assert zarr is not None
    checksum = zarr_checksum_of(local)
    assert result.stdout.startswith(f"Zarr {zarr.zarr_id}: uploaded 2 files (102 B")
    assert result.stdout.endswith(
        f"deleted 0, skipped 0; checksum {checksum} (matches the local one)\n"
    )
    assert result.stderr == (
        f"zarrchive: NOTE: publishing dandiset {dandiset} makes this Zarr immutable: after "
        "publication it can never change again\n"
    )

    (local / "arr" / "1").write_bytes(b"1")
    (local / "arr" / "0").unlink()
    result = CliRunner().invoke(app, [*args, "--dry-run"], env=client_env)
    assert result.exit_code == 0, result.stderr
    assert result.stdout == (
        f"dry run: would upload 1 files (1 B), delete 1 (100 B), skip 1 (of 2 local files); "
        f"Zarr {zarr.zarr_id}\n  upload arr/1 (1 B)\n  delete arr/0 (100 B)\n"
    )
    assert client.get_zarr(zarr.zarr_id).checksum == checksum
