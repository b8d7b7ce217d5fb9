"""A dandiset's audit trail as its readers get it (the API's ``/api/dandisets/{id}/audit/``
and the page's ``audit.json`` alike): one page of its records, oldest first."""

from __future__ import annotations

from zarrchive.services.dandi import audit, dandisets
from zarrchive.services.dandi.audit import AuditEntry
from zarrchive.services.identity.auth import Caller
from zarrchive.services.runtime import Archive


def audit_page(
    archive: Archive,
    user: Caller | None,
    dandiset_id: str,
    *,
    offset: int,
    limit: int,
    record_type: str | None = None,
) -> tuple[int, list[AuditEntry]]:
    """``(count, page)`` of the records of dandiset *dandiset_id* (owners and admins: see
    :func:`~zarrchive.services.dandi.audit.list_records`)."""
    with archive.db.session() as session:
        return audit.list_records(
            session,
            user,
            dandisets.get_dandiset(session, user, dandiset_id),
            offset=offset,
            limit=limit,
            record_type=record_type,
        )
