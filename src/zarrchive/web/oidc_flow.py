"""What a sign-in through an OpenID Connect provider carries across the provider's redirect.

The archive sends the browser to the provider with a random ``state``, ``nonce`` and PKCE
challenge; the provider sends it back to ``/signin/oidc/callback`` with a code.  The values
to check the answer against (``state``, ``nonce``, the PKCE verifier, which provider, the
redirect URI, when it started) travel in one cookie, signed with the archive's key
(HMAC-SHA256) so that nothing but the archive makes one, and good for
:data:`FLOW_MAX_AGE` seconds.  The cookie is ``SameSite=Lax``: the provider's redirect back
is a cross-site navigation, on which a ``Strict`` cookie would not come back.

Pure: no I/O (the time is given).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import secrets
from dataclasses import asdict, dataclass

#: A sign-in must come back from the provider within this many seconds.
FLOW_MAX_AGE = 600
#: Longer cookie values are not ours: refused before any decoding.
MAX_FLOW_COOKIE = 3000


@dataclass(frozen=True)
class SignInFlow:
    """One sign-in under way."""

    #: the provider's key (:attr:`zarrchive.config.OidcProvider.key`)
    provider: str
    state: str
    nonce: str
    #: the PKCE code verifier (RFC 7636; its S256 challenge went to the provider)
    code_verifier: str
    redirect_uri: str
    #: when it started (seconds since the epoch)
    started: int

    @classmethod
    def start(cls, provider: str, redirect_uri: str, now: int) -> SignInFlow:
        return cls(
            provider=provider,
            state=secrets.token_urlsafe(32),
            nonce=secrets.token_urlsafe(32),
            code_verifier=secrets.token_urlsafe(48),  # 64 characters (43 to 128 allowed)
            redirect_uri=redirect_uri,
            started=now,
        )


def flow_key(secret: str) -> bytes:
    """The HMAC key of the flow cookies, derived from one of the archive's secrets."""
    return hashlib.sha256(b"zarrchive oidc sign-in flow\x00" + secret.encode("utf-8")).digest()


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def encode_flow(flow: SignInFlow, key: bytes) -> str:
    """The cookie's value: the flow as JSON and its signature, both base64url."""
    body = _b64(json.dumps(asdict(flow), separators=(",", ":")).encode("utf-8"))
    signature = _b64(hmac.new(key, body.encode("ascii"), hashlib.sha256).digest())
    return f"{body}.{signature}"


def decode_flow(value: str, key: bytes, now: int) -> SignInFlow | None:
    """The flow of a cookie the archive made less than :data:`FLOW_MAX_AGE` seconds ago;
    ``None`` for anything else (forged, altered, stale, garbage)."""
    if not value or len(value) > MAX_FLOW_COOKIE or value.count(".") != 1:
        return None
    body, signature = value.split(".")
    expected = _b64(hmac.new(key, body.encode("ascii", "replace"), hashlib.sha256).digest())
    if not hmac.compare_digest(signature.encode("ascii", "replace"), expected.encode("ascii")):
        return None
    try:
        fields = json.loads(_unb64(body))
        flow = SignInFlow(**fields)
    except (ValueError, TypeError, binascii.Error):
        return None
    texts = (flow.provider, flow.state, flow.nonce, flow.code_verifier, flow.redirect_uri)
    if not all(isinstance(text, str) for text in texts) or isinstance(flow.started, bool):
        return None
    if not isinstance(flow.started, int) or not 0 <= now - flow.started <= FLOW_MAX_AGE:
        return None
    return flow
