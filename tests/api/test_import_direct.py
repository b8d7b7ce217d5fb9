"""Server-side import, one copy per file (#39 item 1): ``POST .../upload/import/`` records the
sources in the batch's staging area and stages no file; the apply copies each source object
straight into place, only if it still has its listed ETag.  A source that changed between the
import request and the apply refuses the batch whole: the copies already made are undone,
nothing is recorded.  A crash in the apply leaves the batch to be applied again from its
sources.  And the apply reads the Zarr's row once per call, not per batch (#40).  (A second
bucket of the test SeaweedFS; one database: the subject is the copies.)"""

from __future__ import annotations

import os
import traceback
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import event

from tests.conftest import make_settings
from tests.helpers.api_uploads import info, oracle
from tests.helpers.jobs import HeldJobQueue
from tests.helpers.s3_zarr import PART, put_in_parts, source_s3_client
from tests.helpers.zarr_client import md5
from zarrchive.config import Settings
from zarrchive.errors import StorageError
from zarrchive.services.runtime import Archive
from zarrchive.services.zarr_engine.uploads import apply, import_copy
from zarrchive.services.zarr_engine.uploads.import_copy import SOURCES_DIR
from zarrchive.storage.keys import staging_prefix, zarr_object_key
from zarrchive.storage.seaweedfs import SeaweedFS

SOURCE = f"zdirect-{os.getpid()}-{uuid.uuid4().hex[:6]}"
FILES = {"zarr.json": b'{"zarr_format": 3}', "a/0": b"zero", "a/1": b"one", "a/2": b"two"}


@pytest.fixture
def database_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'zarrchive.sqlite3'}"


@pytest.fixture
def settings(seaweedfs: SeaweedFS, bucket: str, database_url: str, tmp_path: Path) -> Settings:
    """Imports from :data:`SOURCE`; big files (and copies in parts) by parts of 5 MiB."""
    return make_settings(
        seaweedfs,
        bucket,
        database_url,
        tmp_path,
        import_buckets=(SOURCE,),
        multipart_threshold=PART,
    )


@pytest.fixture(scope="module")
def source_s3(seaweedfs: SeaweedFS) -> Any:
    return source_s3_client(seaweedfs, SOURCE)


def _put_source(s3: Any, files: dict[str, bytes]) -> tuple[str, dict[str, str]]:
    """*files* under a new prefix of the source bucket: the prefix and each file's ETag."""
    prefix = f"z/{uuid.uuid4().hex[:8]}"
    etags = {}
    for path, body in files.items():
        etags[path] = s3.put_object(Bucket=SOURCE, Key=f"{prefix}/{path}", Body=body)["ETag"]
    return prefix, etags


def _open_and_import(
    api: httpx.Client,
    zarr_id: str,
    files: dict[str, bytes],
    prefix: str,
    etags: dict[str, str],
    md5s: dict[str, str] | None = None,
) -> str:
    """Open a batch of *files* (sizes up to 5 MiB declared, as the importer does; *md5s*
    overrides some md5s) and import them: the batch's uid."""
    md5s = md5s or {}
    opened = api.post(
        f"/api/zarr/{zarr_id}/upload/",
        json=[
            {"path": p, "etag": md5s.get(p, md5(b)), **({"size": len(b)} if len(b) <= PART else {})}
            for p, b in files.items()
        ],
    )
    assert opened.status_code == 200, opened.text
    uid = opened.headers["X-Zarrchive-Batch"]
    imported = api.post(
        f"/api/zarr/{zarr_id}/upload/import/",
        json={
            "batch": uid,
            "bucket": SOURCE,
            "prefix": prefix,
            "files": [{"path": p, "etag": etags[p]} for p in files],
        },
    )
    assert imported.status_code == 200, imported.text
    return uid


def _queue(api: httpx.Client, zarr_id: str) -> None:
    done = api.post(f"/api/zarr/{zarr_id}/upload/complete/", params={"verify": "apply"})
    assert done.status_code == 200, done.text


def _staged(archive: Archive, zarr_id: str, uid: str) -> list[str]:
    prefix = staging_prefix(zarr_id, uid)
    return sorted(v.key[len(prefix) :] for v in archive.store.iter_versions(prefix))


def _versions(archive: Archive, zarr_id: str) -> list[str]:
    prefix = zarr_object_key(zarr_id, "")
    return sorted(v.key[len(prefix) :] for v in archive.store.iter_versions(prefix))


def test_imported_files_are_copied_once_straight_into_place(
    api: httpx.Client, archive: Archive, zarr_id: str, source_s3: Any, held: HeldJobQueue
) -> None:
    prefix, etags = _put_source(source_s3, FILES)
    uid = _open_and_import(api, zarr_id, FILES, prefix, etags)
    # nothing staged but the record of the sources: no copy into staging
    staged = _staged(archive, zarr_id, uid)
    assert len(staged) == 1 and staged[0].startswith(SOURCES_DIR), staged
    _queue(api, zarr_id)
    assert held.run("apply:") == 1
    answer = info(api, zarr_id)
    assert answer["checksum"] == oracle(FILES) and answer["file_count"] == len(FILES)
    for path, body in FILES.items():
        assert archive.store.get(zarr_object_key(zarr_id, path)) == body
    # one version per file: one copy each
    assert _versions(archive, zarr_id) == sorted(FILES)
    assert _staged(archive, zarr_id, uid) == []  # dropped with the batch


def test_a_source_changed_before_the_apply_refuses_the_batch_whole(
    api: httpx.Client, archive: Archive, zarr_id: str, source_s3: Any, held: HeldJobQueue
) -> None:
    prefix, etags = _put_source(source_s3, FILES)
    uid = _open_and_import(api, zarr_id, FILES, prefix, etags)
    source_s3.put_object(Bucket=SOURCE, Key=f"{prefix}/a/2", Body=b"changed")
    _queue(api, zarr_id)
    held.run("apply:")
    refused = api.get(f"/api/zarr/{zarr_id}/upload/refused/", params={"batch": [uid]}).json()
    assert [(r["path"], r["found_md5"]) for r in refused] == [("a/2", "source changed")], refused
    answer = info(api, zarr_id)
    assert answer["file_count"] == 0 and answer["upload_state"] != "applying"
    # the other files' copies were undone: no version of any key is left
    assert _versions(archive, zarr_id) == []
    assert _staged(archive, zarr_id, uid) == []
    # listed again, the import goes through with the new content
    changed = {**FILES, "a/2": b"changed"}
    etags["a/2"] = source_s3.head_object(Bucket=SOURCE, Key=f"{prefix}/a/2")["ETag"]
    _open_and_import(api, zarr_id, changed, prefix, etags)
    _queue(api, zarr_id)
    held.run("apply:")
    assert info(api, zarr_id)["checksum"] == oracle(changed)


def test_a_crash_in_the_apply_is_applied_again_from_the_sources(
    api: httpx.Client,
    archive: Archive,
    zarr_id: str,
    source_s3: Any,
    held: HeldJobQueue,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    prefix, etags = _put_source(source_s3, FILES)
    uid = _open_and_import(api, zarr_id, FILES, prefix, etags)
    _queue(api, zarr_id)

    def crash(*args: Any, **kwargs: Any) -> Any:  # after every copy, before the commit
        raise StorageError("the applier died")

    monkeypatch.setattr(apply, "apply_changes", crash)
    with pytest.raises(StorageError):
        apply.apply_pending(archive, zarr_id)
    # the copies were made, nothing recorded; the batch is queued again, still unstaged
    assert info(api, zarr_id)["file_count"] == 0
    assert all(p.startswith(SOURCES_DIR) for p in _staged(archive, zarr_id, uid))
    monkeypatch.undo()
    assert apply.apply_pending(archive, zarr_id) == 1
    assert info(api, zarr_id)["checksum"] == oracle(FILES)
    assert held.run("apply:") >= 0


@pytest.fixture
def zarr_selects(archive: Archive) -> Iterator[list[str]]:
    """The SELECTs of the ``zarrs`` table sent while the fixture is live: for each, the
    functions of the archive that sent it (innermost last)."""
    seen: list[str] = []

    def count(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        if statement.lstrip().upper().startswith("SELECT") and "FROM zarrs" in statement:
            stack = traceback.extract_stack()
            seen.append(" > ".join(f.name for f in stack if "/zarrchive/" in f.filename))

    event.listen(archive.db.engine, "before_cursor_execute", count)
    try:
        yield seen
    finally:
        event.remove(archive.db.engine, "before_cursor_execute", count)


def test_the_apply_reads_the_zarrs_row_once_per_call(
    api: httpx.Client,
    archive: Archive,
    zarr_id: str,
    source_s3: Any,
    held: HeldJobQueue,
    zarr_selects: list[str],
) -> None:
    """Three batches applied by one call: the row read once by the call, then each batch's
    apply only locks it for its commit (it read it for the bucket too before), besides the
    claims (each batch's, and those of the call's end, while its staging drops finish)."""
    for n in range(3):
        files = {f"b/{n}": bytes([n]) * 10}
        prefix, etags = _put_source(source_s3, files)
        _open_and_import(api, zarr_id, files, prefix, etags)
        _queue(api, zarr_id)
    zarr_selects.clear()
    assert apply.apply_pending(archive, zarr_id) == 3
    by = [select.split(" > ")[-2:] for select in zarr_selects]
    assert by.count(["apply_pending", "get_zarr"]) == 1, zarr_selects
    assert by.count(["_apply_claimed", "get_zarr"]) == 3, zarr_selects
    assert all(fn in ("apply_pending", "_apply_claimed", "_claim_next") for fn, _get in by), by


def test_a_source_uploaded_in_parts_is_hashed_as_it_is_copied(
    api: httpx.Client, archive: Archive, zarr_id: str, source_s3: Any, held: HeldJobQueue
) -> None:
    """Its ETag is no md5: the apply copies it in parts (``UploadPartCopy``) while it hashes
    it; the checksum is the one of the same bytes uploaded from a local disk."""
    big = os.urandom(PART + 1000)
    files = {**FILES, "b/big": big}
    prefix, etags = _put_source(source_s3, FILES)
    put_in_parts(source_s3, SOURCE, f"{prefix}/b/big", big)
    etags["b/big"] = source_s3.head_object(Bucket=SOURCE, Key=f"{prefix}/b/big")["ETag"]
    assert etags["b/big"].strip('"').endswith("-2")
    uid = _open_and_import(api, zarr_id, files, prefix, etags)
    staged = _staged(archive, zarr_id, uid)
    assert len(staged) == 1 and staged[0].startswith(SOURCES_DIR), staged  # not read through
    _queue(api, zarr_id)
    held.run("apply:")
    assert info(api, zarr_id)["checksum"] == oracle(files)
    key = zarr_object_key(zarr_id, "b/big")
    assert archive.store.get(key) == big
    assert archive.store.recorded_md5(key) == md5(big)
    assert _versions(archive, zarr_id) == sorted(files)


def test_a_source_in_parts_whose_md5_is_not_the_batchs_refuses_it(
    api: httpx.Client, archive: Archive, zarr_id: str, source_s3: Any, held: HeldJobQueue
) -> None:
    big = os.urandom(PART + 1000)
    files = {**FILES, "b/big": big}
    prefix, etags = _put_source(source_s3, FILES)
    put_in_parts(source_s3, SOURCE, f"{prefix}/b/big", big)
    etags["b/big"] = source_s3.head_object(Bucket=SOURCE, Key=f"{prefix}/b/big")["ETag"]
    uid = _open_and_import(api, zarr_id, files, prefix, etags, md5s={"b/big": md5(b"other")})
    _queue(api, zarr_id)
    held.run("apply:")
    refused = api.get(f"/api/zarr/{zarr_id}/upload/refused/", params={"batch": [uid]}).json()
    assert [(r["path"], r["found_md5"]) for r in refused] == [("b/big", md5(big))], refused
    assert info(api, zarr_id)["file_count"] == 0
    assert _versions(archive, zarr_id) == []
    assert list(archive.store.iter_multipart_uploads(zarr_object_key(zarr_id, ""))) == []


def test_a_source_above_the_copy_limit_is_copied_in_parts(
    api: httpx.Client,
    archive: Archive,
    zarr_id: str,
    source_s3: Any,
    held: HeldJobQueue,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """S3 copies at most 5 GiB in one ``CopyObject``: above, in parts (the limit lowered to
    1 MiB here; parts of 5 MiB, the archive's multipart threshold)."""
    monkeypatch.setattr(import_copy, "COPY_OBJECT_LIMIT", 1024**2)
    big = os.urandom(2 * PART + 3)
    files = {**FILES, "b/big": big}
    prefix, etags = _put_source(source_s3, files)
    _open_and_import(api, zarr_id, files, prefix, etags)
    _queue(api, zarr_id)
    held.run("apply:")
    assert info(api, zarr_id)["checksum"] == oracle(files)
    key = zarr_object_key(zarr_id, "b/big")
    assert archive.store.get(key) == big
    head = archive.store.head(key)
    assert head is not None and head.etag.endswith("-3")  # copied in 3 parts
