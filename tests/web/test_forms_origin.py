"""The pure checks of the pages' forms and answers: same-origin, form parsing, headers."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from starlette.requests import Request

from zarrchive.errors import PermissionDenied
from zarrchive.web.forms import (
    MAX_FORM_FIELDS,
    is_same_origin,
    parse_form,
    require_form_from_here,
    session_form_token,
)
from zarrchive.web.security_headers import security_headers


def request(scheme: str, host: str, **headers: str) -> Request:
    raw = [(b"host", host.encode())] + [
        (k.replace("_", "-").encode(), v.encode()) for k, v in headers.items()
    ]
    scope = {
        "type": "http",
        "method": "POST",
        "scheme": scheme,
        "path": "/signin",
        "query_string": b"",
        "headers": raw,
        "server": ("archive.example", 443),
    }
    return Request(scope)


@pytest.mark.parametrize(
    ("scheme", "host", "origin", "same"),
    [
        ("http", "127.0.0.1:8000", "http://127.0.0.1:8000", True),
        ("http", "127.0.0.1:8000", "http://127.0.0.1:8000/signin?x=1", True),
        ("http", "127.0.0.1:8000", "http://127.0.0.1:8001", False),
        ("http", "127.0.0.1:8000", "http://127.0.0.1", False),
        ("https", "archive.example", "https://archive.example", True),
        ("https", "archive.example", "https://ARCHIVE.example:443", True),
        ("https", "archive.example:443", "https://archive.example", True),
        ("https", "archive.example", "http://archive.example", False),  # downgrade
        ("http", "archive.example", "https://archive.example", True),  # TLS proxy in front
        ("https", "archive.example", "https://archive.example.evil.example", False),
        ("https", "archive.example", "https://evil.example/archive.example", False),
        ("https", "archive.example", "https://archive.example@evil.example", False),
        ("https", "archive.example", "null", False),
        ("https", "archive.example", "", False),
        ("https", "archive.example", "file:///etc", False),
        ("https", "archive.example", "//archive.example", False),
        ("https", "archive.example", "https://[::1", False),
    ],
)
def test_same_origin(scheme: str, host: str, origin: str, same: bool) -> None:
    assert is_same_origin(request(scheme, host), origin) is same


@given(st.text(max_size=200))
def test_same_origin_never_raises(claimed: str) -> None:
    is_same_origin(request("https", "archive.example"), claimed)


def test_a_form_needs_its_token_and_no_foreign_origin() -> None:
    token = session_form_token("a session id")
    here = request("https", "archive.example", origin="https://archive.example")
    require_form_from_here(here, token, token)
    require_form_from_here(request("https", "archive.example"), token, token)  # no Origin
    with_referer = request("https", "archive.example", referer="https://archive.example/x")
    require_form_from_here(with_referer, token, token)
    for sent, expected in (
        (None, token),
        ("", token),
        (token, None),
        (token[:-1], token),
        ("\u00e9", token),
        (token, ""),
    ):
        with pytest.raises(PermissionDenied):
            require_form_from_here(here, sent, expected)
    for headers in (
        {"origin": "https://evil.example"},
        {"referer": "https://evil.example/"},
        {"origin": "null", "referer": "https://archive.example/"},
    ):
        with pytest.raises(PermissionDenied, match="another site"):
            require_form_from_here(request("https", "archive.example", **headers), token, token)


def test_form_tokens_are_one_way_and_per_session() -> None:
    assert session_form_token("a") != session_form_token("b")
    assert "a session id" not in session_form_token("a session id")
    assert len(session_form_token("x")) == 64


def test_parse_form() -> None:
    assert parse_form(b"token=abc&csrf_token=t%2B1&token=second") == {
        "token": "abc",
        "csrf_token": "t+1",
    }
    assert parse_form(b"token=%ff") == {"token": "\ufffd"}
    assert parse_form(b"\xff\xfe=1") == {"\ufffd\ufffd": "1"}
    assert parse_form(b"a=1&" * (MAX_FORM_FIELDS + 1)) == {}
    assert parse_form(b"") == {}


@pytest.mark.parametrize("content_type", ["text/html; charset=utf-8", "TEXT/HTML", "text/html"])
def test_pages_get_the_page_policy(content_type: str) -> None:
    headers = security_headers(content_type)
    assert headers["X-Frame-Options"] == "DENY"
    assert headers["X-Content-Type-Options"] == "nosniff"
    assert "frame-ancestors 'none'" in headers["Content-Security-Policy"]
    assert "default-src" not in headers["Content-Security-Policy"]  # /docs runs inline script


@pytest.mark.parametrize(
    "content_type", ["application/json", "", "image/png", "text/html-ish", "text/plain"]
)
def test_everything_else_loads_and_runs_nothing(content_type: str) -> None:
    headers = security_headers(content_type)
    assert headers["Content-Security-Policy"] == "default-src 'none'; frame-ancestors 'none'"
    assert headers["X-Content-Type-Options"] == "nosniff"
    assert headers["X-Frame-Options"] == "DENY"
