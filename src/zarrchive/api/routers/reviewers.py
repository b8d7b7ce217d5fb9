"""``/api/dandisets/{id}/reviewers/``: who reads an embargoed dandiset without changing it
(see :mod:`zarrchive.services.reviewers`)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends
from pydantic import BaseModel, ConfigDict, Field

from zarrchive.api.bodies import JsonBody
from zarrchive.api.deps import ArchiveDep, UserDep
from zarrchive.services import reviewers

router = APIRouter(tags=["dandisets"])


class ReviewerIn(BaseModel):
    """One reviewer, as the owners' list (``name`` and ``email`` are ignored)."""

    model_config = ConfigDict(extra="ignore")
    username: str = Field(max_length=150, description="An existing user's name")


class ReviewerOut(BaseModel):
    username: str
    name: str


def _out(found: list[reviewers.ReviewerInfo]) -> list[ReviewerOut]:
    return [ReviewerOut(username=r.username, name=r.name) for r in found]


@router.get(
    "/api/dandisets/{dandiset_id}/reviewers/",
    response_model=list[ReviewerOut],
    summary="The dandiset's reviewers",
)
def get_reviewers(dandiset_id: str, archive: ArchiveDep, user: UserDep) -> list[ReviewerOut]:
    """Owners and admins only (reviewers' names are shown to nobody else)."""
    with archive.db.session() as session:
        return _out(reviewers.list_reviewers(session, user, dandiset_id))


#: Like the owners' ``PUT``: bounded by the body's size (a signed-in caller's).
NEW_REVIEWERS = JsonBody(list[ReviewerIn], login=True)


@router.put(
    "/api/dandisets/{dandiset_id}/reviewers/",
    response_model=list[ReviewerOut],
    summary="Replace the dandiset's reviewers",
    openapi_extra=NEW_REVIEWERS.openapi,
)
def put_reviewers(
    dandiset_id: str,
    body: Annotated[list[ReviewerIn], Depends(NEW_REVIEWERS)],
    archive: ArchiveDep,
    user: UserDep,
) -> list[ReviewerOut]:
    """`[{"username": ...}, ...]` (may be empty): the new reviewers (owners and admins only;
    400 naming a user that does not exist).  Reviewers read everything of the dandiset while
    it is embargoed and change nothing; a removed one loses sight at once."""
    with archive.db.write_session() as session:
        return _out(reviewers.set_reviewers(session, user, dandiset_id, [r.username for r in body]))
