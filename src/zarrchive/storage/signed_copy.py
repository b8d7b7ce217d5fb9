"""Server-side copies (``CopyObject``) signed by our own signer and sent with urllib3.

An upload's apply makes one ``CopyObject`` per file: a million for a Zarr of a million chunks.
botocore spends about 1.6 ms of CPU on each (parameter validation, a dozen event hooks, the
endpoint ruleset, the user agent, signing, parsing), which on a machine whose S3 shares the
cores (the embedded SeaweedFS, any single-host deployment) is taken from S3 itself: at
256 KiB a file it was a sixth of all the CPU an upload used.  Here a copy costs about 0.7 ms:
the request is presigned by :class:`~zarrchive.storage.presign.Presigner` (the signer the
upload URLs already use, checked against botocore's byte for byte), sent on a urllib3
connection pool (the HTTP library botocore itself sends with), and its small XML answer read
with the standard library.

An unembargo's copies (from the embargo bucket to the public one, on the same endpoint) and
its multipart copies' parts (``UploadPartCopy``) are sent the same way.

It does what botocore does for these operations: the ``x-amz-copy-source`` header encoded
as botocore encodes it, one retry of a transient failure (5xx, ``SlowDown``, a connection
error), and the error S3 may put in a ``200`` answer of a copy that failed part-way (retried
as botocore retries it).  :class:`~zarrchive.storage.objects.ObjectStore` uses it where its
presigner applies and maps :class:`S3Refused` / :class:`S3Unreachable` into the archive's
exception tree as it maps botocore's errors.
"""

from __future__ import annotations

import random
import time
import urllib.parse
import xml.etree.ElementTree as ElementTree
from collections.abc import Mapping
from dataclasses import dataclass

import urllib3

from zarrchive.storage.presign import Presigner

#: S3's answers worth one more attempt (botocore's "standard" retry mode retries these).
RETRIED_STATUSES = frozenset({500, 502, 503, 504})
RETRIED_CODES = frozenset(
    {
        "InternalError",
        "ServiceUnavailable",
        "SlowDown",
        "RequestTimeout",
        "RequestTimeTooSkewed",
        "Throttling",
        "ThrottlingException",
    }
)
#: Attempts of one copy (botocore's ``total_max_attempts`` of the archive's clients).
ATTEMPTS = 2
#: How long a signed copy request stays valid: it is sent at once, by this process.
URL_SECONDS = 900


@dataclass(frozen=True, slots=True)
class CopyAnswer:
    """What S3 answered a copy: the new version's ETag (unquoted), its version id (``None``
    on an unversioned bucket) and its LastModified as S3 wrote it (ISO 8601), if given; for
    a part copied into an upload created with a CRC32 checksum, the part's CRC32 (base64)."""

    etag: str
    version_id: str | None
    last_modified: str | None
    checksum_crc32: str | None = None


class S3Refused(Exception):
    """S3 answered the copy with an error (*status*, its *code* and *message*)."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(f"{code or 'error'} ({status}): {message}" if message else code)
        self.status = status
        self.code = code
        self.message = message

    @property
    def transient(self) -> bool:
        return self.status in RETRIED_STATUSES or self.code in RETRIED_CODES


class S3Unreachable(Exception):
    """The copy got no answer: no connection, a reset, or a timeout."""


def copy_source_header(bucket: str, key: str, version_id: str | None) -> str:
    """``x-amz-copy-source`` of *key* in *bucket* (at *version_id*), as botocore writes it:
    ``bucket/key`` percent-encoded except ``/`` and ``-._~``, the version id appended as is."""
    source = urllib.parse.quote(f"{bucket}/{key}", safe="/-._~")
    return source if version_id is None else f"{source}?versionId={version_id}"


def _local(tag: str) -> str:
    """An element's name without its namespace."""
    return tag.rsplit("}", 1)[-1]


def _texts(root: ElementTree.Element) -> dict[str, str]:
    return {_local(child.tag): (child.text or "") for child in root}


def parse_copy_answer(
    status: int, headers: Mapping[str, str], body: bytes, *, result: str = "CopyObjectResult"
) -> CopyAnswer:
    """The copy S3 answered with *status*, *headers* and *body*; raises :class:`S3Refused`
    for an error, including one in a ``200`` answer (S3 sends it when a copy fails after it
    has begun: botocore treats it as an ``InternalError``, 500) or a ``200`` whose body is
    not a *result* (``CopyObjectResult``; an ``UploadPartCopy``'s: ``CopyPartResult``)."""
    try:
        root = ElementTree.fromstring(body) if body.strip() else None
    except ElementTree.ParseError:
        root = None
    fields = _texts(root) if root is not None else {}
    if status != 200 or root is None or _local(root.tag) != result:
        if status == 200:  # an error after the copy began, or an answer that is not one
            raise S3Refused(500, fields.get("Code", "InternalError"), fields.get("Message", ""))
        raise S3Refused(status, fields.get("Code", str(status)), fields.get("Message", ""))
    version = headers.get("x-amz-version-id")
    return CopyAnswer(
        etag=fields.get("ETag", "").strip('"'),
        version_id=version if version and version != "null" else None,
        last_modified=fields.get("LastModified") or None,
        checksum_crc32=fields.get("ChecksumCRC32") or None,
    )


class CopySender:
    """Sends ``CopyObject`` and ``UploadPartCopy`` requests to one bucket (from it, or from
    another bucket of the same endpoint: an unembargo's copies), each signed by *presigner*.

    *verify* is the TLS verification of an ``https`` endpoint as botocore was given it:
    ``True`` (the default certificate store), ``False``, or a CA bundle's path."""

    def __init__(
        self,
        presigner: Presigner,
        endpoint_url: str,
        bucket: str,
        *,
        connections: int,
        connect_timeout: float,
        read_timeout: float,
        verify: bool | str = True,
    ) -> None:
        self._presigner = presigner
        self._bucket = bucket
        #: The S3 endpoint copies are sent to (a source bucket must be on it).
        self.endpoint_url = endpoint_url.rstrip("/")
        tls: dict[str, str] = {}
        if endpoint_url.startswith("https:"):
            if verify is False:
                tls["cert_reqs"] = "CERT_NONE"
            elif isinstance(verify, str):
                tls["ca_certs"] = verify
        self._pool = urllib3.connection_from_url(
            endpoint_url,
            maxsize=connections,
            timeout=urllib3.Timeout(connect=connect_timeout, read=read_timeout),
            retries=False,
            **tls,
        )

    def copy(
        self,
        source_key: str,
        key: str,
        version_id: str | None = None,
        *,
        content_type: str | None = None,
        source_bucket: str | None = None,
        if_match: str | None = None,
    ) -> CopyAnswer:
        """Copy *source_key* (at *version_id*; of *source_bucket*, default this bucket) to
        *key*, keeping its metadata (with *content_type*: replacing it, the copy has that
        type and no user metadata); retried once after a transient failure.  With
        *if_match* (an ETag), S3 copies only if the source still has it
        (``x-amz-copy-source-if-match``; else 412 ``PreconditionFailed``).  Raises
        :class:`S3Refused` or :class:`S3Unreachable`."""
        headers = {
            "x-amz-copy-source": copy_source_header(
                source_bucket or self._bucket, source_key, version_id
            ),
            "x-amz-metadata-directive": "REPLACE" if content_type else "COPY",
        }
        if if_match is not None:
            headers["x-amz-copy-source-if-match"] = if_match
        if content_type:
            headers["Content-Type"] = content_type
        return self._send(key, headers, {}, "CopyObjectResult")

    def copy_part(
        self,
        source_key: str,
        version_id: str | None,
        key: str,
        upload_id: str,
        part_number: int,
        first: int,
        last: int,
        *,
        source_bucket: str | None = None,
        if_match: str | None = None,
    ) -> CopyAnswer:
        """``UploadPartCopy``: bytes *first*..*last* (inclusive) of *source_key* (at
        *version_id*; of *source_bucket*, default this bucket) as part *part_number* of the
        multipart upload *upload_id* of *key*: the part's ETag (unquoted) and, on an upload
        created with a CRC32 checksum, its CRC32 (:attr:`CopyAnswer.checksum_crc32`).
        *if_match*: as :meth:`copy`.  Retried once after a transient failure, as
        :meth:`copy`."""
        headers = {
            "x-amz-copy-source": copy_source_header(
                source_bucket or self._bucket, source_key, version_id
            ),
            "x-amz-copy-source-range": f"bytes={first}-{last}",
        }
        if if_match is not None:
            headers["x-amz-copy-source-if-match"] = if_match
        params = {"partNumber": str(part_number), "uploadId": upload_id}
        return self._send(key, headers, params, "CopyPartResult")

    def _send(
        self, key: str, headers: dict[str, str], params: dict[str, str], result: str
    ) -> CopyAnswer:
        for attempt in range(1, ATTEMPTS + 1):
            url = self._presigner.url(
                "PUT", self._bucket, key, URL_SECONDS, headers=headers, params=params
            )
            target = "/" + url.split("/", 3)[3]  # path and query: the pool's host is signed
            try:
                response = self._pool.urlopen("PUT", target, headers=headers, body=b"")
                return parse_copy_answer(
                    response.status, response.headers, response.data, result=result
                )
            except urllib3.exceptions.HTTPError as exc:
                if attempt == ATTEMPTS:
                    raise S3Unreachable(str(exc)) from exc
            except S3Refused as refused:
                if attempt == ATTEMPTS or not refused.transient:
                    raise
            time.sleep(random.uniform(0.05, 0.5))  # jittered, as botocore backs off
        raise AssertionError("unreachable")  # pragma: no cover

    def close(self) -> None:
        self._pool.close()
