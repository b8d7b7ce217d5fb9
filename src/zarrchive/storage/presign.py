"""Presigned S3 URLs (AWS Signature Version 4, query-string form), made without I/O.

The upload path presigns one PUT URL per file: 500 per batch, about two thousand batches for a
Zarr of a million chunks.  botocore's ``generate_presigned_url`` spends about a millisecond on
each (endpoint resolution, parameter validation, event hooks, a fresh signing key), so a batch
of 500 costs the request half a second.  This module signs the same URLs in microseconds: the
canonical request of one object is a few string joins, and the signing key changes once a day.

It covers what the archive presigns (path-style URLs of one endpoint, static credentials, the
``host`` header plus optional ``Content-MD5``, optional query parameters such as
``versionId``); :class:`~zarrchive.storage.objects.ObjectStore` falls back to botocore for
anything else.  The tests check every URL equal to botocore's, byte for byte.
"""

from __future__ import annotations

import hashlib
import hmac
import threading
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime

_ALGORITHM = "AWS4-HMAC-SHA256"
_UNSIGNED_PAYLOAD = "UNSIGNED-PAYLOAD"


def _quote(value: str, safe: str) -> str:
    return urllib.parse.quote(value, safe=safe)


@dataclass(frozen=True)
class Credentials:
    access_key_id: str
    secret_access_key: str


class Presigner:
    """Presigns path-style URLs of *endpoint_url* (``scheme://host[:port]``) in *region*."""

    def __init__(
        self, endpoint_url: str, credentials: Credentials, region: str, service: str = "s3"
    ) -> None:
        parsed = urllib.parse.urlsplit(endpoint_url)
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise ValueError(f"not an endpoint URL: {endpoint_url!r}")
        self._origin = f"{parsed.scheme}://{parsed.netloc}"
        self._base_path = parsed.path.rstrip("/")
        self._host = parsed.netloc
        self._credentials = credentials
        self._region = region
        self._service = service
        self._lock = threading.Lock()
        self._key_date = ""
        self._key = b""

    @property
    def host(self) -> str:
        """The ``host`` header the URLs are signed for."""
        return self._host

    @property
    def access_key_id(self) -> str:
        return self._credentials.access_key_id

    def _signing_key(self, date: str) -> bytes:
        with self._lock:
            if date != self._key_date:
                key = ("AWS4" + self._credentials.secret_access_key).encode()
                for part in (date, self._region, self._service, "aws4_request"):
                    key = hmac.new(key, part.encode(), hashlib.sha256).digest()
                self._key_date, self._key = date, key
            return self._key

    def url(
        self,
        method: str,
        bucket: str,
        key: str,
        expires_in: int,
        *,
        headers: Mapping[str, str] | None = None,
        params: Mapping[str, str] | None = None,
        now: datetime | None = None,
    ) -> str:
        """The presigned URL of *method* on ``bucket/key``, valid *expires_in* seconds from
        *now*; the client must send exactly *headers* (they are signed)."""
        moment = (now or datetime.now(UTC)).astimezone(UTC)
        amz_date = moment.strftime("%Y%m%dT%H%M%SZ")
        date = amz_date[:8]
        scope = f"{date}/{self._region}/{self._service}/aws4_request"
        signed = {"host": self._host}
        for name, value in (headers or {}).items():
            signed[name.lower()] = " ".join(value.split())
        names = sorted(signed)
        signed_headers = ";".join(names)
        # the URL lists the operation's own parameters first, then the signature's (as
        # botocore does); the signed form sorts them all
        query = {
            **(params or {}),
            "X-Amz-Algorithm": _ALGORITHM,
            "X-Amz-Credential": f"{self._credentials.access_key_id}/{scope}",
            "X-Amz-Date": amz_date,
            "X-Amz-Expires": str(expires_in),
            "X-Amz-SignedHeaders": signed_headers,
        }
        encoded = [(_quote(k, "-_.~"), _quote(v, "-_.~")) for k, v in query.items()]
        canonical_query = "&".join(f"{k}={v}" for k, v in sorted(encoded))
        path = _quote(f"{self._base_path}/{bucket}/{key}", "/~")
        canonical_request = "\n".join(
            (
                method,
                path,
                canonical_query,
                "".join(f"{n}:{signed[n]}\n" for n in names),
                signed_headers,
                _UNSIGNED_PAYLOAD,
            )
        )
        string_to_sign = "\n".join(
            (_ALGORITHM, amz_date, scope, hashlib.sha256(canonical_request.encode()).hexdigest())
        )
        signature = hmac.new(
            self._signing_key(date), string_to_sign.encode(), hashlib.sha256
        ).hexdigest()
        listed = "&".join(f"{k}={v}" for k, v in encoded)
        return f"{self._origin}{path}?{listed}&X-Amz-Signature={signature}"
