"""The DOIs of dandisets and of their published versions at DataCite, as DANDI mints them.

Unset ``ZARRCHIVE_DOI_*``: nothing here does anything (no row, no job, no call).  Otherwise:

- a public dandiset gets a Draft DOI when it is created (an embargoed one when it is
  unembargoed); its first publication makes it Findable (``ZARRCHIVE_DOI_PUBLISH=true``),
  each publication sends its metadata again (``HasVersion`` each version's DOI);
- each published version gets its DOI (``IsVersionOf`` the dandiset's), named in its
  metadata (``doi``) and citation from the start;
- deleting a dandiset deletes its Draft DOI (a Findable one is hidden: Registered);
- ``zarrchive admin doi sync`` sends every DOI's metadata again.

The hooks record a :class:`~zarrchive.db.models.Doi` row in the caller's transaction and
queue its job when it commits (content lane: a Zarr's jobs never wait for DataCite).  The job
is keyed by the DOI and idempotent (DataCite's DOI is named: a retried create updates it);
DataCite down is an error recorded on the row and a retry (RQ's; in-process a timer's, with a
growing delay, see :func:`sync_doi_job`; a DOI job that succeeds, a server's start-up and
``doi sync`` queue the ones still pending); a refusal (4xx) is recorded with DataCite's message
for the admins and not retried.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from zarrchive.config import DoiSettings
from zarrchive.db.models import Dandiset, Doi, DoiGoal, DoiState, Version, utcnow
from zarrchive.errors import DataCiteRefused, DataCiteUnavailable
from zarrchive.jobs import InProcessJobQueue, JobLane
from zarrchive.jobs.queue import backoff_delay
from zarrchive.services.dandi import doi_metadata
from zarrchive.services.dandi.dandiset_rows import DRAFT, served_metadata
from zarrchive.services.dandi.datacite import DataCiteClient
from zarrchive.services.dandi.validation import (
    VersionFacts,
    instance_name,
    validatable_dandiset,
    web_url,
)
from zarrchive.services.runtime import (
    Archive,
    current_archive,
    queue_after_commit,
    serving_archive,
)

log = logging.getLogger(__name__)

DOI_JOB = "zarrchive.services.dandi.dois:sync_doi_job"


@dataclass(frozen=True)
class DoiStatus:
    """A DOI as pages and commands show it."""

    doi: str
    version: str | None
    state: DoiState
    goal: DoiGoal
    last_error: str | None
    refused_status: int | None
    attempts: int

    @property
    def url(self) -> str:
        return f"https://doi.org/{self.doi}"


def dandiset_doi_name(settings: DoiSettings, identifier: str) -> str:
    return doi_metadata.dandiset_doi(settings.prefix, instance_name(), identifier)


def version_doi_name(settings: DoiSettings, identifier: str, version: str) -> str:
    return doi_metadata.version_doi(settings.prefix, instance_name(), identifier, version)


# -- hooks: in the caller's transaction --------------------------------------------------------
def _record(
    session: Session,
    archive: Archive,
    doi: str,
    identifier: str,
    version: str | None,
    goal: DoiGoal,
    *,
    resend: bool = False,
) -> None:
    row = session.get(Doi, doi)
    if row is None:
        session.add(Doi(doi=doi, dandiset=identifier, version=version, goal=goal.value))
    elif row.goal != goal.value:
        if row.state == DoiState.DELETED.value:  # a deleted Draft's name is free again
            row.state = DoiState.PENDING.value
        row.goal = goal.value
        row.updated_at = utcnow()
    session.flush()
    _queue_on_commit(session, archive, doi, resend)


def _queue_on_commit(session: Session, archive: Archive, doi: str, resend: bool) -> None:
    """Queue *doi*'s job when the transaction commits (*resend*: its metadata changed)."""
    queue_after_commit(session, "doi", (doi, resend), queue_dois, archive=archive)


def queue_dois(archive: Archive, dois: list[tuple[str, bool]]) -> None:
    """Queue the job of each ``(doi, resend)`` (a DOI's metadata is sent again if any of its
    changes asked): the dandiset's DOI before its versions'."""
    resend: dict[str, bool] = {}
    for doi, again in dois:
        resend[doi] = resend.get(doi, False) or again
    for doi in sorted(resend):
        queue_doi(archive, doi, resend=resend[doi])


def dandiset_created(session: Session, dandiset: Dandiset) -> None:
    """A new dandiset: a Draft DOI if it is public (an embargoed one waits for its unembargo)."""
    archive = serving_archive(session)
    if archive is None or archive.settings.doi is None or dandiset.embargoed:
        return
    doi = dandiset_doi_name(archive.settings.doi, dandiset.identifier)
    _record(session, archive, doi, dandiset.identifier, None, DoiGoal.DRAFT)


def dandiset_restored(session: Session, dandiset: Dandiset) -> None:
    """A deleted dandiset restored (from the trash): its Draft DOI again (a deleted Draft's
    name is free at DataCite), as at its creation."""
    dandiset_created(session, dandiset)


def dandiset_deleted(session: Session, identifier: str) -> None:
    """A dandiset deleted: its Draft DOIs are deleted at DataCite, Findable ones hidden."""
    archive = serving_archive(session)
    if archive is None or archive.settings.doi is None:
        return
    for row in session.scalars(select(Doi).where(Doi.dandiset == identifier)):
        _record(session, archive, row.doi, identifier, row.version, DoiGoal.GONE)


def version_published(
    archive: Archive, session: Session, dandiset: Dandiset, version: str
) -> str | None:
    """A version published: its DOI (returned, for its metadata) and the dandiset's, both to
    be Findable; ``None`` without DOIs."""
    settings = archive.settings.doi
    if settings is None:
        return None
    identifier = dandiset.identifier
    concept = dandiset_doi_name(settings, identifier)
    # its metadata is the latest version's, with one more HasVersion: sent again
    _record(session, archive, concept, identifier, None, DoiGoal.FINDABLE, resend=True)
    doi = version_doi_name(settings, identifier, version)
    _record(session, archive, doi, identifier, version, DoiGoal.FINDABLE)
    return doi


def dandiset_unembargoed(archive: Archive, dandiset_id: int) -> None:
    """An embargoed dandiset became public: its Draft DOI now (never fails the unembargo)."""
    if archive.settings.doi is None:
        return
    try:
        with archive.db.write_session() as session:
            dandiset = session.get(Dandiset, dandiset_id)
            if dandiset is None or dandiset.embargoed:
                return
            doi = dandiset_doi_name(archive.settings.doi, dandiset.identifier)
            if session.get(Doi, doi) is None:
                _record(session, archive, doi, dandiset.identifier, None, DoiGoal.DRAFT)
    except Exception:  # the caller's change stands: `doi sync` sends it
        log.exception("could not record the DOI of unembargoed dandiset %06d", dandiset_id)


def queue_doi(archive: Archive, doi: str, *, resend: bool = False) -> None:
    """Queue the DOI's job (keyed by the DOI; never fails the caller)."""
    if archive.jobs is None:
        return
    try:
        archive.jobs.enqueue(
            DOI_JOB, {"doi": doi, "resend": resend}, key=f"doi:{doi}", lane=JobLane.CONTENT
        )
    except Exception:  # the caller's change stands: `doi sync` sends it
        log.exception("could not queue the job of DOI %s", doi)


# -- what the archive shows ---------------------------------------------------------------------
def _status(row: Doi) -> DoiStatus:
    return DoiStatus(
        row.doi,
        row.version,
        DoiState(row.state),
        DoiGoal(row.goal),
        row.last_error,
        row.refused_status,
        row.attempts,
    )


def dandiset_dois(session: Session, identifier: str) -> list[DoiStatus]:
    """The DOIs of a dandiset: its own first, then its versions'."""
    rows = session.scalars(select(Doi).where(Doi.dandiset == identifier))
    return sorted((_status(r) for r in rows), key=lambda s: (s.version is not None, s.version))


# -- the job --------------------------------------------------------------------------------------
def sync_doi_job(doi: str, resend: bool = False) -> None:
    """The background job (see :mod:`zarrchive.jobs`).  DataCite down: RQ retries it (10 s,
    1 min, 5 min: its scheduler); the in-process queue's retries (seconds) are shorter than an
    outage, so there it is queued again later by a timer of this process, with a growing
    delay, until DataCite answers (a restart queues what is still pending:
    :func:`queue_pending`)."""
    archive = current_archive()
    try:
        sync_doi(archive, doi, resend=resend)
    except DataCiteUnavailable:
        if not isinstance(archive.jobs, InProcessJobQueue):
            raise
        _retry_later(archive, doi, resend)


#: The in-process retries of a DOI job while DataCite is down: seconds before the first,
#: doubled each time up to the most.
RETRY_FIRST = 10.0
RETRY_MOST = 600.0


def _retry_later(archive: Archive, doi: str, resend: bool) -> None:
    with archive.db.session() as session:
        row = session.get(Doi, doi)
        attempts = row.attempts if row is not None else 1
    delay = backoff_delay(max(attempts, 1), RETRY_FIRST, RETRY_MOST)
    log.warning("DataCite did not answer for DOI %s: trying again in %.0f s", doi, delay)
    timer = threading.Timer(delay, queue_doi, (archive, doi), {"resend": resend})
    timer.daemon = True
    timer.start()


def queue_pending(archive: Archive) -> int:
    """Queue the job of every DOI not at its goal that DataCite did not refuse (at start-up:
    an outage's DOIs whose retries this process no longer holds); how many."""
    settings = archive.settings.doi
    if settings is None or archive.jobs is None:
        return 0
    with archive.db.session() as session:
        rows = [
            (r.doi, DoiState(r.state), DoiGoal(r.goal))
            for r in session.scalars(select(Doi).where(Doi.refused_status.is_(None)))
        ]
    todo = [d for d, s, g in rows if doi_metadata.next_step(s, g, publish=settings.publish)]
    for doi in todo:
        queue_doi(archive, doi)
    return len(todo)


#: Steps one job takes at most (create, then publish: two).
MAX_STEPS = 3


def sync_doi(
    archive: Archive,
    doi: str,
    *,
    resend: bool = False,
    client: DataCiteClient | None = None,
) -> DoiStatus | None:
    """Bring *doi* to its goal at DataCite (*resend*: send its metadata again even if it is
    there).  Raises :class:`DataCiteUnavailable` (after recording it) so the queue retries; a
    refusal is recorded, not raised."""
    settings = archive.settings.doi
    if settings is None:
        return None
    own = client is None
    datacite = client or DataCiteClient(settings)
    try:
        for _ in range(MAX_STEPS):
            with archive.db.session() as session:
                row = session.get(Doi, doi)
                if row is None:
                    return None
                state, goal = DoiState(row.state), DoiGoal(row.goal)
                pick = doi_metadata.resend_step if resend else doi_metadata.next_step
                step = pick(state, goal, publish=settings.publish)
                metadata = None
                if step is not None and step.with_metadata:
                    metadata = _attributes(archive, session, settings, row)
            resend = False
            if step is None:
                break
            try:
                reached = _call(datacite, doi, step, metadata)
            except DataCiteRefused as exc:
                log.warning("%s", exc.message)
                _note(archive, doi, error=exc.message, refused=exc.status)
                break
            except DataCiteUnavailable as exc:
                _note(archive, doi, error=exc.message, refused=None)
                raise
            _note(archive, doi, state=reached)
        else:
            log.warning("DOI %s did not reach its goal in %d steps", doi, MAX_STEPS)
    finally:
        if own:
            datacite.close()
    with archive.db.session() as session:
        row = session.get(Doi, doi)
        result = _status(row) if row is not None else None
    if result is not None and result.last_error is None:
        _queue_stalled(archive, doi)
    return result


def _call(
    datacite: DataCiteClient,
    doi: str,
    step: doi_metadata.DoiStep,
    metadata: dict[str, Any] | None,
) -> DoiState:
    if step.method is doi_metadata.DoiMethod.DELETE:
        # DataCite deletes Draft DOIs only: a Findable one is hidden, a Registered one stays
        current = datacite.get_state(doi)
        if current is None:
            return DoiState.DELETED
        if current is DoiState.DRAFT:
            datacite.delete(doi)
            return DoiState.DELETED
        if current is DoiState.FINDABLE:
            hide = {"doi": doi, "event": doi_metadata.DoiEvent.HIDE.value}
            return datacite.update(doi, hide)
        return current
    attributes = doi_metadata.step_attributes(step, doi, metadata)
    if doi_metadata.needs_full_metadata(attributes):
        wrong = doi_metadata.kernel_4_errors(attributes)
        if wrong is not None:
            raise DataCiteRefused(
                f"DOI {doi}: not sent, its metadata fails DataCite's kernel-4 schema: {wrong}",
                status=422,
            )
    if step.method is doi_metadata.DoiMethod.CREATE:
        return datacite.create(doi, attributes)
    return datacite.update(doi, attributes)


def _note(
    archive: Archive,
    doi: str,
    *,
    state: DoiState | None = None,
    error: str | None = None,
    refused: int | None = None,
) -> None:
    with archive.db.write_session() as session:
        row = session.get(Doi, doi)
        if row is None:
            return
        if error is None:
            row.last_error, row.refused_status, row.attempts = None, None, 0
        else:
            row.last_error, row.refused_status = error, refused
            row.attempts += 1
        if state is not None:
            row.state = state.value
        row.updated_at = utcnow()


def _queue_stalled(archive: Archive, done: str) -> None:
    """DataCite answered: queue the DOIs an outage left pending (not refused ones)."""
    with archive.db.session() as session:
        stalled = list(
            session.scalars(
                select(Doi.doi).where(
                    Doi.doi != done, Doi.attempts > 0, Doi.refused_status.is_(None)
                )
            )
        )
    for doi in stalled:
        queue_doi(archive, doi)


# -- the metadata -----------------------------------------------------------------------------
def _attributes(
    archive: Archive, session: Session, settings: DoiSettings, row: Doi
) -> dict[str, Any] | None:
    dandiset = session.scalar(select(Dandiset).where(Dandiset.id == int(row.dandiset)))
    if dandiset is None:
        return None
    versions = list(
        session.scalars(
            select(Version).where(Version.dandiset_id == dandiset.id).order_by(Version.id)
        )
    )
    published = [v for v in versions if v.version != DRAFT]
    web = web_url(archive)
    concept = dandiset_doi_name(settings, dandiset.identifier)
    if row.version is not None:
        version = next((v for v in published if v.version == row.version), None)
        if version is None:
            return None
        metadata = served_metadata(dandiset, version)
        metadata["doi"] = row.doi
        try:
            converted = _to_datacite(metadata)
        except ValueError as exc:
            log.info("DOI %s: dandischema can't convert the metadata (%s)", row.doi, exc)
            return doi_metadata.draft_attributes(
                doi=row.doi, url=str(metadata.get("url") or web), title=dandiset.name
            )
        return doi_metadata.version_attributes(
            converted, doi=row.doi, dandiset_doi=concept, event=None
        )
    url = f"{web}/dandiset/{dandiset.identifier}"
    version_dois = [version_doi_name(settings, dandiset.identifier, v.version) for v in published]
    try:
        if published:
            metadata = served_metadata(dandiset, published[-1])
            metadata["doi"] = version_doi_name(settings, dandiset.identifier, published[-1].version)
        else:
            draft = next(v for v in versions if v.version == DRAFT)
            facts = VersionFacts(
                dandiset.identifier, "draft", dandiset.embargoed, dandiset.created_at, web
            )
            metadata = validatable_dandiset(
                served_metadata(dandiset, draft), facts, asset_count=1, has_bytes=True
            )
        converted = _to_datacite(metadata)
    except (ValueError, StopIteration) as exc:
        log.info("DOI %s: dandischema can't convert the metadata (%s)", row.doi, exc)
        return doi_metadata.draft_attributes(doi=row.doi, url=url, title=dandiset.name)
    return doi_metadata.dandiset_attributes(
        converted, doi=row.doi, url=url, version_dois=version_dois, event=None
    )


def _to_datacite(metadata: dict[str, Any]) -> dict[str, Any]:
    from dandischema.datacite import to_datacite

    try:
        result: dict[str, Any] = to_datacite(metadata)
    except (TypeError, KeyError, AttributeError, NotImplementedError, IndexError) as exc:
        raise ValueError(str(exc)) from exc
    return result


# -- admin ------------------------------------------------------------------------------------
def sync_all(archive: Archive, identifier: str | None = None) -> list[DoiStatus]:
    """``zarrchive admin doi sync [DANDISET]``: record the DOIs that public dandisets and their
    versions should have and don't (made while DOIs were off), then send every DOI's metadata
    again, here and now; the statuses after."""
    settings = archive.settings.doi
    if settings is None:
        return []
    with archive.db.write_session() as session:
        query = select(Dandiset).order_by(Dandiset.id)
        if identifier is not None:
            query = query.where(Dandiset.id == int(identifier))
        for dandiset in session.scalars(query):
            if dandiset.embargoed or getattr(dandiset, "deleted_at", None) is not None:
                continue  # embargoed, or deleted (in the trash)
            published = [
                n
                for n in session.scalars(
                    select(Version.version).where(Version.dandiset_id == dandiset.id)
                )
                if n != DRAFT
            ]
            goal = DoiGoal.FINDABLE if published else DoiGoal.DRAFT
            concept = dandiset_doi_name(settings, dandiset.identifier)
            if session.get(Doi, concept) is None:
                session.add(Doi(doi=concept, dandiset=dandiset.identifier, goal=goal.value))
            for name in published:
                doi = version_doi_name(settings, dandiset.identifier, name)
                if session.get(Doi, doi) is None:
                    session.add(
                        Doi(
                            doi=doi,
                            dandiset=dandiset.identifier,
                            version=name,
                            goal=DoiGoal.FINDABLE.value,
                        )
                    )
        rows = select(Doi.doi).order_by(Doi.doi)
        if identifier is not None:
            rows = rows.where(Doi.dandiset == identifier)
        names = list(session.scalars(rows))
    statuses = []
    with DataCiteClient(settings) as client:
        for doi in names:
            try:
                status = sync_doi(archive, doi, resend=True, client=client)
            except DataCiteUnavailable:
                with archive.db.session() as session:
                    row = session.get(Doi, doi)
                    status = _status(row) if row is not None else None
            if status is not None:
                statuses.append(status)
    return statuses


def describe(status: DoiStatus) -> str:
    """One line of ``doi sync``'s output."""
    line = f"{status.doi}  {status.state.value}"
    if status.state.value != status.goal.value and status.goal is not DoiGoal.GONE:
        line += f" (wanted: {status.goal.value})"
    if status.last_error:
        kind = f"refused {status.refused_status}" if status.refused_status else "unreachable"
        line += f"  {kind}: {status.last_error}"
    return line


__all__ = [
    "DoiStatus",
    "dandiset_created",
    "dandiset_deleted",
    "dandiset_dois",
    "dandiset_restored",
    "dandiset_unembargoed",
    "describe",
    "queue_doi",
    "queue_pending",
    "sync_all",
    "sync_doi",
    "sync_doi_job",
    "version_published",
]
