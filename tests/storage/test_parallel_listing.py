"""``ObjectStore.iter_current_versions`` (prefixes listed in parallel) against a real SeaweedFS:
exactly the rows, in exactly the order, of filtering the one-paginator version listing."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Generator, Iterator
from typing import Any

import pytest

from tests.helpers.waiting import wait_until
from zarrchive.errors import StorageError
from zarrchive.storage.objects import ObjectStore
from zarrchive.storage.seaweedfs import SeaweedFS

PREFIX = "zarr/z1/"
TRICKY_PREFIX = "zarr/z2/"

#: A Zarr's layout: metadata beside chunk directories, levels narrow (split) and wide (listed
#: whole when they do not fit in a page), names that are not ASCII.
KEYS = [
    ".zgroup",
    "a/.zarray",
    "a/0/0",
    "a/0/1",
    "a/1/0",
    *[f"arr/{i}/{j}/{k}" for i in range(3) for j in range(3) for k in range(4)],
    *[f"wide/{k:02d}" for k in range(25)],
    "wide/sub/x",
    "é/ü",
    "z",
]
#: Files sorting between a directory and its siblings in S3's byte order ("a-b" < "a.txt" <
#: "a/..." < "a0"): SeaweedFS walks directories first, and its ListObjectVersions loses such
#: keys when a page boundary falls inside the directory (the one-paginator listing too), so
#: they are listed here with pages that hold a whole level.
TRICKY = ["a-b", "a.txt", "a/b.x", "a/b/c", "a0"]
DELETED = ["a/0/1", "arr/1/1/0", "wide/03"]
OVERWRITTEN = ["a/1/0", "arr/2/2/3", "wide/sub/x"]


@pytest.fixture(scope="module")
def store(seaweedfs: SeaweedFS) -> Iterator[ObjectStore]:
    bucket = f"zlist-{uuid.uuid4().hex[:12]}"
    client: Any = seaweedfs.client()
    client.create_bucket(Bucket=bucket)
    client.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
    store = ObjectStore(
        endpoint_url=seaweedfs.endpoint_url,
        bucket=bucket,
        access_key_id=seaweedfs.access_key_id,
        secret_access_key=seaweedfs.secret_access_key,
    )
    store.map(lambda key: store.put(PREFIX + key, key.encode(), "application/octet-stream"), KEYS)
    store.map(
        lambda key: store.put(TRICKY_PREFIX + key, key.encode(), "application/octet-stream"),
        [*KEYS, *TRICKY],
    )
    store.put("zarr/z10/outside", b"x", "application/octet-stream")  # shares "zarr/z1"
    for key in OVERWRITTEN:
        store.put(PREFIX + key, b"second " + key.encode(), "application/octet-stream")
    for key in DELETED:
        store.delete(PREFIX + key)
    yield store
    store.close()


def serial(store: ObjectStore, prefix: str = PREFIX) -> list[Any]:
    return [v for v in store.iter_versions(prefix) if v.is_latest and not v.is_delete_marker]


def test_the_fixture_is_what_the_test_means(store: ObjectStore) -> None:
    rows = serial(store)
    keys = [row.key[len(PREFIX) :] for row in rows]
    assert keys == sorted(set(KEYS) - set(DELETED), key=lambda k: k.encode())
    assert all(row.etag for row in rows)


@pytest.mark.parametrize("parallel", [1, 2, 3, 8])
@pytest.mark.parametrize("page_size", [2, 5, 10, 1000])
def test_parallel_listing_equals_the_serial_one(
    store: ObjectStore, parallel: int, page_size: int
) -> None:
    assert list(store.iter_current_versions(PREFIX, parallel=parallel, page_size=page_size)) == (
        serial(store)
    )


@pytest.mark.parametrize("parallel", [2, 8])
def test_files_sorting_inside_directories_keep_their_place(
    store: ObjectStore, parallel: int
) -> None:
    rows = list(store.iter_current_versions(TRICKY_PREFIX, parallel=parallel))
    assert rows == serial(store, TRICKY_PREFIX)
    keys = [row.key[len(TRICKY_PREFIX) :] for row in rows]
    assert keys == sorted([*KEYS, *TRICKY], key=lambda k: k.encode())


def test_an_empty_prefix_lists_nothing(store: ObjectStore) -> None:
    assert list(store.iter_current_versions("zarr/none/", parallel=4)) == []


def test_stopping_early_leaves_no_thread_behind(store: ObjectStore) -> None:
    before = {t for t in threading.enumerate() if t.name.startswith("s3-list")}
    listing = store.iter_current_versions(PREFIX, parallel=4, page_size=2)
    assert isinstance(listing, Generator)
    first = [next(listing) for _ in range(3)]
    assert first == serial(store)[:3]
    listing.close()
    wait_until(
        lambda: not {t for t in threading.enumerate() if t.name.startswith("s3-list")} - before,
        "the listing threads to end after close()",
    )


def test_a_listing_error_reaches_the_consumer(seaweedfs: SeaweedFS) -> None:
    missing = ObjectStore(
        endpoint_url=seaweedfs.endpoint_url,
        bucket="no-such-bucket-for-listing",
        access_key_id=seaweedfs.access_key_id,
        secret_access_key=seaweedfs.secret_access_key,
    )
    with pytest.raises(StorageError):
        list(missing.iter_current_versions(PREFIX, parallel=4))
    missing.close()
