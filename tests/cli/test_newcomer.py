"""A newcomer's first commands: admin commands act on the archive the user means (and
refuse, naming the data directory, where there is none), the first user is announced, a
command typed at the wrong level is pointed to its place, and help reads naturally."""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path

import pytest
from sqlalchemy import select
from typer.testing import CliRunner

from zarrchive.cli import app
from zarrchive.cli._common import archive_exists
from zarrchive.cli.admin import first_user_note
from zarrchive.config import Settings
from zarrchive.db.models import ApiToken
from zarrchive.db.session import Database
from zarrchive.services.identity.auth import create_user
from zarrchive.services.runtime import Archive

ADMIN_COMMANDS = [
    ["admin", "create-user", "alice"],
    ["admin", "rotate-token", "alice"],
    ["admin", "fsck", "--all"],
    ["admin", "gc"],
    ["manifest", "backfill", "--all"],
]


def fresh_env(**settings: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ZARRCHIVE_")}
    env.update(settings)
    return env


@pytest.mark.parametrize("args", ADMIN_COMMANDS, ids=lambda a: " ".join(a))
def test_admin_commands_refuse_a_directory_without_an_archive(
    args: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Run outside the clone, an admin command used to create ./.zarrchive and an empty
    database there (and print a token no running server knows)."""
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(app, args, env=fresh_env())
    assert result.exit_code == 2, result.output
    assert result.stdout == ""  # no token
    (line,) = result.stderr.splitlines()
    assert line.startswith(
        f"zarrchive: no archive in {tmp_path / '.zarrchive'} (ZARRCHIVE_DATA_DIR)"
    )
    assert "set ZARRCHIVE_DATA_DIR to the archive's data directory" in line
    assert list(tmp_path.iterdir()) == []  # nothing created


def test_admin_refuses_a_missing_sqlite_file(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'elsewhere' / 'db.sqlite3'}"
    env = fresh_env(ZARRCHIVE_DATA_DIR=str(tmp_path / "data"), ZARRCHIVE_DATABASE_URL=url)
    result = CliRunner().invoke(app, ["admin", "create-user", "alice"], env=env)
    assert result.exit_code == 2
    assert f"the SQLite file {tmp_path / 'elsewhere' / 'db.sqlite3'} (ZARRCHIVE_DATABASE_URL)" in (
        result.stderr
    )
    assert not (tmp_path / "elsewhere").exists() and not (tmp_path / "data").exists()


def test_create_user_from_anywhere_with_the_data_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = tmp_path / "clone" / ".zarrchive"
    data.mkdir(parents=True)
    database = Database(f"sqlite:///{data / 'zarrchive.sqlite3'}")  # what `serve` made
    database.migrate()
    database.dispose()
    elsewhere = tmp_path / "home"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    result = CliRunner().invoke(
        app, ["admin", "create-user", "alice"], env=fresh_env(ZARRCHIVE_DATA_DIR=str(data))
    )
    assert result.exit_code == 0, result.stderr
    assert re.fullmatch(r"[0-9a-f]{40}\n", result.stdout)
    assert list(elsewhere.iterdir()) == []


def test_rotate_token_replaces_the_token(tmp_path: Path) -> None:
    data = tmp_path / ".zarrchive"
    data.mkdir()
    made = Database(f"sqlite:///{data / 'zarrchive.sqlite3'}")  # what `serve` made
    made.migrate()
    made.dispose()
    env = fresh_env(ZARRCHIVE_DATA_DIR=str(data))
    first = CliRunner().invoke(app, ["admin", "create-user", "alice"], env=env)
    assert first.exit_code == 0, first.stderr
    rotated = CliRunner().invoke(app, ["admin", "rotate-token", "alice"], env=env)
    assert rotated.exit_code == 0, rotated.stderr
    old, new = first.stdout.strip(), rotated.stdout.strip()
    assert re.fullmatch(r"[0-9a-f]{40}", new) and new != old
    database = Database(f"sqlite:///{data / 'zarrchive.sqlite3'}")
    try:
        with database.session() as session:
            stored = set(session.scalars(select(ApiToken.token_hash)))
    finally:
        database.dispose()
    assert stored == {hashlib.sha256(new.encode()).hexdigest()}  # the old one is gone
    unknown = CliRunner().invoke(app, ["admin", "rotate-token", "bob"], env=env)
    assert unknown.exit_code != 0 and "bob" in unknown.stderr


def test_what_counts_as_an_archive(tmp_path: Path) -> None:
    base = Settings.from_env({"ZARRCHIVE_DATA_DIR": str(tmp_path)})
    assert not archive_exists(base)
    (tmp_path / "zarrchive.sqlite3").write_bytes(b"")
    assert archive_exists(base)
    server = base.with_overrides(database_url="postgresql+psycopg://u@127.0.0.1:5432/db")
    assert archive_exists(server)  # a database server: its own business
    assert not archive_exists(base.with_overrides(database_url="sqlite://"))  # in memory


def test_first_user_note(archive: Archive, settings: Settings) -> None:
    note = first_user_note(archive)
    assert note is not None
    assert note.startswith("this archive has no users yet: create the first one")
    command = note.splitlines()[-1].strip()
    if settings.database_url.startswith("sqlite"):
        assert command.startswith(f"ZARRCHIVE_DATA_DIR={settings.data_dir} ")
    assert command.endswith("zarrchive admin create-user NAME --admin")
    with archive.db.write_session() as session:
        create_user(session, "first", admin=True)
    assert first_user_note(archive) is None


@pytest.mark.parametrize(
    ("typed", "meant"),
    [
        ("create-user", "'zarrchive admin create-user'"),
        ("fsck", "'zarrchive admin fsck'"),
        ("backfill", "'zarrchive lindi backfill' or 'zarrchive manifest backfill'"),
    ],
)
def test_a_subcommand_typed_at_the_top_is_pointed_to_its_place(typed: str, meant: str) -> None:
    result = CliRunner().invoke(app, [typed, "x"])
    assert result.exit_code == 2
    assert f"No such command '{typed}'. Did you mean {meant}?" in result.output


def _help_pages() -> list[list[str]]:
    pages: list[list[str]] = [[]]
    for name in ("serve", "checksum", "worker", "upload", "publish", "download", "verify"):
        pages.append([name])
    for group, names in {
        "admin": ("create-user", "fsck", "gc"),
        "lindi": ("convert", "to-zarr", "show"),
        "manifest": ("backfill",),
    }.items():
        pages.append([group])
        pages.extend([group, name] for name in names)
    return pages


@pytest.mark.parametrize("page", _help_pages(), ids=lambda p: " ".join(p) or "zarrchive")
def test_help_placeholders_read_naturally(page: list[str]) -> None:
    result = CliRunner().invoke(app, [*page, "--help"], env={"COLUMNS": "120"})
    assert result.exit_code == 0, result.output
    text = result.output
    assert not re.search(r"<(bool|str|int|path|float|list\[str\])>", text), text
    assert not re.search(r"\{[a-z_]+\}", text), text  # typer's {local}
    if page == ["upload"]:
        assert "Usage: zarrchive upload [OPTIONS] LOCAL" in text
        assert re.search(r"LOCAL\s+TEXT\s+The local Zarr directory, or\s+s3://BUCKET/PREFIX", text)
        assert re.search(r"-d, --dandiset\s+TEXT", text)
        assert re.search(r"-j, --jobs\s+INTEGER", text)
        assert re.search(r"--dry-run\s+Only say", text)
    if page == ["admin", "gc"]:
        assert "[ZARR_IDS]..." in text
