"""``zarrchive metadata get|set``: a draft's dandiset metadata from the command line (issue
#41: the README had no command to make its first dandiset publishable).  ``set`` stores the
file's metadata (``schemaKey`` and ``schemaVersion`` filled in when absent), ``get --status``
lists every error of the draft, a file that is no metadata is one line and exit 2.  That
``set`` waits for the validation and prints ``Valid`` runs in tests/readme (the README's
publishing block, against a server started as ``make serve`` starts it)."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
from tests.conftest import LiveServer, Users
from tests.helpers.databases import SQLITE_ONLY
from tests.helpers.jobs import HeldJobQueue
from tests.helpers.metadata import validate_now
from typer.testing import CliRunner

from zarrchive.cli import app
from zarrchive.services.runtime import Archive

pytestmark = [pytest.mark.settings(publish_requires_valid=True), SQLITE_ONLY]

WITHOUT_CONTRIBUTOR = """\
name: Mouse recordings
description: Recordings of a mouse.
license: [spdx:CC-BY-4.0]
keywords: [mouse]
"""


@pytest.fixture
def env(live_server: LiveServer, archive: Archive, users: Users) -> dict[str, str]:
    live_server.app.state.archive = archive
    return {"ZARRCHIVE_URL": live_server.url + "/api", "ZARRCHIVE_TOKEN": users.owner}


def cli(args: list[str], env: dict[str, str]) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, ["metadata", *args], env=env)
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    return result.exit_code, result.stdout, result.stderr


def test_set_stores_the_file_and_get_lists_what_is_missing(
    env: dict[str, str], api: httpx.Client, held: HeldJobQueue, dandiset: str, tmp_path: Path
) -> None:
    file = tmp_path / "dandiset.yaml"
    file.write_text(WITHOUT_CONTRIBUTOR)
    code, out, err = cli(["set", dandiset, str(file), "--no-wait"], env)
    assert (code, err) == (0, ""), err
    assert out == f"dandiset {dandiset}: metadata set; validation under way\n"
    stored = api.get(f"/api/dandisets/{dandiset}/versions/draft/").json()
    assert stored["name"] == "Mouse recordings" and stored["license"] == ["spdx:CC-BY-4.0"]
    assert stored["schemaKey"] == "Dandiset" and stored["schemaVersion"] == "0.8.0"
    assert validate_now(api, held, dandiset)["status"] == "Invalid"
    code, out, _ = cli(["get", dandiset, "--status"], env)
    assert code == 1
    lines = out.splitlines()
    assert lines[0] == f"dandiset {dandiset} draft: Invalid"
    assert any("contributor" in line for line in lines[1:]), out
    assert not any("schemaVersion" in line or "description" in line for line in lines), out
    # get: the same metadata, as YAML or JSON
    code, out, _ = cli(["get", dandiset, "--json"], env)
    assert code == 0 and json.loads(out)["description"] == "Recordings of a mouse."
    code, out, _ = cli(["get", dandiset], env)
    assert code == 0 and "description: Recordings of a mouse.\n" in out


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("name: [unclosed\n", "is not YAML or JSON (line 2)"),
        ("- a\n- list\n", "does not hold a mapping of metadata fields"),
    ],
)
def test_a_file_that_is_no_metadata_is_one_line(
    env: dict[str, str], dandiset: str, tmp_path: Path, text: str, said: str
) -> None:
    file = tmp_path / "bad.yaml"
    file.write_text(text)
    code, out, err = cli(["set", dandiset, str(file), "--no-wait"], env)
    assert code == 2 and out == ""
    assert err.startswith("zarrchive metadata set: ") and said in err and err.count("\n") == 1
