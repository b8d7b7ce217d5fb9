"""The archive as an OpenID Connect relying party (authorization code flow with PKCE).

Authlib does the protocol: the authorization request with its S256 code challenge, the
code's exchange at the token endpoint (RFC 6749's request, sent with httpx: authenticated
with the client secret, ``client_secret_basic``, or the client id alone for a public
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
from authlib.oauth2.rfc6749.parameters import (  # type: ignore[import-untyped]
    prepare_grant_uri,
    prepare_token_request,
)
from authlib.oauth2.rfc7636 import create_s256_code_challenge  # type: ignore[import-untyped]
from authlib.oidc.core import CodeIDToken  # type: ignore[import-untyped]
from joserfc import jwt
from joserfc.errors import InvalidKeyIdError, JoseError
from joserfc.jwk import KeySet
from joserfc.jws import JWSRegistry

from zarrchive.config import OidcProvider
from zarrchive.errors import IdentityProviderUnavailable, SignInRefused
from zarrchive.services.identity.identities import IdentityClaims, claims_of

DISCOVERY_PATH = "/.well-known/openid-configuration"
#: A provider's metadata and keys are fetched again after this many seconds.
METADATA_TTL = 3600.0
#: A provider whose metadata could not be had is not asked again for this many seconds.
FAILURE_TTL = 30.0
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
    #: where the profile's claims are when the ID token lacks them (``None``: none)
    userinfo_endpoint: str | None = None


def origin_of(url: str) -> str:
    """``scheme://host[:port]`` of *url* (for the pages' ``form-action``)."""
    parts = urllib.parse.urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


def _fetch_json(url: str, what: str, access_token: str | None = None) -> dict[str, Any]:
    """A JSON object from a provider (at most :data:`MAX_DOCUMENT` bytes)."""
    headers = {"Accept": "application/json"}
    if access_token is not None:
        headers["Authorization"] = f"Bearer {access_token}"
    try:
        with (
            httpx.Client(timeout=HTTP_TIMEOUT, follow_redirects=False) as client,
            client.stream("GET", url, headers=headers) as response,
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
    userinfo = document.get("userinfo_endpoint")
    return ProviderMetadata(
        issuer=provider.issuer,
        algorithms=algorithms,
        userinfo_endpoint=userinfo if isinstance(userinfo, str) else None,
        **endpoints,
    )


class ProviderCache:
    """The providers' metadata and keys, per process (see the module's docstring)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._metadata: dict[str, tuple[float, ProviderMetadata]] = {}
        self._keys: dict[str, tuple[float, KeySet]] = {}
        self._failures: dict[str, tuple[float, IdentityProviderUnavailable]] = {}

    def metadata(self, provider: OidcProvider) -> ProviderMetadata:
        """The provider's metadata; a provider that just failed fails again at once for
        :data:`FAILURE_TTL` (the sign-in page does not wait on it at every view)."""
        with self._lock:
            cached = self._metadata.get(provider.issuer)
            failed = self._failures.get(provider.issuer)
        if cached is not None and time.monotonic() - cached[0] < METADATA_TTL:
            return cached[1]
        if failed is not None and time.monotonic() - failed[0] < FAILURE_TTL:
            raise failed[1]
        try:
            metadata = _metadata(provider)
        except IdentityProviderUnavailable as exc:
            with self._lock:
                self._failures[provider.issuer] = (time.monotonic(), exc)
            raise
        with self._lock:
            self._metadata[provider.issuer] = (time.monotonic(), metadata)
            self._failures.pop(provider.issuer, None)
        return metadata

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


def authorization_url(
    provider: OidcProvider,
    metadata: ProviderMetadata,
    *,
    redirect_uri: str,
    state: str,
    nonce: str,
    code_verifier: str,
) -> str:
    """Where the browser goes to sign in at the provider (the code flow, with the S256
    challenge of *code_verifier*)."""
    return str(
        prepare_grant_uri(
            metadata.authorization_endpoint,
            provider.client_id,
            "code",
            redirect_uri=redirect_uri,
            scope=SCOPE,
            state=state,
            nonce=nonce,
            code_challenge=create_s256_code_challenge(code_verifier),
            code_challenge_method="S256",
        )
    )


def _refused(why: str) -> SignInRefused:
    return SignInRefused(
        f"the sign-in was refused: {why}; nothing was changed (start again from /signin)"
    )


def _token_request(
    provider: OidcProvider, metadata: ProviderMetadata, body: str
) -> tuple[int, dict[str, Any] | None]:
    """POST *body* to the token endpoint (client_secret_basic, or the client id alone for a
    public client): the status and the JSON object answered (``None``: not one)."""
    headers = {
        "Content-Type": "application/x-www-form-urlencoded",
        "Accept": "application/json",
    }
    auth = None
    if provider.client_secret is not None:  # RFC 6749 2.3.1: both form-encoded first
        auth = httpx.BasicAuth(
            urllib.parse.quote_plus(provider.client_id),
            urllib.parse.quote_plus(provider.client_secret),
        )
    try:
        with (
            httpx.Client(timeout=HTTP_TIMEOUT, follow_redirects=False) as client,
            client.stream(
                "POST", metadata.token_endpoint, content=body, headers=headers, auth=auth
            ) as response,
        ):
            content = bytearray()
            for chunk in response.iter_bytes():
                content += chunk
                if len(content) > MAX_DOCUMENT:
                    raise IdentityProviderUnavailable(
                        f"the identity provider's token endpoint answered more than "
                        f"{MAX_DOCUMENT} bytes"
                    )
            status = response.status_code
    except httpx.HTTPError as exc:
        raise IdentityProviderUnavailable(
            f"the identity provider's token endpoint can't be reached ({type(exc).__name__}): "
            "try again later"
        ) from exc
    try:
        answer = httpx.Response(200, content=bytes(content)).json()
    except ValueError:
        answer = None
    return status, answer if isinstance(answer, dict) else None


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
    body = prepare_token_request(
        "authorization_code",
        redirect_uri=redirect_uri,
        code=code,
        code_verifier=code_verifier,
        client_id=None if provider.client_secret is not None else provider.client_id,
    )
    status, token = _token_request(provider, metadata, body)
    if status != 200 or token is None:
        error = token.get("error") if token is not None else None
        if 400 <= status < 500 and isinstance(error, str):  # the code: used, expired, not ours
            description = token.get("error_description") if token is not None else None
            raise _refused(
                f"the identity provider refused the authorization code ({error[:100]}"
                + (f": {description[:200]}" if isinstance(description, str) else "")
                + ")"
            )
        raise IdentityProviderUnavailable(
            f"the identity provider's token endpoint answered HTTP {status}"
            + ("" if token is not None else " without a JSON object")
            + ": try again later"
        )
    id_token = token.get("id_token")
    if not isinstance(id_token, str):
        raise _refused("the identity provider answered no ID token")
    access_token = token.get("access_token")
    claims = verify_id_token(
        provider, metadata, id_token, nonce=nonce, access_token=access_token, cache=cache
    )
    if (
        metadata.userinfo_endpoint is not None
        and isinstance(access_token, str)
        and not (claims.preferred_username and claims.email and claims.name)
    ):
        claims = with_user_info(
            claims, _fetch_json(metadata.userinfo_endpoint, "user info", access_token)
        )
    return claims


def with_user_info(claims: IdentityClaims, user_info: dict[str, Any]) -> IdentityClaims:
    """*claims* completed by the provider's user info (OpenID Connect Core 5.3.2: only when
    it is about the ID token's subject; the ID token's own claims win)."""
    if user_info.get("sub") != claims.subject:
        return claims
    more = claims_of(claims.issuer, user_info)
    return IdentityClaims(
        issuer=claims.issuer,
        subject=claims.subject,
        preferred_username=claims.preferred_username or more.preferred_username,
        name=claims.name or more.name,
        email=claims.email or more.email,
        email_verified=claims.email_verified if claims.email else more.email_verified,
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
