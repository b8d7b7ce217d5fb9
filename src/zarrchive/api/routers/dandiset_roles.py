"""The routes of a dandiset's role given by a list of user names (its owners, its
reviewers): ``GET`` lists the members, ``PUT`` replaces them (see
:mod:`zarrchive.services.dandi.dandiset_roles`).  Each role's module says who may do what.

No ``from __future__ import annotations`` here: FastAPI reads the routes' annotations, which
name this function's locals.
"""

from collections.abc import Callable
from typing import Annotated, TypeVar

from fastapi import APIRouter, Depends
from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy.orm import Session

from zarrchive.api.bodies import JsonBody
from zarrchive.api.deps import ArchiveDep, UserDep
from zarrchive.services.identity.auth import Caller

Info = TypeVar("Info")
Out = TypeVar("Out", bound=BaseModel)


class MemberIn(BaseModel):
    """One member of a ``PUT`` body (``name`` and ``email`` are ignored, as DANDI does)."""

    model_config = ConfigDict(extra="ignore")
    username: str = Field(max_length=150, description="An existing user's name")


def add_role_routes(
    router: APIRouter,
    path: str,
    *,
    role: str,
    body: JsonBody,
    response_model: type[Out],
    out: Callable[[Info], Out],
    list_members: Callable[[Session, Caller | None, str], list[Info]],
    set_members: Callable[[Session, Caller | None, str, list[str]], list[Info]],
    get_doc: str,
    put_doc: str,
) -> None:
    """Add to *router* the ``GET`` (``get_<role>``: *list_members*) and ``PUT``
    (``put_<role>``: *set_members*, the user names of *body*, a list of :class:`MemberIn`) of
    *path*, each answering the members as *out* makes them; *get_doc* and *put_doc* are
    their descriptions."""

    def get_members(dandiset_id: str, archive: ArchiveDep, user: UserDep) -> list[Out]:
        with archive.db.session() as session:
            return [out(m) for m in list_members(session, user, dandiset_id)]

    def put_members(
        dandiset_id: str,
        members: Annotated[list[MemberIn], Depends(body)],
        archive: ArchiveDep,
        user: UserDep,
    ) -> list[Out]:
        usernames = [m.username for m in members]
        with archive.db.write_session() as session:
            return [out(m) for m in set_members(session, user, dandiset_id, usernames)]

    get_members.__doc__, put_members.__doc__ = get_doc, put_doc
    router.add_api_route(
        path,
        get_members,
        methods=["GET"],
        name=f"get_{role}",
        response_model=list[response_model],  # type: ignore[valid-type]
        summary=f"The dandiset's {role}",
    )
    router.add_api_route(
        path,
        put_members,
        methods=["PUT"],
        name=f"put_{role}",
        response_model=list[response_model],  # type: ignore[valid-type]
        summary=f"Replace the dandiset's {role}",
        openapi_extra=body.openapi,
    )
