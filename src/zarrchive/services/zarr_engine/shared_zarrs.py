"""Shared Zarrs: an asset of dandiset B reads a Zarr of dandiset A, in one published state.

A Zarr is too big to copy, and one Zarr may belong in several dandisets (dandi-archive
#1792).  An asset of B may name A's Zarr (``POST .../assets/`` with ``zarr_id``, optionally
``zarr_checksum``) when the caller may read it, and then reads exactly the state it took,
for ever:

- ``freeze``: A's Zarr is frozen (published in ``freeze`` mode): its live state *is* the
  published one and never changes, so B reads it live (every route of the Zarr, dandi-cli).
- ``snapshot``: a published snapshot of A's Zarr (a checksum that one of A's published
  versions pins, :mod:`zarrchive.services.zarr_engine.snapshots`): B reads it through the snapshot's
  manifest (every file at its pinned S3 version), whatever A's draft does to the Zarr.  B's
  asset names the state's read-only **pinned view** as its Zarr (DANDI's ``zarr``: see
  :mod:`zarrchive.services.zarr_engine.pinned_views`), so what reads a Zarr by id alone
  (dandi-cli, ``zarrchive download B/PATH``) reads that state, never A's live Zarr.

Nothing is copied: B's asset row names A's Zarr (``assets.zarr_id``) and a row of
``shared_zarr_assets`` (keyed by the asset's id) records the state.  The refusals change
nothing: a Zarr the caller can't read is 404 (401 anonymous), as DANDI answers; an
embargoed Zarr is 403 for a caller who does not own A and 409 when B is public; a Zarr
with no published state, or a checksum that no published version pins, is 409.

What keeps a shared state alive:

- the Zarr row: B's asset (``assets.zarr_id``, ``trashed_assets.zarr_id`` once deleted) is
  a reference gc already counts (:func:`zarrchive.services.zarr_engine.snapshots.unreferenced_zarrs`);
- its objects: a shared state is always one that a published version of A pins
  (checked here), and gc keeps every object version a pin's manifest names; a gc that may
  one day drop a version's pin must keep :func:`held_checksums` too.

Deleting A's asset (it goes to A's trash) or files of A's draft Zarr changes neither: the
published pin and its manifest stay.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import delete, exists, or_, select
from sqlalchemy.orm import Session

from zarrchive.checksum.digest import ZarrDigest
from zarrchive.db.models import (
    Asset,
    Dandiset,
    EmbargoStatus,
    SharedZarrAsset,
    SharedZarrMode,
    TrashedAsset,
    Version,
    Zarr,
    ZarrPin,
)
from zarrchive.errors import Conflict, InvalidInput, PermissionDenied
from zarrchive.services.identity.auth import Caller, is_owner

#: DANDI's Zarr checksum digest in an asset's metadata.
_ZARR_DIGEST = "dandi:dandi-zarr-checksum"


@dataclass(frozen=True)
class SharedState:
    """The state of another dandiset's Zarr that an asset reads."""

    zarr_id: str
    #: the identifier of the Zarr's own dandiset (A)
    dandiset: str
    mode: SharedZarrMode
    checksum: str

    @property
    def file_count(self) -> int:
        return ZarrDigest.totals(self.checksum)[0]

    @property
    def size(self) -> int:
        return ZarrDigest.totals(self.checksum)[1]

    @property
    def snapshot(self) -> str | None:
        """The checksum to read through its snapshot (``None``: the Zarr is read live)."""
        return self.checksum if self.mode is SharedZarrMode.SNAPSHOT else None


def is_embargoed(dandiset: Dandiset) -> bool:
    return dandiset.embargoed or dandiset.embargo_status != EmbargoStatus.OPEN


def _newest_pin(session: Session, zarr_id: str) -> str | None:
    checksum: str | None = session.scalar(
        select(ZarrPin.checksum)
        .join(Version, Version.id == ZarrPin.version_id)
        .where(ZarrPin.zarr_id == zarr_id, Version.version != "draft")
        .order_by(Version.id.desc())
        .limit(1)
    )
    return checksum


def _is_pinned(session: Session, zarr_id: str, checksum: str, *, frozen: bool = False) -> bool:
    query = (
        select(ZarrPin.id)
        .join(Version, Version.id == ZarrPin.version_id)
        .where(ZarrPin.zarr_id == zarr_id, ZarrPin.checksum == checksum, Version.version != "draft")
    )
    if frozen:
        query = query.where(ZarrPin.frozen.is_(True))
    return session.scalar(query.limit(1)) is not None


def check_reference(
    session: Session, user: Caller | None, dandiset: Dandiset, zarr: Zarr, checksum: str | None
) -> tuple[SharedZarrMode, str]:
    """The state an asset of *dandiset* (B) takes of *zarr*, a Zarr of another dandiset
    that *user* may read (the caller checked): ``(mode, checksum)``; *checksum* ``None``:
    the Zarr's newest published state.  Raises, changing nothing:

    - :class:`PermissionDenied` (403): the Zarr is embargoed and *user* does not own its
      dandiset;
    - :class:`Conflict` (409): the Zarr is embargoed and *dandiset* is not; the Zarr has no
      published state; *checksum* is no published state of it.
    """
    source = zarr.dandiset
    if is_embargoed(source):
        if not is_owner(user, source):
            raise PermissionDenied(
                f"Zarr {zarr.id} belongs to the embargoed dandiset {source.identifier}: only "
                "its owners may use it in another dandiset"
            )
        if not is_embargoed(dandiset):
            raise Conflict(
                f"Zarr {zarr.id} belongs to the embargoed dandiset {source.identifier} and "
                f"dandiset {dandiset.identifier} is public: an embargoed Zarr is shared only "
                "with embargoed dandisets"
            )
    if checksum is None:
        if _is_pinned(session, zarr.id, zarr.checksum, frozen=True):
            return SharedZarrMode.FREEZE, zarr.checksum
        newest = _newest_pin(session, zarr.id)
        if newest is None:
            raise Conflict(
                f"Zarr {zarr.id} of dandiset {source.identifier} has no published state: a "
                "Zarr of another dandiset is shared as a published version holds it (publish "
                f"dandiset {source.identifier} first)"
            )
        return SharedZarrMode.SNAPSHOT, newest
    if len(checksum) > 80:
        raise InvalidInput("zarr_checksum is a Zarr checksum (at most 80 characters)")
    if checksum == zarr.checksum and _is_pinned(session, zarr.id, checksum, frozen=True):
        return SharedZarrMode.FREEZE, checksum
    if _is_pinned(session, zarr.id, checksum):
        return SharedZarrMode.SNAPSHOT, checksum
    raise Conflict(
        f"Zarr {zarr.id} of dandiset {source.identifier} has no published snapshot "
        f"{checksum!r}: a Zarr of another dandiset is shared only in a state a published "
        f"version holds (GET /api/zarr/{zarr.id}/snapshots/ lists them)"
    )


def record(
    session: Session,
    asset_id: str,
    dandiset: Dandiset,
    zarr: Zarr,
    mode: SharedZarrMode,
    checksum: str,
) -> None:
    """Record (or replace) the state the asset *asset_id* of *dandiset* reads."""
    forget(session, asset_id)
    session.add(
        SharedZarrAsset(
            asset_id=asset_id,
            dandiset_id=dandiset.id,
            zarr_id=zarr.id,
            mode=mode.value,
            checksum=checksum,
        )
    )
    session.flush()


def forget(session: Session, asset_id: str) -> None:
    """The asset no longer reads another dandiset's Zarr (its content was replaced)."""
    session.execute(delete(SharedZarrAsset).where(SharedZarrAsset.asset_id == asset_id))


def shared_state(asset: Asset) -> SharedState | None:
    """The state of another dandiset's Zarr that *asset* reads (its rows loaded), else
    ``None`` (a blob, or a Zarr of the asset's own dandiset).

    A published copy of a shared asset without a row of its own reads the checksum its
    metadata pinned at publication (the shared state: see :func:`carry_to_published`),
    through that snapshot."""
    zarr = asset.zarr
    if zarr is None:
        return None
    row = asset.shared
    if row is not None:
        return SharedState(
            zarr.id, zarr.dandiset.identifier, SharedZarrMode(row.mode), row.checksum
        )
    if asset.version.is_draft or zarr.dandiset_id == asset.version.dandiset_id:
        return None
    digest = (asset.metadata_ or {}).get("digest") or {}
    checksum = digest.get("dandi:dandi-zarr-checksum") if isinstance(digest, dict) else None
    if not isinstance(checksum, str):
        return None
    return SharedState(zarr.id, zarr.dandiset.identifier, SharedZarrMode.SNAPSHOT, checksum)


def carry_to_published(session: Session, copies: list[tuple[str, str]]) -> None:
    """For publication: each ``(draft asset id, published asset id)`` whose draft asset is
    shared gets the same state (publishing must pin that state, not the Zarr's live one)."""
    by_draft = dict(copies)
    if not by_draft:
        return
    rows = session.scalars(
        select(SharedZarrAsset).where(SharedZarrAsset.asset_id.in_(list(by_draft)))
    ).all()
    for row in rows:
        session.add(
            SharedZarrAsset(
                asset_id=by_draft[row.asset_id],
                dandiset_id=row.dandiset_id,
                zarr_id=row.zarr_id,
                mode=row.mode,
                checksum=row.checksum,
            )
        )
    session.flush()


def version_states(session: Session, version: Version) -> dict[str, SharedState]:
    """``asset id -> the shared state it reads`` for the assets of *version* whose Zarr
    belongs to another dandiset (their rows, or a published copy's pinned digest): what the
    version's totals and pages show of them, never the Zarr's live values."""
    rows = session.execute(
        select(Asset.id, Asset.metadata_, Zarr.id, Zarr.dandiset_id, SharedZarrAsset)
        .join(Zarr, Zarr.id == Asset.zarr_id)
        .outerjoin(SharedZarrAsset, SharedZarrAsset.asset_id == Asset.id)
        .where(Asset.version_id == version.id, Zarr.dandiset_id != version.dandiset_id)
    ).all()
    found: dict[str, SharedState] = {}
    for asset_id, metadata, zarr_id, dandiset_id, row in rows:
        if row is not None:
            mode, checksum = SharedZarrMode(row.mode), row.checksum
        else:  # a published copy from before its row was carried: its pinned digest
            digest = (metadata or {}).get("digest") or {}
            pinned = digest.get(_ZARR_DIGEST) if isinstance(digest, dict) else None
            if not isinstance(pinned, str):
                continue
            mode, checksum = SharedZarrMode.SNAPSHOT, pinned
        found[asset_id] = SharedState(zarr_id, f"{dandiset_id:06d}", mode, checksum)
    return found


def pin_states(session: Session, version_id: int, states: list[SharedState]) -> None:
    """For publication: the published version *version_id* pins each shared state it reads
    (the state's checksum, never the Zarr's live one).  Only a ``freeze`` state's pin is
    frozen (its Zarr is frozen already); a snapshot's Zarr stays its dandiset's to change."""
    for state in states:
        session.add(
            ZarrPin(
                zarr_id=state.zarr_id,
                version_id=version_id,
                checksum=state.checksum,
                frozen=state.mode is SharedZarrMode.FREEZE,
            )
        )


def held_checksums(session: Session, zarr_id: str) -> set[str]:
    """The states of *zarr_id* that assets of other dandisets read (live or in a trash): what
    a gc of the Zarr's object versions, manifests and pins must keep besides its own pins."""
    live = or_(
        exists().where(Asset.id == SharedZarrAsset.asset_id),
        exists().where(TrashedAsset.id == SharedZarrAsset.asset_id),
    )
    return set(
        session.scalars(
            select(SharedZarrAsset.checksum).where(SharedZarrAsset.zarr_id == zarr_id, live)
        )
    )
