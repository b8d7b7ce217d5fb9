"""Database: SQLAlchemy models, sessions, Alembic migrations."""

from zarrchive.db.session import Database

__all__ = ["Database"]
