"""CLI start-up: a command imports what it needs when it runs, nothing heavy up front.

``python -X importtime`` lists every module a process imports; ``import zarrchive.cli``,
``zarrchive --help`` and ``zarrchive checksum`` must not import zarr-python, numcodecs,
boto3, FastAPI, SQLAlchemy or h5py (each takes a large part of a second to import), and
``checksum`` needs no HTTP client either.  No timing is asserted (the machine may be
loaded): the modules imported are what decides the start-up time.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

#: Top-level packages no command may import before it runs.
HEAVY = frozenset(
    {"zarr", "numcodecs", "numpy", "boto3", "botocore", "fastapi", "sqlalchemy", "h5py"}
)

_ROW = re.compile(r"^import time:\s+\d+ \|\s+\d+ \|\s*(\S+)\s*$")


def imported_modules(*args: str, cwd: Path | None = None) -> set[str]:
    """Every module the process ``python -X importtime ARGS`` imports."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ZARRCHIVE_")}
    env["ZARRCHIVE_NO_CACHE"] = "1"
    done = subprocess.run(
        [sys.executable, "-X", "importtime", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    found = {m.group(1) for line in done.stderr.splitlines() if (m := _ROW.match(line))}
    assert "zarrchive" in found, "importtime printed nothing: " + done.stderr[-500:]
    return found


def heavy(modules: set[str]) -> set[str]:
    return {m for m in modules if m.split(".")[0] in HEAVY}


def test_import_cli_is_light() -> None:
    modules = imported_modules("-c", "import zarrchive.cli")
    assert heavy(modules) == set()
    # The client package is imported piecewise: no HTTP client for `checksum` or `--help`.
    assert "httpx" not in modules
    assert "importlib.metadata" not in modules


@pytest.mark.parametrize(
    "argv",
    [
        ["--help"],
        ["upload", "--help"],
        ["download", "--help"],
        ["verify", "--help"],
        ["admin", "--help"],
        ["publish", "--help"],
    ],
)
def test_help_is_light(argv: list[str]) -> None:
    modules = imported_modules("-m", "zarrchive.cli", *argv)
    assert heavy(modules) == set()
    assert "httpx" not in modules


def test_checksum_imports_neither_zarr_nor_http(tmp_path: Path) -> None:
    (tmp_path / "z").mkdir()
    (tmp_path / "z" / ".zgroup").write_text('{"zarr_format": 2}')
    modules = imported_modules("-m", "zarrchive.cli", "checksum", str(tmp_path / "z"))
    assert heavy(modules) == set()
    assert "httpx" not in modules
    assert "rich" not in modules  # no progress display without a terminal


#: Every zarrchive module ``zarrchive --help`` may import: the root of the CLI and what it
#: needs; no command's module (see ``zarrchive.cli.COMMANDS``).
HELP_MODULES = frozenset(
    {
        "zarrchive",
        "zarrchive.cli",
        "zarrchive.cli._app",
        "zarrchive.cli._common",
        "zarrchive.cli.registry",
        "zarrchive.config",
        "zarrchive.errors",
    }
)
#: Besides the standard library and typer, nothing: in particular no rich (typer's rich help
#: alone costs more than everything else), no pydantic, no SQLite, no hashing.
NOT_FOR_HELP = frozenset(
    {"rich", "markdown_it", "pygments", "pydantic", "sqlite3", "hashlib", "concurrent", "httpx"}
)


def test_top_level_help_imports_no_command() -> None:
    """The import budget of ``zarrchive --help``, by module list (not by a timing)."""
    modules = imported_modules("-m", "zarrchive.cli", "--help")
    assert {m for m in modules if m.split(".")[0] == "zarrchive"} == HELP_MODULES
    assert {m.split(".")[0] for m in modules} & NOT_FOR_HELP == set()


@pytest.mark.parametrize(
    ("argv", "command_module", "allowed"),
    [
        (["checksum", "--help"], "zarrchive.cli.checksum", set()),
        # upload takes its --no-cache option from checksum (and hashes as it does)
        (["upload", "--help"], "zarrchive.cli.upload", {"zarrchive.cli.checksum"}),
        (["admin", "--help"], "zarrchive.cli.admin", set()),
    ],
)
def test_a_command_imports_no_other_command(
    argv: list[str], command_module: str, allowed: set[str]
) -> None:
    from zarrchive.cli import COMMANDS

    modules = imported_modules("-m", "zarrchive.cli", *argv)
    assert command_module in modules
    others = {spec.module for spec in COMMANDS.values()} - {command_module} - allowed
    assert modules & others == set()
    assert "rich" not in {m.split(".")[0] for m in modules}


def test_the_console_script_help_needs_no_typer() -> None:
    """``zarrchive --help`` (the console script, 80 columns) writes the list of commands
    itself: exactly typer's text, and neither typer nor any command imported."""
    script = str(Path(sys.executable).parent / "zarrchive")
    env = {k: v for k, v in os.environ.items() if not k.startswith("ZARRCHIVE_")}
    env.update(COLUMNS="100", PYTHONPROFILEIMPORTTIME="1")
    fast = subprocess.run(
        [script, "--help"], capture_output=True, text=True, env=env, timeout=120, check=True
    )
    found = {m.group(1) for line in fast.stderr.splitlines() if (m := _ROW.match(line))}
    assert "zarrchive.cli" in found
    assert {m.split(".")[0] for m in found} & {"typer", *NOT_FOR_HELP} == set()
    assert {m for m in found if m.startswith("zarrchive")} == {
        "zarrchive",
        "zarrchive.cli",
        "zarrchive.cli.registry",
    }
    typer_help = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; sys.argv[0] = 'zarrchive'; from zarrchive.cli._app import app; app()",
            "--help",
        ],
        capture_output=True,
        text=True,
        env={**env, "PYTHONPROFILEIMPORTTIME": ""},
        timeout=120,
        check=True,
    )
    assert fast.stdout == typer_help.stdout
    narrow = subprocess.run(  # a narrow terminal: typer wraps, as it always did
        [script, "--help"],
        capture_output=True,
        text=True,
        env={**env, "COLUMNS": "60"},
        timeout=120,
    )
    assert narrow.returncode == 0
    assert max(map(len, narrow.stdout.splitlines())) <= 60


def test_the_listed_help_is_each_command_own() -> None:
    """``zarrchive --help`` lists the commands from ``COMMANDS`` without importing them: each
    line there must be the command's own first sentence, and every command listed."""
    from zarrchive.cli import COMMANDS, load_command

    for name, spec in COMMANDS.items():
        command = load_command(name)
        assert command.name == name
        assert command.get_short_help_str(limit=1000) == spec.short_help, name


def test_help_is_plain_and_natural() -> None:
    from typer.testing import CliRunner

    from zarrchive.cli import app

    runner = CliRunner()
    top = runner.invoke(app, ["--help"])
    assert top.exit_code == 0
    assert "Usage: zarrchive [OPTIONS] COMMAND [ARGS]..." in top.output
    assert "  verify    Compare a local directory with a Zarr" in top.output
    assert "\u2500" not in top.output and "\x1b[" not in top.output  # no boxes, no colours
    upload = runner.invoke(app, ["upload", "--help"])
    assert upload.exit_code == 0
    assert "Usage: zarrchive upload [OPTIONS] LOCAL" in upload.output
    assert "-j, --jobs INTEGER" in upload.output
    assert "--api-url TEXT" in upload.output
    assert "<bool>" not in upload.output and "<str>" not in upload.output
    mistyped = runner.invoke(app, ["create-user"])
    assert mistyped.exit_code == 2
    assert "Did you mean 'zarrchive admin create-user'?" in mistyped.output


def test_lazy_names_still_resolve() -> None:
    """The public names of the packages are imported on first use, and all resolve."""
    import zarrchive
    import zarrchive.client as client

    for name in client.__all__:
        assert getattr(client, name) is not None, name
    assert zarrchive.__version__
    from zarrchive.client import upload
    from zarrchive.client.upload import upload as upload_function

    assert upload is upload_function  # the function, not the submodule of the same name
