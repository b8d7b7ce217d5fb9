"""``zarrchive restore ADDRESS [--to CHECKSUM]``: the Zarr's checksums listed; the Zarr
brought back to one of them (its exact checksum after); a checksum without a manifest
refused (exit 2, nothing changed)."""

from __future__ import annotations

from typer.testing import CliRunner

from tests.helpers.seeded_zarr import seed_zarr
from tests.helpers.zarr_client import oracle_checksum
from zarrchive.cli import app
from zarrchive.client import ApiClient
from zarrchive.services.runtime import Archive
from zarrchive.services.zarr_engine.manifests import write_manifest


def restore(env: dict[str, str], *args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, ["restore", *args], env=env)
    return result.exit_code, result.stdout, result.stderr


def test_restore_lists_and_rolls_back(
    client: ApiClient, client_env: dict[str, str], archive: Archive, dandiset: str
) -> None:
    zarr_id = client.create_zarr("r.zarr", dandiset).zarr_id
    files_a = {"a/0": b"zero", "b": b"bee"}
    a = seed_zarr(archive, zarr_id, files_a)
    write_manifest(archive, zarr_id)
    b = seed_zarr(archive, zarr_id, {"a/0": b"rewritten", "c": b"new"})
    write_manifest(archive, zarr_id)

    code, out, err = restore(client_env, zarr_id)
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0] == f"Zarr {zarr_id} ({dandiset}/r.zarr), newest first:"
    assert lines[1].startswith(f"  {b}  ") and lines[1].endswith("(current, restorable)")
    assert lines[2].startswith(f"  {a}  ") and lines[2].endswith("2 files, 7 B  (restorable)")

    code, out, err = restore(client_env, zarr_id, "--to", oracle_checksum({"x": b"x"}))
    assert code == 2 and "has no manifest of checksum" in err
    assert client.get_zarr(zarr_id).checksum == b

    code, out, err = restore(client_env, f"{dandiset}/r.zarr", "--to", a)
    assert code == 0, err
    assert out == f"Zarr {zarr_id}: restored to {a} (1 file copied back, 1 deleted)\n"
    assert client.get_zarr(zarr_id).checksum == a == oracle_checksum(files_a)
    code, out, err = restore(client_env, zarr_id, "--to", a)
    assert code == 0, err
    assert out == f"Zarr {zarr_id}: already at {a}; nothing changed\n"
