"""``/api/dandisets/{id}/reviewers/``: who reads an embargoed dandiset without changing it
(see :mod:`zarrchive.services.dandi.reviewers`)."""

from __future__ import annotations

from fastapi import APIRouter
from pydantic import BaseModel

from zarrchive.api.bodies import JsonBody
from zarrchive.api.routers.dandiset_roles import MemberIn, add_role_routes
from zarrchive.services.dandi import reviewers

router = APIRouter(tags=["dandisets"])


class ReviewerIn(MemberIn):
    """One reviewer, as the owners' list (``name`` and ``email`` are ignored)."""


class ReviewerOut(BaseModel):
    username: str
    name: str


def _out(found: reviewers.ReviewerInfo) -> ReviewerOut:
    return ReviewerOut(username=found.username, name=found.name)


#: Like the owners' ``PUT``: bounded by the body's size (a signed-in caller's).
NEW_REVIEWERS = JsonBody(list[ReviewerIn], login=True)

add_role_routes(
    router,
    "/api/dandisets/{dandiset_id}/reviewers/",
    role="reviewers",
    body=NEW_REVIEWERS,
    response_model=ReviewerOut,
    out=_out,
    list_members=reviewers.list_reviewers,
    set_members=reviewers.set_reviewers,
    get_doc="Owners and admins only (reviewers' names are shown to nobody else).",
    put_doc="""`[{"username": ...}, ...]` (may be empty): the new reviewers (owners and admins only;
    400 naming a user that does not exist).  Reviewers read everything of the dandiset while
    it is embargoed and change nothing; a removed one loses sight at once.""",
)
