"""The pages in a real browser: headless Chromium (Debian's ``chromium``) driven by
Playwright. Screenshots are kept in ``test-artifacts/web/`` (ignored by git)."""

from __future__ import annotations

import io
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from PIL import Image

from tests.conftest import Users
from tests.helpers.databases import SQLITE_ONLY
from tests.helpers.web_site import IMAGE_SHAPE, Site

pytestmark = SQLITE_ONLY

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "web"


@pytest.fixture
def tab(chromium: Any, base_url: str, request: pytest.FixtureRequest) -> Iterator[Any]:
    context = chromium.new_context(base_url=base_url)
    context.set_default_timeout(30_000)
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    try:
        yield page
    finally:
        context.close()
    assert errors == [], f"JavaScript errors: {errors}"


def shot(page: Any, name: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)


def test_from_the_list_down_to_an_array_and_its_thumbnail(
    tab: Any, base_url: str, site: Site
) -> None:
    tab.goto("/")
    shot(tab, "1-dandisets")
    tab.get_by_role("link", name=site.public, exact=True).click()
    tab.wait_for_url(f"**/dandiset/{site.public}")
    assert tab.locator("#owners").inner_text() == "owner"
    shot(tab, "2-dandiset")
    tab.locator("#zarrs").get_by_role("link", name="sub-1/sample.zarr").click()
    tab.wait_for_url(f"**/zarr/{site.zarr_id}/")
    assert "image" in tab.locator("#group-arrays").inner_text()
    shot(tab, "3-zarr-root")
    tab.locator("#entries").get_by_role("link", name="image/", exact=True).click()
    tab.wait_for_url(f"**/zarr/{site.zarr_id}/image/")
    assert tab.locator("#array-shape").inner_text() == "40 × 60"
    image = tab.locator("img#thumbnail")
    image.scroll_into_view_if_needed()
    tab.wait_for_function(
        "() => { const i = document.getElementById('thumbnail'); return i.complete && i.naturalWidth > 0; }"
    )
    width, height = tab.evaluate(
        "() => { const i = document.getElementById('thumbnail'); return [i.naturalWidth, i.naturalHeight]; }"
    )
    assert (height, width) == IMAGE_SHAPE
    shot(tab, "4-array")
    # the same PNG, decoded server side
    source = image.get_attribute("src")
    png = httpx.get(base_url + source).content
    assert Image.open(io.BytesIO(png)).size == (IMAGE_SHAPE[1], IMAGE_SHAPE[0])
    # a file: its facts and a working download link
    tab.locator("#entries").get_by_role("link", name="0.0", exact=True).click()
    tab.wait_for_url(f"**/zarr/{site.zarr_id}/image/0.0")
    assert (
        tab.locator("#file-size").inner_text().startswith(f"{len(site.files['image/0.0'])} bytes")
    )
    shot(tab, "5-file")
    href = tab.locator("#download").get_attribute("href")
    answer = httpx.get(base_url + href, follow_redirects=True)
    assert answer.content == site.files["image/0.0"]


def test_paging_through_a_large_directory(tab: Any, site: Site) -> None:
    tab.goto(f"/zarr/{site.zarr_id}/wide/?page_size=500")
    names: list[str] = []
    pages = 0
    while True:
        pages += 1
        names += tab.locator("#entries tr.file td:first-child a").all_inner_texts()
        following = tab.locator("#next-page")
        if following.count() == 0:
            break
        following.click()
        tab.wait_for_url(re.compile(r".*cursor=.*"))
    shot(tab, "6-wide-last-page")
    assert pages == 5
    assert names == [f"{i:06d}" for i in range(site.wide)]
    tab.locator("#first-page").click()
    assert tab.locator("#entries tr.file").first.inner_text().startswith("000000")


def test_embargoed_dandisets_show_to_their_owner_signed_in(
    tab: Any, site: Site, users: Users
) -> None:
    tab.goto("/")
    assert tab.get_by_text("Secret rat").count() == 0
    assert tab.goto(f"/dandiset/{site.embargoed}").status == 401  # sign in first
    tab.goto("/")
    tab.get_by_role("link", name="Sign in").click()
    tab.get_by_label("API token").fill(users.owner)
    tab.keyboard.press("Enter")
    tab.wait_for_url("**/")
    assert tab.locator("#signed-in-user").inner_text() == "owner"
    assert tab.get_by_text("Secret rat").count() == 1
    assert tab.locator(".badge.embargo").first.inner_text() == "embargoed"
    assert "zarrchive_session" not in tab.evaluate("document.cookie")  # HttpOnly
    shot(tab, "7-signed-in")
    tab.get_by_role("link", name=site.embargoed, exact=True).click()
    assert tab.locator("#embargo-status").inner_text() == "embargoed"
    tab.get_by_role("button", name="Sign out").click()
    tab.wait_for_url("**/")
    assert tab.get_by_text("Secret rat").count() == 0
    assert tab.goto(f"/dandiset/{site.embargoed}").status == 401  # sign in first


def test_keyboard_search_and_navigation(tab: Any, site: Site) -> None:
    tab.goto("/")
    tab.keyboard.press("/")
    assert tab.evaluate("document.activeElement.id") == "search"
    tab.keyboard.type("mouse")
    tab.keyboard.press("Enter")
    tab.wait_for_url("**/?search=mouse")
    assert tab.locator("#dandiset-count").inner_text().startswith("1 dandiset")
    tab.locator("body").click()  # leave the search box
    tab.keyboard.press("j")
    assert tab.evaluate("document.activeElement.textContent") == site.public
    tab.keyboard.press("Enter")
    tab.wait_for_url(f"**/dandiset/{site.public}")


def test_docs_render_from_local_assets(tab: Any, base_url: str) -> None:
    requested: list[str] = []
    tab.on("request", lambda r: requested.append(r.url))
    tab.goto("/docs")
    tab.wait_for_selector(".swagger-ui .info .title")
    assert "zarrchive" in tab.locator(".swagger-ui .info .title").inner_text()
    tab.wait_for_selector(".opblock")  # the operations rendered from /openapi.json
    shot(tab, "8-docs")
    assert f"{base_url}/openapi.json" in requested
    assert [u for u in requested if not u.startswith(base_url + "/")] == []
