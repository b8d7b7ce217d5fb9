"""The conformance suite of object stores: what the services rely on, for every implementation.

:class:`ObjectStoreTests` holds one test per behaviour of
:class:`zarrchive.storage.protocol.ObjectStoreProtocol` that a service relies on. Each
implementation's test module subclasses it and provides the fixtures (a fresh, empty,
versioned, world-readable bucket; a store that can't be reached; one whose bucket does not
exist; one that can be told to refuse a deletion), as zarr-python's ``StoreTests`` does. It
is not a test module itself (no ``test_`` prefix): pytest collects the subclasses.
"""

from __future__ import annotations

import hashlib
import io
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager

import httpx
import pytest

from tests.helpers.waiting import EVENT_TIMEOUT
from zarrchive.checksum import ChecksumNode
from zarrchive.errors import InvalidInput, StorageError, StorageUnavailable
from zarrchive.services.zarr_engine.node_cache import NodeCache
from zarrchive.services.zarr_engine.tree_updater import read_node
from zarrchive.storage.keys import checksum_node_key
from zarrchive.storage.objects import md5_to_content_md5
from zarrchive.storage.protocol import ObjectStoreProtocol

MiB = 1024 * 1024


def md5(data: bytes) -> str:
    return hashlib.md5(data).hexdigest()


def history(store: ObjectStoreProtocol, prefix: str) -> list[tuple[str, bool, str | None]]:
    """``(key, is_delete_marker, etag)`` of every version under *prefix*, as listed."""
    return [(v.key, v.is_delete_marker, v.etag) for v in store.iter_versions(prefix)]


class ObjectStoreTests:
    """Subclass it and override the fixtures below; every test then runs on your store."""

    # -- what an implementation provides ---------------------------------------------------
    @pytest.fixture
    def store(self) -> ObjectStoreProtocol:
        """A store of a fresh, empty, versioned, world-readable bucket."""
        raise NotImplementedError

    @pytest.fixture
    def unreachable_store(self) -> ObjectStoreProtocol:
        """A store nothing answers for (nothing listens where it points)."""
        raise NotImplementedError

    @pytest.fixture
    def missing_bucket_store(self) -> ObjectStoreProtocol:
        """A store of a bucket that does not exist (yet)."""
        raise NotImplementedError

    @pytest.fixture
    def locked_store(self) -> ObjectStoreProtocol:
        """A store of a fresh versioned bucket on which :meth:`refusing` works."""
        raise NotImplementedError

    def refusing(
        self, store: ObjectStoreProtocol, key: str, version_id: str
    ) -> AbstractContextManager[None]:
        """While entered, *store* refuses to delete that version of *key* for good."""
        raise NotImplementedError

    # -- objects and versions ---------------------------------------------------------------
    def test_put_then_read_it_back_exactly(self, store: ObjectStoreProtocol) -> None:
        body = bytes(range(256)) * 3
        version = store.put("a/b.bin", body, "application/json")
        assert version
        assert store.get("a/b.bin") == body
        assert store.get_with_etag("a/b.bin") == (body, md5(body))
        info = store.head("a/b.bin")
        assert info is not None
        assert (info.key, info.size, info.etag, info.version_id) == (
            "a/b.bin",
            768,
            md5(body),
            version,
        )
        assert b"".join(store.iter_content("a/b.bin", chunk_size=100)) == body

    def test_a_range_reads_exactly_those_bytes(self, store: ObjectStoreProtocol) -> None:
        body = bytes(range(256)) * 40
        store.put("r/k", body)
        assert store.get_range("r/k", 0, 16) == body[:16]
        assert store.get_range("r/k", 1000, 500) == body[1000:1500]
        assert store.get_range("r/k", len(body) - 4, 4) == body[-4:]
        # past the end: what there is, then nothing
        assert store.get_range("r/k", len(body) - 3, 100) == body[-3:]
        assert store.get_range("r/k", len(body) + 10, 5) == b""
        assert store.get_range("r/absent", 0, 5) is None
        with pytest.raises(ValueError):
            store.get_range("r/k", 0, 0)

    def test_absent_keys_read_as_none_and_list_as_nothing(self, store: ObjectStoreProtocol) -> None:
        store.put("present", b"x")
        assert store.get("absent") is None
        assert store.head("absent") is None
        assert store.get_with_etag("absent") is None
        assert store.latest_version("absent") is None
        assert list(store.iter_objects("absent")) == []
        assert list(store.iter_versions("absent")) == []
        assert list(store.iter_prefixes("absent/")) == []

    def test_every_put_is_a_new_version_and_old_ones_stay_readable(
        self, store: ObjectStoreProtocol
    ) -> None:
        first = store.put("k", b"one")
        second = store.put("k", b"two!")
        assert first and second and first != second
        assert store.get("k") == b"two!"
        versions = list(store.iter_versions("k"))
        assert [
            (v.version_id, v.is_latest, v.is_delete_marker, v.etag, v.size) for v in versions
        ] == [
            (second, True, False, md5(b"two!"), 4),
            (first, False, False, md5(b"one"), 3),
        ]
        latest = store.latest_version("k")
        assert latest is not None and latest.version_id == second
        assert b"".join(store.iter_content("k", version_id=first)) == b"one"

    def test_delete_adds_a_marker_and_keeps_the_versions(self, store: ObjectStoreProtocol) -> None:
        kept = store.put("d/k", b"kept")
        store.put("d/other", b"other")
        store.delete("d/k")
        assert store.get("d/k") is None and store.head("d/k") is None
        assert [o.key for o in store.iter_objects("d/")] == ["d/other"]
        # (versions and delete markers are listed apart: each kind newest first)
        listed = list(store.iter_versions("d/k"))
        assert len(listed) == 2
        (marker,) = [v for v in listed if v.is_delete_marker]
        (old,) = [v for v in listed if not v.is_delete_marker]
        assert (marker.key, marker.is_latest, marker.etag, marker.size) == ("d/k", True, None, 0)
        assert (old.version_id, old.is_latest, old.etag) == (kept, False, md5(b"kept"))
        latest = store.latest_version("d/k")
        assert latest is not None and latest.is_delete_marker
        # the old version is still there to copy back
        assert store.copy_within("d/k", "d/restored", version_id=kept).etag == md5(b"kept")
        assert store.get("d/restored") == b"kept"

    def test_delete_many_marks_every_key_past_a_thousand(self, store: ObjectStoreProtocol) -> None:
        keys = [f"m/{i:04d}" for i in range(1003)]
        store.map(lambda k: store.put(k, k.encode()), keys)
        store.put("n/untouched", b"n")
        store.delete_many([*keys, "m/never-written"])
        assert list(store.iter_objects("m/")) == []
        markers = [v.key for v in store.iter_versions("m/") if v.is_delete_marker and v.is_latest]
        assert set(keys) <= set(markers)
        assert store.get("n/untouched") == b"n"

    def test_copy_within_copies_the_current_or_a_given_version(
        self, store: ObjectStoreProtocol
    ) -> None:
        old = store.put("src", b"old")
        store.put("src", b"new")
        assert old is not None
        new = store.copy_within("src", "dst")
        assert new.etag == md5(b"new")
        assert store.get("dst") == b"new"
        copied = store.copy_within("src", "dst", version_id=old)
        assert copied.etag == md5(b"old")
        assert store.get("dst") == b"old"
        listed = list(store.iter_versions("dst"))
        assert [v.etag for v in listed] == [md5(b"old"), md5(b"new")]
        # the copy's answer is what a listing says of the version (to the second)
        assert [(v.version_id, v.last_modified.replace(microsecond=0)) for v in listed] == [
            (c.version_id, c.last_modified.replace(microsecond=0) if c.last_modified else None)
            for c in (copied, new)
        ]
        head = store.head("dst", new.version_id)
        assert head is not None and head.etag == md5(b"new")
        assert store.get("src") == b"new"  # the source is left alone

    def test_copy_of_an_absent_object_is_a_storage_error(self, store: ObjectStoreProtocol) -> None:
        with pytest.raises(StorageError):
            store.copy_within("nothing-here", "dst")
        assert store.head("dst") is None

    def test_upload_fileobj_streams_a_file(self, store: ObjectStoreProtocol) -> None:
        body = b"0123456789" * 100_000
        store.upload_fileobj("f", io.BytesIO(body), "application/octet-stream")
        assert store.get_with_etag("f") == (body, md5(body))

    # -- listings ----------------------------------------------------------------------------
    def test_listings_are_in_key_order_each_key_newest_first(
        self, store: ObjectStoreProtocol
    ) -> None:
        """What the services rely on: the versions (and, apart, the delete markers) come in
        key order (byte order: ``a/0`` < ``a0``), each key's newest first, exactly one
        latest entry per key; current objects in key order."""
        writes = ["z", "a/1", "a0", "a/0", "a/1", "z", "b", "a/1"]
        written: dict[str, list[str]] = {}
        for i, key in enumerate(writes):
            version = store.put(key, f"{key}#{i}".encode())
            assert version is not None
            written.setdefault(key, []).insert(0, version)
        store.delete("b")
        listed = list(store.iter_versions(""))
        versions = [v for v in listed if not v.is_delete_marker]
        assert [v.key for v in versions] == sorted(v.key for v in versions)
        for key, newest_first in written.items():
            assert [v.version_id for v in versions if v.key == key] == newest_first
        markers = [v for v in listed if v.is_delete_marker]
        assert [(m.key, m.is_latest) for m in markers] == [("b", True)]
        latest = sorted(v.key for v in listed if v.is_latest)
        assert latest == sorted(written)
        objects = list(store.iter_objects(""))
        assert [o.key for o in objects] == ["a/0", "a/1", "a0", "z"]
        assert [o.etag for o in objects] == [
            md5(b"a/0#3"),
            md5(b"a/1#7"),
            md5(b"a0#2"),
            md5(b"z#5"),
        ]

    def test_each_keys_history_is_consecutive_with_its_delete_markers_in_place(
        self, store: ObjectStoreProtocol
    ) -> None:
        """What gc reads (a key's history from consecutive rows): a delete marker sits in its
        key's history, between the version it replaced and the one after it, not after every
        other key's versions."""
        first = store.put("h/a", b"1")
        store.put("h/b", b"2")
        store.delete("h/a")
        again = store.put("h/a", b"3")
        listed = [
            (v.key, v.is_delete_marker, v.version_id, v.is_latest)
            for v in store.iter_versions("h/")
        ]
        keys = [key for key, *_ in listed]
        assert keys == ["h/a", "h/a", "h/a", "h/b"]
        history = [(marker, version) for key, marker, version, _ in listed if key == "h/a"]
        assert history[0] == (False, again)
        # then the marker and the first version: in that order when their times differ
        # (written within one second, S3's listing times can't tell them apart, nor need they)
        assert (False, first) in history[1:] and [m for m, _ in history[1:]].count(True) == 1
        assert [latest for key, *_, latest in listed if key == "h/a"] == [True, False, False]
        times = [v.last_modified for v in store.iter_versions("h/a")]
        assert times == sorted(times, reverse=True)

    def test_prefixes_are_the_subdirectories(self, store: ObjectStoreProtocol) -> None:
        for key in ("d/b/2", "d/a/1", "d/c", "d/b/3", "e/x/1", "d/a b/1"):
            store.put(key, b".")
        # as a set: SeaweedFS lists "d/a/" before "d/a b/" (directory order, not S3's byte
        # order), and the one caller (stale staging areas) needs no order
        assert sorted(store.iter_prefixes("d/")) == ["d/a b/", "d/a/", "d/b/"]

    def test_a_directory_lists_its_own_objects_only_from_a_start(
        self, store: ObjectStoreProtocol
    ) -> None:
        for key in ("f/a", "f/b", "f/c", "f/sub/x", "f/b-c", "fx"):
            store.put(key, key.encode())
        store.delete("f/c")
        # only f/'s own current objects (not its subdirectory's, not deleted ones); as sets,
        # since SeaweedFS's order is not S3's byte order for every name
        listed = {o.key: o for o in store.iter_directory("f/")}
        assert sorted(listed) == ["f/a", "f/b", "f/b-c"]
        assert listed["f/a"].etag == md5(b"f/a") and listed["f/a"].size == 3
        assert listed["f/a"].last_modified.tzinfo is not None
        assert {o.key for o in store.iter_directory("f/", start_after="f/a")} == {"f/b", "f/b-c"}

    # -- removal for good ----------------------------------------------------------------------
    def test_purge_removes_every_version_and_marker_under_the_prefix(
        self, store: ObjectStoreProtocol
    ) -> None:
        store.put("p/a", b"1")
        store.put("p/a", b"2")
        store.put("p/b/c", b"3")
        store.delete("p/b/c")
        store.put("pq", b"outside")
        store.put("q/p/a", b"outside")
        assert store.purge("p/") == 4
        assert list(store.iter_versions("p/")) == []
        assert store.get("pq") == b"outside" and store.get("q/p/a") == b"outside"
        assert store.purge("p/") == 0

    def test_delete_all_versions_removes_exactly_that_key(self, store: ObjectStoreProtocol) -> None:
        for key in ("k", "k", "k/x", "kk"):
            store.put(key, key.encode())
        store.delete("k")
        store.delete_all_versions("k")
        assert [(k, m) for k, m, _ in history(store, "k")] == [("k/x", False), ("kk", False)]

    def test_a_refused_purge_names_the_key_and_a_rerun_finishes(
        self, locked_store: ObjectStoreProtocol
    ) -> None:
        store = locked_store
        held = store.put("p/held", b"held")
        store.put("p/free", b"free")
        store.delete("p/free")
        assert held is not None
        with self.refusing(store, "p/held", held):
            with pytest.raises(StorageError, match="p/held") as info:
                store.purge("p/")
            assert not isinstance(info.value, StorageUnavailable)
            assert history(store, "p/") == [("p/held", False, md5(b"held"))]  # the rest went
        assert store.purge("p/") == 1
        assert list(store.iter_versions("p/")) == []

    # -- presigned and public URLs ---------------------------------------------------------------
    def test_presigned_put_takes_exactly_the_announced_body(
        self, store: ObjectStoreProtocol
    ) -> None:
        body = b"the right body"
        url = store.presign_put("u/right", md5(body), 60)
        response = httpx.put(
            url, content=body, headers={"Content-MD5": md5_to_content_md5(md5(body))}
        )
        assert response.status_code == 200, response.text
        info = store.head("u/right")
        assert info is not None and (info.etag, info.size) == (md5(body), len(body))

    def test_presigned_put_refuses_another_body_and_stores_nothing(
        self, store: ObjectStoreProtocol
    ) -> None:
        announced = md5(b"what was announced")
        url = store.presign_put("u/wrong", announced, 60)
        wrong = httpx.put(
            url, content=b"something else", headers={"Content-MD5": md5_to_content_md5(announced)}
        )
        assert 400 <= wrong.status_code < 500
        # without the header (so without the check) the signature does not match
        unsigned = httpx.put(url, content=b"what was announced")
        assert 400 <= unsigned.status_code < 500
        assert store.head("u/wrong") is None
        assert list(store.iter_versions("u/wrong")) == []

    def test_presigned_and_public_gets_serve_the_exact_bytes(
        self, store: ObjectStoreProtocol
    ) -> None:
        for name in ("plain", "a#b", "q?x=1", "100%", "with space", "é/ü"):
            key = f"g/{name}"
            body = f"bytes of {name}".encode()
            store.put(key, body)
            assert httpx.get(store.presign_get(key, 60)).content == body
            assert httpx.get(store.public_url(key)).content == body
            head = httpx.head(store.presign_head(key, 60))
            assert head.status_code == 200 and head.headers["etag"].strip('"') == md5(body)

    # -- multipart uploads ---------------------------------------------------------------------
    def test_multipart_upload_assembles_the_parts(self, store: ObjectStoreProtocol) -> None:
        parts_data = [b"a" * (5 * MiB), b"tail"]
        upload_id = store.create_multipart_upload("blob/x")
        parts: list[tuple[int, str]] = []
        for number, data in enumerate(parts_data, start=1):
            url = store.presign_upload_part("blob/x", upload_id, number, 60)
            response = httpx.put(url, content=data, timeout=60)
            assert response.status_code == 200, response.text
            parts.append((number, response.headers["ETag"].strip('"')))
        assert [etag for _, etag in parts] == [md5(d) for d in parts_data]
        etag = store.complete_multipart_upload("blob/x", upload_id, parts)
        combined = hashlib.md5(b"".join(bytes.fromhex(md5(d)) for d in parts_data)).hexdigest()
        assert etag == f"{combined}-2"
        assert b"".join(store.iter_content("blob/x")) == b"".join(parts_data)

    def test_multipart_mistakes_are_invalid_input_and_aborts_are_idempotent(
        self, store: ObjectStoreProtocol
    ) -> None:
        upload_id = store.create_multipart_upload("blob/y")
        url = store.presign_upload_part("blob/y", upload_id, 1, 60)
        assert httpx.put(url, content=b"part").status_code == 200
        with pytest.raises(InvalidInput):
            store.complete_multipart_upload("blob/y", upload_id, [(1, md5(b"not the part"))])
        with pytest.raises(InvalidInput):
            store.complete_multipart_upload("blob/y", "no-such-upload", [(1, md5(b"part"))])
        store.abort_multipart_upload("blob/y", upload_id)
        store.abort_multipart_upload("blob/y", upload_id)
        store.abort_multipart_upload("blob/y", "no-such-upload")
        assert store.head("blob/y") is None

    def test_parts_signed_by_md5_listed_copied_and_recorded(
        self, store: ObjectStoreProtocol
    ) -> None:
        first, tail = b"p" * (5 * MiB), b"tail"
        upload_id = store.create_multipart_upload("mp/x")
        assert ("mp/x", upload_id) in {(k, u) for k, u, _ in store.iter_multipart_uploads("mp/")}
        signed = store.presign_upload_part("mp/x", upload_id, 1, 60, md5(first))
        other = httpx.put(signed, content=b"q" * (5 * MiB), headers=_content_md5(first), timeout=60)
        assert other.status_code == 400  # the URL signs the part's md5: another body is refused
        assert httpx.put(signed, content=first, headers=_content_md5(first), timeout=60).is_success
        url = store.presign_upload_part("mp/x", upload_id, 2, 60, md5(tail))
        assert httpx.put(url, content=tail, headers=_content_md5(tail)).is_success
        held = store.list_parts("mp/x", upload_id)
        assert held == {1: (md5(first), len(first)), 2: (md5(tail), len(tail))}
        store.complete_multipart_upload("mp/x", upload_id, [(n, e) for n, (e, _s) in held.items()])
        assert store.list_parts("mp/x", upload_id) is None  # the upload is gone
        assert store.recorded_md5("mp/x") is None  # nothing recorded: the ETag is not an md5
        size = len(first) + len(tail)
        copy_id = store.create_multipart_upload("mp/y", metadata={"zarrchive-md5": "a" * 32})
        parts = [
            (1, store.upload_part_copy("mp/x", None, "mp/y", copy_id, 1, 0, len(first) - 1).etag),
            (
                2,
                store.upload_part_copy("mp/x", None, "mp/y", copy_id, 2, len(first), size - 1).etag,
            ),
        ]
        done = store.complete_multipart("mp/y", copy_id, parts)
        assert done.etag.endswith("-2") and done.last_modified is None
        # the answer names the version it made, as a listing does
        (listed,) = store.iter_versions("mp/y")
        assert (done.version_id, done.etag) == (listed.version_id, listed.etag)
        assert b"".join(store.iter_content("mp/y")) == first + tail
        assert store.recorded_md5("mp/y") == "a" * 32
        assert store.recorded_md5("mp/none") is None
        assert not list(store.iter_multipart_uploads("mp/"))

    # -- what the services read: .checksum nodes -------------------------------------------------
    def test_nodes_are_read_fresh_through_the_cache_and_the_updater(
        self, store: ObjectStoreProtocol
    ) -> None:
        key = checksum_node_key("zid", "dir")
        node = ChecksumNode()
        node.set_file("a", md5(b"a"), 1)
        store.put(key, node.to_json(), "application/json")
        cache = NodeCache()
        view = cache.get(store, key)
        assert view is not None and view.file_names == ["a"] and view.digest == node.digest
        assert cache.get(store, key) is view
        node.set_file("b", md5(b"bb"), 2)
        store.put(key, node.to_json(), "application/json")  # another process rewrites it
        fresh = cache.get(store, key)
        assert fresh is not None and fresh.file_names == ["a", "b"] and cache.loads == 2
        assert read_node(store, "zid", "dir") == node
        assert read_node(store, "zid", "elsewhere") is None
        assert cache.get(store, checksum_node_key("zid", "elsewhere")) is None

    # -- errors in the archive's exception tree ------------------------------------------------------
    def test_an_unreachable_store_is_unavailable(
        self, unreachable_store: ObjectStoreProtocol
    ) -> None:
        store = unreachable_store
        calls: list[Callable[[], object]] = [
            lambda: store.get("a"),
            lambda: store.head("a"),
            lambda: store.put("a", b"x"),
            lambda: store.delete("a"),
            lambda: list(store.iter_versions("")),
            lambda: list(store.iter_objects("")),
            lambda: store.copy_within("a", "b"),
            lambda: store.purge("a/"),
        ]
        for call in calls:
            with pytest.raises(StorageUnavailable, match="retry later"):
                call()

    def test_a_missing_bucket_is_a_storage_error_until_ensured(
        self, missing_bucket_store: ObjectStoreProtocol
    ) -> None:
        store = missing_bucket_store
        calls: list[Callable[[], object]] = [
            lambda: store.get("a"),
            lambda: store.delete("a"),
            lambda: list(store.iter_versions("")),
            lambda: list(store.iter_objects("")),
            lambda: store.copy_within("a", "b"),
        ]
        for call in calls:
            with pytest.raises(StorageError) as info:
                call()
            assert not isinstance(info.value, StorageUnavailable)
        store.ensure_bucket()
        store.ensure_bucket()  # idempotent
        first = store.put("a", b"1")
        second = store.put("a", b"2")
        assert first and second and first != second  # versioned

    # -- concurrency ---------------------------------------------------------------------------------
    def test_map_keeps_the_order(self, store: ObjectStoreProtocol) -> None:
        assert store.map(lambda i: i * i, range(200)) == [i * i for i in range(200)]

    def test_small_reads_do_not_wait_for_the_bulk_pool(self, store: ObjectStoreProtocol) -> None:
        """An apply's copies fill the bulk pool; node reads go on their own pool meanwhile."""
        release = threading.Event()
        bulk = threading.Thread(
            target=store.map, args=(lambda _i: release.wait(600), range(512)), daemon=True
        )
        bulk.start()
        try:
            with ThreadPoolExecutor(1) as caller:
                reads = caller.submit(store.map_small, lambda i: i + 1, range(20))
                # generous (a loaded machine); the bulk pool is held until the end
                assert reads.result(timeout=EVENT_TIMEOUT) == list(range(1, 21))
        finally:
            release.set()
            bulk.join(60)


def _content_md5(body: bytes) -> dict[str, str]:
    """The ``Content-MD5`` header of *body*."""
    return {"Content-MD5": md5_to_content_md5(md5(body))}
