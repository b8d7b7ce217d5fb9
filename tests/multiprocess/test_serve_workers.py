"""``zarrchive serve --workers N``: refused, with what is missing, unless the processes would
share everything through external services."""

from __future__ import annotations

import os
import subprocess

import pytest
from tests.helpers.server_process import zarrchive_command

from zarrchive.cli.serve import check_multiprocess
from zarrchive.config import Settings
from zarrchive.errors import ConfigurationError

READY = {
    "ZARRCHIVE_S3_ENDPOINT_URL": "http://127.0.0.1:9",
    "ZARRCHIVE_DATABASE_URL": "postgresql+psycopg://postgres@127.0.0.1:5432/x",
    "ZARRCHIVE_REDIS_URL": "redis://127.0.0.1:6379/0",
}


def test_one_process_needs_nothing() -> None:
    check_multiprocess(Settings.from_env({}), 1)


def test_several_processes_with_external_services_are_accepted() -> None:
    check_multiprocess(Settings.from_env(READY), 4)


@pytest.mark.parametrize(
    ("unset", "named"),
    [
        ("ZARRCHIVE_S3_ENDPOINT_URL", "ZARRCHIVE_S3_ENDPOINT_URL"),
        ("ZARRCHIVE_DATABASE_URL", "SQLite"),
        ("ZARRCHIVE_REDIS_URL", "ZARRCHIVE_REDIS_URL"),
    ],
)
def test_each_missing_service_is_named(unset: str, named: str) -> None:
    env = {k: v for k, v in READY.items() if k != unset}
    with pytest.raises(ConfigurationError, match=named):
        check_multiprocess(Settings.from_env(env), 2)


def test_the_command_refuses_before_starting_anything(tmp_path: object) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ZARRCHIVE_")}
    env["ZARRCHIVE_DATA_DIR"] = str(tmp_path)
    result = subprocess.run(
        [*zarrchive_command(), "serve", "--workers", "2"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2
    assert "--workers 2 needs" in result.stderr
    assert "ZARRCHIVE_S3_ENDPOINT_URL" in result.stderr and "Redis" in result.stderr
    assert list(os.scandir(str(tmp_path))) == []  # no embedded S3, no database file
