"""Request bodies (``api.bodies``): every route reads its body through a ``JsonBody``,
anonymous callers of routes that need a token get their 401 before the body is parsed,
and a body is bounded before it is parsed, without refusing any valid one."""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any

import httpx
import pytest
from fastapi.routing import APIRoute, iter_route_contexts
from hypothesis import given, settings
from hypothesis import strategies as st

from zarrchive.api import create_app
from zarrchive.api.bodies import BODIES, JsonBody, batch_limit
from zarrchive.api.schemas import DeleteFile, DigestIn, UploadFile
from zarrchive.errors import BatchTooLarge, InvalidInput

JSON = "application/json"


def _body_routes() -> list[tuple[APIRoute, JsonBody | None]]:
    found = []
    for context in iter_route_contexts(create_app(None).routes):  # type: ignore[arg-type]
        route = context.original_route
        if isinstance(route, APIRoute) and route.include_in_schema:
            bodies = [d.call for d in route.dependant.dependencies if isinstance(d.call, JsonBody)]
            found.append((route, bodies[0] if bodies else None))
    return found


def test_every_body_is_read_by_a_json_body_and_documented_as_such() -> None:
    documented = 0
    for route, body in _body_routes():
        assert route.body_field is None, f"{route.path}: FastAPI would parse its body first"
        if body is None:
            assert not (route.openapi_extra or {}).get("requestBody"), route.path
            continue
        assert route.openapi_extra == body.openapi, route.path
        documented += 1
    assert documented == 20  # the routes with a body (tests/reliability/test_authorization)


def test_anonymous_callers_get_401_before_the_body_is_parsed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def parse(*_args: Any) -> Any:
        raise AssertionError("parsed")

    monkeypatch.setattr(JsonBody, "parse", parse)
    hostile = b"[" + b",".join([b"1"] * 100_000) + b"]"
    needing_token = [(r, b) for r, b in _body_routes() if b is not None and b.login]
    assert len(needing_token) == 17

    async def ask() -> list[tuple[str, httpx.Response]]:
        app = create_app(None)  # type: ignore[arg-type]
        transport = httpx.ASGITransport(app=app)
        answers = []
        async with httpx.AsyncClient(transport=transport, base_url="http://api") as client:
            for route, _ in needing_token:
                url = re.sub(r"\{[^}]+\}", "x", route.path)
                assert route.methods is not None
                (method,) = route.methods
                headers = {"Content-Type": JSON}
                answers.append(
                    (
                        route.path,
                        await client.request(method, url, content=hostile, headers=headers),
                    )
                )
        return answers

    for path, response in asyncio.run(ask()):
        assert response.status_code == 401, (path, response.text)
        assert "token" in response.json()["detail"]


def test_a_hostile_list_is_refused_before_parsing(monkeypatch: pytest.MonkeyPatch) -> None:
    paths = JsonBody(list[DeleteFile], login=False, max_items=batch_limit)
    BODIES.remove(paths)

    def loads(_raw: Any) -> Any:
        raise AssertionError("parsed")

    monkeypatch.setattr(json, "loads", loads)
    with pytest.raises(BatchTooLarge, match="at most 500"):
        paths.parse(b"[" + b",".join([b"1"] * 500_000) + b"]", JSON, 500)
    digest = JsonBody(DigestIn, login=False)
    BODIES.remove(digest)
    with pytest.raises(InvalidInput, match="more values"):
        digest.parse(b"{" + b",".join(b'"k%d":1' % i for i in range(90_000)) + b"}", JSON, None)


@settings(max_examples=60, deadline=None)
@given(
    items=st.lists(st.tuples(st.text(max_size=40), st.text(max_size=40)), min_size=1, max_size=500),
    indent=st.sampled_from([None, 0, 2]),
)
def test_a_valid_body_is_never_refused_for_its_size(
    items: list[tuple[str, str]], indent: int | None
) -> None:
    """Paths full of quotes, commas and brackets, escaped or not, up to the limit: the
    body's bound refuses none (what is then wrong is pydantic's or the services' to say)."""
    files = JsonBody(list[UploadFile], login=True, max_items=batch_limit)
    BODIES.remove(files)
    for ensure_ascii in (True, False):
        raw = json.dumps(
            [{"path": p, "etag": e} for p, e in items], indent=indent, ensure_ascii=ensure_ascii
        ).encode()
        parsed = files.parse(raw, JSON, 500)
        assert [(f.path, f.etag) for f in parsed] == items
