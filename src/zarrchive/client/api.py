"""A typed client of the archive's HTTP API.

One :class:`ApiClient` holds one pooled :class:`httpx.Client`; it is safe to
share between threads.  Every request has timeouts and is retried as
:mod:`zarrchive.transport` says (backoff with jitter on connection errors,
429 and 5xx, honouring ``Retry-After``).  Errors become
:class:`~zarrchive.errors.ApiError` (with the server's ``detail``) or
:class:`~zarrchive.errors.NetworkError`, with one-line messages.

Requests that change state (opening, completing or cancelling a batch, deleting
files) are retried too: the sync engine (:mod:`zarrchive.client.upload`) knows
how to recognise a retried request that had already succeeded (``409`` on
re-opening, ``404`` on re-completing): such an error says it was retried
(:attr:`~zarrchive.errors.ApiError.retried`).

Every endpoint answers typed values (:class:`ZarrInfo`, :class:`AssetInfo`,
:class:`OpenedBatch`, ...), never the server's raw JSON.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote, urlencode

import httpx

from zarrchive.client.address import archive_root
from zarrchive.client.asset_metadata import zarr_asset_metadata
from zarrchive.errors import ApiError, InvalidInput, NetworkError
from zarrchive.transport import (
    RETRY_EXCEPTIONS,
    RETRY_STATUSES,
    RetryEvent,
    RetryHook,
    RetryPolicy,
    http_client,
    parse_retry_after,
    send,
    transport_message,
)
from zarrchive.wire.zarrs import DirectoryPage, ListingEntry, UploadState, ZarrInfo
from zarrchive.wire.zarrs import FileEntry as FileInfo  # a file of a Zarr (the client's name)

#: The listing endpoint's largest page.
MAX_PAGE_SIZE = 1000
DEFAULT_TIMEOUT = httpx.Timeout(60.0, connect=10.0)
#: The header of ``complete``'s answer that names the batch it queued.
BATCH_HEADER = "X-Zarrchive-Batch"
#: Batches one ``GET .../upload/refused/`` asks about at most (the server's limit).
MAX_REFUSAL_BATCHES = 100
#: Attempts at connecting to an archive this client has never reached: a refused connection,
#: an unknown host or a TLS handshake with a plain server is a wrong URL, not a blip, and is
#: said within a second or two rather than after the whole backoff.
UNREACHED_CONNECT_ATTEMPTS = 2


# -- response types ---------------------------------------------------------------------
@dataclass(frozen=True)
class ServerInfo:
    version: str
    s3_endpoint_url: str | None
    bucket: str
    max_batch_files: int
    #: The dandischema version the archive validates with (``schema_version``).
    schema_version: str | None = None
    #: What publishing does to Zarrs: ``freeze`` (immutable) or ``snapshot`` (the version
    #: pins the Zarr's state; the draft stays writable); ``freeze`` when the archive does not
    #: say.
    published_zarrs: str = "freeze"


@dataclass(frozen=True)
class DandisetInfo:
    """A dandiset, as far as the client needs it."""

    identifier: str
    name: str
    #: ``OPEN``, ``EMBARGOED`` or ``UNEMBARGOING`` (None: an archive that does not say)
    embargo_status: str | None
    embargoed: bool

    @property
    def is_private(self) -> bool:
        """True if the dandiset's objects are not world-readable (embargoed or
        unembargoing)."""
        if self.embargo_status is not None:
            return self.embargo_status.lower() != "open"
        return self.embargoed

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> DandisetInfo:
        status = data.get("embargo_status")
        return cls(
            identifier=str(data["identifier"]),
            name=str(data.get("name", "")),
            embargo_status=status if isinstance(status, str) else None,
            embargoed=bool(data.get("embargoed", False)),
        )


@dataclass(frozen=True)
class AssetInfo:
    """An asset of a dandiset's version: a Zarr's (:attr:`zarr_id`) or a blob's."""

    asset_id: str
    path: str
    #: The Zarr of a Zarr asset (None: a file, a blob)
    zarr_id: str | None
    size: int
    #: Its metadata (empty when the listing did not include it)
    metadata: Mapping[str, Any]

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> AssetInfo:
        zarr_id = data.get("zarr_id")
        metadata = data.get("metadata")
        return cls(
            asset_id=str(data["asset_id"]),
            path=str(data["path"]),
            zarr_id=str(zarr_id) if zarr_id else None,
            size=int(data.get("size") or 0),
            metadata=metadata if isinstance(metadata, Mapping) else {},
        )


@dataclass(frozen=True)
class Target:
    """Where a file of an open batch goes: a presigned PUT URL, or parts (their URLs asked
    for while the batch is open: :mod:`zarrchive.client.multipart`)."""

    url: str | None
    part_size: int | None = None
    part_count: int | None = None

    @property
    def in_parts(self) -> bool:
        return self.url is None


@dataclass(frozen=True)
class ZarrState:
    """A checksum a Zarr had (its history, newest first)."""

    checksum: str
    time: str
    file_count: int
    size: int
    restorable: bool
    current: bool


@dataclass(frozen=True)
class RestoreOutcome:
    """What rolling a Zarr back did: files copied back and deleted, the batches of the
    change (0: already at that checksum), and whether it is applied (else the server's job
    applies it)."""

    copied: int
    deleted: int
    batches: int
    applied: bool


@dataclass(frozen=True)
class OpenedBatch:
    """An upload batch :meth:`ApiClient.open_upload` opened (or answered again): its uid,
    if the archive names it, and each file's :class:`Target`."""

    uid: str | None
    targets: dict[str, Target]


@dataclass(frozen=True)
class DownloadLink:
    """Where to read a file of an embargoed Zarr: a presigned GET, and a presigned HEAD of
    the same object when the archive gives one (a GET URL cannot be HEADed under SigV4)."""

    url: str
    head_url: str | None = None

    @classmethod
    def from_json(cls, item: Mapping[str, Any]) -> DownloadLink:
        head = item.get("head_url")
        return cls(str(item["url"]), head if isinstance(head, str) and head else None)


@dataclass(frozen=True)
class DirectoryListing:
    """A whole directory (every page)."""

    path: str
    digest: str
    directories: list[ListingEntry]
    files: list[ListingEntry]


def is_zarr_id(value: str) -> bool:
    try:
        uuid.UUID(value)
    except ValueError:
        return False
    return True


# -- the client -------------------------------------------------------------------------
def _checked_token(token: str | None) -> str | None:
    """*token* without the blanks a copy and paste may add; refused (one clear line, not an
    error of the HTTP layer) unless it is one word of visible ASCII, as tokens are."""
    if token is None:
        return None
    token = token.strip()
    if not token:
        return None
    if not token.isascii() or not token.isprintable() or any(c.isspace() for c in token):
        raise InvalidInput(
            "the API token (ZARRCHIVE_TOKEN / --token) is malformed: a token is one word of "
            "letters and digits, as `zarrchive admin create-user` prints it"
        )
    return token


def _detail_message(detail: Any) -> str:
    if isinstance(detail, str):
        return detail
    if isinstance(detail, Mapping) and isinstance(detail.get("message"), str):
        return str(detail["message"])
    return str(detail)


def _without_header_advice(said: str) -> str:
    """The server's reason without its advice to HTTP clients (``send 'Authorization: token
    KEY'``), which the client's users act on through ZARRCHIVE_TOKEN / --token instead."""
    reason = said.split(": send ", 1)[0].strip()
    return "the API token is malformed" if "Authorization" in reason else reason


def _friendly(status: int, method: str, path: str, detail: Any, *, has_token: bool) -> str:
    said = _detail_message(detail)
    if status == 401:
        reason = _without_header_advice(said)
        if not has_token:
            need = "" if "token" in reason.lower() else ": this needs your API token"
            return (
                f"{reason}{need}: set ZARRCHIVE_TOKEN or pass --token (`zarrchive admin "
                "create-user NAME`, run where the archive is served, prints a new one)"
            )
        hint = "" if "ZARRCHIVE_TOKEN" in reason else " (check ZARRCHIVE_TOKEN / --token)"
        return f"the archive refused the credentials: {reason}{hint}"
    if status == 403:
        return f"permission denied: {said}"
    if status == 404:
        return f"not found: {said}"
    if status == 409:
        return f"conflict: {said}"
    return f"the archive answered {status} to {method} {path}: {said}"


def _unreached_advice(exc: BaseException, url: str) -> str:
    """What to check when the archive at *url* was never reached."""
    if isinstance(exc, httpx.ConnectError) and url.startswith("https://"):
        text = str(exc).lower()
        if "ssl" in text or "tls" in text or "certificate" in text:
            return " (is the archive served over plain http://? check ZARRCHIVE_URL or --api-url)"
    return " (is the archive running, and are ZARRCHIVE_URL or --api-url right?)"


class ApiClient:
    """The archive's API at *url* (``https://host``), authenticated with *token*."""

    def __init__(
        self,
        url: str,
        token: str | None = None,
        *,
        retry: RetryPolicy | None = None,
        on_retry: RetryHook | None = None,
        timeout: httpx.Timeout | float = DEFAULT_TIMEOUT,
        max_connections: int = 32,
    ) -> None:
        self.url = archive_root(url)
        self.token = _checked_token(token)
        self.retry = retry or RetryPolicy()
        #: Called before each retry of any request of this client (its S3 transfers too).
        self.on_retry = on_retry
        headers = {"Authorization": f"token {self.token}"} if self.token else {}
        self.http = http_client(
            base_url=self.url, headers=headers, timeout=timeout, max_connections=max_connections
        )
        self._info: ServerInfo | None = None
        #: Whether the archive ever answered this client (any status).
        self._reached = False

    @classmethod
    def from_env(
        cls,
        url: str | None = None,
        token: str | None = None,
        *,
        environ: Mapping[str, str] | None = None,
        **kwargs: Any,
    ) -> ApiClient:
        """A client from explicit values, else ``ZARRCHIVE_URL`` / ``ZARRCHIVE_TOKEN``
        (and ``ZARRCHIVE_RETRIES``: attempts per request, default 6)."""
        env = os.environ if environ is None else environ
        url = url or env.get("ZARRCHIVE_URL") or None
        token = token or env.get("ZARRCHIVE_TOKEN") or None
        if not url:
            raise InvalidInput("no archive URL: pass --api-url or set ZARRCHIVE_URL")
        attempts = env.get("ZARRCHIVE_RETRIES")
        if attempts and "retry" not in kwargs:
            try:
                kwargs["retry"] = RetryPolicy(attempts=max(1, int(attempts)))
            except ValueError:
                raise InvalidInput(
                    f"ZARRCHIVE_RETRIES={attempts!r}: expected a number of attempts"
                ) from None
        return cls(url, token, **kwargs)

    def close(self) -> None:
        self.http.close()

    def __enter__(self) -> ApiClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- transport ----------------------------------------------------------------------
    def request(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        params: Mapping[str, str | int] | None = None,
        retry: RetryPolicy | None = None,
        timeout: httpx.Timeout | None = None,
    ) -> httpx.Response:
        """A successful (2xx) response, after retries; raises ApiError (which says whether
        the request was retried) / NetworkError.  *timeout*: this request's, if not the
        client's."""
        retried = False

        def on_retry(event: RetryEvent) -> None:
            nonlocal retried
            retried = True
            if self.on_retry is not None:
                self.on_retry(event)

        try:
            response = send(
                self.http,
                method,
                path,
                policy=retry or self.retry,
                on_retry=on_retry,
                give_up=self._give_up,
                json=json,
                params=params,
                **({"timeout": timeout} if timeout is not None else {}),
            )
        except RETRY_EXCEPTIONS as exc:
            raise NetworkError(
                f"cannot reach the archive at {self.url}: {transport_message(exc)}"
                + ("" if self._reached else _unreached_advice(exc, self.url))
            ) from None
        except (httpx.HTTPError, httpx.InvalidURL) as exc:  # not the network: the request
            raise InvalidInput(
                f"cannot ask the archive at {self.url} for {path}: {transport_message(exc)}"
            ) from None
        self._reached = True
        if response.is_success:
            return response
        raise self._error(method, path, response, retried=retried)

    def _give_up(self, exc: Exception, attempts: int) -> bool:
        """A connection that fails before the archive ever answered is given up after
        :data:`UNREACHED_CONNECT_ATTEMPTS` (timeouts keep the whole policy)."""
        return (
            not self._reached
            and isinstance(exc, httpx.ConnectError)
            and attempts >= UNREACHED_CONNECT_ATTEMPTS
        )

    def _error(
        self, method: str, path: str, response: httpx.Response, *, retried: bool
    ) -> ApiError:
        try:
            detail = response.json().get("detail")
        except (ValueError, AttributeError):
            detail = response.text[:200] or response.reason_phrase
        message = _friendly(
            response.status_code, method, path, detail, has_token=self.token is not None
        )
        return ApiError(message, status_code=response.status_code, detail=detail, retried=retried)

    def _json(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        params: Mapping[str, str | int] | None = None,
    ) -> Any:
        return self._decoded(self.request(method, path, json=json, params=params), method, path)

    def _decoded(self, response: httpx.Response, method: str, path: str) -> Any:
        if response.status_code == 204 or not response.content:
            return None
        try:
            return response.json()
        except ValueError:
            raise ApiError(
                f"the archive at {self.url} answered {method} {path} with something that is "
                "not JSON: is this a zarrchive server?",
                status_code=response.status_code,
            ) from None

    # -- endpoints ----------------------------------------------------------------------
    def info(self) -> ServerInfo:
        """``GET /api/info/`` (cached)."""
        if self._info is None:
            data = self._json("GET", "/api/info/")
            try:
                self._info = ServerInfo(
                    version=str(data["version"]),
                    s3_endpoint_url=data.get("s3_endpoint_url"),
                    bucket=str(data["bucket"]),
                    max_batch_files=int(data["max_batch_files"]),
                    schema_version=data.get("schema_version"),
                    published_zarrs=_text(data.get("published_zarrs"), "freeze"),
                )
            except (KeyError, TypeError, ValueError):
                raise ApiError(
                    f"{self.url}/api/info/ is not a zarrchive server's answer", status_code=200
                ) from None
        return self._info

    def create_dandiset(self, name: str, *, embargo: bool = False) -> str:
        body: dict[str, object] = {"name": name}
        if embargo:
            body["embargo"] = True
        data = self._json("POST", "/api/dandisets/", json=body)
        return str(data["identifier"])

    def is_private(self, dandiset: str) -> bool:
        """True if the dandiset's objects are not world-readable (embargoed or unembargoing)."""
        return self.get_dandiset(dandiset).is_private

    def get_dandiset(self, identifier: str) -> DandisetInfo:
        return DandisetInfo.from_json(
            self._json("GET", f"/api/dandisets/{quote(identifier, safe='')}/")
        )

    def find_asset(self, dandiset: str, path: str, *, version: str = "draft") -> AssetInfo | None:
        """The asset at *path* in a version of *dandiset*, or None (also when the dandiset
        or the version does not exist: callers say what was not found)."""
        url = (
            f"/api/dandisets/{quote(dandiset, safe='')}/versions/{quote(version, safe='')}/assets/"
        )
        params: dict[str, str | int] = {"path": path, "page_size": 100, "metadata": "true"}
        while True:
            try:
                page = self._json("GET", url, params=params)
            except ApiError as exc:
                if exc.status_code == 404:
                    return None
                raise
            for row in page.get("results", []):
                if row.get("path") == path:
                    return AssetInfo.from_json(row)
            if not page.get("next"):
                return None
            params["page"] = int(params.get("page", 1)) + 1

    def create_asset(
        self, dandiset: str, path: str, *, zarr_id: str, version: str = "draft"
    ) -> AssetInfo:
        """A new asset at *path* pointing at the Zarr *zarr_id*, with the metadata
        dandi-cli gives a Zarr asset (:mod:`zarrchive.client.asset_metadata`)."""
        url = (
            f"/api/dandisets/{quote(dandiset, safe='')}/versions/{quote(version, safe='')}/assets/"
        )
        started = datetime.now(UTC).astimezone()
        zarr = self.get_zarr(zarr_id)
        metadata = zarr_asset_metadata(
            path,
            checksum=zarr.checksum or None,
            size=zarr.size,
            schema_version=self.info().schema_version,
            started=started,
            ended=datetime.now(UTC).astimezone(),
        )
        return AssetInfo.from_json(
            self._json("POST", url, json={"metadata": metadata, "zarr_id": zarr_id})
        )

    def create_zarr(self, name: str, dandiset: str) -> ZarrInfo:
        return ZarrInfo.from_json(
            self._json("POST", "/api/zarr/", json={"name": name, "dandiset": dandiset})
        )

    def get_zarr(self, zarr_id: str) -> ZarrInfo:
        return ZarrInfo.from_json(self._json("GET", f"/api/zarr/{_id(zarr_id)}/"))

    def find_zarr(self, dandiset: str, name: str) -> ZarrInfo | None:
        """The Zarr named *name* in *dandiset*, or None."""
        page = self._json("GET", "/api/zarr/", params={"dandiset": dandiset, "name": name})
        for row in page["results"]:
            if row["name"] == name:
                return ZarrInfo.from_json(row)
        return None

    def list_page(
        self, zarr_id: str, directory: str, *, cursor: str | None = None, page_size: int = 1000
    ) -> DirectoryPage:
        """One page of a directory's listing (``""`` is the root)."""
        # {id}.zarr/{path}: every directory, none shadowed by another route (files/, ...)
        path = f"/api/zarr/{_id(zarr_id)}.zarr/" + (
            quote(directory, safe="/~") + "/" if directory else ""
        )
        params: dict[str, str | int] = {"page_size": page_size}
        if cursor:
            params["cursor"] = cursor
        data = self._json("GET", path, params=params)
        if data.get("type") != "directory":
            raise ApiError(f"{directory!r} is a file, not a directory", status_code=200)
        return DirectoryPage.from_json(data)

    def list_directory(self, zarr_id: str, directory: str) -> DirectoryListing:
        """Every child of a directory (all pages)."""
        page = self.list_page(zarr_id, directory, page_size=MAX_PAGE_SIZE)
        directories, files = list(page.directories), list(page.files)
        digest = page.digest
        while page.next:
            page = self.list_page(zarr_id, directory, cursor=page.next, page_size=MAX_PAGE_SIZE)
            directories.extend(page.directories)
            files.extend(page.files)
        return DirectoryListing(directory, digest, directories, files)

    def get_file(self, zarr_id: str, path: str) -> FileInfo | None:
        """A file's details, or None if *path* is not a file."""
        try:
            data = self._json("GET", f"/api/zarr/{_id(zarr_id)}/{quote(path, safe='/~')}")
        except ApiError as exc:
            if exc.status_code == 404:
                return None
            raise
        if data.get("type") != "file":
            return None
        return FileInfo.from_json(data)

    def download_urls(self, zarr_id: str, paths: Sequence[str]) -> dict[str, str]:
        """URLs to GET files (presigned, short-lived, for an embargoed Zarr), batched."""
        return {path: link.url for path, link in self.download_links(zarr_id, paths).items()}

    def download_links(self, zarr_id: str, paths: Sequence[str]) -> dict[str, DownloadLink]:
        """:meth:`download_urls` with each file's presigned HEAD when the archive gives one."""
        step = self.info().max_batch_files
        links: dict[str, DownloadLink] = {}
        for start in range(0, len(paths), step):
            chunk = [{"path": p} for p in paths[start : start + step]]
            data = self._json("POST", f"/api/zarr/{_id(zarr_id)}/download/", json=chunk)
            links.update((str(item["path"]), DownloadLink.from_json(item)) for item in data)
        return links

    def upload_in_progress(self, zarr_id: str) -> bool:
        try:
            self.request("GET", f"/api/zarr/{_id(zarr_id)}/upload/")
        except ApiError as exc:
            if exc.status_code == 404 and "upload" in _detail_message(exc.detail).lower():
                return False
            raise
        return True

    def start_upload(self, zarr_id: str, files: Sequence[tuple[str, str]]) -> dict[str, str]:
        """Open a batch for ``(path, md5)`` pairs: ``{path: presigned PUT URL}``."""
        rows = self._json(
            "POST",
            f"/api/zarr/{_id(zarr_id)}/upload/",
            json=[{"path": p, "etag": m} for p, m in files],
        )
        return {str(r["path"]): str(r["upload_url"]) for r in rows}

    def open_upload(
        self,
        zarr_id: str,
        files: Sequence[tuple[str, str, int | None]],
        *,
        resume: bool = False,
        after: str | None = None,
    ) -> OpenedBatch:
        """Open a batch of ``(path, md5, size)``: its uid and each file's :class:`Target` (a
        presigned PUT URL, or parts: see :mod:`zarrchive.client.multipart`).  A size None is
        not declared (the file is never sent in parts, and the batch is verified by
        ``complete`` rather than by its apply).  With *resume*, an open batch of exactly these
        files opened by us is answered again instead of 409.  With *after* (the uid of our
        open batch), the batch is opened ahead as its next one."""
        path = f"/api/zarr/{_id(zarr_id)}/upload/"
        params: dict[str, str] = {}
        if resume:
            params["resume"] = "true"
        if after is not None:
            params["after"] = after
        response = self.request(
            "POST",
            path,
            json=[
                {"path": p, "etag": m} if n is None else {"path": p, "etag": m, "size": n}
                for p, m, n in files
            ],
            params=params or None,
        )
        rows = self._decoded(response, "POST", path)
        return OpenedBatch(
            uid=response.headers.get(BATCH_HEADER) or None,
            targets={
                str(r["path"]): Target(r.get("upload_url"), r.get("part_size"), r.get("part_count"))
                for r in rows
            },
        )

    def part_urls(
        self, zarr_id: str, path: str, parts: Sequence[tuple[int, str]]
    ) -> dict[int, str | None]:
        """The URLs of parts ``(number, md5)`` of the open batch's big file *path*: ``{part
        number: presigned PUT URL, or None when S3 already holds it}``."""
        data = self._json(
            "POST",
            f"/api/zarr/{_id(zarr_id)}/upload/parts/",
            json={"path": path, "parts": [{"part_number": n, "md5": m} for n, m in parts]},
        )
        return {int(p["part_number"]): p.get("upload_url") for p in data["parts"]}

    def complete_upload(self, zarr_id: str, *, wait: bool = False) -> ZarrInfo:
        """Verify the open batch and queue it (with *wait*: apply it before answering)."""
        return ZarrInfo.from_json(
            self._json(
                "POST",
                f"/api/zarr/{_id(zarr_id)}/upload/complete/",
                params={"wait": "true"} if wait else None,
            )
        )

    def queue_upload(self, zarr_id: str) -> str | None:
        """Complete the open batch with ``verify=apply``: queued at once, its files checked
        when it is applied (a batch that fails is refused whole: :meth:`refused_batches`).
        The batch's uid, or None (a retried request that found it queued already, or a
        server that does not name it)."""
        response = self.request(
            "POST", f"/api/zarr/{_id(zarr_id)}/upload/complete/", params={"verify": "apply"}
        )
        uid = response.headers.get(BATCH_HEADER)
        return str(uid) if uid else None

    def import_files(
        self,
        zarr_id: str,
        batch: str,
        bucket: str,
        prefix: str,
        files: Sequence[tuple[str, str, str | None]],
    ) -> list[str]:
        """Ask the archive to copy files ``(path, source ETag, source version)`` of our open
        *batch* from ``s3://{bucket}/{prefix}/{path}`` (server-side import); the paths it
        declined (to send ourselves)."""
        answer = self._json(
            "POST",
            f"/api/zarr/{_id(zarr_id)}/upload/import/",
            json={
                "batch": batch,
                "bucket": bucket,
                "prefix": prefix,
                "files": [{"path": p, "etag": e, "version_id": v} for p, e, v in files],
            },
        )
        return [str(p) for p in answer.get("declined", [])]

    def hash_sources(
        self,
        zarr_id: str,
        bucket: str,
        prefix: str,
        files: Sequence[tuple[str, int, str]],
        *,
        timeout: httpx.Timeout | None = None,
    ) -> dict[str, str]:
        """Ask the archive for the md5s of source objects ``(path, size, ETag)`` at
        ``s3://{bucket}/{prefix}/{path}`` (server-side import of objects uploaded in parts:
        it reads them, we read nothing); ``{path: md5}``.  *timeout*: the request's own (the
        archive answers once it has read every byte)."""
        response = self.request(
            "POST",
            f"/api/zarr/{_id(zarr_id)}/upload/import/hash/",
            json={
                "bucket": bucket,
                "prefix": prefix,
                "files": [{"path": p, "size": n, "etag": e} for p, n, e in files],
            },
            timeout=timeout,
        )
        answer = self._decoded(response, "POST", "/upload/import/hash/")
        return {str(f["path"]): str(f["md5"]) for f in answer["files"]}

    def refused_batches(self, zarr_id: str, uids: Sequence[str]) -> dict[str, list[str]]:
        """Of the batches *uids*, those refused when applied: ``{uid: [refused paths]}``."""
        refused: dict[str, list[str]] = {}
        for start in range(0, len(uids), MAX_REFUSAL_BATCHES):
            query = urlencode([("batch", u) for u in uids[start : start + MAX_REFUSAL_BATCHES]])
            for row in self._json("GET", f"/api/zarr/{_id(zarr_id)}/upload/refused/?{query}"):
                refused.setdefault(str(row["batch"]), []).append(str(row["path"]))
        return refused

    def cancel_upload(self, zarr_id: str, *, retry: RetryPolicy | None = None) -> None:
        self.request("DELETE", f"/api/zarr/{_id(zarr_id)}/upload/", retry=retry)

    def delete_files(self, zarr_id: str, paths: Sequence[str]) -> ZarrInfo:
        self.request(
            "DELETE", f"/api/zarr/{_id(zarr_id)}/files/", json=[{"path": p} for p in paths]
        )
        return self.get_zarr(zarr_id)

    def restore_zarr(self, zarr_id: str, checksum: str) -> RestoreOutcome:
        """Roll the Zarr back to *checksum* (one its history lists as restorable)."""
        data = self._json("POST", f"/api/zarr/{_id(zarr_id)}/restore/", json={"checksum": checksum})
        return RestoreOutcome(
            copied=int(data["copied"]),
            deleted=int(data["deleted"]),
            batches=int(data["batches"]),
            applied=bool(data["applied"]),
        )

    def zarr_history(self, zarr_id: str) -> list[ZarrState]:
        """The checksums the Zarr had, newest first."""
        return [
            ZarrState(
                checksum=str(row["checksum"]),
                time=str(row["time"]),
                file_count=int(row["file_count"]),
                size=int(row["size"]),
                restorable=bool(row["restorable"]),
                current=bool(row["current"]),
            )
            for row in self._json("GET", f"/api/zarr/{_id(zarr_id)}/history/")
        ]

    def stat_path(self, zarr_id: str, path: str) -> tuple[bool, int, int] | None:
        """``(is a directory, files, bytes)`` of the Zarr's entry *path* (a trailing ``/``
        asks for a directory), or None if there is none."""
        directory = path.endswith("/")
        url = f"/api/zarr/{_id(zarr_id)}.zarr/" + quote(path, safe="/~")
        try:
            data = self._json("GET", url, params={"page_size": 1})
        except ApiError as exc:
            if exc.status_code == 404:
                return None
            raise
        if data.get("type") == "directory":
            return True, int(data["file_count"]), int(data["size"])
        return None if directory else (False, 1, int(data["size"]))

    def delete_paths(self, zarr_id: str, paths: Sequence[str]) -> tuple[ZarrInfo, bool]:
        """Delete files and whole directories (a directory: every file below it): the
        Zarr after the request, and True if the deletion is applied, False if the server's
        job applies it (202: the Zarr is ``applying`` until it is done)."""
        response = self.request(
            "DELETE", f"/api/zarr/{_id(zarr_id)}/files/", json=[{"path": p} for p in paths]
        )
        if response.status_code == 202:
            return ZarrInfo.from_json(response.json()), False
        return self.get_zarr(zarr_id), True


def _id(zarr_id: str) -> str:
    return quote(zarr_id, safe="")


def _text(value: Any, default: str) -> str:
    return value if isinstance(value, str) else default


__all__ = [
    "MAX_PAGE_SIZE",
    "RETRY_STATUSES",
    "ApiClient",
    "AssetInfo",
    "DandisetInfo",
    "DirectoryListing",
    "DirectoryPage",
    "DownloadLink",
    "FileInfo",
    "ListingEntry",
    "OpenedBatch",
    "RestoreOutcome",
    "RetryPolicy",
    "ServerInfo",
    "Target",
    "UploadState",
    "ZarrInfo",
    "ZarrState",
    "is_zarr_id",
    "parse_retry_after",
]
