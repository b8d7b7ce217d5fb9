"""The archive's runtime: settings, database, object store and job queue together.

Built once per process (API server, worker, admin command) and handed to the
service functions; nothing here knows about HTTP.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import TypeVar

from sqlalchemy import event
from sqlalchemy.orm import Session

from zarrchive.config import Settings
from zarrchive.db.session import Database
from zarrchive.jobs import JobQueue
from zarrchive.storage.bucket_cors import BUCKET_CORS
from zarrchive.storage.objects import ObjectStore
from zarrchive.storage.protocol import ObjectStoreProtocol

T = TypeVar("T", bound=Hashable)

log = logging.getLogger(__name__)


@dataclass
class Archive:
    """Everything a service operation needs.

    Two buckets: ``store`` is the public, world-readable one; ``embargo_store``
    the private one that holds everything of embargoed dandisets until they are
    unembargoed.
    """

    settings: Settings
    db: Database
    store: ObjectStoreProtocol
    embargo_store: ObjectStoreProtocol
    #: The job queue; ``None`` runs nothing in the background.
    jobs: JobQueue | None = field(default=None)

    def store_for(self, embargoed: bool) -> ObjectStoreProtocol:
        """The bucket holding the objects of an embargoed dandiset, or of a public one."""
        return self.embargo_store if embargoed else self.store

    @classmethod
    def from_settings(cls, settings: Settings, *, migrate: bool = True) -> Archive:
        """Connect to the database and S3 named by *settings* (S3 must be running)."""
        db = Database(settings.database_url, strict=settings.strict_sessions)
        if migrate:
            db.migrate()
        stores = []
        for bucket in (settings.s3_bucket, settings.s3_embargo_bucket):
            store = ObjectStore(
                endpoint_url=settings.s3_endpoint_url,
                bucket=bucket,
                access_key_id=settings.s3_access_key_id,
                secret_access_key=settings.s3_secret_access_key,
                region=settings.s3_region,
            )
            store.ensure_bucket(versioned=True)
            if not store.ensure_cors(BUCKET_CORS):
                log.warning(
                    "could not set the CORS rules of bucket %s (browser viewers need them): "
                    "see docs/deploying.md",
                    bucket,
                )
            stores.append(store)
        return cls(settings=settings, db=db, store=stores[0], embargo_store=stores[1])

    def close(self) -> None:
        if self.jobs is not None:
            self.jobs.close(wait=True, timeout=30)
        self.store.close()
        self.embargo_store.close()
        self.db.dispose()


_current: Archive | None = None


def set_current_archive(archive: Archive | None) -> None:
    """Make *archive* the one background jobs of this process use."""
    global _current
    _current = archive


def close_current_archive() -> None:
    """Close and forget the archive set for this process, if any (a worker, before its jobs
    run in forked children that build their own)."""
    global _current
    archive, _current = _current, None
    if archive is not None:
        archive.close()


def serving_archive(session: Session) -> Archive | None:
    """The archive of this process (:func:`set_current_archive`: ``zarrchive serve`` and
    workers) if *session* is one of its database's; None otherwise (a command's own
    database, a test's): nothing is queued for those."""
    archive = _current
    if archive is None or session.bind is not archive.db.engine:
        return None
    return archive


@dataclass
class _Queued:
    send: Callable[[Archive, list[Hashable]], None]
    archive: Archive | None
    items: dict[Hashable, None]


_AFTER_COMMIT = "zarrchive.after_commit"


def queue_after_commit(
    session: Session,
    name: str,
    item: T,
    send: Callable[[Archive, list[T]], None],
    *,
    archive: Archive | None = None,
) -> None:
    """Hand *item* to *send* when *session*'s transaction commits: never before (the job it
    queues must see the change), never after a rollback.

    Items under one *name* (the kind of work: ``"lindi"``) are collected per transaction,
    without repeats, and *send* gets them all at once, in the order first given, with
    *archive* (the one given with the first item) or else the serving archive
    (:func:`serving_archive`; without one, nothing is sent).  A savepoint's commit is not
    the transaction's.
    """
    pending: dict[str, _Queued] = session.info.setdefault(_AFTER_COMMIT, {})
    queued = pending.get(name)
    if queued is None:
        queued = pending[name] = _Queued(send, archive, {})  # type: ignore[arg-type]
    if not event.contains(session, "after_commit", _send_after_commit):
        event.listen(session, "after_commit", _send_after_commit)
        event.listen(session, "after_rollback", _forget_after_rollback)
    queued.items[item] = None


def _send_after_commit(session: Session) -> None:
    if session.in_nested_transaction():  # a savepoint: the transaction goes on
        return
    pending: dict[str, _Queued] = session.info.pop(_AFTER_COMMIT, {})
    for queued in pending.values():
        target = queued.archive or serving_archive(session)
        if target is not None:
            queued.send(target, list(queued.items))


def _forget_after_rollback(session: Session) -> None:
    if not session.in_nested_transaction():
        session.info.pop(_AFTER_COMMIT, None)


def current_archive() -> Archive:
    """The archive background jobs use: the one set by the server, or one from the environment.

    A worker process (``zarrchive worker``) builds it from ``ZARRCHIVE_*`` on first use (RQ
    runs each job in a forked child, so once per job; the worker migrated the database when
    it started); with the embedded S3 it connects to the one ``zarrchive serve`` runs.
    """
    global _current
    if _current is None:
        from zarrchive.storage.embedded import running_embedded_s3

        archive = Archive.from_settings(running_embedded_s3(Settings.from_env()), migrate=False)
        if archive.settings.redis_url:  # jobs may queue jobs (an applied batch: its manifest)
            from zarrchive.jobs import job_queue_from_settings

            archive.jobs = job_queue_from_settings(archive.settings)
        _current = archive
    return _current
