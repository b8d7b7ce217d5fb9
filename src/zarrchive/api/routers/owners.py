"""``/api/dandisets/{id}/users/``: a dandiset's owners, in DANDI's shapes."""

from __future__ import annotations

from fastapi import APIRouter
from pydantic import BaseModel

from zarrchive.api.bodies import JsonBody
from zarrchive.api.routers.dandiset_roles import MemberIn, add_role_routes
from zarrchive.services.dandi import owners

router = APIRouter(tags=["dandisets"])


class OwnerIn(MemberIn):
    """One owner of DANDI's ``PUT`` body (``name`` and ``email`` are ignored, as DANDI does)."""


class OwnerOut(BaseModel):
    username: str
    name: str
    email: str | None = None


def _out(found: owners.OwnerInfo) -> OwnerOut:
    return OwnerOut(username=found.username, name=found.name, email=found.email)


#: DANDI's body carries each owner's ``name`` and ``email`` too (ignored): not a
#: :class:`~zarrchive.api.schemas.RequestModel`, so bounded by the body's size (8 MiB, a
#: signed-in caller's: anonymous callers get their 401 unread).
NEW_OWNERS = JsonBody(list[OwnerIn], login=True)

add_role_routes(
    router,
    "/api/dandisets/{dandiset_id}/users/",
    role="owners",
    body=NEW_OWNERS,
    response_model=OwnerOut,
    out=_out,
    list_members=owners.list_owners,
    set_members=owners.set_owners,
    get_doc="Anyone who may see the dandiset may list its owners.",
    put_doc="""DANDI's `[{"username": ...}, ...]`: the new owners (owners and admins only; at least
    one; 400 naming a user that does not exist).  A removed owner loses write access, and an
    embargoed dandiset's visibility, at once.""",
)
