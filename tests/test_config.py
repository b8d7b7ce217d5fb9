"""zarrchive.config: URLs are shown (logged) without passwords."""

from __future__ import annotations

import pytest

from zarrchive.config import redact_url


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("redis://:s3cret@127.0.0.1:6379/0", "redis://:***@127.0.0.1:6379/0"),
        ("redis://user:p%40ss@host/1", "redis://user:***@host/1"),
        ("postgresql+psycopg://u:pw@[::1]:5432/db", "postgresql+psycopg://u:***@[::1]:5432/db"),
        ("redis://127.0.0.1:6379", "redis://127.0.0.1:6379"),
        ("sqlite:////tmp/x.sqlite3", "sqlite:////tmp/x.sqlite3"),
    ],
)
def test_urls_are_logged_without_passwords(url: str, shown: str) -> None:
    assert redact_url(url) == shown
