"""Headless Chromium (Debian's ``chromium``) driven by Playwright, and a second local
origin to load pages from (for cross-origin tests)."""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

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

    class Page(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = html.encode("utf-8")
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Page)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
