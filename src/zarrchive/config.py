"""Settings from ``ZARRCHIVE_*`` environment variables, with embedded defaults.

| variable | default |
|---|---|
| ``ZARRCHIVE_DATA_DIR`` | ``./.zarrchive`` |
| ``ZARRCHIVE_DATABASE_URL`` | ``sqlite:///{DATA_DIR}/zarrchive.sqlite3`` |
| ``ZARRCHIVE_S3_ENDPOINT_URL`` | unset: start the embedded SeaweedFS |
| ``ZARRCHIVE_S3_BUCKET`` | ``zarrchive`` (world-readable) |
| ``ZARRCHIVE_S3_EMBARGO_BUCKET`` | ``{S3_BUCKET}-embargoed`` (private) |
| ``ZARRCHIVE_S3_ACCESS_KEY_ID`` / ``ZARRCHIVE_S3_SECRET_ACCESS_KEY`` | embedded: generated once and kept in the data directory |
| ``ZARRCHIVE_S3_REGION`` | ``us-east-1`` |
| ``ZARRCHIVE_MAX_BATCH_FILES`` | ``500`` |
| ``ZARRCHIVE_PRESIGN_EXPIRY`` | ``3600`` seconds |
| ``ZARRCHIVE_MAX_REQUEST_BODY`` | ``8388608`` bytes (8 MiB; anonymous requests: 1 MiB at most) |
| ``ZARRCHIVE_REDIS_URL`` | unset: jobs run in-process |
| ``ZARRCHIVE_REDIS_QUEUE`` | ``zarrchive`` (the RQ queue; archives sharing a Redis need their own) |
| ``ZARRCHIVE_HOST`` / ``ZARRCHIVE_PORT`` | ``127.0.0.1`` / ``8000`` |
| ``ZARRCHIVE_PUBLISHED_ZARRS`` | ``freeze`` (the spec) or ``snapshot`` (see :class:`PublishedZarrs`) |
| ``ZARRCHIVE_CORS_ORIGINS`` | unset: the API answers reads to every origin, changes to none; a comma-separated list of origins (``https://viewer.example``): reads and changes from those only |
| ``ZARRCHIVE_PUBLISH_REQUIRES_VALID`` | ``true``: publishing needs valid dandiset and asset metadata (dandischema); ``false`` (archives of non-DANDI data): the status is still reported |
| ``ZARRCHIVE_AUTO_APPROVE_EMAIL_DOMAINS`` | unset: every new account waits for an admin; a comma-separated list of e-mail domains (``edu,nih.gov``): a new account with a verified e-mail in one of them (or below it) is approved at once |
| ``ZARRCHIVE_OIDC_ISSUER`` / ``_CLIENT_ID`` / ``_CLIENT_SECRET`` / ``_NAME`` | unset: sign-in with API tokens only; an OpenID Connect provider (its issuer URL, this archive's client at it, the button's words); more providers as ``ZARRCHIVE_OIDC_<ID>_ISSUER`` etc. (see :class:`OidcProvider`) |
| ``ZARRCHIVE_PUBLIC_URL`` | unset: absolute URLs name the archive as the request reached it (its ``Host``); ``https://host[:port]``: every absolute URL uses it, a request's ``Host`` is never reflected |
| ``ZARRCHIVE_STRICT_SESSIONS`` | ``false``; ``true``: an ORM object read after its session fails (the tests' setting) |
| ``ZARRCHIVE_HEADER_TIMEOUT`` | ``20`` seconds: a connection that has not sent a whole request head by then is closed (408) |
| ``ZARRCHIVE_MAX_CONNECTIONS`` | ``4096`` per API process (and below its open-files limit) |
| ``ZARRCHIVE_MAX_CONNECTIONS_PER_CLIENT`` | ``256`` per API process and client address (behind a reverse proxy: its address) |
| ``ZARRCHIVE_DOI_API_URL`` / ``_PREFIX`` / ``_USER`` / ``_PASSWORD`` | unset: no DOIs (no call to DataCite); DataCite's REST API (``https://api.test.datacite.org``), the DOI prefix (``10.80507``) and the repository's basic-auth account: DOIs for dandisets and their versions (see :class:`DoiSettings`) |
| ``ZARRCHIVE_DOI_PUBLISH`` | ``false``: DOIs stay Draft; ``true``: they become Findable at publication |
"""

from __future__ import annotations

import ipaddress
import os
import re
import urllib.parse
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum
from pathlib import Path

from zarrchive.errors import ConfigurationError

#: The most an anonymous request may send (e.g. the paths of ``POST .../download/``).
ANONYMOUS_BODY_LIMIT = 1024 * 1024


class PublishedZarrs(StrEnum):
    """What publishing a dandiset does to its Zarrs."""

    #: the spec: a published Zarr is immutable for good (its one snapshot is its live state)
    FREEZE = "freeze"
    #: the version pins the Zarr's checksum and manifest; the draft's Zarr stays writable
    SNAPSHOT = "snapshot"


#: The default multipart threshold (bench/RESULTS.md, "Big files in a Zarr"): DANDI's part
#: size; above it a single ``CopyObject`` into place outlasted the store's 8 s read timeout on
#: a loaded SeaweedFS, while a copy in parts costs one 64 MiB ``UploadPartCopy`` per request.
MULTIPART_THRESHOLD = 64 * 1024**2
#: S3's largest single PUT.
MAX_SINGLE_PUT = 5 * 1024**3
#: S3's smallest part (all but the last): the threshold can't be lower.
MIN_PART_SIZE = 5 * 1024**2


@dataclass(frozen=True)
class OidcProvider:
    """An OpenID Connect provider the sign-in page offers (:mod:`zarrchive.web.oidc`).

    ``ZARRCHIVE_OIDC_ISSUER``, ``ZARRCHIVE_OIDC_CLIENT_ID``, ``ZARRCHIVE_OIDC_CLIENT_SECRET``
    and ``ZARRCHIVE_OIDC_NAME`` configure one (*key* ``default``); each further one has the
    same four variables with an id of letters and digits after ``OIDC_``
    (``ZARRCHIVE_OIDC_ORCID_ISSUER``, ``ZARRCHIVE_OIDC_ORCID_CLIENT_ID``, ...; *key*
    ``orcid``).  Without a client secret the archive is a public client (PKCE only)."""

    key: str
    #: the issuer URL: discovery at ``{issuer}/.well-known/openid-configuration``
    issuer: str
    client_id: str
    client_secret: str | None
    #: the button's words ("ORCID")
    name: str


@dataclass(frozen=True)
class DoiSettings:
    """DataCite's REST API for the DOIs of dandisets and their versions
    (:mod:`zarrchive.services.dandi.dois`): all four of ``ZARRCHIVE_DOI_API_URL``, ``_PREFIX``,
    ``_USER`` and ``_PASSWORD`` set, or none (no DOI, no call)."""

    #: DataCite's REST API, without ``/dois`` (``https://api.test.datacite.org``)
    api_url: str
    #: the repository's DOI prefix (``10.80507``)
    prefix: str
    user: str
    password: str = field(repr=False)
    #: DOIs become Findable at publication (``ZARRCHIVE_DOI_PUBLISH``); else they stay Draft
    publish: bool = False


@dataclass(frozen=True)
class Settings:
    """The archive's configuration."""

    data_dir: Path
    database_url: str
    s3_endpoint_url: str | None
    s3_bucket: str
    s3_embargo_bucket: str
    s3_access_key_id: str | None
    s3_secret_access_key: str | None
    s3_region: str
    max_batch_files: int
    presign_expiry: int
    redis_url: str | None
    host: str
    port: int
    #: Largest request body accepted (an authenticated batch of ``max_batch_files`` entries
    #: needs well under 1 MiB); anonymous requests get at most :data:`ANONYMOUS_BODY_LIMIT`.
    max_request_body: int = 8 * 1024 * 1024
    #: What publishing does to Zarrs (``ZARRCHIVE_PUBLISHED_ZARRS``).
    published_zarrs: PublishedZarrs = PublishedZarrs.FREEZE
    #: The RQ queue the API processes fill and ``zarrchive worker`` consumes: the Zarr
    #: lane's; the content lane's is ``{redis_queue}-content`` (:mod:`zarrchive.jobs.lanes`).
    redis_queue: str = "zarrchive"
    #: Threads of the in-process job queue (no Redis) for a Zarr's jobs (apply, manifests,
    #: unembargo) and for content work (conversions, validations, hashing)
    #: (``ZARRCHIVE_ZARR_JOB_THREADS``, ``ZARRCHIVE_CONTENT_JOB_THREADS``).
    zarr_job_threads: int = 2
    content_job_threads: int = 2
    #: ORM objects expire with their session, so a use after it fails instead of reading
    #: stale values (:class:`zarrchive.db.session.Database`); the tests turn it on.
    strict_sessions: bool = False
    #: Origins allowed cross-origin reads and changes (``ZARRCHIVE_CORS_ORIGINS``); empty:
    #: reads from every origin, changes from none (see :mod:`zarrchive.api.cors`).
    cors_origins: tuple[str, ...] = ()
    #: Publishing refuses a draft whose metadata or assets' metadata is not valid
    #: (``ZARRCHIVE_PUBLISH_REQUIRES_VALID``; see :mod:`zarrchive.services.dandi.validation`).
    publish_requires_valid: bool = True
    #: Files of an upload batch above this size (bytes) are S3 multipart uploads
    #: (``ZARRCHIVE_MULTIPART_THRESHOLD``; at most 5 GiB, S3's largest single PUT).
    multipart_threshold: int = MULTIPART_THRESHOLD
    #: Seconds a conversion of an uploaded HDF5 file to its LINDI file may take before its
    #: sandboxed child is killed and the file ``failed`` (``ZARRCHIVE_LINDI_TIMEOUT``).
    lindi_timeout: int = 120
    #: Seconds a connection gets to send a whole request head (``ZARRCHIVE_HEADER_TIMEOUT``;
    #: see :mod:`zarrchive.connection_guard`).
    header_timeout: float = 20.0
    #: Connections one API process holds at most (``ZARRCHIVE_MAX_CONNECTIONS``).
    max_connections: int = 4096
    #: Connections one API process holds at most from one client address
    #: (``ZARRCHIVE_MAX_CONNECTIONS_PER_CLIENT``).
    max_connections_per_client: int = 256
    #: The archive's external address, ``scheme://host[:port]`` (``ZARRCHIVE_PUBLIC_URL``):
    #: every absolute URL the archive writes (pagination links, ``/api/info/``, LINDI files,
    #: redirects) uses it instead of the request's ``Host`` (:mod:`zarrchive.http_common.public_url`).
    public_url: str | None = None
    #: E-mail domains whose verified addresses approve a new account at once
    #: (``ZARRCHIVE_AUTO_APPROVE_EMAIL_DOMAINS``; see :mod:`zarrchive.services.identity.accounts`).
    auto_approve_email_domains: tuple[str, ...] = ()
    #: OpenID Connect providers of the sign-in page (``ZARRCHIVE_OIDC_*``), in the order of
    #: their buttons.
    oidc_providers: tuple[OidcProvider, ...] = ()
    #: DataCite's API for DOIs (``ZARRCHIVE_DOI_*``); ``None``: no DOIs, no call.
    doi: DoiSettings | None = None
    #: Days a deleted asset or dandiset stays restorable before ``admin gc`` purges it
    #: (``ZARRCHIVE_TRASH_DAYS``; see :mod:`zarrchive.services.dandi.trash`).
    trash_days: int = 30
    #: Days ``admin gc`` keeps a noncurrent S3 object version and a manifest's versions
    #: (``ZARRCHIVE_VERSION_RETENTION_DAYS``; see :mod:`zarrchive.version_retention`).
    version_retention_days: int = 30
    #: Buckets (``bucket`` or ``bucket/prefix``) on the archive's own S3 endpoint that
    #: ``POST .../upload/import/`` may copy from server-side (``ZARRCHIVE_IMPORT_BUCKETS``,
    #: comma-separated; empty: server-side import is off; the archive's own buckets never
    #: count: see :mod:`zarrchive.services.zarr_engine.uploads.import_copy`).
    import_buckets: tuple[str, ...] = ()

    @property
    def embedded_s3(self) -> bool:
        """True when the archive starts its own SeaweedFS."""
        return self.s3_endpoint_url is None

    def ensure_data_dir(self) -> Path:
        """Create the data directory (readable by its owner only) if needed; return it."""
        return make_private_dir(self.data_dir)

    def with_overrides(self, **changes: object) -> Settings:
        """A copy with some fields replaced (command-line flags override the environment)."""
        return replace(self, **changes)  # type: ignore[arg-type]

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Settings:
        env = os.environ if environ is None else environ

        def get(name: str) -> str | None:
            value = env.get(f"ZARRCHIVE_{name}")
            return value if value not in (None, "") else None

        data_dir = Path(get("DATA_DIR") or ".zarrchive").expanduser().absolute()
        bucket = get("S3_BUCKET") or "zarrchive"
        database_url = get("DATABASE_URL") or f"sqlite:///{data_dir / 'zarrchive.sqlite3'}"
        return cls(
            data_dir=data_dir,
            database_url=database_url,
            s3_endpoint_url=get("S3_ENDPOINT_URL"),
            s3_bucket=bucket,
            s3_embargo_bucket=get("S3_EMBARGO_BUCKET") or f"{bucket}-embargoed",
            s3_access_key_id=get("S3_ACCESS_KEY_ID"),
            s3_secret_access_key=get("S3_SECRET_ACCESS_KEY"),
            s3_region=get("S3_REGION") or "us-east-1",
            max_batch_files=_positive_int("MAX_BATCH_FILES", get("MAX_BATCH_FILES"), 500),
            presign_expiry=_positive_int("PRESIGN_EXPIRY", get("PRESIGN_EXPIRY"), 3600),
            redis_url=get("REDIS_URL"),
            host=get("HOST") or "127.0.0.1",
            port=_positive_int("PORT", get("PORT"), 8000),
            max_request_body=_positive_int(
                "MAX_REQUEST_BODY", get("MAX_REQUEST_BODY"), 8 * 1024 * 1024
            ),
            published_zarrs=_published_zarrs(get("PUBLISHED_ZARRS")),
            redis_queue=get("REDIS_QUEUE") or "zarrchive",
            zarr_job_threads=_positive_int("ZARR_JOB_THREADS", get("ZARR_JOB_THREADS"), 2),
            content_job_threads=_positive_int("CONTENT_JOB_THREADS", get("CONTENT_JOB_THREADS"), 2),
            strict_sessions=_flag("STRICT_SESSIONS", get("STRICT_SESSIONS")),
            cors_origins=_origins(get("CORS_ORIGINS")),
            publish_requires_valid=_flag(
                "PUBLISH_REQUIRES_VALID", get("PUBLISH_REQUIRES_VALID"), default=True
            ),
            multipart_threshold=_multipart_threshold(get("MULTIPART_THRESHOLD")),
            lindi_timeout=_positive_int("LINDI_TIMEOUT", get("LINDI_TIMEOUT"), 120),
            header_timeout=_positive_seconds("HEADER_TIMEOUT", get("HEADER_TIMEOUT"), 20.0),
            max_connections=_positive_int("MAX_CONNECTIONS", get("MAX_CONNECTIONS"), 4096),
            max_connections_per_client=_positive_int(
                "MAX_CONNECTIONS_PER_CLIENT", get("MAX_CONNECTIONS_PER_CLIENT"), 256
            ),
            public_url=_public_url(get("PUBLIC_URL")),
            auto_approve_email_domains=_email_domains(get("AUTO_APPROVE_EMAIL_DOMAINS")),
            oidc_providers=_oidc_providers(env, get),
            doi=_doi_settings(get),
            trash_days=_positive_int("TRASH_DAYS", get("TRASH_DAYS"), 30),
            version_retention_days=_positive_int(
                "VERSION_RETENTION_DAYS", get("VERSION_RETENTION_DAYS"), 30
            ),
            import_buckets=_import_buckets(get("IMPORT_BUCKETS")),
        )


def make_private_dir(path: Path) -> Path:
    """Create *path* (and missing parents) readable by its owner only (0700), and tighten
    it if it exists with wider permissions and belongs to us.  The archive's data directory
    holds the S3 credentials, the database and every object of the embedded S3."""
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    info = path.stat()
    if info.st_mode & 0o077 and info.st_uid == os.getuid():
        path.chmod(0o700)
    return path


def redact_url(url: str) -> str:
    """*url* with its password (if any) replaced by ``***``: what logs and messages show."""
    parts = urllib.parse.urlsplit(url)
    if parts.password is None:
        return url
    user = urllib.parse.unquote(parts.username or "")
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    netloc = f"{user}:***@{host}" + (f":{parts.port}" if parts.port is not None else "")
    return urllib.parse.urlunsplit(parts._replace(netloc=netloc))


def _public_url(raw: str | None) -> str | None:
    """``ZARRCHIVE_PUBLIC_URL``: ``http(s)://host[:port]`` (a trailing ``/`` is dropped)."""
    if raw is None:
        return None
    value = raw.strip().rstrip("/")
    parts = urllib.parse.urlsplit(value)
    try:
        parts.port  # noqa: B018 (raises on a bad port)
    except ValueError:
        parts = parts._replace(netloc="")
    if (
        not value.isascii()
        or parts.scheme not in ("http", "https")
        or not parts.hostname
        or parts.path
        or parts.query
        or parts.fragment
        or "@" in parts.netloc
    ):
        raise ConfigurationError(
            f"ZARRCHIVE_PUBLIC_URL={raw!r}: expected the archive's external address as "
            "http(s)://host[:port] in ASCII, without a path (e.g. https://archive.example.org)"
        )
    return value


def _multipart_threshold(raw: str | None) -> int:
    value = _positive_int("MULTIPART_THRESHOLD", raw, MULTIPART_THRESHOLD)
    if not MIN_PART_SIZE <= value <= MAX_SINGLE_PUT:
        raise ConfigurationError(
            f"ZARRCHIVE_MULTIPART_THRESHOLD={raw!r}: expected {MIN_PART_SIZE} (5 MiB) to "
            f"{MAX_SINGLE_PUT} (5 GiB) bytes"
        )
    return value


def _positive_int(name: str, raw: str | None, default: int) -> int:
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value <= 0:
        raise ConfigurationError(f"ZARRCHIVE_{name}={raw!r}: expected a positive integer")
    return value


def _positive_seconds(name: str, raw: str | None, default: float) -> float:
    if raw is None:
        return default
    try:
        value = float(raw)
    except ValueError:
        value = 0.0
    if not 0 < value < float("inf"):
        raise ConfigurationError(f"ZARRCHIVE_{name}={raw!r}: expected a positive number of seconds")
    return value


_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")


def _flag(name: str, raw: str | None, *, default: bool = False) -> bool:
    if raw is None:
        return default
    value = raw.strip().lower()
    if value not in _TRUE + _FALSE:
        raise ConfigurationError(f"ZARRCHIVE_{name}={raw!r}: expected true or false")
    return value in _TRUE


_DOI_VARIABLES = ("DOI_API_URL", "DOI_PREFIX", "DOI_USER", "DOI_PASSWORD")


def _doi_settings(get: Callable[[str], str | None]) -> DoiSettings | None:
    """``ZARRCHIVE_DOI_*``: all four of the API URL, prefix, user and password, or none."""
    values = {name: get(name) for name in _DOI_VARIABLES}
    given = [name for name, value in values.items() if value is not None]
    publish = _flag("DOI_PUBLISH", get("DOI_PUBLISH"))
    if not given:
        return None
    if len(given) < len(_DOI_VARIABLES):
        missing = ", ".join(f"ZARRCHIVE_{n}" for n in _DOI_VARIABLES if n not in given)
        raise ConfigurationError(
            f"DOIs need all of ZARRCHIVE_DOI_API_URL, _PREFIX, _USER and _PASSWORD: {missing} "
            "unset (unset them all for an archive without DOIs)"
        )
    api_url = str(values["DOI_API_URL"]).strip().rstrip("/")
    parts = urllib.parse.urlsplit(api_url)
    if parts.scheme not in ("http", "https") or not parts.hostname or "@" in parts.netloc:
        raise ConfigurationError(
            f"ZARRCHIVE_DOI_API_URL={values['DOI_API_URL']!r}: expected DataCite's REST API "
            "as http(s)://host[/path] (e.g. https://api.test.datacite.org), without credentials"
        )
    prefix = str(values["DOI_PREFIX"]).strip()
    if not re.fullmatch(r"10\.[0-9]{4,9}", prefix):
        raise ConfigurationError(
            f"ZARRCHIVE_DOI_PREFIX={values['DOI_PREFIX']!r}: expected a DOI prefix (10.80507)"
        )
    return DoiSettings(
        api_url=api_url,
        prefix=prefix,
        user=str(values["DOI_USER"]),
        password=str(values["DOI_PASSWORD"]),
        publish=publish,
    )


def _published_zarrs(raw: str | None) -> PublishedZarrs:
    if raw is None:
        return PublishedZarrs.FREEZE
    try:
        return PublishedZarrs(raw.strip().lower())
    except ValueError:
        choices = " or ".join(repr(m.value) for m in PublishedZarrs)
        raise ConfigurationError(f"ZARRCHIVE_PUBLISHED_ZARRS={raw!r}: expected {choices}") from None


def _import_buckets(value: str | None) -> tuple[str, ...]:
    """``ZARRCHIVE_IMPORT_BUCKETS``: comma-separated ``bucket`` or ``bucket/prefix`` (a
    prefix ends at a ``/``: ``b/data`` allows ``b/data/...``, not ``b/database``)."""
    allowed = []
    for item in (value or "").split(","):
        entry = item.strip().strip("/")
        if not entry:
            continue
        bucket, _, prefix = entry.partition("/")
        if not re.fullmatch(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]", bucket) or any(
            part in ("", ".", "..") for part in prefix.split("/") if prefix
        ):
            raise ConfigurationError(
                f"ZARRCHIVE_IMPORT_BUCKETS={value!r}: {item.strip()!r} is not a bucket name "
                "or bucket/prefix"
            )
        allowed.append(entry)
    return tuple(allowed)


def _origins(value: str | None) -> tuple[str, ...]:
    """``ZARRCHIVE_CORS_ORIGINS``: comma-separated origins, each ``scheme://host[:port]``."""
    if value is None:
        return ()
    origins = []
    for item in value.split(","):
        origin = item.strip().rstrip("/")
        if not origin:
            continue
        parts = urllib.parse.urlsplit(origin)
        if parts.scheme not in ("http", "https") or not parts.netloc or parts.path:
            raise ConfigurationError(
                f"ZARRCHIVE_CORS_ORIGINS: {item.strip()!r} is not an origin: give "
                "scheme://host[:port] (e.g. https://viewer.example), separated by commas"
            )
        origins.append(origin)
    return tuple(origins)


def _email_domains(value: str | None) -> tuple[str, ...]:
    """``ZARRCHIVE_AUTO_APPROVE_EMAIL_DOMAINS``: comma-separated domains (``edu,nih.gov``),
    lower-cased, without a leading dot or ``@``."""
    if value is None:
        return ()
    domains: list[str] = []
    for item in value.split(","):
        domain = item.strip().lower().lstrip("@.")
        if not domain:
            continue
        labels = domain.split(".")
        if not domain.isascii() or not all(
            label and len(label) <= 63 and label.replace("-", "").isalnum() for label in labels
        ):
            raise ConfigurationError(
                f"ZARRCHIVE_AUTO_APPROVE_EMAIL_DOMAINS: {item.strip()!r} is not an e-mail "
                "domain: give domains such as edu or nih.gov, separated by commas"
            )
        domains.append(domain)
    return tuple(domains)


_OIDC_ISSUER = re.compile(r"ZARRCHIVE_OIDC_(?:([A-Z0-9]+)_)?ISSUER")


def _oidc_providers(
    names: Iterable[str], get: Callable[[str], str | None]
) -> tuple[OidcProvider, ...]:
    """The providers of ``ZARRCHIVE_OIDC_[<ID>_]ISSUER`` and their three companions: the
    unsuffixed one first, then by id."""
    ids = sorted(
        {
            match.group(1) or ""
            for name in names
            if (match := _OIDC_ISSUER.fullmatch(name)) is not None
        }
    )
    return tuple(_oidc_provider(get, suffix) for suffix in ids if get(_oidc_var(suffix, "ISSUER")))


def _oidc_var(suffix: str, what: str) -> str:
    return f"OIDC_{suffix}_{what}" if suffix else f"OIDC_{what}"


def _oidc_provider(get: Callable[[str], str | None], suffix: str) -> OidcProvider:
    issuer_var = _oidc_var(suffix, "ISSUER")
    raw = get(issuer_var) or ""
    issuer = raw.strip().rstrip("/")
    parts = urllib.parse.urlsplit(issuer)
    local = parts.hostname == "localhost" or _is_loopback(parts.hostname or "")
    if (
        not issuer.isascii()
        or parts.scheme not in ("http", "https")
        or (parts.scheme == "http" and not local)
        or not parts.hostname
        or parts.query
        or parts.fragment
        or "@" in parts.netloc
    ):
        raise ConfigurationError(
            f"ZARRCHIVE_{issuer_var}={raw!r}: expected the provider's issuer URL, https://... "
            "(as its /.well-known/openid-configuration names it, e.g. https://orcid.org; "
            "http only on a loopback address)"
        )
    client_id = get(_oidc_var(suffix, "CLIENT_ID"))
    if not client_id:
        raise ConfigurationError(
            f"ZARRCHIVE_{issuer_var} is set but not ZARRCHIVE_{_oidc_var(suffix, 'CLIENT_ID')}: "
            "register this archive at the provider and give the client id it assigned"
        )
    return OidcProvider(
        key=suffix.lower() or "default",
        issuer=issuer,
        client_id=client_id,
        client_secret=get(_oidc_var(suffix, "CLIENT_SECRET")),
        name=get(_oidc_var(suffix, "NAME")) or parts.hostname,
    )


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
