"""``/api/dandisets/{id}/audit/``: a dandiset's audit trail (owners and admins)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request
from pydantic import BaseModel

from zarrchive.api.deps import ArchiveDep, UserDep
from zarrchive.api.pagination import Page, PageRequest, make_page, page_request
from zarrchive.services import audit, dandisets

router = APIRouter(tags=["dandisets"])


class AuditRecordOut(BaseModel):
    """DANDI's audit record."""

    id: int
    timestamp: datetime
    dandiset: str
    username: str
    user_email: str
    user_fullname: str
    admin: bool
    record_type: str
    details: dict[str, Any]


@router.get(
    "/api/dandisets/{dandiset_id}/audit/",
    response_model=Page[AuditRecordOut],
    summary="The dandiset's audit trail",
)
def list_audit_records(
    dandiset_id: str,
    request: Request,
    archive: ArchiveDep,
    user: UserDep,
    asked: Annotated[PageRequest, Depends(page_request)],
    record_type: Annotated[str | None, Query(max_length=32)] = None,
) -> Page[AuditRecordOut]:
    """Every change, oldest first: who (`username`, `admin`: an administrator not among the
    owners), when, what (`record_type`, `details`).  Owners and admins only."""
    with archive.db.session() as session:
        count, rows = audit.list_records(
            session,
            user,
            dandisets.get_dandiset(session, user, dandiset_id),
            offset=asked.offset,
            limit=asked.page_size,
            record_type=record_type,
        )
    return make_page(request, asked, count, [AuditRecordOut(**r.__dict__) for r in rows])
