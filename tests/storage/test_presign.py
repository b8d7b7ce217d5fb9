"""Our SigV4 presigner makes exactly botocore's URLs (byte for byte), for every key shape."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any
from unittest import mock

import boto3
import pytest
from botocore.config import Config
from hypothesis import given, settings
from hypothesis import strategies as st

from zarrchive.storage.presign import Credentials, Presigner

ENDPOINT = "http://127.0.0.1:8333"
MOMENT = datetime(2026, 11, 24, 21, 5, 9, tzinfo=UTC)
KEYS = [
    "zarr/0f3c/arr/0/0/0",
    "zarr/0f3c/.zattrs",
    "zarr/0f3c/name with space/#hash?query&amp=1",
    "zarr/0f3c/per%cent+plus=equals~tilde",
    "zarr/0f3c/ünïcødé/日本/😀",
    "zarr/0f3c/a//double/slash",
    "zarr/0f3c/*star'quote\"(paren)!",
    "zarr-staging/0f3c/9a8b/x;y:z,@$",
]


def _botocore() -> Any:
    return boto3.session.Session().client(
        "s3",
        endpoint_url=ENDPOINT,
        aws_access_key_id="AKIDEXAMPLE",
        aws_secret_access_key="wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY",
        region_name="us-east-1",
        config=Config(signature_version="s3v4", s3={"addressing_style": "path"}),
    )


BOTOCORE = _botocore()
OURS = Presigner(
    ENDPOINT,
    Credentials("AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"),
    "us-east-1",
)


def _theirs(operation: str, params: dict[str, str], expires: int, method: str | None) -> str:
    with mock.patch("botocore.auth.get_current_datetime", return_value=MOMENT):
        kwargs: dict[str, Any] = {"Params": params, "ExpiresIn": expires}
        if method:
            kwargs["HttpMethod"] = method
        return str(BOTOCORE.generate_presigned_url(operation, **kwargs))


@pytest.mark.parametrize("key", KEYS)
def test_put_with_content_md5_equals_botocore(key: str) -> None:
    md5 = "1B2M2Y8AsgTpgAmY7PhCfg=="
    theirs = _theirs(
        "put_object", {"Bucket": "zarrchive", "Key": key, "ContentMD5": md5}, 3600, "PUT"
    )
    ours = OURS.url("PUT", "zarrchive", key, 3600, headers={"Content-MD5": md5}, now=MOMENT)
    assert ours == theirs


@pytest.mark.parametrize("key", KEYS)
def test_get_and_head_equal_botocore(key: str) -> None:
    for operation, method in (("get_object", "GET"), ("head_object", "HEAD")):
        theirs = _theirs(operation, {"Bucket": "b-1", "Key": key}, 604800, None)
        assert OURS.url(method, "b-1", key, 604800, now=MOMENT) == theirs


def test_get_of_a_version_equals_botocore() -> None:
    version = "3HL4kqtJlcpXroDTDmJ+rmSpXd3dIbrHY+MTRCxf3vjVBH40Nr8X8gdRQBpUMLUo"
    theirs = _theirs(
        "get_object", {"Bucket": "zarrchive", "Key": KEYS[3], "VersionId": version}, 60, None
    )
    ours = OURS.url("GET", "zarrchive", KEYS[3], 60, params={"versionId": version}, now=MOMENT)
    assert ours == theirs


def test_the_signing_key_follows_the_date() -> None:
    """A URL signed after midnight uses the new day's key (it is cached per date)."""
    md5 = "1B2M2Y8AsgTpgAmY7PhCfg=="
    for moment in (MOMENT, MOMENT.replace(day=25, hour=0, minute=0, second=1), MOMENT):
        with mock.patch("botocore.auth.get_current_datetime", return_value=moment):
            theirs = BOTOCORE.generate_presigned_url(
                "put_object",
                Params={"Bucket": "z", "Key": "k", "ContentMD5": md5},
                ExpiresIn=10,
                HttpMethod="PUT",
            )
        assert OURS.url("PUT", "z", "k", 10, headers={"Content-MD5": md5}, now=moment) == theirs


@settings(max_examples=200, deadline=None)
@given(key=st.text(min_size=1, max_size=60).filter(lambda k: "\x00" not in k))
def test_any_key_equals_botocore(key: str) -> None:
    theirs = _theirs("get_object", {"Bucket": "zarrchive", "Key": key}, 900, None)
    assert OURS.url("GET", "zarrchive", key, 900, now=MOMENT) == theirs


def test_an_endpoint_without_a_scheme_is_refused() -> None:
    with pytest.raises(ValueError, match="endpoint"):
        Presigner("127.0.0.1:8333", Credentials("a", "b"), "us-east-1")


@pytest.mark.parametrize("content_type", ["application/octet-stream", "application/json"])
def test_the_stores_put_with_a_content_type_equals_botocore(content_type: str) -> None:
    """A URL that signs the object's type (S3 then refuses any other) is botocore's, which
    signs ``ContentType`` as the ``content-type`` header."""
    from zarrchive.storage.objects import ObjectStore

    store = ObjectStore(
        endpoint_url=ENDPOINT,
        bucket="zarrchive",
        access_key_id="AKIDEXAMPLE",
        secret_access_key="wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY",
    )
    try:
        for key in KEYS:
            with mock.patch("zarrchive.storage.presign.datetime") as clock:
                clock.now.return_value = MOMENT
                ours = store.presign_put(key, "d41d8cd98f00b204e9800998ecf8427e", 600, content_type)
            theirs = _theirs(
                "put_object",
                {
                    "Bucket": "zarrchive",
                    "Key": key,
                    "ContentMD5": "1B2M2Y8AsgTpgAmY7PhCfg==",
                    "ContentType": content_type,
                },
                600,
                "PUT",
            )
            assert ours == theirs
            assert "X-Amz-SignedHeaders=content-md5%3Bcontent-type%3Bhost" in ours
    finally:
        store.close()


def test_the_store_presigns_with_it() -> None:
    """The store's per-file URLs come from the fast signer and equal botocore's."""
    from zarrchive.storage.objects import ObjectStore

    store = ObjectStore(
        endpoint_url=ENDPOINT,
        bucket="zarrchive",
        access_key_id="AKIDEXAMPLE",
        secret_access_key="wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY",
    )
    try:
        with mock.patch("zarrchive.storage.presign.datetime") as clock:
            clock.now.return_value = MOMENT
            ours = store.presign_put(KEYS[2], "d41d8cd98f00b204e9800998ecf8427e", 3600)
        theirs = _theirs(
            "put_object",
            {"Bucket": "zarrchive", "Key": KEYS[2], "ContentMD5": "1B2M2Y8AsgTpgAmY7PhCfg=="},
            3600,
            "PUT",
        )
        assert ours == theirs
    finally:
        store.close()


def test_the_stores_fallback_to_botocore_makes_the_same_urls() -> None:
    """Without our signer (credentials from boto3's own chain), botocore signs: same URLs."""
    from zarrchive.storage.objects import ObjectStore

    fast = ObjectStore(
        endpoint_url=ENDPOINT,
        bucket="zarrchive",
        access_key_id="AKIDEXAMPLE",
        secret_access_key="wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY",
    )
    slow = ObjectStore(
        endpoint_url=ENDPOINT,
        bucket="zarrchive",
        access_key_id="AKIDEXAMPLE",
        secret_access_key="wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY",
    )
    slow._presigner = None
    calls: list[Callable[[ObjectStore], str]] = [
        lambda s: s.presign_put(KEYS[4], "d41d8cd98f00b204e9800998ecf8427e", 3600),
        lambda s: s.presign_put(
            KEYS[1], "d41d8cd98f00b204e9800998ecf8427e", 60, "application/json"
        ),
        lambda s: s.presign_get(KEYS[2], 60),
        lambda s: s.presign_head(KEYS[2], 60),
        lambda s: s.presign_get_version(KEYS[3], "v+1/x", 60),
    ]
    try:
        with (
            mock.patch("zarrchive.storage.presign.datetime") as clock,
            mock.patch("botocore.auth.get_current_datetime", return_value=MOMENT),
        ):
            clock.now.return_value = MOMENT
            for call in calls:
                assert call(fast) == call(slow)
    finally:
        fast.close()
        slow.close()
