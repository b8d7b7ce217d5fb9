"""``zarrchive --version`` (issue #41): the package's version, from the console script (its
quick path, as quick as ``--help``) and from typer's app (``python -m``, a narrow terminal);
``zarrchive --help`` lists it."""

from __future__ import annotations

import subprocess
import sys

from tests.helpers.server_process import zarrchive_command
from typer.testing import CliRunner

from zarrchive import __version__
from zarrchive.cli import app, top_level_help


def test_the_console_script_prints_the_version() -> None:
    done = subprocess.run(
        [*zarrchive_command(), "--version"], capture_output=True, text=True, timeout=120
    )
    assert (done.returncode, done.stdout, done.stderr) == (0, f"zarrchive {__version__}\n", "")


def test_the_app_prints_the_version_and_lists_the_option() -> None:
    result = CliRunner().invoke(app, ["--version"])
    assert (result.exit_code, result.stdout) == (0, f"zarrchive {__version__}\n")
    done = subprocess.run(
        [sys.executable, "-m", "zarrchive.cli", "--version"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.stdout == f"zarrchive {__version__}\n", done.stderr
    assert "  --version  Print zarrchive's version and exit.\n" in top_level_help()
    assert "--version" in CliRunner().invoke(app, ["--help"]).stdout
