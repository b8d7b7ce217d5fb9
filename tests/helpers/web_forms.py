"""Posting the pages' forms as a browser does: with the token the page carries."""

from __future__ import annotations

import re

import httpx

_TOKEN = re.compile(r'name="csrf_token" value="([^"]*)"')


def form_token(page: str) -> str:
    """The ``csrf_token`` of the (first) form of *page*."""
    found = _TOKEN.search(page)
    assert found is not None, "the page has no form token"
    return found.group(1)


def sign_in(client: httpx.Client, token: str) -> httpx.Response:
    """Open the sign-in page and send its form with *token*, as a browser on this site does
    (its ``Origin``, the pre-session cookie and the form's token)."""
    page = client.get("/signin")
    assert page.status_code == 200, page.text
    return client.post(
        "/signin",
        data={"token": token, "csrf_token": form_token(page.text)},
        headers={"Origin": str(client.base_url).rstrip("/")},
    )


def sign_out(client: httpx.Client) -> httpx.Response:
    """Send the sign-out form of the home page."""
    page = client.get("/")
    return client.post(
        "/signout",
        data={"csrf_token": form_token(page.text)},
        headers={"Origin": str(client.base_url).rstrip("/")},
    )
