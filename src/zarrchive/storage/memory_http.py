"""The HTTP face of :class:`~zarrchive.storage.memory.MemoryObjectStore`: its URLs, answered.

A WSGI application on a threaded server of the standard library (127.0.0.1, a free port)
answers what clients send to the URLs the store hands out, by S3's rules:

- a presigned request (``X-Amz-Signature`` in the query) must carry the signature of the
  store's credentials over its method, path, query and signed headers (with the values the
  request sends: a missing or other ``Content-MD5`` or ``Content-Type`` is 403
  ``SignatureDoesNotMatch``), within ``X-Amz-Expires`` of ``X-Amz-Date`` (then 403
  ``AccessDenied``, "Request has expired");
- a body whose md5 is not its ``Content-MD5`` is 400 ``BadDigest``, and stores nothing;
- an unsigned GET or HEAD is served when the bucket is world-readable, anything else
  unsigned is 403 ``AccessDenied``;
- a presigned request with an ``x-amz-checksum-mode`` header it does not sign is 403
  ``AccessDenied`` (as S3 refuses ``x-amz-*`` headers a presigned URL does not sign: the
  embedded SeaweedFS does);
- with ``x-amz-checksum-mode: ENABLED``, a HEAD or a GET of a whole object assembled with a
  full-object CRC32 answers ``x-amz-checksum-crc32`` and ``x-amz-checksum-type:
  FULL_OBJECT``; user metadata is answered as ``x-amz-meta-*``.

Answered: GET and HEAD of an object or one version (``versionId``; ``Range: bytes=``), PUT
of an object or a part (``partNumber``, ``uploadId``), POST completing an upload
(``uploadId``, the parts' XML).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re
import socketserver
import threading
import urllib.parse
import xml.etree.ElementTree as ElementTree
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from typing import TYPE_CHECKING, Any, Protocol
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from zarrchive.errors import ChecksumRefused, InvalidInput, StorageError
from zarrchive.storage.objects import CHECKSUM_MODE_HEADER, ObjectInfo, WrittenVersion
from zarrchive.storage.presign import Presigner

if TYPE_CHECKING:
    from _typeshed.wsgi import StartResponse, WSGIEnvironment

#: S3's longest presigned URL (seven days).
MAX_EXPIRES = 604_800
#: The largest body the server reads (a test store: bounded all the same).
MAX_BODY = 1024**3
_RANGE = re.compile(r"bytes=(\d*)-(\d*)$")
_STATUS = {
    200: "200 OK",
    204: "204 No Content",
    206: "206 Partial Content",
    400: "400 Bad Request",
    403: "403 Forbidden",
    404: "404 Not Found",
    405: "405 Method Not Allowed",
    411: "411 Length Required",
    413: "413 Payload Too Large",
    416: "416 Range Not Satisfiable",
    503: "503 Service Unavailable",
}


class ServedVersion(Protocol):
    """A stored version as the server answers it (a delete marker has no *data*)."""

    @property
    def version_id(self) -> str: ...
    @property
    def data(self) -> bytes | None: ...
    @property
    def etag(self) -> str: ...
    @property
    def last_modified(self) -> datetime: ...
    @property
    def content_type(self) -> str: ...
    @property
    def metadata(self) -> dict[str, str]: ...
    @property
    def checksum_crc32(self) -> str | None: ...


class ServedStore(Protocol):
    """What the server asks of the store whose URLs it answers
    (:class:`~zarrchive.storage.memory.MemoryObjectStore`, which starts the server: the
    server knows the store by this alone, so neither module imports the other both ways)."""

    @property
    def bucket(self) -> str: ...
    @property
    def public_read(self) -> bool: ...
    @property
    def presigner(self) -> Presigner: ...
    @property
    def clock(self) -> Callable[[], datetime]: ...
    def stored(self, key: str, version_id: str | None = None) -> ServedVersion | None: ...
    def head(self, key: str, version_id: str | None = None) -> ObjectInfo | None: ...
    def put(self, key: str, data: bytes, content_type: str = ...) -> str | None: ...
    def upload_part(
        self, key: str, upload_id: str, part_number: int, data: bytes
    ) -> str | None: ...
    def complete_multipart(
        self,
        key: str,
        upload_id: str,
        parts: Iterable[tuple[int, str]],
        *,
        part_crc32s: Mapping[int, str] | None = ...,
        full_object_crc32: str | None = ...,
    ) -> WrittenVersion: ...


@dataclass
class Answer:
    """One HTTP answer."""

    status: int
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)


def s3_error(status: int, code: str, message: str) -> Answer:
    """S3's XML error document."""
    root = ElementTree.Element("Error")
    ElementTree.SubElement(root, "Code").text = code
    ElementTree.SubElement(root, "Message").text = message
    body = ElementTree.tostring(root, encoding="utf-8", xml_declaration=True)
    return Answer(status, body, {"Content-Type": "application/xml"})


@dataclass(frozen=True)
class Request:
    """What the server needs of an HTTP request: the method, the decoded path, the query
    (decoded pairs), the headers (lower-case names) and the body."""

    method: str
    path: str
    query: list[tuple[str, str]]
    headers: dict[str, str]
    body: bytes


def verify_presigned(
    presigner: Presigner, request: Request, bucket: str, key: str, now: datetime
) -> Answer | None:
    """``None`` when *request* carries a valid signature of *presigner*'s credentials for
    *bucket*/*key*, not expired at *now*; else S3's refusal."""
    amz = {name: value for name, value in request.query if name.startswith("X-Amz-")}
    params = {name: value for name, value in request.query if not name.startswith("X-Amz-")}
    try:
        moment = datetime.strptime(amz["X-Amz-Date"], "%Y%m%dT%H%M%SZ").replace(tzinfo=UTC)
        expires = int(amz["X-Amz-Expires"])
        signed_names = amz["X-Amz-SignedHeaders"].split(";")
        signature = amz["X-Amz-Signature"]
        credential = amz["X-Amz-Credential"]
        algorithm = amz["X-Amz-Algorithm"]
    except (KeyError, ValueError):
        return s3_error(400, "AuthorizationQueryParametersError", "incomplete signature")
    if algorithm != "AWS4-HMAC-SHA256" or not 1 <= expires <= MAX_EXPIRES:
        return s3_error(400, "AuthorizationQueryParametersError", "bad algorithm or expiry")
    if credential.split("/", 1)[0] != presigner.access_key_id:
        return s3_error(403, "InvalidAccessKeyId", "unknown access key")
    if "host" not in signed_names:
        return s3_error(403, "SignatureDoesNotMatch", "the host header must be signed")
    if CHECKSUM_MODE_HEADER in request.headers and CHECKSUM_MODE_HEADER not in signed_names:
        return s3_error(
            403,
            "AccessDenied",
            "There were headers present in the request which were not signed: "
            + CHECKSUM_MODE_HEADER,
        )
    headers: dict[str, str] = {}
    for name in signed_names:
        if name == "host":
            if request.headers.get("host") != presigner.host:
                return s3_error(403, "SignatureDoesNotMatch", "signed for another host")
            continue
        if name not in request.headers:
            return s3_error(403, "SignatureDoesNotMatch", f"the signed header {name} is missing")
        headers[name] = request.headers[name]
    expected = presigner.url(
        request.method, bucket, key, expires, headers=headers, params=params, now=moment
    )
    wanted = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(expected).query))
    if not hmac.compare_digest(wanted["X-Amz-Signature"], signature) or sorted(
        wanted["X-Amz-SignedHeaders"].split(";")
    ) != sorted(signed_names):
        return s3_error(403, "SignatureDoesNotMatch", "the signature does not match")
    if now > moment + timedelta(seconds=expires):
        return s3_error(403, "AccessDenied", "Request has expired")
    return None


def check_content_md5(request: Request) -> Answer | None:
    """S3's check of a body against its ``Content-MD5`` header (when it has one)."""
    value = request.headers.get("content-md5")
    if value is None:
        return None
    try:
        digest = base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        digest = b""
    if len(digest) != 16:
        return s3_error(400, "InvalidDigest", "the Content-MD5 is not a base64 md5")
    if digest != hashlib.md5(request.body).digest():
        return s3_error(400, "BadDigest", "the Content-MD5 does not match the body")
    return None


class MemoryS3App:
    """Answers *store*'s URLs (see the module's documentation)."""

    def __init__(self, store: ServedStore) -> None:
        self.store = store

    def answer(self, request: Request) -> Answer:
        store = self.store
        bucket, _, key = request.path.lstrip("/").partition("/")
        if bucket != store.bucket or not key:
            return s3_error(404, "NoSuchBucket", f"no bucket {bucket!r} here")
        signed = any(name == "X-Amz-Signature" for name, _ in request.query)
        if signed:
            refusal = verify_presigned(store.presigner, request, bucket, key, store.clock())
            if refusal is not None:
                return refusal
        elif not (store.public_read and request.method in ("GET", "HEAD")):
            return s3_error(403, "AccessDenied", "Access Denied")
        params = dict(request.query)
        try:
            if request.method in ("GET", "HEAD"):
                return self._read(request, key, params.get("versionId"))
            refusal = check_content_md5(request)
            if refusal is not None:
                return refusal
            if request.method == "PUT" and "uploadId" in params:
                return self._put_part(request, key, params)
            if request.method == "PUT":
                return self._put(request, key)
            if request.method == "POST" and "uploadId" in params:
                return self._complete(request, key, params["uploadId"])
        except InvalidInput as exc:
            return s3_error(400, "InvalidRequest", str(exc))
        except StorageError as exc:
            return s3_error(503, "ServiceUnavailable", str(exc))
        return s3_error(405, "MethodNotAllowed", f"{request.method} is not answered here")

    def _read(self, request: Request, key: str, version_id: str | None) -> Answer:
        version = self.store.stored(key, version_id)
        if version is None or version.data is None:
            return s3_error(404, "NoSuchKey" if version_id is None else "NoSuchVersion", key)
        data = version.data
        headers = {
            "ETag": f'"{version.etag}"',
            "Last-Modified": format_datetime(version.last_modified, usegmt=True),
            "Content-Type": version.content_type,
            "Accept-Ranges": "bytes",
            "x-amz-version-id": version.version_id,
        }
        for name, value in version.metadata.items():
            headers[f"x-amz-meta-{name}"] = value
        status = 200
        wanted = request.headers.get("range")
        checksum_mode = request.headers.get(CHECKSUM_MODE_HEADER, "").upper() == "ENABLED"
        if (
            checksum_mode
            and version.checksum_crc32
            and (wanted is None or request.method == "HEAD")
        ):
            # (S3 answers a full-object checksum with the whole object only)
            headers["x-amz-checksum-crc32"] = version.checksum_crc32
            headers["x-amz-checksum-type"] = "FULL_OBJECT"
        if wanted is not None and (match := _RANGE.match(wanted.strip())):
            first, last = match.groups()
            if first:
                start, end = int(first), min(int(last) if last else len(data) - 1, len(data) - 1)
            elif last:
                start, end = max(0, len(data) - int(last)), len(data) - 1
            else:
                start, end = 0, -1
            if start >= len(data) or end < start:
                return s3_error(416, "InvalidRange", "The requested range is not satisfiable")
            headers["Content-Range"] = f"bytes {start}-{end}/{len(data)}"
            data, status = data[start : end + 1], 206
        headers["Content-Length"] = str(len(data))
        return Answer(status, b"" if request.method == "HEAD" else data, headers)

    def _put(self, request: Request, key: str) -> Answer:
        content_type = request.headers.get("content-type") or None
        version_id = self.store.put(key, request.body, content_type or "binary/octet-stream")
        info = self.store.head(key, version_id)
        headers = {"ETag": f'"{info.etag if info else ""}"'}
        if version_id:
            headers["x-amz-version-id"] = version_id
        return Answer(200, b"", headers)

    def _put_part(self, request: Request, key: str, params: dict[str, str]) -> Answer:
        try:
            number = int(params.get("partNumber", ""))
        except ValueError:
            return s3_error(400, "InvalidArgument", "partNumber must be an integer")
        etag = self.store.upload_part(key, params["uploadId"], number, request.body)
        if etag is None:
            return s3_error(404, "NoSuchUpload", "The specified upload does not exist")
        return Answer(200, b"", {"ETag": f'"{etag}"'})

    def _complete(self, request: Request, key: str, upload_id: str) -> Answer:
        try:
            root = ElementTree.fromstring(request.body)
            listed = [part for part in root.iter() if _local(part.tag) == "Part"]
            parts = [(int(_text(part, "PartNumber")), _text(part, "ETag")) for part in listed]
            crcs = {
                int(_text(part, "PartNumber")): _text(part, "ChecksumCRC32")
                for part in listed
                if any(_local(child.tag) == "ChecksumCRC32" for child in part)
            }
        except (ElementTree.ParseError, ValueError):
            return s3_error(400, "MalformedXML", "the parts' XML is not well formed")
        try:
            written = self.store.complete_multipart(
                key,
                upload_id,
                parts,
                part_crc32s=crcs or None,
                full_object_crc32=request.headers.get("x-amz-checksum-crc32"),
            )
        except ChecksumRefused as exc:
            return s3_error(400, "BadDigest", str(exc))
        except InvalidInput as exc:
            code = next(
                (
                    c
                    for c in ("NoSuchUpload", "InvalidPartOrder", "InvalidPart", "EntityTooSmall")
                    if c in str(exc)
                ),
                "InvalidRequest",
            )
            return s3_error(404 if code == "NoSuchUpload" else 400, code, str(exc))
        result = ElementTree.Element("CompleteMultipartUploadResult")
        for name, value in (
            ("Bucket", self.store.bucket),
            ("Key", key),
            ("ETag", f'"{written.etag}"'),
        ):
            ElementTree.SubElement(result, name).text = value
        headers = {"Content-Type": "application/xml"}
        if written.version_id:
            headers["x-amz-version-id"] = written.version_id
        return Answer(200, ElementTree.tostring(result, encoding="utf-8"), headers)

    # -- WSGI ---------------------------------------------------------------------------------
    def __call__(self, environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        try:
            request = _request(environ)
        except _BodyError as exc:
            answer = s3_error(exc.status, exc.code, str(exc))
        else:
            answer = self.answer(request)
        if "Content-Length" not in answer.headers:
            answer.headers["Content-Length"] = str(len(answer.body))
        start_response(
            _STATUS.get(answer.status, f"{answer.status} S3"), list(answer.headers.items())
        )
        return [answer.body]


def _local(tag: str) -> str:
    return tag.rsplit("}", 1)[-1]


def _text(element: ElementTree.Element, name: str) -> str:
    for child in element:
        if _local(child.tag) == name:
            return (child.text or "").strip()
    raise ValueError(f"no {name}")


class _BodyError(Exception):
    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status, self.code = status, code


def _request(environ: WSGIEnvironment) -> Request:
    """The :class:`Request` of a WSGI environment (the body read whole, bounded)."""
    headers: dict[str, str] = {}
    for name, value in environ.items():
        if name.startswith("HTTP_"):
            headers[name[5:].replace("_", "-").lower()] = str(value)
    for name in ("CONTENT_TYPE", "CONTENT_LENGTH"):
        if environ.get(name):
            headers[name.replace("_", "-").lower()] = str(environ[name])
    stream: Any = environ["wsgi.input"]
    if headers.get("transfer-encoding", "").lower() == "chunked":
        body = _read_chunked(stream)
    else:
        length = int(headers.get("content-length") or 0)
        if length > MAX_BODY:
            raise _BodyError(413, "EntityTooLarge", "the body is too large for this store")
        body = stream.read(length) if length else b""
    # the path as the client encoded it: the standard library's server decoded it as latin-1
    path = str(environ.get("PATH_INFO", "")).encode("latin-1").decode("utf-8", "replace")
    query = urllib.parse.parse_qsl(str(environ.get("QUERY_STRING", "")), keep_blank_values=True)
    return Request(str(environ["REQUEST_METHOD"]), path, query, headers, body)


def _read_chunked(stream: Any) -> bytes:
    body = bytearray()
    while True:
        size_line = stream.readline(100)
        try:
            size = int(size_line.split(b";", 1)[0].strip(), 16)
        except ValueError as exc:
            raise _BodyError(400, "IncompleteBody", "a malformed chunk") from exc
        if size == 0:
            while stream.readline(1000) not in (b"\r\n", b"\n", b""):
                pass
            return bytes(body)
        if len(body) + size > MAX_BODY:
            raise _BodyError(413, "EntityTooLarge", "the body is too large for this store")
        body += stream.read(size)
        stream.readline(10)


class _ThreadingServer(socketserver.ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


class MemoryHTTPServer:
    """:class:`MemoryS3App` of *store* served on 127.0.0.1 in a thread of its own."""

    def __init__(self, store: ServedStore) -> None:
        self._server = make_server(
            "127.0.0.1",
            0,
            MemoryS3App(store),
            server_class=_ThreadingServer,
            handler_class=_QuietHandler,
        )
        self.origin = f"http://127.0.0.1:{self._server.server_address[1]}"
        self.presigner: Presigner | None = None
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.05},
            name="memory-s3",
            daemon=True,
        )
        self._thread.start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
