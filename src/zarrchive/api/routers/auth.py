"""``/api/auth/``: the caller's API keys.

DANDI's ``/api/auth/token/`` (dandi-cli checks a key with ``GET``; ``POST`` replaces the
default key) and the archive's own named keys with a scope and an expiry,
``/api/auth/tokens/`` (see :mod:`zarrchive.services.identity.api_keys`).
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from fastapi import APIRouter, Depends, Header, Response
from pydantic import BaseModel, Field

from zarrchive.api.bodies import JsonBody
from zarrchive.api.deps import ArchiveDep, UserDep
from zarrchive.api.middleware import parse_token
from zarrchive.api.schemas import RequestModel
from zarrchive.http_common.params import KeyId
from zarrchive.services.identity import api_keys
from zarrchive.services.identity.auth import require_user

router = APIRouter(tags=["auth"])


def auth_token(user: UserDep, authorization: Annotated[str | None, Header()] = None) -> str:
    """The token of ``Authorization: token KEY`` once it is known valid (401 otherwise): this
    archive stores only tokens' hashes, so it can only echo the one sent."""
    require_user(user)
    assert authorization is not None
    return parse_token(authorization)


def new_auth_token(archive: ArchiveDep, user: UserDep) -> str:
    """DANDI's way to replace a key: the caller's keys named "default" are revoked and a new
    `write` key named "default" is answered (shown once).  A read key can't."""
    with archive.db.write_session() as session:
        return api_keys.replace_default_key(session, user)


router.add_api_route(
    "/api/auth/token/", auth_token, methods=["GET"], response_model=str, summary="Your API token"
)
router.add_api_route(
    "/api/auth/token/",
    new_auth_token,
    methods=["POST"],
    response_model=str,
    summary="Replace your default API key",
)
# dandi asks without the trailing slash
router.add_api_route(
    "/api/auth/token", auth_token, methods=["GET"], response_model=str, include_in_schema=False
)
router.add_api_route(
    "/api/auth/token",
    new_auth_token,
    methods=["POST"],
    response_model=str,
    include_in_schema=False,
)


class KeyOut(BaseModel):
    id: int
    name: str
    scope: Literal["read", "write"]
    created: datetime
    last_used: datetime | None
    expires: datetime | None


class NewKeyOut(KeyOut):
    #: the key itself: shown this once, never again
    key: str


class KeyCreate(RequestModel):
    name: str = Field(min_length=1, max_length=100, description="Your name for the key")
    scope: Literal["read", "write"] = Field(
        description="`read`: reads all you may see (embargoed data included), changes "
        "nothing; `write`: also changes"
    )
    expires: datetime | None = Field(
        default=None, description="When the key stops working (ISO 8601; none: never)"
    )


NEW_KEY = JsonBody(KeyCreate, login=True)
#: A key's id (a database integer: larger ones are no key's, refused before any query).


def _out(info: api_keys.KeyInfo) -> KeyOut:
    return KeyOut(
        id=info.id,
        name=info.name,
        scope=info.scope.value,
        created=info.created,
        last_used=info.last_used,
        expires=info.expires,
    )


@router.get("/api/auth/tokens/", response_model=list[KeyOut], summary="Your API keys")
def list_keys(archive: ArchiveDep, user: UserDep) -> list[KeyOut]:
    """Your live keys (not revoked, not expired), newest first; never their secrets."""
    with archive.db.session() as session:
        return [_out(k) for k in api_keys.list_keys(session, user)]


@router.post(
    "/api/auth/tokens/",
    response_model=NewKeyOut,
    status_code=201,
    summary="Make an API key",
    openapi_extra=NEW_KEY.openapi,
)
def create_key(
    body: Annotated[KeyCreate, Depends(NEW_KEY)], archive: ArchiveDep, user: UserDep
) -> NewKeyOut:
    """`{"name", "scope", "expires"?}`: a new key, answered this once (only its hash is
    kept).  Refused (403) to a read key and to an account awaiting approval."""
    with archive.db.write_session() as session:
        info, secret = api_keys.create_key(session, user, body.name, body.scope, body.expires)
    return NewKeyOut(**_out(info).model_dump(), key=secret)


@router.delete(
    "/api/auth/tokens/{key_id}/",
    status_code=204,
    summary="Revoke an API key",
    response_class=Response,
)
def revoke_key(key_id: KeyId, archive: ArchiveDep, user: UserDep) -> Response:
    """The key stops working at once (404 for a key that isn't a live one of yours)."""
    with archive.db.write_session() as session:
        api_keys.revoke_key(session, user, key_id)
    return Response(status_code=204)
