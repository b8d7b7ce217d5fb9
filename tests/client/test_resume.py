"""Interrupted uploads, stale batches and expired URLs."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from sqlalchemy import select

from tests.conftest import LiveServer, make_settings
from tests.helpers.local_zarr import file_count, make_zarr, zarr_checksum_of
from tests.helpers.presigned import put_headers
from zarrchive.client import ApiClient, NullProgress, Uploader
from zarrchive.client.upload import BatchRecords
from zarrchive.db.models import UploadBatch
from zarrchive.services.runtime import Archive
from zarrchive.storage.keys import staging_zarr_prefix
from zarrchive.storage.seaweedfs import SeaweedFS


def test_killed_upload_resumes_exactly(
    tmp_path: Path,
    client: ApiClient,
    dandiset: str,
    client_env: dict[str, str],
    records: BatchRecords,
) -> None:
    local = tmp_path / "killed.zarr"
    make_zarr(local, seed=3, coarse=3)
    total = file_count(local)
    env = {**os.environ, **client_env}
    process = subprocess.Popen(
        [
            *(sys.executable, "-m", "zarrchive.cli", "upload", str(local)),
            *("--dandiset", dandiset, "--batch-files", "40", "--jobs", "2"),
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 120  # generous: the machine may be loaded (issue #41)
        zarr = None
        while time.monotonic() < deadline:
            assert process.poll() is None, process.stderr.read() if process.stderr else ""
            zarr = client.find_zarr(dandiset, "killed.zarr")
            if zarr is not None and zarr.file_count >= 80 and zarr.upload_in_progress:
                break
            time.sleep(0.01)
        else:
            raise AssertionError("the upload never got going")
        os.kill(process.pid, signal.SIGKILL)
    finally:
        process.wait(10)
    assert zarr is not None
    state = client.get_zarr(zarr.zarr_id)
    assert 0 < state.file_count < total
    was_open = state.upload_in_progress
    assert records.get(client.url, zarr.zarr_id) is not None or not was_open

    progress = NullProgress()
    result = Uploader(client, jobs=4, records=records, progress=progress).upload(
        local, dandiset=dandiset
    )
    assert result.zarr_id == zarr.zarr_id and not result.created
    if was_open:
        assert result.stale_batch in ("completed", "resumed", "cancelled")
        assert "interrupted earlier run" in progress.notes[0]
    after_stale = result.skipped
    assert after_stale >= state.file_count
    assert result.uploaded + result.skipped == total
    assert result.uploaded == total - after_stale
    assert result.ok and result.remote_checksum == zarr_checksum_of(local)
    final = client.get_zarr(zarr.zarr_id)
    assert (final.file_count, final.upload_in_progress) == (total, False)
    assert not client.upload_in_progress(zarr.zarr_id)
    assert records.get(client.url, zarr.zarr_id) is None


def test_foreign_open_batch_is_cancelled_with_a_message(
    tmp_path: Path, client: ApiClient, dandiset: str, records: BatchRecords
) -> None:
    local = tmp_path / "busy.zarr"
    local.mkdir()
    (local / "a").write_bytes(b"a")
    zarr = client.create_zarr("busy.zarr", dandiset)
    client.start_upload(zarr.zarr_id, [("other", "0" * 32)])
    progress = NullProgress()
    result = Uploader(client, jobs=2, records=records, progress=progress).upload(
        local, dandiset=dandiset
    )
    assert result.stale_batch == "cancelled"
    assert progress.notes == [
        "cancelled an upload batch that was already open on this Zarr (left by an interrupted "
        "run elsewhere or by another client; only one batch can be open)"
    ]
    assert result.ok and result.uploaded == 1
    assert client.get_file(zarr.zarr_id, "other") is None


@pytest.fixture
def short_lived_urls(
    tmp_path: Path,
    seaweedfs: SeaweedFS,
    bucket: str,
    database_url: str,
    archive: Archive,
    live_server: LiveServer,
    client: ApiClient,
) -> Iterator[Archive]:
    """The live server answers with an archive whose presigned URLs expire after 2 s (set
    after *client*, which installs *archive*)."""
    settings = make_settings(seaweedfs, bucket, database_url, tmp_path / "short", presign_expiry=2)
    short = Archive.from_settings(settings)
    live_server.app.state.archive = short
    try:
        yield short
    finally:
        live_server.app.state.archive = archive
        short.close()


def _random_files(local: Path, count: int) -> None:
    local.mkdir()
    for i in range(count):
        (local / f"{i:02d}").write_bytes(os.urandom(1000 + i))


def _expiring_at(n: int) -> tuple[list[int], Callable[[int], None]]:
    """An ``on_batch_open`` hook that records each batch's size and, at the *n*-th batch
    opened, waits until its URLs (2 s) have expired; and its record."""
    opened: list[int] = []

    def hook(files: int) -> None:
        opened.append(files)
        if len(opened) == n:
            time.sleep(3.5)

    return opened, hook


def test_expired_urls_are_reminted(
    tmp_path: Path,
    short_lived_urls: Archive,
    client: ApiClient,
    dandiset: str,
    records: BatchRecords,
) -> None:
    local = tmp_path / "slow.zarr"
    _random_files(local, 24)
    opened, slow_start = _expiring_at(1)  # the first batch's URLs expire before any PUT
    progress = NullProgress()
    uploader = Uploader(
        client, jobs=4, records=records, progress=progress, on_batch_open=slow_start
    )
    result = uploader.upload(local, dandiset=dandiset)
    assert opened[:2] == [24, 12]
    assert result.reopened >= 1
    assert progress.notes[0] == (
        "S3 refused expired upload URLs: cancelled the batch and re-requesting URLs in "
        "batches of 12 files"
    )
    assert result.uploaded == 24 and result.batches == len(opened) - result.reopened
    assert result.ok and result.remote_checksum == zarr_checksum_of(local)
    assert not client.upload_in_progress(result.zarr_id or "")


def test_expired_urls_of_a_batch_opened_ahead_cancel_both_and_resend(
    tmp_path: Path,
    short_lived_urls: Archive,
    client: ApiClient,
    dandiset: str,
    records: BatchRecords,
) -> None:
    # Batches of 20: the second is opened ahead while the first is sent, and its URLs
    # expire before it is sent.  When it is refused, the third (opened ahead of it) is
    # cancelled with it; both are sent again in halves, and nothing is lost or left open.
    local = tmp_path / "ahead.zarr"
    _random_files(local, 60)
    opened, slow_second = _expiring_at(2)  # the second's URLs expire before its PUTs
    uploader = Uploader(client, jobs=4, batch_files=20, records=records, on_batch_open=slow_second)
    result = uploader.upload(local, dandiset=dandiset)
    assert opened[:4] == [20, 20, 20, 10]  # the 2nd and the 3rd again, in halves
    assert result.reopened == 1 and sum(opened) == 60 + 40
    assert result.uploaded == 60 and result.batches == len(opened) - 2
    assert result.ok and result.remote_checksum == zarr_checksum_of(local)
    zarr_id = result.zarr_id or ""
    assert not client.upload_in_progress(zarr_id)
    assert not list(short_lived_urls.store.iter_objects(staging_zarr_prefix(zarr_id)))


class _Interrupted(Exception):
    """Stands for the process being killed."""


def test_a_run_interrupted_after_opening_a_batch_ahead_is_finished_by_the_next(
    tmp_path: Path, client: ApiClient, dandiset: str, records: BatchRecords, archive: Archive
) -> None:
    # The run stops just after its second batch was opened ahead of the first (whose files
    # are being sent): two batches are left, the first open, the second following it.  The
    # next run completes or takes up the first and takes up or replaces the second; the Zarr
    # ends equal to the directory, nothing open or staged.
    local = tmp_path / "ahead.zarr"
    _random_files(local, 60)
    opened: list[int] = []

    def stop_at_second(files: int) -> None:
        opened.append(files)
        if len(opened) == 2:
            raise _Interrupted

    first = Uploader(client, jobs=4, batch_files=20, records=records, on_batch_open=stop_at_second)
    with pytest.raises(_Interrupted):
        first.upload(local, dandiset=dandiset)
    zarr = client.find_zarr(dandiset, local.name)
    assert zarr is not None and client.upload_in_progress(zarr.zarr_id)
    with archive.db.session() as session:
        follows = session.scalars(
            select(UploadBatch.follows).where(UploadBatch.zarr_id == zarr.zarr_id)
        ).all()
    assert len(follows) == 2 and sum(f is None for f in follows) == 1  # open + one ahead

    result = Uploader(client, jobs=4, batch_files=20, records=records).upload(
        local, dandiset=dandiset
    )
    assert result.stale_batch in ("completed", "resumed"), result.notes
    assert result.ok and result.remote_checksum == zarr_checksum_of(local)
    assert not client.upload_in_progress(zarr.zarr_id)
    assert not list(archive.store.iter_objects(staging_zarr_prefix(zarr.zarr_id)))


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_ctrl_c_exits_130_and_a_rerun_finishes(
    tmp_path: Path,
    client: ApiClient,
    dandiset: str,
    client_env: dict[str, str],
    records: BatchRecords,
) -> None:
    local = tmp_path / "interrupted.zarr"
    make_zarr(local, seed=4, coarse=3)
    total = file_count(local)
    process = subprocess.Popen(
        [
            *(sys.executable, "-m", "zarrchive.cli", "upload", str(local)),
            # about 300 batches of 2 files, one PUT at a time: interrupted as soon as the
            # first batch is in, it is still running however fast this machine runs it
            *("--dandiset", dandiset, "--batch-files", "2", "--jobs", "1"),
        ],
        # faulthandler: a SIGABRT makes it print every thread's stack (see below)
        env={**os.environ, **client_env, "PYTHONFAULTHANDLER": "1"},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        # Ctrl-C as in a terminal, whatever this test process inherited: when SIGINT is
        # ignored (as under `make test` in CI), a child inherits that and Python then
        # installs no KeyboardInterrupt handler
        preexec_fn=_default_sigint,
    )
    try:
        deadline = time.monotonic() + 120  # generous: the machine may be loaded (issue #41)
        while time.monotonic() < deadline:
            assert process.poll() is None
            zarr = client.find_zarr(dandiset, "interrupted.zarr")
            if zarr is not None and (
                zarr.file_count > 0 or client.upload_in_progress(zarr.zarr_id)
            ):
                break
            time.sleep(0.01)
        else:
            raise AssertionError("the upload never got going")
        process.send_signal(signal.SIGINT)
        try:
            _, stderr = process.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            process.send_signal(signal.SIGABRT)
            _, stacks = process.communicate(timeout=30)
            pytest.fail(f"the upload still ran 60 s after Ctrl-C; its threads:\n{stacks}")
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 130
    assert stderr.splitlines()[-1] == (
        "zarrchive upload: interrupted; run the same command again to finish"
    )
    assert "Traceback" not in stderr
    result = Uploader(client, jobs=4, records=records).upload(local, dandiset=dandiset)
    assert result.ok and result.uploaded + result.skipped == total
    assert result.remote_checksum == zarr_checksum_of(local)
    assert not client.upload_in_progress(result.zarr_id or "")


def test_own_stale_batch_with_every_file_sent_is_completed(
    tmp_path: Path, client: ApiClient, dandiset: str, records: BatchRecords
) -> None:
    import hashlib

    import httpx

    local = tmp_path / "stale.zarr"
    local.mkdir()
    files = {f"f{i}": bytes([i]) * (10 + i) for i in range(5)}
    for name, body in files.items():
        (local / name).write_bytes(body)
    zarr = client.create_zarr("stale.zarr", dandiset)
    # What an earlier run did before it was killed: record, open, send every file.
    records.mark(client.url, zarr.zarr_id, 3)
    sent = {n: files[n] for n in ("f0", "f1", "f2")}
    md5s = {n: hashlib.md5(b).hexdigest() for n, b in sent.items()}
    urls = client.start_upload(zarr.zarr_id, list(md5s.items()))
    with httpx.Client() as http:
        for name, url in urls.items():
            response = http.put(url, content=sent[name], headers=put_headers(url, sent[name]))
            assert response.status_code == 200
    progress = NullProgress()
    result = Uploader(client, jobs=2, records=records, progress=progress).upload(
        local, dandiset=dandiset
    )
    assert result.stale_batch == "completed"
    assert progress.notes[0].startswith("completed the upload batch left open by an interrupted")
    assert (result.uploaded, result.skipped) == (2, 3)
    assert result.ok and result.remote_checksum == zarr_checksum_of(local)
    assert records.get(client.url, zarr.zarr_id) is None


def test_a_file_changed_during_the_upload_is_refused_by_s3(
    tmp_path: Path, client: ApiClient, dandiset: str, records: BatchRecords
) -> None:
    from zarrchive.errors import LocalFileError

    local = tmp_path / "moving.zarr"
    local.mkdir()
    for i in range(3):
        (local / f"f{i}").write_bytes(b"before")

    def change(files: int) -> None:
        (local / "f1").write_bytes(b"AFTER!")  # same size, other content

    uploader = Uploader(client, jobs=2, records=records, on_batch_open=change)
    with pytest.raises(LocalFileError, match="changed while it was being uploaded"):
        uploader.upload(local, dandiset=dandiset)
    zarr = client.find_zarr(dandiset, "moving.zarr")
    assert zarr is not None and not zarr.upload_in_progress and zarr.file_count == 0
    assert records.get(client.url, zarr.zarr_id) is None
    result = Uploader(client, jobs=2, records=records).upload(local, dandiset=dandiset)
    assert result.ok and result.uploaded == 3
    assert result.remote_checksum == zarr_checksum_of(local)
