"""The embedded SeaweedFS keeps its data to the archive (review #25 items 6 and 8).

One embedded S3, started as ``zarrchive serve`` starts it (:func:`embedded_s3` on a data
directory of its own), with an archive on it.  Another local user must not get at the
objects other than through the S3 gateway's rules:

- the filer's and master's HTTP APIs, and the volume server's without a signed token,
  refuse reads and writes (embargoed objects stay unread, the public bucket unwritten,
  no bucket's volumes deleted);
- every gRPC port refuses a client without TLS, or with TLS but without the archive's
  certificate (the certificate works: the refusal is about it, not a broken port);
- the data directory, database, volumes and certificates are the owner's only;
- anonymous callers can't list the public bucket's in-progress multipart uploads or
  their parts, while anonymous listing and reading of objects still work.
"""

from __future__ import annotations

import json
import os
import re
import stat
import urllib.parse
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
import httpx
import pytest
from botocore import UNSIGNED
from botocore.config import Config
from botocore.exceptions import ClientError

from tests.helpers.embedded_s3 import (
    GRPC_OFFSET,
    grpc_answers_plaintext,
    grpc_tls_handshake,
    process_children,
    weed_ports,
    weed_shell,
)
from zarrchive.config import Settings
from zarrchive.services.runtime import Archive
from zarrchive.storage.embedded import embedded_s3
from zarrchive.storage.seaweedfs import free_port

PUBLIC_BODY = b"public chunk " + uuid.uuid4().bytes
SECRET_BODY = b"embargoed chunk " + uuid.uuid4().bytes


@dataclass
class Embedded:
    settings: Settings
    s3_dir: Path
    ports: dict[str, int]
    client: Any
    anonymous: Any
    public_key: str
    secret_key: str

    @property
    def host(self) -> str:
        """The loopback address every part listens on (S3's own: not the pages')."""
        return str(urllib.parse.urlsplit(self.settings.s3_endpoint_url).hostname)

    def url(self, part: str) -> str:
        return f"http://{self.host}:{self.ports[part]}"

    def grpc(self, part: str) -> str:
        """*part*'s address as ``weed shell`` takes it (``host:port.grpcport``)."""
        return f"{self.host}:{self.ports[part]}.{self.ports[part] + GRPC_OFFSET}"


@pytest.fixture(scope="module")
def embedded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Embedded]:
    data_dir = tmp_path_factory.mktemp("embedded") / "data"
    settings = Settings.from_env({"ZARRCHIVE_DATA_DIR": str(data_dir)})
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("ZARRCHIVE_EMBEDDED_S3_PORT", str(free_port()))
        with embedded_s3(settings) as resolved:
            archive = Archive.from_settings(resolved)  # the buckets, the database
            archive.close()
            s3_dir = data_dir / "s3"
            (args,) = [
                cmdline
                for pid in process_children(os.getpid())
                if f"-dir={s3_dir}" in (cmdline := _cmdline(pid))
            ]
            client = boto3.client(
                "s3",
                endpoint_url=resolved.s3_endpoint_url,
                aws_access_key_id=resolved.s3_access_key_id,
                aws_secret_access_key=resolved.s3_secret_access_key,
                region_name="us-east-1",
            )
            anonymous = boto3.client(
                "s3",
                endpoint_url=resolved.s3_endpoint_url,
                region_name="us-east-1",
                config=Config(signature_version=UNSIGNED, retries={"max_attempts": 1}),
            )
            public_key, secret_key = f"zarr/{uuid.uuid4()}/0", f"zarr/{uuid.uuid4()}/0"
            client.put_object(Bucket=resolved.s3_bucket, Key=public_key, Body=PUBLIC_BODY)
            client.put_object(Bucket=resolved.s3_embargo_bucket, Key=secret_key, Body=SECRET_BODY)
            yield Embedded(
                resolved,
                s3_dir,
                weed_ports(args),
                client,
                anonymous,
                public_key,
                secret_key,
            )


def _cmdline(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_text().split("\0")
    except OSError:
        return []


def _unchanged(e: Embedded) -> None:
    """Both objects still hold their bytes, and nothing else was written."""
    s = e.settings
    assert e.client.get_object(Bucket=s.s3_bucket, Key=e.public_key)["Body"].read() == PUBLIC_BODY
    secret = e.client.get_object(Bucket=s.s3_embargo_bucket, Key=e.secret_key)["Body"].read()
    assert secret == SECRET_BODY
    for bucket in (s.s3_bucket, s.s3_embargo_bucket):
        keys = [o["Key"] for o in e.client.list_objects_v2(Bucket=bucket).get("Contents", [])]
        assert keys == [e.public_key if bucket == s.s3_bucket else e.secret_key]


def test_filer_http_refuses_reads_and_writes(embedded: Embedded) -> None:
    e, s = embedded, embedded.settings
    filer = e.url("filer")
    reads = [
        f"/buckets/{s.s3_embargo_bucket}/{e.secret_key}",
        f"/buckets/{s.s3_bucket}/{e.public_key}",
        f"/buckets/{s.s3_embargo_bucket}/",
        "/buckets/",
        "/",
    ]
    for path in reads:
        response = httpx.get(filer + path, headers={"Accept": "application/json"})
        assert response.status_code >= 400, (path, response.status_code)
        assert SECRET_BODY not in response.content and PUBLIC_BODY not in response.content
        assert e.secret_key.split("/")[1] not in response.text
    for bucket in (s.s3_bucket, s.s3_embargo_bucket):
        evil = f"{filer}/buckets/{bucket}/evil.txt"
        assert httpx.put(evil, content=b"evil").status_code >= 400
        assert httpx.post(evil, files={"file": ("evil.txt", b"evil")}).status_code >= 400
        tus = httpx.post(
            f"{filer}/.tus/buckets/{bucket}/evil.txt",
            headers={"Tus-Resumable": "1.0.0", "Upload-Length": "4"},
        )
        assert tus.status_code >= 400
    target = f"{filer}/buckets/{s.s3_bucket}/{e.public_key}"
    assert httpx.delete(target).status_code >= 400
    _unchanged(e)


def test_master_http_refuses_its_api(embedded: Embedded) -> None:
    e, s = embedded, embedded.settings
    master = e.url("master")
    for path in (
        "/dir/assign",
        "/dir/lookup?volumeId=1",
        "/dir/status",
        "/vol/status",
        f"/vol/grow?collection={s.s3_bucket}&count=1",
        f"/col/delete?collection={s.s3_embargo_bucket}",
        f"/col/delete?collection={s.s3_bucket}",
        "/collection/info",
    ):
        response = httpx.get(master + path)
        assert response.status_code >= 400, (path, response.status_code, response.text[:200])
    _unchanged(e)


def _fids(e: Embedded, bucket: str, key: str) -> list[str]:
    """The volume file ids of an object's chunks, asked as the archive may (``weed shell``
    in the data directory, whose ``security.toml`` holds the certificate)."""
    master, filer = e.grpc("master"), e.grpc("filer")
    versions = f"/buckets/{bucket}/{key}.versions"  # a versioned bucket's object
    listed = weed_shell(f"fs.ls {versions}/", e.s3_dir, master, filer).split()
    assert len(listed) == 1 and listed[0].startswith("v_"), listed
    output = weed_shell(f"fs.meta.cat {versions}/{listed[0]}", e.s3_dir, master, filer)
    fids = re.findall(r'"fileId":\s*"(\d+,[0-9a-f]+)"', output)
    assert fids, output[-2000:]
    return fids


def test_volume_http_refuses_unsigned_reads_and_writes(embedded: Embedded) -> None:
    e, s = embedded, embedded.settings
    volume = e.url("volume")
    (secret_fid,) = _fids(e, s.s3_embargo_bucket, e.secret_key)
    (public_fid,) = _fids(e, s.s3_bucket, e.public_key)
    for fid in (secret_fid, public_fid):
        read = httpx.get(f"{volume}/{fid}")
        assert read.status_code == 401, (read.status_code, read.content[:200])
        assert SECRET_BODY not in read.content and PUBLIC_BODY not in read.content
        assert httpx.post(f"{volume}/{fid}", files={"file": ("x", b"evil")}).status_code == 401
        assert httpx.put(f"{volume}/{fid}", content=b"evil").status_code == 401
        assert httpx.delete(f"{volume}/{fid}").status_code == 401
    vid = public_fid.split(",")[0]
    fresh = f"{vid},{uuid.uuid4().hex[:8]}0badcafe"
    assert httpx.post(f"{volume}/{fresh}", files={"file": ("x", b"evil")}).status_code == 401
    _unchanged(e)


@pytest.mark.parametrize("part", ["master", "volume", "filer", "s3", "admin"])
def test_grpc_ports_refuse_clients_without_the_certificate(embedded: Embedded, part: str) -> None:
    port = embedded.ports[part] + GRPC_OFFSET
    tls = embedded.s3_dir / "tls"
    host = embedded.host
    assert not grpc_answers_plaintext(port, host=host)
    assert not grpc_tls_handshake(port, tls / "ca.crt", None, host=host)
    # the port works for a client with the archive's certificate: the refusals are about it
    assert grpc_tls_handshake(port, tls / "ca.crt", (tls / "node.crt", tls / "node.key"), host=host)


def test_weed_shell_without_the_certificate_gets_nothing(
    embedded: Embedded, tmp_path: Path
) -> None:
    e = embedded
    master, filer = e.grpc("master"), e.grpc("filer")
    try:
        output = weed_shell("fs.ls /buckets", tmp_path, master, filer, timeout=15)
    except Exception as exc:  # it keeps retrying the refused connection: a timeout
        output = str(exc)
    assert e.settings.s3_embargo_bucket not in output
    # the same command with the data directory's security.toml lists the buckets
    assert e.settings.s3_embargo_bucket in weed_shell("fs.ls /buckets", e.s3_dir, master, filer)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_data_files_are_the_owners_only(embedded: Embedded) -> None:
    e = embedded
    data_dir = e.settings.data_dir
    assert _mode(data_dir) == 0o700
    assert _mode(e.s3_dir) == 0o700
    assert _mode(data_dir / "zarrchive.sqlite3") == 0o600
    for name in ("zarrchive.sqlite3-wal", "zarrchive.sqlite3-shm"):
        if (data_dir / name).exists():
            assert _mode(data_dir / name) & 0o077 == 0, name
    for name in ("s3-credentials.json", "s3-endpoint"):
        assert _mode(data_dir / name) == 0o600, name
    volumes = list(e.s3_dir.glob("*.dat")) + list(e.s3_dir.glob("*.idx"))
    assert len(volumes) >= 4  # both buckets' volumes and indexes
    for path in volumes:
        assert _mode(path) & 0o077 == 0, (path, oct(_mode(path)))
    for path in (e.s3_dir / "security.toml", e.s3_dir / "weed.log", e.s3_dir / "tls" / "node.key"):
        assert _mode(path) == 0o600, path
    assert not (e.s3_dir / "tls" / "ca.key").exists()  # no further certificate can be signed
    for socket_path in (e.s3_dir / "filer.sock", e.s3_dir / "s3.sock"):
        assert socket_path.is_socket() and _mode(socket_path) & 0o077 == 0
    # nothing of this SeaweedFS in /tmp's guessable socket names
    assert not Path(f"/tmp/seaweedfs-filer-{e.ports['filer']}.sock").exists()
    assert not Path(f"/tmp/seaweedfs-s3-{e.ports['s3']}.sock").exists()


def test_an_existing_data_dir_and_database_are_tightened(tmp_path: Path) -> None:
    from zarrchive.db.session import Database

    data_dir = tmp_path / "old"
    data_dir.mkdir(mode=0o755)
    data_dir.chmod(0o755)
    database = data_dir / "zarrchive.sqlite3"
    database.write_bytes(b"")
    database.chmod(0o644)
    Settings.from_env({"ZARRCHIVE_DATA_DIR": str(data_dir)}).ensure_data_dir()
    Database(f"sqlite:///{database}").dispose()
    assert _mode(data_dir) == 0o700 and _mode(database) == 0o600


def _denied(call: Any) -> bool:
    try:
        call()
    except ClientError as exc:
        return exc.response["Error"]["Code"] == "AccessDenied"
    return False


def test_anonymous_callers_cannot_list_multipart_uploads(embedded: Embedded) -> None:
    e, bucket = embedded, embedded.settings.s3_bucket
    key = f"blobs/{uuid.uuid4()}"
    upload = e.client.create_multipart_upload(Bucket=bucket, Key=key)["UploadId"]
    try:
        e.client.upload_part(Bucket=bucket, Key=key, UploadId=upload, PartNumber=1, Body=b"x")
        assert _denied(lambda: e.anonymous.list_multipart_uploads(Bucket=bucket))
        assert _denied(lambda: e.anonymous.list_parts(Bucket=bucket, Key=key, UploadId=upload))
        # anonymous reading and listing of objects keep working
        listed = e.anonymous.list_objects_v2(Bucket=bucket)
        assert [o["Key"] for o in listed["Contents"]] == [e.public_key]
        got = e.anonymous.get_object(Bucket=bucket, Key=e.public_key)["Body"].read()
        assert got == PUBLIC_BODY
        assert e.anonymous.head_object(Bucket=bucket, Key=e.public_key)["ContentLength"] == len(
            PUBLIC_BODY
        )
        # and anonymous writes stay refused
        assert _denied(lambda: e.anonymous.put_object(Bucket=bucket, Key="evil", Body=b"evil"))
        # the archive itself still sees its uploads
        uploads = e.client.list_multipart_uploads(Bucket=bucket).get("Uploads", [])
        assert [u["UploadId"] for u in uploads] == [upload]
        parts = e.client.list_parts(Bucket=bucket, Key=key, UploadId=upload)["Parts"]
        assert [p["PartNumber"] for p in parts] == [1]
    finally:
        e.client.abort_multipart_upload(Bucket=bucket, Key=key, UploadId=upload)
    # the embargo bucket stays closed to anonymous callers altogether
    embargo = e.settings.s3_embargo_bucket
    assert _denied(lambda: e.anonymous.list_objects_v2(Bucket=embargo))
    assert _denied(lambda: e.anonymous.get_object(Bucket=embargo, Key=e.secret_key))


def test_the_denial_names_only_the_two_listings_of_one_bucket() -> None:
    from zarrchive.storage.seaweedfs import anonymous_multipart_listing_denial

    policy = anonymous_multipart_listing_denial("pub")
    statements = policy["Statement"]
    assert isinstance(statements, list)
    (statement,) = statements
    assert statement["Effect"] == "Deny"
    assert sorted(statement["Action"]) == [
        "s3:ListBucketMultipartUploads",
        "s3:ListMultipartUploadParts",
    ]
    assert statement["Resource"] == ["arn:aws:s3:::pub", "arn:aws:s3:::pub/*"]
    json.dumps(policy)  # what put_bucket_policy sends


def test_weed_runs_without_inherited_weed_settings(
    embedded: Embedded, monkeypatch: pytest.MonkeyPatch
) -> None:
    from zarrchive.storage import seaweedfs

    # a WEED_* variable would override security.toml (e.g. an empty signing key)
    monkeypatch.setenv("WEED_JWT_SIGNING_KEY", "")
    assert "WEED_JWT_SIGNING_KEY" not in seaweedfs._child_environment()
    assert os.environ["WEED_JWT_SIGNING_KEY"] == ""
