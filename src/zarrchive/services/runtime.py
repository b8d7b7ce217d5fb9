"""The archive's runtime: settings, database, object store and job queue together.

Built once per process (API server, worker, admin command) and handed to the
service functions; nothing here knows about HTTP.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from zarrchive.config import Settings
from zarrchive.db.session import Database
from zarrchive.jobs import JobQueue
from zarrchive.storage.bucket_cors import BUCKET_CORS
from zarrchive.storage.objects import ObjectStore

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
    store: ObjectStore
    embargo_store: ObjectStore
    #: The job queue; ``None`` runs nothing in the background.
    jobs: JobQueue | None = field(default=None)

    def store_for(self, embargoed: bool) -> ObjectStore:
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
