"""Metadata validation with dandischema, as the DANDI Archive does it.

A draft's dandiset metadata is validated against dandischema's ``PublishedDandiset`` and
each asset's metadata against ``PublishedAsset``, as they would be published: the archive
fills in what it computes itself (identifiers, URLs, access, ``contentSize``, ``digest``
with every blob's ``dandi:sha2-256``, a Zarr's ``encodingFormat``, ``publishedBy``,
``datePublished``) and, as DANDI does, stand-ins for what only publishing gives (the
version name, ``doi``, an ``assetsSummary`` of at most one file and one byte).

The status of a draft and of each draft asset is DANDI's: ``Pending`` after a change,
``Validating`` while the background job works, then ``Valid`` or ``Invalid`` with the errors
(``[{"field", "message"}]``).  Each result is recorded with the *fingerprint* of what was
validated (a sha256 of the metadata and of the content fields): a result whose fingerprint
is not that of the current state (a Zarr changed since, a blob's sha256 arrived) counts as
``Pending``.  Writes are compare-and-set on the row's ``modified_at``: a job that raced a
change records nothing, and the change's own job validates the new state.

Validation never blocks a request: changes mark the draft ``Pending`` and queue
:func:`validate_draft_job` (coalesced per draft); reading the status of a draft left
``Pending`` (a lost job, a crash) queues it again.  Publishing (with
``ZARRCHIVE_PUBLISH_REQUIRES_VALID``, the default) refuses a draft that is not valid:
409 while validation is pending, 400 naming what to fix when it is invalid.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import sys
import threading
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from zarrchive.db.models import (
    Asset,
    Blob,
    Dandiset,
    MetadataStatus,
    Version,
    Zarr,
    utcnow,
)
from zarrchive.jobs.lanes import JobLane
from zarrchive.services.runtime import Archive, queue_after_commit
from zarrchive.version import package_version

log = logging.getLogger(__name__)

#: The instance name of identifiers (``DANDI:000001``), dandischema's own setting.
INSTANCE_NAME_ENV = "DANDI_INSTANCE_NAME"
DEFAULT_INSTANCE_NAME = "DANDI"
#: Errors kept per validated item, and characters per message (what an uploader sends is
#: hostile: its errors are bounded).
MAX_ERRORS = 100
MAX_MESSAGE = 1000
#: Pending assets and invalid assets listed by ``/info/`` (DANDI: 50 of each).
LISTED_ASSETS = 50
PENDING_MESSAGE = "asset is currently being validated, please wait."
VALIDATE_JOB = "zarrchive.services.dandi.validation_jobs:validate_draft_job"
SHA256_JOB = "zarrchive.services.dandi.validation_jobs:blob_sha256_job"
ZARR_MEDIA_TYPE = "application/x-zarr"
SHA256_DIGEST = "dandi:sha2-256"
#: Assets validated (and recorded) per transaction by the job.
ASSET_BATCH = 500


def instance_name() -> str:
    """The DANDI instance name identifiers carry: ``$DANDI_INSTANCE_NAME``, else ``DANDI``."""
    name = os.environ.get(INSTANCE_NAME_ENV, "").strip()
    return name if re.fullmatch(r"[A-Z][-A-Z]*", name) else DEFAULT_INSTANCE_NAME


# -- dandischema ------------------------------------------------------------------------------
_schema_lock = threading.Lock()


@dataclass(frozen=True)
class _Schema:
    version: str
    validate: Callable[..., None]
    errors: Any
    aggregate: Callable[[Iterable[dict[str, Any]]], dict[str, Any]]


_schema: _Schema | None = None


def schema() -> _Schema:
    """dandischema, imported once with this archive's instance name (its models read the
    instance configuration when they are imported)."""
    global _schema
    with _schema_lock:
        if _schema is None:
            if "dandischema.models" not in sys.modules:
                from dandischema.conf import set_instance_config

                set_instance_config(dandi_instance_name=instance_name())
            import dandischema.exceptions
            from dandischema.consts import DANDI_SCHEMA_VERSION
            from dandischema.metadata import aggregate_assets_summary, validate

            _schema = _Schema(
                DANDI_SCHEMA_VERSION, validate, dandischema.exceptions, aggregate_assets_summary
            )
        return _schema


def schema_version() -> str:
    return schema().version


@dataclass(frozen=True)
class MetadataError:
    """One error of a validation, in DANDI's shape."""

    field: str
    message: str

    def as_json(self) -> dict[str, str]:
        return {"field": self.field, "message": self.message}


def _bounded(errors: list[MetadataError]) -> list[MetadataError]:
    kept = [MetadataError(e.field[:MAX_MESSAGE], e.message[:MAX_MESSAGE]) for e in errors]
    if len(kept) > MAX_ERRORS:
        kept = [
            *kept[:MAX_ERRORS],
            MetadataError("", f"... and {len(kept) - MAX_ERRORS} more errors"),
        ]
    return kept


def check(metadata: dict[str, Any], schema_key: str) -> list[MetadataError]:
    """The errors of *metadata* against dandischema's model *schema_key* (none: valid), as
    DANDI reports them: JSON-schema errors (field: the dotted path), else pydantic's (field:
    the top-level field)."""
    dandischema = schema()
    version = metadata.get("schemaVersion")
    if not isinstance(version, str):
        return [
            MetadataError(
                "schemaVersion",
                f"missing: give the DANDI schema version of the metadata ({dandischema.version})",
            )
        ]
    try:
        # JSON-schema validation of another schema version would download that schema:
        # never from a server; pydantic's models still apply.
        dandischema.validate(
            metadata, schema_key=schema_key, json_validation=version == dandischema.version
        )
    except dandischema.errors.JsonschemaValidationError as exc:
        return _bounded(
            [MetadataError(".".join(str(p) for p in e.path), str(e.message)) for e in exc.errors]
        )
    except dandischema.errors.PydanticValidationError as exc:
        return _bounded(
            [
                MetadataError(str(e["loc"][0]) if e.get("loc") else "", str(e.get("msg", "")))
                for e in exc.errors
            ]
        )
    except ValueError as exc:  # dandischema's own checks, e.g. a schemaVersion it refuses
        return _bounded([MetadataError("", str(exc))])
    except (TypeError, RecursionError) as exc:
        return [MetadataError("", f"the metadata could not be validated: {exc}")]
    return []


# -- what is validated: the metadata as it would be published ----------------------------------
def _published_by(now: datetime) -> dict[str, Any]:
    """DANDI's ``publishedBy`` activity."""
    stamp = now.isoformat()
    return {
        "id": uuid.uuid4().urn,
        "name": "DANDI publish",
        "startDate": stamp,
        "endDate": stamp,
        "wasAssociatedWith": [
            {
                "id": uuid.uuid4().urn,
                "identifier": "RRID:SCR_017571",
                "name": "DANDI API",
                "version": package_version(),
                "schemaKey": "Software",
            }
        ],
        "schemaKey": "PublishActivity",
    }


def access(embargoed: bool) -> list[dict[str, str]]:
    status = "dandi:EmbargoedAccess" if embargoed else "dandi:OpenAccess"
    return [{"schemaKey": "AccessRequirements", "status": status}]


def citation(metadata: dict[str, Any], year: int) -> str:
    """DANDI's citation of a version."""
    name = str(metadata.get("name", "")).rstrip(".")
    url = f"https://doi.org/{metadata['doi']}" if "doi" in metadata else metadata.get("url", "")
    version = metadata.get("version", "")
    text = f"{name} ({year}). (Version {version}) [Data set]. DANDI Archive. {url}"
    contributors = metadata.get("contributor")
    if isinstance(contributors, list):
        names = "; ".join(
            str(c.get("name"))
            for c in contributors
            if isinstance(c, dict) and c.get("includeInCitation") and c.get("name")
        )
        if names:
            text = f"{names} ({year}) {name} (Version {version}) [Data set]. DANDI Archive. {url}"
    return text


@dataclass(frozen=True)
class VersionFacts:
    """What the archive knows of a version besides its stored metadata."""

    identifier: str
    version: str
    embargoed: bool
    created: datetime
    web_url: str


def _add_context(populated: dict[str, Any]) -> None:
    """The JSON-LD ``@context`` of the metadata's schema version, as DANDI publishes it."""
    if isinstance(populated.get("schemaVersion"), str):
        populated["@context"] = (
            "https://raw.githubusercontent.com/dandi/schema/master/releases/"
            f"{populated['schemaVersion']}/context.json"
        )


def populated_dandiset(
    metadata: dict[str, Any], facts: VersionFacts, *, now: datetime
) -> dict[str, Any]:
    """The version's metadata with the fields the archive sets (DANDI's ``_populate_metadata``
    and the publish fields): what a published version's metadata is, less its summary."""
    instance = instance_name()
    populated = dict(metadata)
    populated.setdefault("schemaKey", "Dandiset")
    url = f"{facts.web_url}/dandiset/{facts.identifier}/{facts.version}"
    populated.update(
        identifier=f"{instance}:{facts.identifier}",
        id=f"{instance}:{facts.identifier}/{facts.version}",
        version=facts.version,
        repository=facts.web_url,
        url=url,
        dateCreated=facts.created.astimezone(UTC).isoformat(),
        access=access(facts.embargoed),
        manifestLocation=[
            f"{facts.web_url}/api/dandisets/{facts.identifier}/versions/{facts.version}/assets/"
        ],
        publishedBy=_published_by(now),
        datePublished=now.astimezone(UTC).isoformat(),
    )
    _add_context(populated)
    populated["citation"] = citation(populated, now.year)
    return populated


def validatable_dandiset(
    metadata: dict[str, Any], facts: VersionFacts, *, asset_count: int, has_bytes: bool
) -> dict[str, Any]:
    """What DANDI validates of a draft: the metadata as published, with a stand-in name,
    DOI and summary (DANDI's ``_build_validatable_version_metadata``)."""
    now = datetime.now(UTC)
    stand_in = VersionFacts(
        facts.identifier, "0.123456.1234", facts.embargoed, facts.created, facts.web_url
    )
    populated = populated_dandiset(metadata, stand_in, now=now)
    populated["doi"] = f"10.80507/{instance_name().lower()}.123456/0.123456.1234"
    populated["assetsSummary"] = {
        "schemaKey": "AssetsSummary",
        "numberOfBytes": 1 if has_bytes else 0,
        "numberOfFiles": 1 if asset_count else 0,
    }
    return populated


def published_asset(
    metadata: dict[str, Any],
    *,
    asset_id: str,
    content_urls: list[str],
    embargoed: bool,
    now: datetime,
) -> dict[str, Any]:
    """An asset's metadata as published (DANDI's ``published_metadata``): *metadata* is the
    computed one (path, contentSize, digest, a Zarr's encodingFormat)."""
    populated = dict(metadata)
    populated.setdefault("schemaKey", "Asset")
    populated.update(
        id=f"dandiasset:{asset_id}",
        identifier=asset_id,
        access=access(embargoed),
        contentUrl=content_urls,
        publishedBy=_published_by(now),
        datePublished=now.astimezone(UTC).isoformat(),
    )
    _add_context(populated)
    return populated


def fingerprint(*parts: object) -> str:
    """The sha256 of the canonical JSON of *parts*: what a validation result is valid for."""
    text = json.dumps(parts, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


# -- the archive's side ---------------------------------------------------------------------
def web_url(archive: Archive) -> str:
    """The archive's own URL in metadata (``url``, ``repository``): dandischema's
    ``DANDI_INSTANCE_URL`` if set, else where ``zarrchive serve`` listens."""
    configured = os.environ.get("DANDI_INSTANCE_URL", "").strip().rstrip("/")
    if configured.startswith(("http://", "https://")):
        return configured
    host = archive.settings.host
    return f"http://{'localhost' if host in ('0.0.0.0', '::') else host}:{archive.settings.port}"


def content_urls(
    archive: Archive, session: Session, asset: Asset, *, view: str | None = None
) -> list[str]:
    """Where an asset is downloaded: the API's route and the object's (or Zarr's) URL.  A
    Zarr asset published as a snapshot (*view*: the pinned view it names, ``snapshot``
    mode) gives the view's ``read/`` route instead of the Zarr's S3 prefix, which serves
    the live draft: a path appended to it redirects to the file's pinned S3 version."""
    api = f"{web_url(archive)}/api/assets/{asset.id}/download/"
    if asset.blob is not None:
        store = archive.store_for(asset.blob.embargoed)
        return [api, store.public_url(asset.blob.key)]
    if asset.zarr is not None and view is not None:
        return [api, f"{web_url(archive)}/api/zarr/{view}/read/"]
    if asset.zarr is not None:
        store = archive.store_for(asset.zarr.dandiset.embargoed)
        return [api, store.public_url(f"zarr/{asset.zarr.id}/")]
    return [api]


def version_facts(
    archive: Archive, session: Session, dandiset: Dandiset, version: Version
) -> VersionFacts:
    """What the archive knows of *version* (rows of the caller's *session*)."""
    return VersionFacts(
        dandiset.identifier,
        version.version,
        dandiset.embargoed,
        dandiset.created_at,
        web_url(archive),
    )


def version_contents(session: Session, version: Version) -> tuple[int, bool]:
    """``(asset count, any asset has bytes)`` of *version*."""
    count = session.scalar(select(func.count()).where(Asset.version_id == version.id)) or 0
    sized = session.scalar(
        select(Asset.id)
        .outerjoin(Blob, Blob.id == Asset.blob_id)
        .outerjoin(Zarr, Zarr.id == Asset.zarr_id)
        .where(Asset.version_id == version.id, (Blob.size > 0) | (Zarr.size > 0))
        .limit(1)
    )
    return int(count), sized is not None


def version_fingerprint(metadata: dict[str, Any], embargoed: bool, count: int, sized: bool) -> str:
    return fingerprint(metadata, embargoed, bool(count), sized)


def mark_pending(session: Session, version: Version) -> None:
    """A change of the draft (in the caller's transaction): its status is ``Pending``
    until the job queued when the transaction commits validates it."""
    if version.is_draft:
        version.status = MetadataStatus.PENDING.value
        request_validation(session, version.dandiset_id)


def asset_changed(session: Session, version: Version, asset: Asset | None = None) -> None:
    """An asset of the draft was added, changed or removed (in the caller's transaction)."""
    if asset is not None:
        asset.status = MetadataStatus.PENDING.value
    mark_pending(session, version)


def request_validation(session: Session, dandiset_id: int) -> None:
    """Queue the validation of the dandiset's draft when *session*'s transaction commits
    (never before: the job must see the change; never after a rollback)."""
    queue_after_commit(session, "validation", dandiset_id, queue_validations)


def queue_validations(archive: Archive, dandiset_ids: list[int]) -> None:
    """Queue the validation of each dandiset's draft (see :func:`queue_validation`)."""
    for dandiset_id in sorted(dandiset_ids):
        queue_validation(archive, dandiset_id)


def queue_validation(archive: Archive, dandiset_id: str | int) -> None:
    """Queue the validation of the dandiset's draft (after the commit of a change; coalesced
    per draft).  Never fails the change: a queue that is down leaves the draft ``Pending``,
    and the next look at its status queues it again."""
    if archive.jobs is None:
        return
    try:
        number = int(dandiset_id)
        with archive.db.session() as session:
            draft = session.scalar(
                select(Version.id).where(Version.dandiset_id == number, Version.version == "draft")
            )
        if draft is not None:
            archive.jobs.enqueue(
                VALIDATE_JOB, {"version_id": draft}, key=f"validate:{draft}", lane=JobLane.CONTENT
            )
    except Exception:
        log.exception("could not queue the validation of dandiset %s", dandiset_id)


def queue_blob_sha256(archive: Archive, blob_id: str) -> None:
    """Queue the computation of a new blob's ``dandi:sha2-256`` (never fails the caller)."""
    if archive.jobs is None:
        return
    try:
        archive.jobs.enqueue(
            SHA256_JOB, {"blob_id": blob_id}, key=f"sha256:{blob_id}", lane=JobLane.CONTENT
        )
    except Exception:
        log.exception("could not queue the sha256 of blob %s", blob_id)


@dataclass(frozen=True)
class AssetError:
    field: str
    message: str
    path: str


@dataclass(frozen=True)
class DraftValidation:
    """The validation state of a version as ``/info/`` reports it."""

    status: MetadataStatus
    version_errors: list[MetadataError]
    asset_errors: list[AssetError]


def stored_validation(session: Session, version: Version) -> DraftValidation:
    """The recorded state (cheap: no fingerprints computed): the version's status and
    errors, the pending assets (first 50) then the errors of 50 invalid assets."""
    status = MetadataStatus(version.status or MetadataStatus.PENDING.value)
    errors = [
        MetadataError(str(e.get("field", "")), str(e.get("message", "")))
        for e in (version.validation_errors or [])
        if isinstance(e, dict)
    ]
    if not version.is_draft:
        return DraftValidation(MetadataStatus.VALID, [], [])
    pending = session.scalars(
        select(Asset.path)
        .where(
            Asset.version_id == version.id,
            Asset.status.in_([MetadataStatus.PENDING.value, MetadataStatus.VALIDATING.value]),
        )
        .order_by(Asset.path)
        .limit(LISTED_ASSETS)
    ).all()
    asset_errors = [AssetError("", PENDING_MESSAGE, p) for p in pending]
    for path, listed in session.execute(
        select(Asset.path, Asset.validation_errors)
        .where(Asset.version_id == version.id, Asset.status == MetadataStatus.INVALID.value)
        .order_by(Asset.path)
        .limit(LISTED_ASSETS)
    ):
        for e in listed or []:
            if isinstance(e, dict):
                asset_errors.append(
                    AssetError(str(e.get("field", "")), str(e.get("message", "")), path)
                )
    return DraftValidation(status, errors, asset_errors)


def summary(metadata: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """dandischema's ``assetsSummary`` of the assets' published metadata."""
    return schema().aggregate(metadata)


def now_utc() -> datetime:
    return utcnow()
