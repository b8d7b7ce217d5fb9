"""``/docs`` has an Authorize button: the OpenAPI document declares ``Authorization: token KEY``
as an optional security scheme of every route."""

from __future__ import annotations

import httpx

from tests.conftest import Users
from tests.helpers.databases import SQLITE_ONLY

pytestmark = SQLITE_ONLY


def test_the_token_is_a_security_scheme(anon: httpx.Client, users: Users) -> None:
    document = anon.get("/openapi.json").json()
    scheme = document["components"]["securitySchemes"]["token"]
    assert scheme["type"] == "apiKey" and scheme["in"] == "header"
    assert scheme["name"] == "Authorization" and "token KEY" in scheme["description"]
    assert document["security"] == [{}, {"token": []}]  # optional: anonymous reads stay open
    # what Swagger UI sends once authorized is what the API takes
    me = anon.get("/api/auth/token/", headers={scheme["name"]: f"token {users.owner}"})
    assert me.status_code == 200
