"""``ZARRCHIVE_PUBLIC_URL``: the archive's external address, an origin (no path)."""

from __future__ import annotations

import pytest

from zarrchive.config import Settings
from zarrchive.errors import ConfigurationError


def _public_url(value: str) -> str | None:
    return Settings.from_env({"ZARRCHIVE_PUBLIC_URL": value}).public_url


def test_the_public_url_is_an_origin() -> None:
    assert Settings.from_env({}).public_url is None
    assert _public_url("https://archive.example.org/") == "https://archive.example.org"
    assert _public_url(" http://127.0.0.1:8000 ") == "http://127.0.0.1:8000"
    assert _public_url("https://[::1]:8443") == "https://[::1]:8443"
    for wrong in (
        "archive.example.org",
        "ftp://archive.example.org",
        "https://archive.example.org/dandi",
        "https://archive.example.org?x=1",
        "https://user:pw@archive.example.org",
        "https://archive.example.org:99999",
        "https://\u00e9t\u00e9.example",
        "https://",
    ):
        with pytest.raises(ConfigurationError, match="ZARRCHIVE_PUBLIC_URL"):
            _public_url(wrong)
