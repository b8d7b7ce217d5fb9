"""Alembic migrations, run programmatically (no alembic.ini needed).

Alembic's INFO lines (one per revision applied: 17 on a new archive) are not shown:
``zarrchive serve`` says "database migration" and how long it took.  An operator who wants
them sets the ``alembic`` logger's level (``logging.getLogger("alembic").setLevel(INFO)``).
"""

from __future__ import annotations

import logging
from pathlib import Path

#: Set before alembic is imported: its plugins say INFO lines as they load.
_ALEMBIC_LOG = logging.getLogger("alembic")
if _ALEMBIC_LOG.level == logging.NOTSET:  # not chosen by the operator: warnings only
    _ALEMBIC_LOG.setLevel(logging.WARNING)

from alembic import command  # noqa: E402
from alembic.config import Config  # noqa: E402
from sqlalchemy import Engine  # noqa: E402

MIGRATIONS = Path(__file__).parent / "migrations"


def alembic_config(engine: Engine) -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    config.set_main_option("sqlalchemy.url", engine.url.render_as_string(hide_password=False))
    config.attributes["engine"] = engine
    return config


def upgrade(engine: Engine, revision: str = "head") -> None:
    command.upgrade(alembic_config(engine), revision)
