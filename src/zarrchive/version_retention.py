"""PURE: which noncurrent S3 object versions ``admin gc`` may delete (no I/O).

The bucket keeps every version.  A version stops being current when a newer version or a
delete marker of its key is written; from then on only two things can need it:

- a **manifest** that names it (``zarr-manifest/{zarr}/{checksum}.json`` records the S3
  version of every file of a Zarr's state): a published version's pinned state reads
  through its manifest, a rollback (``zarrchive restore --to CHECKSUM``) copies the versions
  its target's manifest names back into place;
- nothing else (a blob, a LINDI file, a ``.checksum`` node or a manifest file is read at its
  current version only).

A Zarr's manifest is **kept** (:func:`keep_reasons`) while a published version pins its
checksum, while it is the Zarr's current checksum (a publication may pin it next), while
it is younger than the retention, while its Zarr is in the trash (the state may be brought
back) and while a rollback targets it.  A noncurrent version may go
(:func:`removable_versions`) once it has been noncurrent for the retention
(:func:`expired_versions`: counted, as S3's ``NoncurrentDays``, from when its successor was
written) and no kept manifest names it.  A version a manifest younger than the retention
names is never expired anyway (it was current when the manifest was written), so what the
retention alone protects and what the kept manifests protect agree; the kept manifests are
read regardless, against clock skew and late manifests.

Listings stream key by key (bounded memory: one key's history at a time); the needed set is
matched against the candidates only, so kept manifests of 10^6 entries cost a pass each.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from itertools import pairwise

from zarrchive.storage.objects import ObjectVersion, oldest_first

#: ``(key, version id)`` of one object version.
VersionRef = tuple[str, str]


class KeepReason(StrEnum):
    """Why a manifest's versions stay."""

    PINNED = "pinned by a published version"
    CURRENT = "the Zarr's current state"
    RECENT = "younger than the retention"
    TRASHED = "its Zarr is in the trash"
    ROLLBACK = "a rollback targets it"


@dataclass(frozen=True, slots=True)
class ManifestRecord:
    """One manifest of a Zarr, as the database records it."""

    checksum: str
    created_at: datetime


@dataclass(frozen=True, slots=True)
class ZarrHolds:
    """What holds states of one Zarr (from the database)."""

    current_checksum: str
    #: ``checksum -> frozen`` of every published version's pin, and of every state an asset
    #: of another dandiset reads (a shared Zarr)
    pins: dict[str, bool]
    #: some trash item (an asset, or a deleted dandiset's asset) names the Zarr
    trashed: bool = False
    #: checksums a rollback in progress brings the Zarr back to
    rollback_targets: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class ManifestPlan:
    """The manifests whose versions stay (read them: :func:`removable_versions`), or why the
    Zarr must be left alone (``refusal``: nothing of it may be removed)."""

    kept: dict[str, frozenset[KeepReason]]
    refusal: str | None = None


@dataclass(frozen=True, slots=True)
class ExpiredVersion:
    """A noncurrent version (or delete marker) noncurrent since before the cutoff."""

    key: str
    version_id: str
    size: int
    is_delete_marker: bool
    #: when its successor was written
    noncurrent_since: datetime

    @property
    def ref(self) -> VersionRef:
        return (self.key, self.version_id)


def keep_reasons(
    manifest: ManifestRecord, holds: ZarrHolds, *, now: datetime, retention: timedelta
) -> frozenset[KeepReason]:
    """Why *manifest* is kept (empty: it is not, its versions may expire)."""
    reasons: set[KeepReason] = set()
    if manifest.checksum in holds.pins:
        reasons.add(KeepReason.PINNED)
    if manifest.checksum == holds.current_checksum:
        reasons.add(KeepReason.CURRENT)
    if manifest.created_at > now - retention:
        reasons.add(KeepReason.RECENT)
    if holds.trashed:
        reasons.add(KeepReason.TRASHED)
    if manifest.checksum in holds.rollback_targets:
        reasons.add(KeepReason.ROLLBACK)
    return frozenset(reasons)


def plan_manifests(
    manifests: Iterable[ManifestRecord],
    holds: ZarrHolds,
    *,
    now: datetime,
    retention: timedelta,
) -> ManifestPlan:
    """The kept manifests of one Zarr.  Refused when a published version's non-frozen
    (snapshot) pin has no manifest: the versions that state needs are unknown.  (A frozen
    pin's Zarr never changes: its current versions are the pinned state.)"""
    kept: dict[str, frozenset[KeepReason]] = {}
    present: set[str] = set()
    for manifest in manifests:
        present.add(manifest.checksum)
        reasons = keep_reasons(manifest, holds, now=now, retention=retention)
        if reasons:
            kept[manifest.checksum] = reasons
    missing = sorted(c for c, frozen in holds.pins.items() if not frozen and c not in present)
    if missing:
        return ManifestPlan({}, f"the pinned snapshot {missing[0]} has no manifest")
    return ManifestPlan(kept)


def _histories(listing: Iterable[ObjectVersion]) -> Iterator[list[ObjectVersion]]:
    """The listing (by key, as S3 lists it) cut into one list per key."""
    history: list[ObjectVersion] = []
    for version in listing:
        if history and version.key != history[0].key:
            yield history
            history = []
        history.append(version)
    if history:
        yield history


def expired_versions(
    listing: Iterable[ObjectVersion],
    *,
    cutoff: datetime,
    keep_content_under_marker: bool = False,
) -> Iterator[ExpiredVersion]:
    """The noncurrent versions and delete markers of *listing* that became noncurrent (their
    successor was written) at or before *cutoff*.  The current entry of a key never
    expires.  With *keep_content_under_marker*, the newest version with content of a key
    whose current entry is a delete marker does not either (a blob's content is removed
    with its blob, never under it)."""
    for history in _histories(listing):
        ordered = oldest_first(history)
        newest = ordered[-1]
        spared: str | None = None
        if keep_content_under_marker and newest.is_delete_marker:
            with_content = [v for v in ordered if not v.is_delete_marker]
            if with_content:
                spared = with_content[-1].version_id
        for version, successor in pairwise(ordered):
            if version.is_latest or version.version_id == spared:
                continue
            if successor.last_modified <= cutoff:
                yield ExpiredVersion(
                    version.key,
                    version.version_id,
                    0 if version.is_delete_marker else version.size,
                    version.is_delete_marker,
                    successor.last_modified,
                )


def removable_versions(
    expired: Iterable[ExpiredVersion], needed: Iterable[Iterable[VersionRef]]
) -> list[ExpiredVersion]:
    """The *expired* versions that none of the *needed* streams (one per kept manifest:
    the ``(key, version id)`` it names) names, in listing order."""
    candidates = {v.ref: v for v in expired}
    for refs in needed:
        if not candidates:
            break
        for ref in refs:
            candidates.pop(ref, None)
    return list(candidates.values())


@dataclass(frozen=True, slots=True)
class Freed:
    """What a gc frees: how many versions and bytes."""

    count: int = 0
    bytes: int = 0

    def __add__(self, other: Freed) -> Freed:
        return Freed(self.count + other.count, self.bytes + other.bytes)


def freed(versions: Iterable[ExpiredVersion]) -> Freed:
    total = Freed()
    for version in versions:
        total += Freed(1, version.size)
    return total
