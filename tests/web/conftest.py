"""Fixtures of the web pages' tests: a small archive to browse (see ``site.py``), a headless
Chromium."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.conftest import LiveServer, Users
from tests.helpers.browser import chromium_browser
from tests.helpers.web_site import Site, build_site
from zarrchive.services.runtime import Archive


@pytest.fixture
def site(api: httpx.Client, archive: Archive) -> Site:
    return build_site(api, archive)


@pytest.fixture
def base_url(live_server: LiveServer, archive: Archive, users: Users) -> str:
    live_server.app.state.archive = archive
    return live_server.url


@pytest.fixture(scope="module")
def chromium() -> Iterator[Any]:
    """A headless Chromium (Playwright's), one per module."""
    with chromium_browser() as browser:
        yield browser
