"""``/api/auth/token/``: the caller's API token (DANDI's clients check a key with it)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Header

from zarrchive.api.deps import UserDep
from zarrchive.api.middleware import parse_token
from zarrchive.services.auth import require_user

router = APIRouter(tags=["auth"])


def auth_token(user: UserDep, authorization: Annotated[str | None, Header()] = None) -> str:
    """The token of ``Authorization: token KEY`` once it is known valid (401 otherwise): this
    archive stores only tokens' hashes, so it can only echo the one sent."""
    require_user(user)
    assert authorization is not None
    return parse_token(authorization)


router.add_api_route(
    "/api/auth/token/", auth_token, methods=["GET"], response_model=str, summary="Your API token"
)
# dandi asks without the trailing slash
router.add_api_route(
    "/api/auth/token", auth_token, methods=["GET"], response_model=str, include_in_schema=False
)
