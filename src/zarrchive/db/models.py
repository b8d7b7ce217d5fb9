"""SQLAlchemy models.

Only the root checksum (with file count and size) of a Zarr lives in the
database; every directory's node lives in S3 next to the Zarr.  An upload batch
or a deletion is a row of ``upload_batches``: at most one ``open`` per Zarr (a partial
unique index: the database, not luck, keeps a second one out) and the uploader's next batch
opened ahead of its completion (at most one, following the open one), plus any number of
verified ones queued to be applied in the order of their ``seq``.
"""

from __future__ import annotations

import uuid
from datetime import UTC, date, datetime
from enum import StrEnum
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    CheckConstraint,
    Date,
    DateTime,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    TypeDecorator,
    UniqueConstraint,
    false,
    text,
)
from sqlalchemy.engine import Dialect
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship

from zarrchive.checksum import EMPTY_CHECKSUM


def utcnow() -> datetime:
    return datetime.now(UTC)


class UTCDateTime(TypeDecorator[datetime]):
    """A timezone-aware timestamp on every database (SQLite stores none: it is UTC)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is not None and value.tzinfo is not None:
            value = value.astimezone(UTC)
        return value

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is not None and value.tzinfo is None:
            value = value.replace(tzinfo=UTC)
        return value


class Base(DeclarativeBase):
    pass


class BatchKind(StrEnum):
    """What a row of ``upload_batches`` is."""

    #: files PUT by the client to the batch's staging area
    UPLOAD = "upload"
    #: files being deleted
    DELETE = "delete"
    #: files copied back from the versions of the Zarr's own objects that an earlier
    #: manifest records (a rollback, :mod:`zarrchive.services.zarr_engine.zarr_restore`): no staging area
    RESTORE = "restore"


class BatchState(StrEnum):
    """Where a batch is in its life (see :mod:`zarrchive.services.zarr_engine.uploads`)."""

    #: the client PUTs its files
    OPEN = "open"
    #: verified (or a deletion, checked) and recorded with its ``seq``: waits to be applied
    QUEUED = "queued"
    #: claimed by an applier (``claimed_by`` until ``claimed_until``): its files are being
    #: copied into place and the tree updated; an expired claim is taken over
    APPLYING = "applying"


#: The states of a batch that is verified and waits for (or is in) its apply.
PENDING_STATES = (BatchState.QUEUED, BatchState.APPLYING)


class EmbargoStatus(StrEnum):
    """Where a dandiset is on the way from private to public."""

    EMBARGOED = "embargoed"
    #: its objects are being moved to the public bucket
    UNEMBARGOING = "unembargoing"
    OPEN = "open"


class MetadataStatus(StrEnum):
    """DANDI's validation status of a draft's metadata or of an asset's metadata (see
    :mod:`zarrchive.services.dandi.validation`)."""

    #: changed since last validated: a background job will validate it
    PENDING = "Pending"
    VALIDATING = "Validating"
    VALID = "Valid"
    INVALID = "Invalid"


class BlobValidation(StrEnum):
    """A background validation of a multipart blob upload (``None``: not asked yet)."""

    VALIDATING = "validating"
    VALID = "valid"
    FAILED = "failed"


class LindiState(StrEnum):
    """Where a blob's LINDI file is (see :mod:`zarrchive.services.dandi.lindi_files`)."""

    #: a background job will (re)write it
    PENDING = "pending"
    READY = "ready"
    #: the conversion failed for good: ``reason`` says why (too big or too deep, unsupported)
    FAILED = "failed"
    #: the blob is not HDF5: it has no LINDI file
    NOT_HDF5 = "not-hdf5"


class DoiState(StrEnum):
    """Where a DOI is at DataCite, as the archive last saw it (:mod:`zarrchive.services.dandi.dois`)."""

    #: not at DataCite yet (or not known to be): a background job will send it
    PENDING = "pending"
    DRAFT = "draft"
    #: hidden: it resolves, but is not in DataCite's search (a Findable DOI can't be deleted)
    REGISTERED = "registered"
    FINDABLE = "findable"
    #: a Draft DOI deleted at DataCite (its dandiset was deleted)
    DELETED = "deleted"


class DoiGoal(StrEnum):
    """What the archive wants a DOI to be at DataCite."""

    DRAFT = "draft"
    FINDABLE = "findable"
    #: its dandiset was deleted: a Draft DOI is deleted, a Findable one hidden
    GONE = "gone"


class AccountStatus(StrEnum):
    """DANDI's statuses of an account (see :mod:`zarrchive.services.identity.auth`): only an approved
    account changes anything, holds keys or sees embargoed data."""

    #: signed in, not yet asked for approval (DANDI's questionnaire not sent)
    INCOMPLETE = "INCOMPLETE"
    #: waits for an admin: reads what is public, changes nothing
    PENDING = "PENDING"
    APPROVED = "APPROVED"
    REJECTED = "REJECTED"


class TokenScope(StrEnum):
    """What an API key may do: ``read`` reads all its user may see, ``write`` also changes."""

    READ = "read"
    WRITE = "write"


def _one_of(column: str, values: type[StrEnum], *, nullable: bool = False) -> str:
    """SQL of a CHECK constraint: *column* holds one of the enum's values."""
    listed = ", ".join(f"'{v.value}'" for v in values)
    check = f"{column} IN ({listed})"
    return f"{check} OR {column} IS NULL" if nullable else check


class User(Base):
    __tablename__ = "users"
    # On SQLite, migration 0017 enforces this with triggers (as 0008 does for dandisets).
    __table_args__ = (CheckConstraint(_one_of("status", AccountStatus), name="ck_user_status"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    username: Mapped[str] = mapped_column(String(150), unique=True)
    is_admin: Mapped[bool] = mapped_column(Boolean, default=False)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    #: an :class:`AccountStatus`: a new account waits for approval (``admin create-user``
    #: makes approved ones); accounts older than migration 0017 are approved (its default)
    status: Mapped[str] = mapped_column(
        String(16),
        default=AccountStatus.PENDING.value,
        server_default=AccountStatus.APPROVED.value,
    )
    #: the person's name and e-mail, as an identity provider gave them (``None``: unknown)
    name: Mapped[str | None] = mapped_column(String(300), nullable=True)
    email: Mapped[str | None] = mapped_column(String(320), nullable=True)


class UserIdentity(Base):
    """An account's identity at an OpenID Connect provider: its (``issuer``, ``sub``), to
    which sign-ins are linked (never to an e-mail alone)."""

    __tablename__ = "user_identities"
    __table_args__ = (UniqueConstraint("issuer", "subject", name="uq_identity_issuer_subject"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    issuer: Mapped[str] = mapped_column(String(500))
    subject: Mapped[str] = mapped_column(String(255))
    #: the provider's ``email_verified`` claim at the last sign-in (``None``: not given)
    email_verified: Mapped[bool | None] = mapped_column(Boolean, nullable=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)

    user: Mapped[User] = relationship()


class ApiToken(Base):
    """An API key: only its hash is stored.  Revoking one sets ``revoked_at`` (the row stays,
    so that its holder is told it was revoked); a revoked or expired key authenticates
    nothing."""

    __tablename__ = "api_tokens"
    # On SQLite, migration 0017 enforces this with triggers.
    __table_args__ = (CheckConstraint(_one_of("scope", TokenScope), name="ck_api_token_scope"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    #: sha256 hex of the token; the token itself is shown once and never stored.
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    #: the user's name for the key (DANDI's ``GET``/``POST /api/auth/token/`` use "default")
    name: Mapped[str] = mapped_column(String(100), default="default", server_default="default")
    #: a :class:`TokenScope`
    scope: Mapped[str] = mapped_column(
        String(8), default=TokenScope.WRITE.value, server_default=TokenScope.WRITE.value
    )
    expires_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    #: when it last authenticated a request (updated at most once a minute)
    last_used_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    revoked_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)

    user: Mapped[User] = relationship()


class WebSession(Base):
    """A browser signed in to the web pages: its cookie holds a random session id, of which
    only the sha256 is stored (a copy of the database gives no live session).  Signing out,
    rotating the user's API token and deleting the user remove it; past ``expires_at`` it
    is worth nothing (and deleted at the user's next sign-in)."""

    __tablename__ = "web_sessions"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    #: sha256 hex of the session id.
    session_hash: Mapped[str] = mapped_column(String(64), unique=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    expires_at: Mapped[datetime] = mapped_column(UTCDateTime())

    user: Mapped[User] = relationship()


class Dandiset(Base):
    __tablename__ = "dandisets"
    # On SQLite, migration 0008 enforces this with triggers (see there why not a CHECK).
    __table_args__ = (
        CheckConstraint(
            _one_of("embargo_status", EmbargoStatus), name="ck_dandiset_embargo_status"
        ),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    name: Mapped[str] = mapped_column(String(300))
    embargoed: Mapped[bool] = mapped_column(Boolean, default=False)
    #: an :class:`EmbargoStatus`
    embargo_status: Mapped[str] = mapped_column(String(16), default=EmbargoStatus.OPEN.value)
    #: The day the archive unembargoes it by itself (DANDI's ``embargo_end_date``, shown as
    #: ``access[].embargoedUntil``); once public, the day it became so.  ``None``: no end.
    embargo_end_date: Mapped[date | None] = mapped_column(Date, nullable=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    #: In the trash since (``None``: not deleted): a deleted dandiset is seen only by
    #: :mod:`zarrchive.services.dandi.trash` until restored or purged; its draft's assets are rows
    #: of ``trashed_assets`` (``with_dandiset``) meanwhile.
    deleted_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    #: the username of who deleted it
    deleted_by: Mapped[str | None] = mapped_column(String(150), nullable=True)

    owners: Mapped[list[User]] = relationship(secondary="dandiset_owners", lazy="selectin")
    #: read everything of an embargoed dandiset, change nothing; loaded when first asked
    #: (only a non-owner's read of an embargoed dandiset asks)
    reviewers: Mapped[list[User]] = relationship(
        secondary="dandiset_reviewers", lazy="select", viewonly=True
    )

    @property
    def identifier(self) -> str:
        return f"{self.id:06d}"


class DandisetOwner(Base):
    __tablename__ = "dandiset_owners"

    dandiset_id: Mapped[int] = mapped_column(
        ForeignKey("dandisets.id", ondelete="CASCADE"), primary_key=True
    )
    user_id: Mapped[int] = mapped_column(
        ForeignKey("users.id", ondelete="CASCADE"), primary_key=True
    )


class DandisetReviewer(Base):
    """A reviewer of a dandiset (see :mod:`zarrchive.services.dandi.reviewers`)."""

    __tablename__ = "dandiset_reviewers"

    dandiset_id: Mapped[int] = mapped_column(
        ForeignKey("dandisets.id", ondelete="CASCADE"), primary_key=True
    )
    user_id: Mapped[int] = mapped_column(
        ForeignKey("users.id", ondelete="CASCADE"), primary_key=True
    )


class Zarr(Base):
    __tablename__ = "zarrs"
    __table_args__ = (UniqueConstraint("dandiset_id", "name", name="uq_zarr_name_per_dandiset"),)

    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    dandiset_id: Mapped[int] = mapped_column(ForeignKey("dandisets.id"), index=True)
    name: Mapped[str] = mapped_column(String(512))
    checksum: Mapped[str] = mapped_column(String(80), default=EMPTY_CHECKSUM)
    file_count: Mapped[int] = mapped_column(BigInteger, default=0)
    size: Mapped[int] = mapped_column(BigInteger, default=0)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    modified_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)

    dandiset: Mapped[Dandiset] = relationship(lazy="joined", innerjoin=True)


#: The rows of ``upload_batches`` that are a Zarr's open batch (at most one per Zarr: a
#: partial unique index); an open batch that ``follows`` another is that one's next batch.
OPEN_BATCH_WHERE = "state = 'open' AND follows IS NULL"


class UploadBatch(Base):
    """An upload batch (kind ``upload``) or a file deletion (kind ``delete``).

    ``state`` is ``open`` while the client uploads (to the batch's staging keys; at most one
    per Zarr), ``queued`` once verified (``seq`` gives the order in which the Zarr's batches
    are applied), ``applying`` while an applier that claimed it copies its files into place
    and updates the tree.  The row is deleted when the batch is applied (or cancelled).
    See :mod:`zarrchive.services.zarr_engine.uploads`.
    """

    __tablename__ = "upload_batches"
    #: SQLite must never reuse an id (without AUTOINCREMENT it reuses the largest freed one).
    __table_args__ = (
        CheckConstraint(_one_of("kind", BatchKind), name="ck_batch_kind"),
        CheckConstraint(_one_of("state", BatchState), name="ck_batch_state"),
        UniqueConstraint("zarr_id", "seq", name="uq_batch_seq"),
        Index(
            "uq_one_open_batch",
            "zarr_id",
            unique=True,
            sqlite_where=text(OPEN_BATCH_WHERE),
            postgresql_where=text(OPEN_BATCH_WHERE),
        ),
        Index(
            "uq_one_next_batch",
            "follows",
            unique=True,
            sqlite_where=text("follows IS NOT NULL"),
            postgresql_where=text("follows IS NOT NULL"),
        ),
        {"sqlite_autoincrement": True},
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    #: The batch's identity, unique forever: it names the batch's staging prefix in S3, and
    #: ``complete`` applies only the batch (uid) it verified.
    uid: Mapped[str] = mapped_column(String(32), unique=True, default=lambda: uuid.uuid4().hex)
    zarr_id: Mapped[str] = mapped_column(ForeignKey("zarrs.id", ondelete="CASCADE"), index=True)
    kind: Mapped[str] = mapped_column(String(16), default=BatchKind.UPLOAD)
    state: Mapped[str] = mapped_column(String(16), default=BatchState.OPEN)
    #: The apply order among the Zarr's batches (given when verified; ``None`` while open).
    seq: Mapped[int | None] = mapped_column(Integer, nullable=True)
    #: The applier that claimed the batch, and until when (it renews the claim as it goes).
    claimed_by: Mapped[str | None] = mapped_column(String(32), nullable=True)
    claimed_until: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    created_by: Mapped[int | None] = mapped_column(ForeignKey("users.id"), nullable=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    #: Set while the batch is the uploader's *next* batch, opened ahead (``open`` with
    #: ``after``): the id of the Zarr's open batch it follows.  Its rows, clash check and
    #: URLs are ready and its files may be PUT, but it is not the open batch: ``complete``
    #: and ``cancel`` act on the batch it follows, and completing that one makes this one the
    #: open batch (``follows`` cleared, in the same transaction); cancelling it cancels both.
    follows: Mapped[int | None] = mapped_column(Integer, nullable=True)
    #: Queued by a ``complete`` that left the check of the staged objects (present, with
    #: their md5 and size) to the applier, which lists them before any copy and refuses the
    #: batch (:class:`RefusedUpload`) if one is not: nothing of it is visible before that.
    verify_on_apply: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())

    files: Mapped[list[UploadBatchFile]] = relationship(
        cascade="all, delete-orphan", lazy="selectin", order_by="UploadBatchFile.path"
    )


class UploadBatchFile(Base):
    __tablename__ = "upload_batch_files"
    #: ``open``'s file/directory clash check looks queued files up by path
    __table_args__ = (Index("ix_upload_batch_files_path", "path"),)

    batch_id: Mapped[int] = mapped_column(
        ForeignKey("upload_batches.id", ondelete="CASCADE"), primary_key=True
    )
    path: Mapped[str] = mapped_column(Text, primary_key=True)
    etag: Mapped[str | None] = mapped_column(String(32), nullable=True)
    #: Filled in when the batch is verified.
    size: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    #: The S3 version id of the verified staging object (what ``complete`` copies into place).
    staged_version: Mapped[str | None] = mapped_column(String(200), nullable=True)
    #: Set for a file uploaded as an S3 multipart upload (declared above the archive's
    #: multipart threshold): the size of its parts (the last may be shorter).  Its ``size`` is
    #: then the declared one from the start, and its md5 is verified when it is applied.
    part_size: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    #: The S3 multipart upload of its staging key, while its parts are being sent.
    multipart_upload_id: Mapped[str | None] = mapped_column(String(1024), nullable=True)


class UploadBatchDirectory(Base):
    """A directory above the files of a verified upload batch not applied yet (the root
    excluded), written when the batch is queued and deleted with it: ``open``'s
    file/directory clash check looks a new batch's paths up here by equality, at a cost
    that follows the new batch, not the backlog."""

    __tablename__ = "upload_batch_directories"

    path: Mapped[str] = mapped_column(Text, primary_key=True)
    batch_id: Mapped[int] = mapped_column(
        ForeignKey("upload_batches.id", ondelete="CASCADE"), primary_key=True, index=True
    )


class RefusedUpload(Base):
    """A file of an upload batch refused when its batch was applied: its content's md5 (read
    by the archive, for multipart uploads) is not the md5 declared, or (a batch queued with
    ``verify_on_apply``) its staged object is missing (``found_md5`` "missing") or differs.  The whole batch was
    dropped (nothing of it became visible); the row says why, to the uploader."""

    __tablename__ = "refused_uploads"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    zarr_id: Mapped[str] = mapped_column(ForeignKey("zarrs.id", ondelete="CASCADE"), index=True)
    batch_uid: Mapped[str] = mapped_column(String(32))
    path: Mapped[str] = mapped_column(Text)
    expected_md5: Mapped[str] = mapped_column(String(32))
    found_md5: Mapped[str] = mapped_column(String(32))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)


class ZarrManifest(Base):
    """A manifest file written for one checksum of a Zarr."""

    __tablename__ = "zarr_manifests"
    __table_args__ = (UniqueConstraint("zarr_id", "checksum", name="uq_manifest_per_checksum"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    zarr_id: Mapped[str] = mapped_column(ForeignKey("zarrs.id", ondelete="CASCADE"), index=True)
    #: The checksum the archive held (the file is named by it).
    checksum: Mapped[str] = mapped_column(String(80))
    #: The tree hash of the S3 listing; differs from ``checksum`` on a mismatch.
    listing_checksum: Mapped[str] = mapped_column(String(80))
    entries: Mapped[int] = mapped_column(BigInteger)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)

    @property
    def mismatch(self) -> bool:
        return self.checksum != self.listing_checksum


class Version(Base):
    """A dandiset's ``draft`` or a published version ``0.YYMMDD.NNNN``."""

    __tablename__ = "versions"
    __table_args__ = (UniqueConstraint("dandiset_id", "version", name="uq_version"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    dandiset_id: Mapped[int] = mapped_column(
        ForeignKey("dandisets.id", ondelete="CASCADE"), index=True
    )
    version: Mapped[str] = mapped_column(String(32))
    metadata_: Mapped[dict[str, Any]] = mapped_column("metadata", JSON, default=dict)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    modified_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    #: A draft's :class:`MetadataStatus` (published versions: ``Valid``, they were).
    status: Mapped[str] = mapped_column(String(16), default=MetadataStatus.PENDING.value)
    #: ``[{"field", "message"}]`` of the last validation.
    validation_errors: Mapped[list[dict[str, str]] | None] = mapped_column(
        JSON, nullable=True, default=list
    )
    #: The fingerprint of what the last validation saw (``None``: never validated).
    validated: Mapped[str | None] = mapped_column(String(64), nullable=True)

    @property
    def is_draft(self) -> bool:
        return self.version == "draft"


class Blob(Base):
    """A regular file's content, stored once per bucket under ``blobs/``: per (md5, size) for
    our own uploads, per ``dandi:dandi-etag`` for DANDI's (whose md5 is unknown)."""

    __tablename__ = "blobs"
    __table_args__ = (
        UniqueConstraint("md5", "size", "embargoed", name="uq_blob_content"),
        UniqueConstraint("etag", "embargoed", name="uq_blob_etag"),
    )

    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    md5: Mapped[str | None] = mapped_column(String(32), nullable=True)
    #: ``dandi:dandi-etag`` (None only for blobs of more than one part older than it).
    etag: Mapped[str | None] = mapped_column(String(40), nullable=True)
    size: Mapped[int] = mapped_column(BigInteger)
    key: Mapped[str] = mapped_column(String(200))
    #: True while it lives in the embargo bucket.
    embargoed: Mapped[bool] = mapped_column(Boolean, default=False)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    #: ``dandi:sha2-256``, computed by a background job streaming the object (``None``
    #: until then; see :mod:`zarrchive.services.dandi.validation`).
    sha256: Mapped[str | None] = mapped_column(String(64), nullable=True)
    #: The last time an uploader was given it (an upload of the same content) or an asset or
    #: trash item let go of it (``None``: since ``created_at``): ``admin gc`` removes an
    #: unreferenced blob only once both are older than its grace period (see
    #: :mod:`zarrchive.services.dandi.blob_gc`).
    touched_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)


class BlobUpload(Base):
    """An upload of a blob in progress (single PUT or S3 multipart)."""

    __tablename__ = "blob_uploads"
    __table_args__ = (
        CheckConstraint(
            _one_of("validation", BlobValidation, nullable=True), name="ck_blob_validation"
        ),
    )

    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    #: What the uploader announced: an md5 (our flow) or a dandi-etag (DANDI's flow).
    md5: Mapped[str | None] = mapped_column(String(32), nullable=True)
    etag: Mapped[str | None] = mapped_column(String(40), nullable=True)
    size: Mapped[int] = mapped_column(BigInteger)
    key: Mapped[str] = mapped_column(String(200))
    embargoed: Mapped[bool] = mapped_column(Boolean, default=False)
    #: S3's multipart upload id, when the blob is uploaded in parts.
    multipart_upload_id: Mapped[str | None] = mapped_column(String(400), nullable=True)
    part_size: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    #: ``None`` while uploading; ``validating`` while a background job hashes a multipart
    #: object; ``failed`` (with :attr:`validation_error`) when it did not match.
    validation: Mapped[str | None] = mapped_column(String(16), nullable=True)
    validation_error: Mapped[str | None] = mapped_column(Text, nullable=True)
    #: The blob a background validation recorded (``validation`` is then ``valid``).
    validated_blob_id: Mapped[str | None] = mapped_column(String(36), nullable=True, index=True)
    created_by: Mapped[int | None] = mapped_column(ForeignKey("users.id"), nullable=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)


class Asset(Base):
    """A file of a version: a blob or a Zarr, with metadata; a path is unique per version.

    Publishing copies the draft's asset rows into the new version (metadata only:
    they reference the same blobs and Zarrs; no data is copied).
    """

    __tablename__ = "assets"
    __table_args__ = (UniqueConstraint("version_id", "path", name="uq_asset_path"),)

    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    version_id: Mapped[int] = mapped_column(
        ForeignKey("versions.id", ondelete="CASCADE"), index=True
    )
    path: Mapped[str] = mapped_column(Text)
    metadata_: Mapped[dict[str, Any]] = mapped_column("metadata", JSON, default=dict)
    blob_id: Mapped[str | None] = mapped_column(ForeignKey("blobs.id"), nullable=True, index=True)
    zarr_id: Mapped[str | None] = mapped_column(ForeignKey("zarrs.id"), nullable=True, index=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    modified_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    #: The :class:`MetadataStatus` of the asset's metadata as it would be published, valid
    #: for the content whose fingerprint is ``validated``.
    status: Mapped[str] = mapped_column(String(16), default=MetadataStatus.PENDING.value)
    validation_errors: Mapped[list[dict[str, str]] | None] = mapped_column(
        JSON, nullable=True, default=list
    )
    validated: Mapped[str | None] = mapped_column(String(64), nullable=True)

    version: Mapped[Version] = relationship(lazy="joined", innerjoin=True)
    blob: Mapped[Blob | None] = relationship(lazy="joined")
    zarr: Mapped[Zarr | None] = relationship(lazy="joined")
    #: the pinned state of another dandiset's Zarr this asset reads (``None``: its own Zarr,
    #: or a blob)
    shared: Mapped[SharedZarrAsset | None] = relationship(
        primaryjoin="foreign(SharedZarrAsset.asset_id) == Asset.id",
        viewonly=True,
        uselist=False,
        lazy="joined",
    )


class TrashedAsset(Base):
    """A deleted asset of a draft, restorable for ``ZARRCHIVE_TRASH_DAYS``: the asset's row as
    it was (same id, path, metadata, blob or Zarr), moved out of ``assets`` so that no read
    path of assets sees it (see :mod:`zarrchive.services.dandi.trash`).  ``with_dandiset``: it went
    with its deleted dandiset and comes back with it."""

    __tablename__ = "trashed_assets"

    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    dandiset_id: Mapped[int] = mapped_column(
        ForeignKey("dandisets.id", ondelete="CASCADE"), index=True
    )
    path: Mapped[str] = mapped_column(Text)
    metadata_: Mapped[dict[str, Any]] = mapped_column("metadata", JSON, default=dict)
    blob_id: Mapped[str | None] = mapped_column(ForeignKey("blobs.id"), nullable=True, index=True)
    zarr_id: Mapped[str | None] = mapped_column(ForeignKey("zarrs.id"), nullable=True, index=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())
    modified_at: Mapped[datetime] = mapped_column(UTCDateTime())
    deleted_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    #: the username of who deleted it
    deleted_by: Mapped[str] = mapped_column(String(150))
    with_dandiset: Mapped[bool] = mapped_column(Boolean, default=False)

    blob: Mapped[Blob | None] = relationship(lazy="joined")
    zarr: Mapped[Zarr | None] = relationship(lazy="joined")


#: The namespace of the ids of pinned views (:func:`pinned_view_id`).
PINNED_VIEW_NAMESPACE = uuid.UUID("82076220-5e50-41f9-b0aa-0640996b42f2")


def pinned_view_id(zarr_id: str, checksum: str) -> str:
    """The id of the read-only view of the Zarr *zarr_id* at *checksum* (a pinned state): a
    UUID of version 5, the same for every pin of that state, never a Zarr's (version 4).
    See :mod:`zarrchive.services.zarr_engine.pinned_views`."""
    return str(uuid.uuid5(PINNED_VIEW_NAMESPACE, f"{zarr_id}:{checksum}"))


def _pin_view_id(context: Any) -> str:
    parameters = context.get_current_parameters()
    return pinned_view_id(parameters["zarr_id"], parameters["checksum"])


class ZarrPin(Base):
    """A published version's hold on one state of a Zarr: its checksum at publication.

    ``frozen`` pins (publishing in ``freeze`` mode, and every publication older than pins)
    make the Zarr immutable for good; ``snapshot`` pins leave the Zarr writable, and the
    version reads the pinned state through the manifest of ``checksum`` (which names each
    object's S3 version): nothing a pin needs is ever deleted.
    """

    __tablename__ = "zarr_pins"
    __table_args__ = (UniqueConstraint("zarr_id", "version_id", name="uq_pin_per_version"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    zarr_id: Mapped[str] = mapped_column(ForeignKey("zarrs.id", ondelete="CASCADE"), index=True)
    version_id: Mapped[int] = mapped_column(ForeignKey("versions.id", ondelete="CASCADE"))
    checksum: Mapped[str] = mapped_column(String(80))
    frozen: Mapped[bool] = mapped_column(Boolean, default=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    #: :func:`pinned_view_id` of (zarr_id, checksum): how ``/api/zarr/{view_id}/`` finds it
    view_id: Mapped[str | None] = mapped_column(String(36), index=True, default=_pin_view_id)


class SharedZarrMode(StrEnum):
    """How an asset of one dandiset reads a Zarr of another (see
    :mod:`zarrchive.services.zarr_engine.shared_zarrs`)."""

    #: the Zarr is frozen (published in ``freeze`` mode): its live state is the pinned one
    FREEZE = "freeze"
    #: a published snapshot of the Zarr, read through its manifest, whatever its draft does
    SNAPSHOT = "snapshot"


class SharedZarrAsset(Base):
    """An asset (``asset_id``, of dandiset ``dandiset_id``) whose Zarr belongs to another
    dandiset: the state it reads, pinned when it was made (``mode``, ``checksum``).

    Keyed by the asset's id without a foreign key: the id is the same in ``assets`` and in
    ``trashed_assets``, so a trashed and restored asset keeps its pin; a row whose asset is
    in neither (purged) holds nothing (:func:`zarrchive.services.zarr_engine.shared_zarrs.held_checksums`).
    """

    __tablename__ = "shared_zarr_assets"
    __table_args__ = (CheckConstraint(_one_of("mode", SharedZarrMode), name="ck_shared_zarr_mode"),)

    asset_id: Mapped[str] = mapped_column(String(36), primary_key=True)
    dandiset_id: Mapped[int] = mapped_column(
        ForeignKey("dandisets.id", ondelete="CASCADE"), index=True
    )
    zarr_id: Mapped[str] = mapped_column(ForeignKey("zarrs.id", ondelete="CASCADE"), index=True)
    #: a :class:`SharedZarrMode`
    mode: Mapped[str] = mapped_column(String(16))
    checksum: Mapped[str] = mapped_column(String(80))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)


class AuditRecord(Base):
    """One change of a dandiset, in DANDI's audit record shape: who (``username``, ``user_name``,
    ``user_email``, ``admin``), when (``timestamp``), what (``record_type`` and ``details``).
    Written in the transaction of the change it records: both are kept or neither."""

    __tablename__ = "audit_records"
    __table_args__ = (Index("ix_audit_dandiset_time", "dandiset_id", "timestamp", "id"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    timestamp: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    #: No foreign key: the trail of a deleted dandiset stays.
    dandiset_id: Mapped[int] = mapped_column(Integer)
    username: Mapped[str] = mapped_column(String(150))
    user_email: Mapped[str] = mapped_column(String(254), default="")
    user_fullname: Mapped[str] = mapped_column(String(300), default="")
    #: The change was made by an administrator who does not own the dandiset.
    admin: Mapped[bool] = mapped_column(Boolean, default=False)
    record_type: Mapped[str] = mapped_column(String(32))
    details: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)


class LindiFile(Base):
    """The LINDI file of one blob content (HDF5/NWB): its state and where its JSON lives.

    One row per blob (assets sharing a blob share it), deleted with its blob.  The JSON is
    in the blob's bucket at :func:`zarrchive.services.dandi.lindi_files.lindi_key`; ``embargoed``
    tells which bucket (and which chunk URLs) it was written for, so an unembargoed blob's
    file is known to be stale."""

    __tablename__ = "lindi_files"
    __table_args__ = (CheckConstraint(_one_of("state", LindiState), name="ck_lindi_state"),)

    blob_id: Mapped[str] = mapped_column(
        ForeignKey("blobs.id", ondelete="CASCADE"), primary_key=True
    )
    state: Mapped[str] = mapped_column(String(16), default=LindiState.PENDING.value)
    #: why it failed (``failed``), for people
    reason: Mapped[str | None] = mapped_column(Text, nullable=True)
    #: the bucket it was written to: the embargo bucket (chunk URLs through the API) or not
    embargoed: Mapped[bool] = mapped_column(Boolean, default=False)
    #: bytes of the written JSON
    size: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    #: conversions started since it was last asked for (a crash counts): bounded retries
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    modified_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)


class ZarrChangeSet(Base):
    """One applied batch's effect on a Zarr, as the archive recorded it when it applied it
    (or, with ``seq`` ``None`` and no objects, a *rest mark*: the Zarr was at rest at
    ``checksum_after`` when a manifest was listed from S3).

    Rows are in apply order (``id``; the apply holds the Zarr's lock).  The manifest of a
    new checksum is the manifest of the newest set with ``manifest_written`` merged with the
    changed objects of the sets after it, when their checksums chain (each set's
    ``checksum_before`` is the previous set's ``checksum_after``).  Sets older than the
    newest ``manifest_written`` one are pruned.  See :mod:`zarrchive.services.zarr_engine.manifest_changes`.
    """

    __tablename__ = "zarr_change_sets"
    __table_args__ = ({"sqlite_autoincrement": True},)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    zarr_id: Mapped[str] = mapped_column(ForeignKey("zarrs.id", ondelete="CASCADE"), index=True)
    #: The applied batch's ``seq`` (``None`` for a rest mark).
    seq: Mapped[int | None] = mapped_column(Integer, nullable=True)
    checksum_before: Mapped[str] = mapped_column(String(80))
    checksum_after: Mapped[str] = mapped_column(String(80))
    #: The bucket the objects were written to (an unembargo moves them: the chain breaks).
    embargoed: Mapped[bool] = mapped_column(Boolean)
    #: A manifest of ``checksum_after`` names exactly the state right after this set.
    manifest_written: Mapped[bool] = mapped_column(Boolean, default=False)
    applied_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)


class ZarrChangedObject(Base):
    """One path a change set wrote (the copy's answer: version, time, size, ETag) or
    deleted (``version_id`` ``None``)."""

    __tablename__ = "zarr_changed_objects"

    change_set_id: Mapped[int] = mapped_column(
        ForeignKey("zarr_change_sets.id", ondelete="CASCADE"), primary_key=True
    )
    path: Mapped[str] = mapped_column(Text, primary_key=True)
    version_id: Mapped[str | None] = mapped_column(String(200), nullable=True)
    last_modified: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    size: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    etag: Mapped[str | None] = mapped_column(String(64), nullable=True)


class Doi(Base):
    """A DOI of a dandiset (``version`` ``None``) or of a published version, and where it is
    at DataCite (:mod:`zarrchive.services.dandi.dois`).  Keyed by the DOI; the dandiset by its
    identifier (no foreign key: the record of a deleted dandiset's DOI stays)."""

    __tablename__ = "dois"
    __table_args__ = (
        CheckConstraint(_one_of("state", DoiState), name="ck_doi_state"),
        CheckConstraint(_one_of("goal", DoiGoal), name="ck_doi_goal"),
    )

    doi: Mapped[str] = mapped_column(String(300), primary_key=True)
    dandiset: Mapped[str] = mapped_column(String(32), index=True)
    version: Mapped[str | None] = mapped_column(String(32), nullable=True)
    state: Mapped[str] = mapped_column(String(16), default=DoiState.PENDING.value)
    goal: Mapped[str] = mapped_column(String(16), default=DoiGoal.DRAFT.value)
    #: DataCite's refusal (a 4xx: its message) or the last failure to reach it
    last_error: Mapped[str | None] = mapped_column(Text, nullable=True)
    #: the HTTP status of a refusal (4xx): an admin must act; ``None`` for an outage
    refused_status: Mapped[int | None] = mapped_column(Integer, nullable=True)
    #: calls that failed since the last success
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
