"""Issue 35: Ctrl-C keeps a big file's finished parts.

``zarrchive upload`` (the real CLI, a child process) is sent SIGINT while a big file goes up
in parts, between two parts (a forward proxy holds the next part PUT until the client says it
is finishing).  The run exits 130, says what it left and how to resume or cancel it, and
leaves its batch open with every part that reached S3 (boto3's ListParts against the test's
SeaweedFS); the rerun sends only the parts S3 lacks (bytes counted by the proxy).
The network failing between two parts leaves the batch open the same way.  ``--cancel``
cancels such a batch (its upload aborted), and ``admin gc`` aborts one abandoned for its
grace period, not before.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from tests.helpers.interrupted_upload import (
    BIG_PARTS,
    BIG_PATH,
    FILES,
    LET_THROUGH,
    PART,
    cli_env,
    interrupt_upload,
    part_length,
    parts_in_s3,
    run_cli,
    upload_args,
)
from tests.helpers.local_zarr import zarr_checksum_of
from tests.helpers.multipart import write_tree
from tests.helpers.part_gate import part_gate
from tests.helpers.snapshots import admin_env, gc_now
from zarrchive.cli import app
from zarrchive.client import ApiClient
from zarrchive.config import Settings
from zarrchive.db.models import utcnow
from zarrchive.services.runtime import Archive
from zarrchive.storage.keys import staging_zarr_prefix

pytestmark = pytest.mark.settings(multipart_threshold=PART)

ALL_PARTS = set(range(1, BIG_PARTS + 1))


def _small_bytes() -> int:
    return sum(len(b) for p, b in FILES.items() if p != BIG_PATH)


def test_ctrl_c_leaves_the_parts_in_s3_and_the_rerun_sends_only_the_rest(
    tmp_path: Path,
    client: ApiClient,
    dandiset: str,
    client_env: dict[str, str],
    archive: Archive,
    s3: Any,
    bucket: str,
) -> None:
    local = tmp_path / "ctrl-c.zarr"
    first = interrupt_upload(local, dandiset, client_env)
    assert first.code == 130, first.stderr
    assert not any("Traceback" in line for line in first.stderr), first.stderr
    # the parts before the gate and the one it held (finished after Ctrl-C), no other
    assert first.parts_sent == list(range(1, LET_THROUGH + 2)), "parts started after Ctrl-C"
    held = parts_in_s3(s3, bucket, first.key, first.upload_id)
    assert held == {n: part_length(n) for n in first.parts_sent}, "S3 lost finished parts"
    assert first.said_finishing, first.stderr
    zarr = client.find_zarr(dandiset, local.name)
    assert zarr is not None and client.upload_in_progress(zarr.zarr_id)
    # what it left, and how to resume or cancel it; the last line as before
    (note,) = [line for line in first.stderr if "left the upload batch open" in line]
    assert f"on Zarr {zarr.zarr_id}" in note
    assert f"and {len(first.parts_sent)} parts of its 1 big files" in note
    assert f"zarrchive upload {local} --dandiset {dandiset} --cancel" in note
    assert first.stderr[-1] == "zarrchive upload: interrupted; run the same command again to finish"

    with part_gate() as gate:
        rerun = run_cli(cli_env(client_env, gate.url), *upload_args(local, dandiset))
        assert rerun.returncode == 0, rerun.stderr
        assert "taking up the upload batch left open" in rerun.stderr
        rest = sorted(ALL_PARTS - set(first.parts_sent))
        assert sorted(gate.part_numbers()) == rest, "the rerun sent parts S3 held"
        assert gate.part_bytes() == sum(part_length(n) for n in rest)
        # every byte it sent: the small files again (one PUT each) and the missing parts
        assert gate.put_bytes == _small_bytes() + gate.part_bytes()
    assert "(matches the local one)" in rerun.stdout
    assert client.get_zarr(zarr.zarr_id).checksum == zarr_checksum_of(local)
    assert not client.upload_in_progress(zarr.zarr_id)
    assert parts_in_s3(s3, bucket, first.key, first.upload_id) is None  # assembled
    assert not list(archive.store.iter_multipart_uploads(staging_zarr_prefix(zarr.zarr_id)))


def test_a_network_failure_between_parts_leaves_them_for_the_rerun(
    tmp_path: Path,
    client: ApiClient,
    dandiset: str,
    client_env: dict[str, str],
    s3: Any,
    bucket: str,
) -> None:
    # S3 stops answering after two parts (connections closed unanswered), no retry: the
    # upload fails (exit 2) and leaves its batch open with the two parts, as Ctrl-C does
    local = tmp_path / "network.zarr"
    write_tree(local, FILES)
    with part_gate(let_through=LET_THROUGH, drop=True) as gate:
        env = {**cli_env(client_env, gate.url), "ZARRCHIVE_RETRIES": "1"}
        failed = run_cli(env, *upload_args(local, dandiset), "--jobs", "1")
        assert failed.returncode == 2, failed.stderr
        assert gate.dropped >= 1
        sent = gate.parts
    assert [p.number for p in sent] == list(range(1, LET_THROUGH + 1))
    key, upload_id = sent[0].key, sent[0].upload_id
    assert parts_in_s3(s3, bucket, key, upload_id) == {
        n: part_length(n) for n in range(1, LET_THROUGH + 1)
    }, "S3 lost finished parts"
    assert "left the upload batch open" in failed.stderr
    with part_gate() as gate:
        rerun = run_cli(cli_env(client_env, gate.url), *upload_args(local, dandiset))
        assert rerun.returncode == 0, rerun.stderr
        assert sorted(gate.part_numbers()) == sorted(ALL_PARTS - set(range(1, LET_THROUGH + 1)))
    zarr = client.find_zarr(dandiset, local.name)
    assert zarr is not None and zarr.checksum == zarr_checksum_of(local)


def test_cancel_cancels_the_batch_an_interrupted_run_left(
    tmp_path: Path,
    client: ApiClient,
    dandiset: str,
    client_env: dict[str, str],
    archive: Archive,
    s3: Any,
    bucket: str,
) -> None:
    local = tmp_path / "cancelled.zarr"
    first = interrupt_upload(local, dandiset, client_env)
    assert first.code == 130 and parts_in_s3(s3, bucket, first.key, first.upload_id)
    cancel = run_cli(client_env, *upload_args(local, dandiset), "--cancel")
    assert cancel.returncode == 0, cancel.stderr
    zarr = client.find_zarr(dandiset, local.name)
    assert zarr is not None
    assert f"cancelled the upload batch open on Zarr {zarr.zarr_id}" in cancel.stderr
    assert not client.upload_in_progress(zarr.zarr_id)
    assert parts_in_s3(s3, bucket, first.key, first.upload_id) is None  # aborted
    assert not list(archive.store.iter_objects(staging_zarr_prefix(zarr.zarr_id)))
    assert zarr.file_count == 0  # nothing of it reached the Zarr
    again = run_cli(client_env, *upload_args(local, dandiset), "--cancel")
    assert again.returncode == 0 and "nothing to cancel" in again.stderr


def test_gc_aborts_an_abandoned_upload_after_its_grace_not_before(
    tmp_path: Path,
    client: ApiClient,
    dandiset: str,
    client_env: dict[str, str],
    archive: Archive,
    settings: Settings,
    s3: Any,
    bucket: str,
) -> None:
    local = tmp_path / "abandoned.zarr"
    first = interrupt_upload(local, dandiset, client_env)
    held = parts_in_s3(s3, bucket, first.key, first.upload_id)
    assert first.code == 130 and held is not None and set(held) == set(first.parts_sent)
    zarr = client.find_zarr(dandiset, local.name)
    assert zarr is not None
    sent_at = archive.store.upload_activity(first.key, first.upload_id)
    assert sent_at is not None and sent_at <= utcnow()
    day = timedelta(days=1)
    # within the grace (its last part a day ago less a minute): kept, with its parts
    kept = gc_now(
        archive,
        zarr.zarr_id,
        apply=True,
        abandoned_after=day,
        now=sent_at + day - timedelta(minutes=1),
    )
    assert kept.multipart == []
    assert parts_in_s3(s3, bucket, first.key, first.upload_id) == held
    # `admin gc --apply` now, with its default grace (7 days): kept
    week = CliRunner().invoke(app, ["admin", "gc", "--apply"], env=admin_env(settings))
    assert week.exit_code == 0, week.stderr
    assert first.upload_id not in week.stdout
    assert parts_in_s3(s3, bucket, first.key, first.upload_id) == held
    # past the grace: a dry run names it, --apply aborts it
    dry = CliRunner().invoke(app, ["admin", "gc", "--grace-days", "0"], env=admin_env(settings))
    assert dry.exit_code == 0, dry.stderr
    (line,) = [r for r in dry.stdout.splitlines() if first.upload_id in r]
    assert line.startswith(f"would abort\t{first.key}\t") and "abandoned" in line
    assert parts_in_s3(s3, bucket, first.key, first.upload_id) == held
    done = CliRunner().invoke(
        app, ["admin", "gc", "--apply", "--grace-days", "0"], env=admin_env(settings)
    )
    assert done.exit_code == 0, done.stderr
    assert f"aborted\t{first.key}\t" in done.stdout
    assert parts_in_s3(s3, bucket, first.key, first.upload_id) is None
    # the batch stays open; the rerun sends the big file again whole, and finishes
    with part_gate() as gate:
        rerun = run_cli(cli_env(client_env, gate.url), *upload_args(local, dandiset))
        assert rerun.returncode == 0, rerun.stderr
        assert sorted(gate.part_numbers()) == sorted(ALL_PARTS)
    assert client.get_zarr(zarr.zarr_id).checksum == zarr_checksum_of(local)
    assert not client.upload_in_progress(zarr.zarr_id)
