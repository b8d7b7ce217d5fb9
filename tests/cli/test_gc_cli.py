"""``zarrchive admin gc`` refuses bad input clearly (unknown Zarr ids: before anything is
removed; a negative retention), and takes ``--retention-days``."""

from __future__ import annotations

from tests.helpers.databases import SQLITE_ONLY
from tests.helpers.snapshots import admin_env
from typer.testing import CliRunner

from zarrchive.cli import app
from zarrchive.config import Settings

pytestmark = SQLITE_ONLY


def test_gc_refuses_unknown_zarr_ids_and_a_negative_retention(
    settings: Settings, zarr_id: str
) -> None:
    env = admin_env(settings)
    result = CliRunner().invoke(app, ["admin", "gc", zarr_id, "no-such-zarr", "--apply"], env=env)
    assert result.exit_code == 2
    assert "zarrchive: no Zarr 'no-such-zarr': nothing removed" in result.stderr
    assert result.stdout == ""
    result = CliRunner().invoke(app, ["admin", "gc", "--retention-days", "-1"], env=env)
    assert result.exit_code == 2
    assert "--retention-days" in result.stderr
    result = CliRunner().invoke(app, ["admin", "gc", zarr_id, "--retention-days", "0"], env=env)
    assert result.exit_code == 0, result.stderr
    assert "would remove 0 object versions" in result.stderr
