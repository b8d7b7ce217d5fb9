"""Random histories of a Zarr (and a blob) on the in-memory store, for the property test of
``admin gc`` of noncurrent versions (tests/services/test_version_gc_histories.py).

A :class:`History` drives one dandiset with one Zarr asset and one blob asset through
uploads (written straight into S3 and the tree, as :func:`tests.helpers.seeded_zarr.seed_zarr`:
fast), deletions, manifests, publications, trash and its restore, rollbacks (``POST
/api/zarr/{id}/restore/``), time passing (the stores' and the database's clock) and gc runs (:mod:`zarrchive.services.zarr_engine.version_gc`, applied), and keeps the model: the
files of every state the Zarr had, by checksum.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta, tzinfo

import httpx
from sqlalchemy import select

from tests.helpers.assets import add_blob_asset, add_zarr_asset, assets_url, ok
from tests.helpers.seeded_zarr import seed_zarr
from zarrchive.db.models import Blob, ZarrManifest
from zarrchive.manifest import manifest_key, read_manifest
from zarrchive.services.runtime import Archive
from zarrchive.services.zarr_engine.manifests import current_entries, write_manifest
from zarrchive.services.zarr_engine.tree_updater import apply_changes
from zarrchive.services.zarr_engine.version_gc import content_versions, zarr_versions
from zarrchive.services.zarr_engine.zarrs import get_zarr
from zarrchive.storage.keys import zarr_object_key
from zarrchive.storage.memory import MemoryObjectStore
from zarrchive.version_retention import Freed

#: The retention of the histories' gc runs.
RETENTION = timedelta(days=30)


class OffsetClock:
    """Real time plus an offset the history advances: the stores' clock, and the database's
    (:meth:`shifted_datetime` stands for ``datetime`` in :mod:`zarrchive.db.models`, whose
    ``utcnow`` dates every row)."""

    def __init__(self) -> None:
        self.offset = timedelta(0)

    def __call__(self) -> datetime:
        return datetime.now(UTC) + self.offset

    def shifted_datetime(self) -> type[datetime]:
        clock = self

        class Shifted(datetime):
            @classmethod
            def now(cls, tz: tzinfo | None = None) -> datetime:  # type: ignore[override]
                return datetime.now(tz) + clock.offset

        return Shifted


def delete_seeded(archive: Archive, zarr_id: str, paths: list[str]) -> str:
    """Delete *paths* of the Zarr (delete markers and tree, one update); its new checksum."""
    store = archive.store
    for path in paths:
        store.delete(zarr_object_key(zarr_id, path))
    with archive.db.write_session() as session:
        zarr = get_zarr(session, None, zarr_id, lock=True, check_read=False)
        state = apply_changes(store, zarr_id, dict.fromkeys(paths))
        zarr.checksum, zarr.file_count, zarr.size = state.checksum, state.file_count, state.size
        return state.checksum


@dataclass
class History:
    api: httpx.Client
    archive: Archive
    clock: OffsetClock
    dandiset: str
    zarr_id: str
    asset_id: str
    blob_key: str
    blob: bytes
    files: dict[str, bytes] = field(default_factory=dict)
    #: checksum -> files of every state the Zarr had
    states: dict[str, dict[str, bytes]] = field(default_factory=dict)
    #: checksum -> files of every published state
    published: dict[str, dict[str, bytes]] = field(default_factory=dict)
    trashed: bool = False
    #: manifests a gc run did not keep (their versions may be gone)
    lost: set[str] = field(default_factory=set)

    @classmethod
    def dandiset_with_blob(cls, api: httpx.Client, archive: Archive) -> tuple[str, str, bytes]:
        """A dandiset with a blob asset, shared by histories: ``(identifier, blob key, blob)``."""
        dandiset = ok(api.post("/api/dandisets/", json={"name": "histories"}))["identifier"]
        blob = b"the histories' blob"
        add_blob_asset(api, dandiset, blob, "blob.bin")
        with archive.db.session() as session:
            md5 = hashlib.md5(blob).hexdigest()
            blob_key = session.scalars(select(Blob.key).where(Blob.md5 == md5)).one()
        return dandiset, blob_key, blob

    @classmethod
    def start(
        cls,
        api: httpx.Client,
        archive: Archive,
        clock: OffsetClock,
        shared: tuple[str, str, bytes],
        n: int,
    ) -> History:
        """A new Zarr asset ``h{n}.zarr`` in the *shared* dandiset."""
        dandiset, blob_key, blob = shared
        body = {"name": f"h{n}.zarr", "dandiset": dandiset}
        zarr_id = ok(api.post("/api/zarr/", json=body))["zarr_id"]
        asset_id = add_zarr_asset(api, dandiset, zarr_id, f"h{n}.zarr")["asset_id"]
        history = cls(api, archive, clock, dandiset, zarr_id, asset_id, blob_key, blob)
        history.record()
        return history

    def end(self) -> None:
        """The Zarr's asset leaves the draft (the next histories' publications skip it)."""
        self.trash()

    # -- the model -------------------------------------------------------------------------
    @property
    def checksum(self) -> str:
        return str(ok(self.api.get(f"/api/zarr/{self.zarr_id}/"))["checksum"])

    def record(self) -> None:
        assert self.states.setdefault(self.checksum, dict(self.files)) == self.files

    # -- steps -------------------------------------------------------------------------------
    def write(self, path: str, body: bytes) -> None:
        if self.trashed:  # (the archive refuses to change a trashed Zarr)
            return
        seed_zarr(self.archive, self.zarr_id, {path: body})
        self.files[path] = body
        self.record()

    def delete(self, path: str) -> None:
        if path in self.files and not self.trashed:
            delete_seeded(self.archive, self.zarr_id, [path])
            del self.files[path]
            self.record()

    def manifest(self) -> None:
        write_manifest(self.archive, self.zarr_id)
        self.record()

    def publish(self) -> None:
        if self.trashed or not self.files:  # (a Zarr asset without files is refused)
            return
        url = f"/api/dandisets/{self.dandiset}/versions/draft/publish/"
        ok(self.api.post(url))
        self.published[self.checksum] = dict(self.files)
        self.record()

    def trash(self) -> None:
        if not self.trashed:
            ok(self.api.delete(f"{assets_url(self.dandiset)}{self.asset_id}/"), 204)
            self.trashed = True

    def untrash(self) -> None:
        if self.trashed:
            ok(self.api.post(f"/api/dandisets/{self.dandiset}/trash/{self.asset_id}/restore/"))
            self.trashed = False

    def rewrite_blob(self) -> None:
        """A noncurrent version of the blob's key (the same content written again)."""
        self.archive.store.put(self.blob_key, self.blob)

    def wait(self, days: int) -> None:
        self.clock.offset += timedelta(days=days)

    def gc(self) -> Freed:
        """A gc run (applied), then :meth:`check` of what it had to keep; what it freed."""
        now = self.clock()
        report = zarr_versions(self.archive, self.zarr_id, retention=RETENTION, apply=True, now=now)
        freed = report.freed
        for content in content_versions(self.archive, retention=RETENTION, apply=True, now=now):
            freed += content.freed
        assert report.skipped is None, report.skipped
        # what the issue promises, from the model: the published states, the current one,
        # those of manifests younger than the retention, all while the Zarr is in the trash
        manifests = self.manifests()
        promised = self.kept_now(manifests, now)
        assert set(report.kept) == promised
        self.lost |= set(manifests) - promised
        self.check(promised - self.lost)
        return freed

    def manifests(self) -> dict[str, datetime]:
        """``checksum -> created_at`` of the Zarr's manifests."""
        with self.archive.db.session() as session:
            rows = session.execute(
                select(ZarrManifest.checksum, ZarrManifest.created_at).where(
                    ZarrManifest.zarr_id == self.zarr_id
                )
            )
            return {c: t for c, t in rows}

    def kept_now(self, manifests: dict[str, datetime], now: datetime) -> set[str]:
        """The manifests gc would keep at *now*: the published states, the current one, those
        younger than the retention, all while the Zarr is in the trash."""
        return {
            c
            for c, made in manifests.items()
            if c in self.published or c == self.checksum or made > now - RETENTION or self.trashed
        }

    def restorable(self) -> list[str]:
        """The checksums the Zarr can be rolled back to: a manifest every gc since it was
        written kept, and that gc would keep now (a restore follows gc's rule whether or not
        a gc has run since: a state older than the retention is refused)."""
        manifests = self.manifests()
        return sorted(self.kept_now(manifests, self.clock()) - self.lost)

    def rollback(self, pick: int) -> None:
        """Restore the Zarr to one of its restorable states."""
        targets = self.restorable()
        if not targets or self.trashed:
            return
        target = targets[pick % len(targets)]
        response = self.api.post(f"/api/zarr/{self.zarr_id}/restore/", json={"checksum": target})
        assert response.status_code == 200, response.text
        assert response.json()["applied"], response.text
        self.files = dict(self.states[target])
        assert self.checksum == target
        self.record()

    # -- what must read back ---------------------------------------------------------------
    def read_manifest_state(self, checksum: str) -> dict[str, bytes]:
        """The files of a state read through its manifest: each at the version it names."""
        store = self.archive.store
        raw = b"".join(store.iter_content(manifest_key(self.zarr_id, checksum)))
        return {
            e.path: b"".join(
                store.iter_content(zarr_object_key(self.zarr_id, e.path), e.version_id)
            )
            for e in read_manifest(raw).entries
        }

    def check(self, kept: set[str] | None = None) -> None:
        """Every published state, every restorable state (and the *kept* ones of a gc run),
        the current state and the blob read back byte for byte."""
        for checksum, files in self.published.items():
            assert self.read_manifest_state(checksum) == files, f"published {checksum}"
        for checksum in (kept or set()) | set(self.restorable()):
            assert self.read_manifest_state(checksum) == self.states[checksum], checksum
        store = self.archive.store
        current = {
            e.path: store.get(zarr_object_key(self.zarr_id, e.path)) or b""
            for e in current_entries(store, self.zarr_id)
        }
        assert current == self.files
        assert store.get(self.blob_key) == self.blob


def run_stores_on(archive: Archive, clock: OffsetClock) -> None:
    """The in-memory stores of *archive* date their versions (and expire their URLs) by
    *clock*."""
    stores: tuple[object, object] = (archive.store, archive.embargo_store)  # typed as S3's
    for store in stores:
        assert isinstance(store, MemoryObjectStore), store
        store.clock = clock
