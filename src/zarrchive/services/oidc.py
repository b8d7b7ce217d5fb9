"""The archive as an OpenID Connect relying party (authorization code flow with PKCE).

Authlib does the protocol: the authorization URL with its S256 code challenge, the code's
exchange at the token endpoint (authenticated with the client secret, or none for a public
client), and the ID token's checks: its signature against the provider's JWKS (joserfc,
asymmetric algorithms only: never ``none``, nor an HMAC keyed by the client secret), its
issuer (the configured one, as discovery confirmed), its audience (our client id, and
``azp``), its expiry and issue time, its ``nonce`` and ``at_hash``.  A provider's metadata
(``{issuer}/.well-known/openid-configuration``) and keys are cached per process for
:data:`METADATA_TTL`; an ID token signed by a key id the cache does not know fetches the keys
once more (the provider rotated them).

What a provider answers is bounded (:data:`MAX_DOCUMENT`) and given :data:`HTTP_TIMEOUT`.
"""

from __future__ import annotations

import threading
import time
import urllib.parse
from dataclasses import dataclass
from typing import Any

import httpx
from authlib.integrations.httpx_client import (  # type: ignore[import-untyped]
    OAuth2Client,
    OAuthError,
)
from authlib.oidc.core import CodeIDToken  # type: ignore[import-untyped]
from joserfc import jwt
from joserfc.errors import InvalidKeyIdError, JoseError
from joserfc.jwk import KeySet
from joserfc.jws import JWSRegistry

from zarrchive.config import OidcProvider
from zarrchive.errors import IdentityProviderUnavailable, SignInRefused
from zarrchive.services.identities import IdentityClaims, claims_of

DISCOVERY_PATH = "/.well-known/openid-configuration"
#: A provider's metadata and keys are fetched again after this many seconds.
METADATA_TTL = 3600.0
HTTP_TIMEOUT = httpx.Timeout(15.0)
#: The largest discovery document, JWKS or token answer read from a provider.
MAX_DOCUMENT = 1024 * 1024
#: Clock difference tolerated between the provider and the archive (seconds).
LEEWAY = 60
SCOPE = "openid profile email"
#: ID token signatures the archive accepts (of those the provider says it uses).
ASYMMETRIC_ALGORITHMS = (
    "RS256",
    "RS384",
    "RS512",
    "PS256",
    "PS384",
    "PS512",
    "ES256",
    "ES384",
    "ES512",
    "EdDSA",
)


@dataclass(frozen=True)
class ProviderMetadata:
    """What the archive uses of a provider's discovery document."""

    issuer: str
    authorization_endpoint: str
    token_endpoint: str
    jwks_uri: str
    algorithms: tuple[str, ...]


def origin_of(url: str) -> str:
    """``scheme://host[:port]`` of *url* (for the pages' ``form-action``)."""
    parts = urllib.parse.urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


def _fetch_json(url: str, what: str) -> dict[str, Any]:
    """A JSON object from a provider (at most :data:`MAX_DOCUMENT` bytes)."""
    try:
        with (
            httpx.Client(timeout=HTTP_TIMEOUT, follow_redirects=False) as client,
            client.stream("GET", url, headers={"Accept": "application/json"}) as response,
        ):
            body = bytearray()
            for chunk in response.iter_bytes():
                body += chunk
                if len(body) > MAX_DOCUMENT:
                    raise IdentityProviderUnavailable(
                        f"the identity provider's {what} ({url}) is larger than "
                        f"{MAX_DOCUMENT} bytes"
                    )
            status = response.status_code
    except httpx.HTTPError as exc:
        raise IdentityProviderUnavailable(
            f"the identity provider can't be reached ({what} at {url}: {type(exc).__name__}): "
            "try again later, or sign in with an API token"
        ) from exc
    if status != 200:
        raise IdentityProviderUnavailable(
            f"the identity provider answered HTTP {status} for its {what} ({url}): try again "
            "later, or sign in with an API token"
        )
    try:
        document = httpx.Response(200, content=bytes(body)).json()
    except ValueError:
        document = None
    if not isinstance(document, dict):
        raise IdentityProviderUnavailable(
            f"the identity provider's {what} ({url}) is not a JSON object"
        )
    return document


def _metadata(provider: OidcProvider) -> ProviderMetadata:
    url = provider.issuer + DISCOVERY_PATH
    document = _fetch_json(url, "discovery document")
    if document.get("issuer") != provider.issuer:
        raise IdentityProviderUnavailable(
            f"the discovery document at {url} names the issuer {document.get('issuer')!r}, "
            f"not {provider.issuer!r}: set ZARRCHIVE_OIDC_..._ISSUER to the provider's issuer"
        )
    endpoints = {}
    for name in ("authorization_endpoint", "token_endpoint", "jwks_uri"):
        value = document.get(name)
        if not isinstance(value, str) or urllib.parse.urlsplit(value).scheme not in (
            "http",
            "https",
        ):
            raise IdentityProviderUnavailable(f"the discovery document at {url} has no {name}")
        endpoints[name] = value
    offered = document.get("id_token_signing_alg_values_supported") or ["RS256"]
    algorithms = tuple(
        a for a in ASYMMETRIC_ALGORITHMS if isinstance(offered, list) and a in offered
    )
    if not algorithms:
        raise IdentityProviderUnavailable(
            f"the provider at {provider.issuer} signs ID tokens with none of "
            f"{', '.join(ASYMMETRIC_ALGORITHMS)}"
        )
    return ProviderMetadata(issuer=provider.issuer, algorithms=algorithms, **endpoints)


class ProviderCache:
    """The providers' metadata and keys, per process (see the module's docstring)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._metadata: dict[str, tuple[float, ProviderMetadata]] = {}
        self._keys: dict[str, tuple[float, KeySet]] = {}

    def metadata(self, provider: OidcProvider) -> ProviderMetadata:
        with self._lock:
            cached = self._metadata.get(provider.issuer)
        if cached is not None and time.monotonic() - cached[0] < METADATA_TTL:
            return cached[1]
        metadata = _metadata(provider)
        with self._lock:
            self._metadata[provider.issuer] = (time.monotonic(), metadata)
        return metadata

    def known_metadata(self, provider: OidcProvider) -> ProviderMetadata | None:
        """The metadata if already fetched (no request)."""
        with self._lock:
            cached = self._metadata.get(provider.issuer)
        return cached[1] if cached is not None else None

    def keys(self, metadata: ProviderMetadata, *, refresh: bool = False) -> KeySet:
        with self._lock:
            cached = self._keys.get(metadata.jwks_uri)
        if not refresh and cached is not None and time.monotonic() - cached[0] < METADATA_TTL:
            return cached[1]
        document = _fetch_json(metadata.jwks_uri, "keys (JWKS)")
        try:
            keys = KeySet.import_key_set(document)  # type: ignore[arg-type]
        except (JoseError, ValueError, TypeError, KeyError) as exc:
            raise IdentityProviderUnavailable(
                f"the identity provider's keys at {metadata.jwks_uri} are not a JWKS: {exc}"
            ) from exc
        with self._lock:
            self._keys[metadata.jwks_uri] = (time.monotonic(), keys)
        return keys


#: The archive's process-wide cache.
PROVIDERS = ProviderCache()


def _client(provider: OidcProvider, redirect_uri: str) -> OAuth2Client:
    return OAuth2Client(
        client_id=provider.client_id,
        client_secret=provider.client_secret,
        token_endpoint_auth_method="client_secret_basic" if provider.client_secret else "none",
        redirect_uri=redirect_uri,
        scope=SCOPE,
        code_challenge_method="S256",
        timeout=HTTP_TIMEOUT,
    )


def authorization_url(
    provider: OidcProvider,
    metadata: ProviderMetadata,
    *,
    redirect_uri: str,
    state: str,
    nonce: str,
    code_verifier: str,
) -> str:
    """Where the browser goes to sign in at the provider."""
    with _client(provider, redirect_uri) as client:
        url, _ = client.create_authorization_url(
            metadata.authorization_endpoint,
            state=state,
            nonce=nonce,
            code_verifier=code_verifier,
        )
    return str(url)


def _refused(why: str) -> SignInRefused:
    return SignInRefused(
        f"the sign-in was refused: {why}; nothing was changed (start again from /signin)"
    )


def exchange_code(
    provider: OidcProvider,
    metadata: ProviderMetadata,
    *,
    code: str,
    redirect_uri: str,
    code_verifier: str,
    nonce: str,
    cache: ProviderCache = PROVIDERS,
) -> IdentityClaims:
    """Redeem *code* at the token endpoint and check the ID token it answers; its claims."""
    with _client(provider, redirect_uri) as client:
        try:
            token = client.fetch_token(
                metadata.token_endpoint, code=code, code_verifier=code_verifier
            )
        except OAuthError as exc:  # the provider refused the code (used, expired, not ours)
            raise _refused(
                f"the identity provider refused the authorization code ({exc.error}"
                + (f": {exc.description[:200]}" if exc.description else "")
                + ")"
            ) from exc
        except httpx.HTTPError as exc:
            raise IdentityProviderUnavailable(
                f"the identity provider's token endpoint can't be reached "
                f"({type(exc).__name__}): try again later"
            ) from exc
        except ValueError as exc:  # not JSON
            raise IdentityProviderUnavailable(
                "the identity provider's token endpoint did not answer JSON"
            ) from exc
    id_token = token.get("id_token")
    if not isinstance(id_token, str) or len(id_token) > MAX_DOCUMENT:
        raise _refused("the identity provider answered no ID token")
    return verify_id_token(
        provider,
        metadata,
        id_token,
        nonce=nonce,
        access_token=token.get("access_token"),
        cache=cache,
    )


def verify_id_token(
    provider: OidcProvider,
    metadata: ProviderMetadata,
    id_token: str,
    *,
    nonce: str,
    access_token: object = None,
    cache: ProviderCache = PROVIDERS,
) -> IdentityClaims:
    """The claims of *id_token* once its signature, issuer, audience, expiry and *nonce* are
    checked (:class:`SignInRefused` otherwise)."""
    registry = JWSRegistry(algorithms=list(metadata.algorithms), strict_check_header=False)
    try:
        try:
            decoded = jwt.decode(id_token, key=cache.keys(metadata), registry=registry)
        except InvalidKeyIdError:  # a key the cache does not know: the provider rotated
            decoded = jwt.decode(
                id_token, key=cache.keys(metadata, refresh=True), registry=registry
            )
        params: dict[str, Any] = {"nonce": nonce, "client_id": provider.client_id}
        if isinstance(access_token, str):
            params["access_token"] = access_token
        claims = CodeIDToken(
            decoded.claims,
            decoded.header,
            {
                "iss": {"essential": True, "value": metadata.issuer},
                "aud": {"essential": True, "value": provider.client_id},
            },
            params,
        )
        claims.validate(leeway=LEEWAY)
    except (JoseError, ValueError, TypeError, KeyError) as exc:
        detail = getattr(exc, "description", None) or str(exc) or type(exc).__name__
        raise _refused(f"the ID token is not valid ({type(exc).__name__}: {detail[:200]})") from exc
    if not isinstance(claims.get("sub"), str) or not claims["sub"]:
        raise _refused("the ID token names no subject")
    return claims_of(metadata.issuer, dict(claims))
