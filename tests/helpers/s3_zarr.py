"""A Zarr in an S3 bucket, as the source of an import (``zarrchive upload s3://...``): its
files written to a local directory (for the zarr-checksum oracle) and put under a prefix,
some of them as multipart objects (whose ETag is not an md5)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from zarrchive.storage.seaweedfs import SeaweedFS

#: The first part of an object put in parts (S3's smallest part).
PART = 5 * 1024**2
#: A small Zarr v3 group with two arrays' worth of chunk-like files.
SMALL_ZARR: dict[str, bytes] = {
    "zarr.json": b'{"zarr_format": 3, "node_type": "group"}',
    **{f"a/c/{i}/{j}": bytes([i, j]) * (50 + 7 * i + j) for i in range(3) for j in range(4)},
    **{f"b/c/{i}": f"chunk {i}".encode() * 20 for i in range(5)},
    "b/zarr.json": b'{"zarr_format": 3, "node_type": "array"}',
}


def source_s3_client(seaweedfs: SeaweedFS, bucket: str) -> Any:
    """A boto3 client of the test SeaweedFS, with *bucket* (an import's source) created: what
    the import tests' ``source_s3`` fixtures give."""
    client: Any = seaweedfs.client()
    client.create_bucket(Bucket=bucket)
    return client


def write_tree(root: Path, files: dict[str, bytes]) -> Path:
    """Write *files* (``path -> bytes``) below *root*; returns *root*."""
    for path, data in files.items():
        target = root / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
    return root


def put_tree(
    client: Any,
    bucket: str,
    prefix: str,
    files: dict[str, bytes],
    *,
    in_parts: tuple[str, ...] = (),
) -> None:
    """Put *files* under ``{prefix}/``; those named in *in_parts* as 2-part uploads."""
    for path, data in files.items():
        key = f"{prefix}/{path}" if prefix else path
        if path in in_parts:
            put_in_parts(client, bucket, key, data)
        else:
            client.put_object(Bucket=bucket, Key=key, Body=data)


def put_in_parts(client: Any, bucket: str, key: str, data: bytes) -> None:
    """*data* (more than :data:`PART` bytes) as a multipart upload of two parts (the ETag is
    ``<hex>-2``; S3 wants every part but the last of at least 5 MiB)."""
    half = PART
    upload = client.create_multipart_upload(Bucket=bucket, Key=key)["UploadId"]
    parts = []
    for number, body in ((1, data[:half]), (2, data[half:])):
        answer = client.upload_part(
            Bucket=bucket, Key=key, UploadId=upload, PartNumber=number, Body=body
        )
        parts.append({"PartNumber": number, "ETag": answer["ETag"]})
    client.complete_multipart_upload(
        Bucket=bucket, Key=key, UploadId=upload, MultipartUpload={"Parts": parts}
    )
