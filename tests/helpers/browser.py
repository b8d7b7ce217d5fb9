"""Headless Chromium (Debian's ``chromium``) driven by Playwright, and a second local
origin to load pages from (for cross-origin tests)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.static_server import serving

CHROMIUM = Path(os.environ.get("ZARRCHIVE_TEST_CHROMIUM", "/usr/bin/chromium"))


@contextlib.contextmanager
def chromium_browser() -> Iterator[Any]:
    """A headless Chromium, or skip saying how to get one."""
    if not CHROMIUM.exists():
        pytest.skip(
            f"no browser at {CHROMIUM}: install Debian's chromium (apt-get install -y chromium) "
            "or set ZARRCHIVE_TEST_CHROMIUM"
        )
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed")
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True)
        try:
            yield browser
        finally:
            browser.close()


@contextlib.contextmanager
def other_origin(html: str) -> Iterator[str]:
    """An HTTP server on another loopback port serving *html* at ``/``: its origin."""
    with serving(html.encode("utf-8"), "text/html; charset=utf-8") as origin:
        yield origin
