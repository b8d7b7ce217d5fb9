"""``/api/dandisets/{id}/audit/``: a dandiset's audit trail (owners and admins)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Query, Request

from zarrchive.api.deps import ArchiveDep, UserDep
from zarrchive.http_common.pagination import Page, PageRequest, make_page, page_request
from zarrchive.services.dandi.audit import AuditEntry
from zarrchive.services.dandi.audit_trail import audit_page

router = APIRouter(tags=["dandisets"])


@router.get(
    "/api/dandisets/{dandiset_id}/audit/",
    response_model=Page[AuditEntry],
    summary="The dandiset's audit trail",
)
def list_audit_records(
    dandiset_id: str,
    request: Request,
    archive: ArchiveDep,
    user: UserDep,
    asked: Annotated[PageRequest, Depends(page_request)],
    record_type: Annotated[str | None, Query(max_length=32)] = None,
) -> Page[AuditEntry]:
    """Every change, oldest first: who (`username`, `admin`: an administrator not among the
    owners), when, what (`record_type`, `details`).  Owners and admins only."""
    count, rows = audit_page(
        archive,
        user,
        dandiset_id,
        offset=asked.offset,
        limit=asked.page_size,
        record_type=record_type,
    )
    return make_page(request, asked, count, rows)
