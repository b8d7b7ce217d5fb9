"""The background work of metadata validation and what publishing checks (above
:mod:`~zarrchive.services.dandi.assets` and :mod:`~zarrchive.services.dandi.versions`, whose metadata it
validates; :mod:`~zarrchive.services.dandi.validation` holds the rest).

- :func:`validate_draft_job`: validate a draft and its assets whose results are not current,
  recording each result compare-and-set on the row's ``modified_at``;
- :func:`blob_sha256_job`: a new blob's ``dandi:sha2-256``, streamed from its object;
- :func:`publishable`: refuse to publish a draft not validated valid in its current state.
"""

from __future__ import annotations

import hashlib
import logging
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from zarrchive.db.models import Asset, Blob, Dandiset, MetadataStatus, Version
from zarrchive.errors import Conflict, InvalidInput
from zarrchive.jobs.lanes import JobLane
from zarrchive.services.dandi.assets import computed_metadata
from zarrchive.services.dandi.dandiset_rows import served_metadata
from zarrchive.services.dandi.validation import (
    ASSET_BATCH,
    SHA256_DIGEST,
    VALIDATE_JOB,
    ZARR_MEDIA_TYPE,
    AssetError,
    MetadataError,
    check,
    content_urls,
    fingerprint,
    published_asset,
    queue_validation,
    validatable_dandiset,
    version_contents,
    version_facts,
    version_fingerprint,
)
from zarrchive.services.runtime import Archive, current_archive

log = logging.getLogger(__name__)


def asset_inputs(asset: Asset, embargoed: bool) -> tuple[dict[str, Any], str]:
    """The computed metadata of a draft asset and its fingerprint."""
    metadata = computed_metadata(asset)
    if asset.zarr is not None:
        metadata["encodingFormat"] = ZARR_MEDIA_TYPE
    if asset.blob is not None and asset.blob.sha256 is not None:
        metadata["digest"] = {**metadata.get("digest", {}), SHA256_DIGEST: asset.blob.sha256}
    return metadata, fingerprint(metadata, embargoed)


def blob_sha256_job(blob_id: str) -> None:
    """Stream a blob's object and record its sha256 (idempotent), as DANDI's checksum task."""
    archive = current_archive()
    if ensure_sha256(archive, blob_id) is None:
        return
    with archive.db.session() as session:  # drafts using it: their assets can now validate
        dandisets = sorted(
            set(
                session.scalars(
                    select(Version.dandiset_id)
                    .join(Asset, Asset.version_id == Version.id)
                    .where(Asset.blob_id == blob_id, Version.version == "draft")
                )
            )
        )
    for dandiset_id in dandisets:
        queue_validation(archive, dandiset_id)


def ensure_sha256(archive: Archive, blob_id: str) -> str | None:
    """The blob's sha256, computed from its object if not known yet."""
    with archive.db.session() as session:
        blob = session.get(Blob, blob_id)
        if blob is None:
            return None
        if blob.sha256 is not None:
            return blob.sha256
        key, embargoed = blob.key, blob.embargoed
    digest = hashlib.sha256()
    for chunk in archive.store_for(embargoed).iter_content(key, None):
        digest.update(chunk)
    value = digest.hexdigest()
    with archive.db.write_session() as session:
        session.execute(
            update(Blob).where(Blob.id == blob_id, Blob.sha256.is_(None)).values(sha256=value)
        )
    return value


def validate_draft_job(version_id: int) -> None:
    """The background validation of a draft (see :func:`validate_draft`)."""
    validate_draft(current_archive(), version_id)


def validate_draft(archive: Archive, version_id: int) -> MetadataStatus | None:
    """Validate the draft *version_id* and its assets whose results are not current;
    returns the draft's status (``None``: no such draft)."""
    with archive.db.write_session() as session:
        version = session.get(Version, version_id)
        if version is None or not version.is_draft:
            return None
        if version.status == MetadataStatus.PENDING:
            version.status = MetadataStatus.VALIDATING.value
        dandiset = session.get(Dandiset, version.dandiset_id)
        assert dandiset is not None
        embargoed = dandiset.embargoed
        # blobs of the draft without their sha256 yet (old ones; new ones have a job)
        missing = sorted(
            b
            for b in session.scalars(
                select(Blob.id)
                .join(Asset, Asset.blob_id == Blob.id)
                .where(Asset.version_id == version_id, Blob.sha256.is_(None))
            )
        )
    for blob_id in missing:
        try:
            ensure_sha256(archive, blob_id)
        except Exception:  # the asset stays invalid (no sha256) until the next validation
            log.exception("could not compute the sha256 of blob %s", blob_id)
    _validate_assets(archive, version_id, embargoed)
    return _validate_version(archive, version_id)


def _validate_assets(archive: Archive, version_id: int, embargoed: bool) -> None:
    now = datetime.now(UTC)
    after = ""
    while True:
        results: list[tuple[str, datetime, str, list[MetadataError]]] = []
        with archive.db.session() as session:
            assets = list(
                session.scalars(
                    select(Asset)
                    .where(Asset.version_id == version_id, Asset.path > after)
                    .order_by(Asset.path)
                    .limit(ASSET_BATCH)
                )
            )
            if not assets:
                return
            after = assets[-1].path
            for asset in assets:
                metadata, print_ = asset_inputs(asset, embargoed)
                if asset.validated == print_ and asset.status in (
                    MetadataStatus.VALID,
                    MetadataStatus.INVALID,
                ):
                    continue
                published = published_asset(
                    metadata,
                    asset_id=asset.id,
                    content_urls=content_urls(archive, session, asset),
                    embargoed=embargoed,
                    now=now,
                )
                errors = check(published, "PublishedAsset")
                results.append((asset.id, asset.modified_at, print_, errors))
        if results:
            with archive.db.write_session() as session:
                for asset_id, modified, print_, errors in results:
                    session.execute(
                        update(Asset)
                        .where(Asset.id == asset_id, Asset.modified_at == modified)
                        .values(
                            status=(
                                MetadataStatus.INVALID if errors else MetadataStatus.VALID
                            ).value,
                            validation_errors=[e.as_json() for e in errors],
                            validated=print_,
                        )
                    )


def _validate_version(archive: Archive, version_id: int) -> MetadataStatus | None:
    with archive.db.session() as session:
        version = session.get(Version, version_id)
        if version is None:
            return None
        dandiset = session.get(Dandiset, version.dandiset_id)
        assert dandiset is not None
        metadata = served_metadata(dandiset, version)
        count, sized = version_contents(session, version)
        facts = version_facts(archive, session, dandiset, version)
        modified = version.modified_at
        print_ = version_fingerprint(metadata, dandiset.embargoed, count, sized)
    errors = check(
        validatable_dandiset(metadata, facts, asset_count=count, has_bytes=sized),
        "PublishedDandiset",
    )
    status = MetadataStatus.INVALID if errors else MetadataStatus.VALID
    with archive.db.write_session() as session:
        done = session.execute(
            update(Version)
            .where(Version.id == version_id, Version.modified_at == modified)
            .values(
                status=status.value,
                validation_errors=[e.as_json() for e in errors],
                validated=print_,
            )
        )
    if not getattr(done, "rowcount", 0):
        return MetadataStatus.PENDING  # changed meanwhile: its own job validates it
    return status


# -- reading the state, and what publishing needs ---------------------------------------------
def publishable(archive: Archive, session: Session, dandiset: Dandiset, draft: Version) -> None:
    """Refuse (DANDI's statuses) to publish a draft whose current state is not validated
    valid: 409 while pending (its validation is queued), 400 naming what to fix."""
    metadata_ok = _current_version_result(archive, session, dandiset, draft)
    stale: list[str] = []
    invalid: list[AssetError] = []
    for asset in session.scalars(select(Asset).where(Asset.version_id == draft.id)):
        print_ = asset_inputs(asset, dandiset.embargoed)[1]
        if asset.validated != print_ or asset.status not in (
            MetadataStatus.VALID,
            MetadataStatus.INVALID,
        ):
            stale.append(asset.path)
        elif asset.status == MetadataStatus.INVALID:
            invalid.extend(
                AssetError(str(e.get("field", "")), str(e.get("message", "")), asset.path)
                for e in (asset.validation_errors or [])
                if isinstance(e, dict)
            )
    version_errors = [
        MetadataError(str(e.get("field", "")), str(e.get("message", "")))
        for e in (draft.validation_errors or [])
        if isinstance(e, dict)
    ]
    if metadata_ok is None or stale:
        if archive.jobs is not None:  # no new session here: this one holds the write lock
            archive.jobs.enqueue(
                VALIDATE_JOB,
                {"version_id": draft.id},
                key=f"validate:{draft.id}",
                lane=JobLane.CONTENT,
            )
        what = "the dandiset's metadata" if metadata_ok is None else f"{len(stale)} asset(s)"
        raise Conflict(
            "Metadata validation is pending for this dandiset, please try again later "
            f"({what} not validated yet: wait until the draft's status (GET .../versions/"
            "draft/info/) is Valid, then publish)"
        )
    if not metadata_ok or invalid:
        parts = [f"{e.field or '(metadata)'}: {e.message}" for e in version_errors[:10]]
        parts += [f"{e.path}: {e.field or '(metadata)'}: {e.message}" for e in invalid[:10]]
        raise InvalidInput(
            "Dandiset metadata or asset metadata is not valid: fix "
            + "; ".join(parts)
            + " (all errors: GET .../versions/draft/info/, version_validation_errors and "
            "asset_validation_errors)"
        )


def _current_version_result(
    archive: Archive, session: Session, dandiset: Dandiset, draft: Version
) -> bool | None:
    """Whether the draft's metadata was validated valid in its current state (``None``:
    not validated in this state)."""
    count, sized = version_contents(session, draft)
    print_ = version_fingerprint(served_metadata(dandiset, draft), dandiset.embargoed, count, sized)
    if draft.validated != print_ or draft.status not in (
        MetadataStatus.VALID,
        MetadataStatus.INVALID,
    ):
        return None
    return draft.status == MetadataStatus.VALID
