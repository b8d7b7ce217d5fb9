"""The upload's planner alone (:mod:`zarrchive.client.upload.planner`): what a whole upload
sends, deletes and skips given the remote files walked, and a new Zarr's patch.  Pure: no
archive, no S3."""

from __future__ import annotations

from tests.helpers.upload_batches import entries, entry
from zarrchive.checksum import EMPTY_CHECKSUM, compute_checksum
from zarrchive.client.api import ApiClient, ZarrInfo
from zarrchive.client.remote import RemoteState, local_digests
from zarrchive.client.upload import DRY_RUN_PATHS, UploadResult
from zarrchive.client.upload.planner import plan, plan_new_zarr, plan_sync

LOCAL = {
    ".zgroup": b"{}",
    "a/0": b"same",
    "a/1": b"changed locally",
    "a/2": b"new",
    "b/0": b"in an identical subtree",
    "b/1": b"also there",
}


def test_a_whole_upload_sends_the_difference_and_deletes_what_is_not_here() -> None:
    local = entries(LOCAL)
    state = RemoteState(
        "remote-root",
        files={
            ".zgroup": (entry(".zgroup", b"{}").md5, 2),
            "a/0": (entry("a/0", b"same").md5, 4),
            "a/1": (entry("a/1", b"as it was").md5, 9),
            "a/gone": ("0" * 32, 7),
            "c/gone": ("1" * 32, 11),
        },
        identical={"b"},  # b/ is the same below: never listed, its files never compared
    )
    planned = plan_sync(local, state)
    assert [e.path for e in planned.upload] == ["a/1", "a/2"]
    assert planned.upload_bytes == len(b"changed locally") + len(b"new")
    assert planned.skipped == 4  # .zgroup, a/0 (same md5) and b/0, b/1 (identical subtree)
    assert planned.delete == ["a/gone", "c/gone"]
    assert (planned.delete_bytes, planned.delete_sizes) == (18, [("a/gone", 7), ("c/gone", 11)])

    # the engine's result records the plan as it is returned
    result = UploadResult(None, "x", False, True, len(local), 0, "", None)
    result.record_plan(planned)
    assert (result.planned_uploads, result.planned_deletes, result.skipped) == (2, 2, 4)
    assert result.planned_upload_paths == [("a/1", 15), ("a/2", 3)]
    assert result.planned_delete_paths == [("a/gone", 7), ("c/gone", 11)]


def test_a_dry_run_names_only_the_first_files_to_delete() -> None:
    state = RemoteState("r", files={f"gone/{i:03}": ("0" * 32, 1) for i in range(50)})
    planned = plan_sync([], state)
    assert len(planned.delete) == 50 and planned.delete_bytes == 50
    assert [p for p, _ in planned.delete_sizes] == [f"gone/{i:03}" for i in range(DRY_RUN_PATHS)]


def test_an_unchanged_zarr_is_planned_without_asking_the_archive() -> None:
    local = entries(LOCAL)
    digests = local_digests(local)
    zarr = ZarrInfo("z", "x.zarr", "000001", "p", "s3://b/p", digests[""], 6, 100, False)
    # an archive that cannot be reached: planning asks it nothing
    with ApiClient("http://127.0.0.1:9") as nowhere:
        planned = plan(nowhere, zarr, local, digests)
    assert (planned.upload, planned.delete, planned.skipped) == ([], [], len(local))


def test_a_new_zarr_s_patch_sends_everything_and_predicts_its_checksum() -> None:
    local = entries(LOCAL)
    patched = plan_new_zarr(local)
    assert patched.upload == local and (patched.new, patched.skipped, patched.changed) == (6, 0, 0)
    assert patched.base_checksum == EMPTY_CHECKSUM
    assert patched.expected_checksum == compute_checksum(local, grouped=True)
    assert plan_new_zarr([]).expected_checksum == EMPTY_CHECKSUM
