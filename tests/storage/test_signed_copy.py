"""The apply's copies without botocore (:mod:`zarrchive.storage.signed_copy`): the header as
botocore writes it, the answers S3 gives, the retry, and the copy itself on SeaweedFS."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from botocore.handlers import _quote_source_header_from_dict  # type: ignore[attr-defined]
from hypothesis import given
from hypothesis import strategies as st

from tests.helpers.flaky_proxy import FlakyProxy
from tests.helpers.s3 import object_store
from zarrchive.errors import StorageError, StorageUnavailable
from zarrchive.storage.objects import ObjectStore
from zarrchive.storage.presign import Credentials, Presigner
from zarrchive.storage.seaweedfs import SeaweedFS
from zarrchive.storage.signed_copy import (
    CopySender,
    S3Refused,
    S3Unreachable,
    copy_source_header,
    parse_copy_answer,
)

RESULT = (
    b'<?xml version="1.0" encoding="UTF-8"?>\n'
    b'<CopyObjectResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">'
    b"<LastModified>2026-11-29T01:15:56.683Z</LastModified>"
    b"<ETag>&quot;e54024e77d3fe3471c7341750edc4b90&quot;</ETag></CopyObjectResult>"
)


def _error(code: str, message: str = "m") -> bytes:
    return f"<Error><Code>{code}</Code><Message>{message}</Message></Error>".encode()


# -- the header, as botocore writes it -----------------------------------------------------------
@given(
    key=st.text(min_size=1, max_size=40).filter(lambda k: "\x00" not in k),
    version=st.one_of(st.none(), st.text(alphabet="0123456789abcdef", min_size=1, max_size=32)),
)
def test_the_copy_source_is_botocores(key: str, version: str | None) -> None:
    source = {"Bucket": "zarrchive-bucket", "Key": key}
    if version is not None:
        source["VersionId"] = version
    assert copy_source_header("zarrchive-bucket", key, version) == _quote_source_header_from_dict(
        source
    )


# -- S3's answers ----------------------------------------------------------------------------------
def test_a_copy_result_gives_etag_version_and_time() -> None:
    answer = parse_copy_answer(200, {"x-amz-version-id": "v1"}, RESULT)
    assert answer.etag == "e54024e77d3fe3471c7341750edc4b90"
    assert answer.version_id == "v1"
    assert answer.last_modified == "2026-11-29T01:15:56.683Z"
    # an unversioned bucket: no version id ("null", or none at all)
    assert parse_copy_answer(200, {"x-amz-version-id": "null"}, RESULT).version_id is None
    assert parse_copy_answer(200, {}, RESULT).version_id is None


@pytest.mark.parametrize(
    ("status", "body", "code", "transient"),
    [
        # an error after the copy began comes in a 200: botocore's InternalError, retried
        (200, _error("InternalError"), "InternalError", True),
        (200, _error("SlowDown"), "SlowDown", True),
        (200, b"", "InternalError", True),  # no result at all
        (200, b"<not-xml", "InternalError", True),
        (503, _error("SlowDown"), "SlowDown", True),
        (500, b"", "500", True),
        (404, _error("NoSuchKey"), "NoSuchKey", False),
        (404, _error("NoSuchBucket"), "NoSuchBucket", False),
        (403, _error("SignatureDoesNotMatch"), "SignatureDoesNotMatch", False),
        (400, _error("InvalidRequest"), "InvalidRequest", False),
    ],
)
def test_errors_are_refusals_transient_or_not(
    status: int, body: bytes, code: str, transient: bool
) -> None:
    with pytest.raises(S3Refused) as info:
        parse_copy_answer(status, {}, body)
    assert info.value.code == code
    assert info.value.transient is transient
    assert info.value.status == (500 if status == 200 else status)


# -- on SeaweedFS -------------------------------------------------------------------------------------
@pytest.fixture
def store(seaweedfs: SeaweedFS, fresh_bucket: str) -> Iterator[ObjectStore]:
    store = object_store(seaweedfs, fresh_bucket)
    yield store
    store.close()


#: ``(proxy arguments) -> (proxy, sender)``: see :func:`through_proxy`.
ThroughProxy = Callable[..., tuple[FlakyProxy, CopySender]]


@pytest.fixture
def through_proxy(seaweedfs: SeaweedFS, fresh_bucket: str) -> Iterator[ThroughProxy]:
    """Makes SeaweedFS's proxies (:class:`FlakyProxy`, its arguments) and a sender of copies
    in *fresh_bucket* that signs for SeaweedFS and connects to the proxy (which forwards the
    request with SeaweedFS's ``Host``: the signature holds); all closed at the end."""
    made: list[tuple[FlakyProxy, CopySender]] = []
    signer = Presigner(
        seaweedfs.endpoint_url,
        Credentials(seaweedfs.access_key_id, seaweedfs.secret_access_key),
        "us-east-1",
    )

    def make(**proxy_arguments: Any) -> tuple[FlakyProxy, CopySender]:
        proxy = FlakyProxy(seaweedfs.endpoint_url, **proxy_arguments)
        sender = CopySender(
            signer, proxy.url, fresh_bucket, connections=4, connect_timeout=3, read_timeout=30
        )
        made.append((proxy, sender))
        return proxy, sender

    yield make
    for proxy, sender in made:
        sender.close()
        proxy.close()


NAMES = ["plain", "a b/c d", "ünï/cødé", "plus+and=equals", "per%cent", "q?mark#hash", "~tilde"]


def test_the_store_copies_without_botocore(store: ObjectStore) -> None:
    """The store's copies go by the signed sender; keys of every kind are copied, by their
    current or a given version, and the answer is what S3 lists of the new version."""
    assert store._copier is not None
    for name in NAMES:
        old = store.put(f"src/{name}", b"old " + name.encode())
        store.put(f"src/{name}", b"new " + name.encode())
        assert old is not None
        current = store.copy_within(f"src/{name}", f"dst/{name}")
        assert current.etag == hashlib.md5(b"new " + name.encode()).hexdigest()
        pinned = store.copy_within(f"src/{name}", f"dst/{name}", old)
        assert store.get(f"dst/{name}") == b"old " + name.encode()
        listed = {v.version_id: v for v in store.iter_versions(f"dst/{name}")}
        for written in (current, pinned):
            assert written.version_id in listed
            version = listed[written.version_id]
            assert version.etag == written.etag
            assert written.last_modified is not None
            assert version.last_modified.replace(microsecond=0) == written.last_modified.replace(
                microsecond=0
            )


def test_botocores_copy_gives_the_same_answer(store: ObjectStore) -> None:
    """The fallback (credentials from boto3's chain: no signer of our own) copies alike."""
    store.put("src/a b", b"body")
    signed = store.copy_within("src/a b", "dst/signed")
    copier, store._copier = store._copier, None
    try:
        plain = store.copy_within("src/a b", "dst/plain")
    finally:
        store._copier = copier
    assert plain.etag == signed.etag == hashlib.md5(b"body").hexdigest()
    assert plain.version_id and signed.version_id and plain.version_id != signed.version_id
    assert plain.last_modified is not None and signed.last_modified is not None


def test_a_transient_failure_is_retried_once(
    fresh_bucket: str, store: ObjectStore, through_proxy: ThroughProxy
) -> None:
    store.put("src", b"body")
    proxy, sender = through_proxy(fails=lambda method, path: method == "PUT")
    answer = sender.copy("src", "dst")
    assert answer.etag == hashlib.md5(b"body").hexdigest()
    assert [h.status for h in proxy.hits_of("PUT", f"/{fresh_bucket}/dst")] == [503, 200]
    assert store.get("dst") == b"body"


def test_a_second_failure_is_unavailable(
    fresh_bucket: str, store: ObjectStore, through_proxy: ThroughProxy
) -> None:
    store.put("src", b"body")
    proxy, sender = through_proxy(failures=2)
    with pytest.raises(S3Refused) as info:
        sender.copy("src", "dst")
    assert info.value.status == 503 and info.value.transient
    assert len(proxy.hits_of("PUT", f"/{fresh_bucket}/dst")) == 2
    assert store.head("dst") is None
    # through the store: the archive's 503
    store._copier = sender
    with pytest.raises(StorageUnavailable, match="retry later"):
        store.copy_within("src", "dst2")


def test_a_refusal_is_not_retried(
    fresh_bucket: str, store: ObjectStore, through_proxy: ThroughProxy
) -> None:
    proxy, sender = through_proxy(fails=lambda method, path: False)
    store._copier = sender
    with pytest.raises(StorageError) as info:  # a missing source
        store.copy_within("nothing-here", "dst")
    assert not isinstance(info.value, StorageUnavailable)
    assert "nothing-here" in info.value.message
    assert [h.status for h in proxy.hits_of("PUT", f"/{fresh_bucket}/dst")] == [404]


def test_no_answer_is_unreachable(through_proxy: ThroughProxy) -> None:
    proxy, sender = through_proxy()
    proxy.close()  # nothing listens there any more
    with pytest.raises(S3Unreachable):
        sender.copy("src", "dst")
