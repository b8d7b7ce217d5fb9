"""A real OpenID Connect provider for the sign-in tests: panva's ``oidc-provider`` (npm,
installed from ``tests/oidc_provider/package-lock.json`` into ``.venv-oidc`` by ``make test``) run by Node.js on
loopback addresses, a tampering proxy in front of it, and the sign-in driven without a
browser (httpx following the redirects, posting the provider's own login and consent forms).

Two providers run in one Node process, with one test client each (redirect URI: the
archive's ``/signin/oidc/callback``):

- ``direct``: on ``127.0.0.2`` (another site than the archive on ``127.0.0.1``, as every
  real provider is: the flow's cookie must come back on a cross-site navigation);
- ``proxied``: its issuer is a :class:`TamperingProxy` on ``127.0.0.1``, which passes
  everything through and, when told to, rewrites the token endpoint's answer: an ID token
  with a wrong issuer, audience or nonce, an expired one, or one signed with another key.
"""

from __future__ import annotations

import contextlib
import html
import json
import os
import re
import shutil
import socket
import subprocess
import threading
import time
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
from joserfc import jws, jwt
from joserfc.jwk import KeySet, RSAKey

from zarrchive.config import OidcProvider

PROVIDER_DIR = Path(__file__).resolve().parents[1] / "oidc_provider"
#: Where ``make test`` installs the provider's npm packages (beside the Python venvs).
INSTALL_DIR = Path(__file__).resolve().parents[2] / ".venv-oidc"
#: The provider's host (another site than the archive's 127.0.0.1).
PROVIDER_HOST = "127.0.0.2"
KEY_ID = "zarrchive-test-key"
CLIENT_SECRET = "zarrchive-test-client-secret"
#: How long the provider may take to start on a loaded machine.
START_DEADLINE = 120.0


def require_provider() -> tuple[str, Path]:
    """``node`` and the installed provider, or skip saying how to get them."""
    node = shutil.which("node")
    if node is None:
        pytest.skip("Node.js is missing: install nodejs and npm to run the OpenID Connect tests")
    if not (INSTALL_DIR / "node_modules" / "oidc-provider").is_dir():
        pytest.skip(
            "the OpenID Connect provider is not installed: run `make "
            ".venv-oidc/.installed-stamp` (npm ci of tests/oidc_provider's lock in .venv-oidc)"
        )
    # the script runs beside the packages it imports (Node resolves from the script's place)
    script = INSTALL_DIR / "provider.mjs"
    staged = INSTALL_DIR / f".provider.{os.getpid()}.mjs"
    shutil.copyfile(PROVIDER_DIR / "provider.mjs", staged)
    os.replace(staged, script)
    return node, script


def _free_port(host: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def signing_key() -> RSAKey:
    return RSAKey.generate_key(2048, {"kid": KEY_ID, "use": "sig", "alg": "RS256"}, private=True)


@dataclass
class Providers:
    """The running providers: their settings for the archive, and the proxy."""

    direct: OidcProvider
    proxied: OidcProvider
    proxy: TamperingProxy


@contextlib.contextmanager
def running_providers(redirect_uri: str, work_dir: Path) -> Iterator[Providers]:
    """Start both providers (see the module's docstring) for an archive whose redirect URI
    is *redirect_uri*."""
    node, script = require_provider()
    key = signing_key()
    direct_port = _free_port(PROVIDER_HOST)
    backend_port = _free_port("127.0.0.1")
    proxy = TamperingProxy(f"http://127.0.0.1:{backend_port}", key)
    direct = OidcProvider(
        key="direct",
        issuer=f"http://{PROVIDER_HOST}:{direct_port}",
        client_id="zarrchive-direct",
        client_secret=CLIENT_SECRET,
        name="Test Provider",
    )
    proxied = OidcProvider(
        key="proxied",
        issuer=proxy.url,
        client_id="zarrchive-proxied",
        client_secret=CLIENT_SECRET,
        name="Proxied Provider",
    )
    config = {
        "jwks": {"keys": [key.as_dict(private=True)]},
        "providers": [
            {
                "issuer": provider.issuer,
                "host": host,
                "port": port,
                "client": {
                    "client_id": provider.client_id,
                    "client_secret": CLIENT_SECRET,
                    "redirect_uris": [redirect_uri],
                },
            }
            for provider, host, port in (
                (direct, PROVIDER_HOST, direct_port),
                (proxied, "127.0.0.1", backend_port),
            )
        ],
    }
    config_path = work_dir / "oidc-provider.json"
    config_path.write_text(json.dumps(config))
    log_path = work_dir / "oidc-provider.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [node, str(script), str(config_path)],
            cwd=PROVIDER_DIR,
            stdout=subprocess.PIPE,
            stderr=log,
        )
        try:
            _wait_ready(process, 2, log_path)
            with proxy.serving():
                yield Providers(direct=direct, proxied=proxied, proxy=proxy)
        finally:
            process.terminate()
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def _wait_ready(process: subprocess.Popen[bytes], count: int, log_path: Path) -> None:
    """Wait until the provider printed ``ready`` *count* times (bounded: fails saying so)."""
    assert process.stdout is not None
    ready = 0
    lines: list[str] = []

    def read() -> None:
        nonlocal ready
        assert process.stdout is not None
        for line in process.stdout:
            lines.append(line.decode(errors="replace"))
            if line.startswith(b"ready "):
                ready += 1
                if ready == count:
                    return

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(START_DEADLINE)
    if ready < count:
        process.kill()
        raise RuntimeError(
            f"the OpenID Connect provider did not start within {START_DEADLINE:.0f} s "
            f"(printed {lines!r}; its log: {log_path.read_text(errors='replace')[-2000:]})"
        )


class TamperingProxy:
    """An HTTP proxy on 127.0.0.1 in front of a provider: passes every request through; with
    :attr:`mode` set, the token endpoint's ID token is rewritten and signed again (with the
    provider's key, or another one for ``other-key``)."""

    MODES = ("resigned", "issuer", "audience", "nonce", "expired", "other-key")

    def __init__(self, backend: str, key: RSAKey) -> None:
        self.backend = backend
        self.key = key
        self.other_key = signing_key()  # same key id, other key
        self.mode: str | None = None
        self.port = _free_port("127.0.0.1")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def rewrite_id_token(self, id_token: str) -> str:
        claims = json.loads(jws.extract_compact(id_token.encode()).payload)
        now = int(time.time())
        if self.mode == "issuer":
            claims["iss"] = "http://127.0.0.1:9/not-the-provider"
        elif self.mode == "audience":
            claims["aud"] = "another-client"
        elif self.mode == "nonce":
            claims["nonce"] = "not-the-nonce-of-this-sign-in"
        elif self.mode == "expired":
            claims["iat"], claims["exp"] = now - 7200, now - 3600
        key = self.other_key if self.mode == "other-key" else self.key
        return jwt.encode({"alg": "RS256", "kid": KEY_ID}, claims, KeySet([key]))

    @contextlib.contextmanager
    def serving(self) -> Iterator[None]:
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def _forward(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                headers = {k: v for k, v in self.headers.items() if k.lower() != "content-length"}
                with httpx.Client(timeout=60) as client:
                    answer = client.request(
                        self.command, proxy.backend + self.path, headers=headers, content=body
                    )
                content = answer.content
                if (
                    self.command == "POST"
                    and self.path.startswith("/token")
                    and proxy.mode is not None
                    and answer.status_code == 200
                ):
                    token = answer.json()
                    token["id_token"] = proxy.rewrite_id_token(token["id_token"])
                    content = json.dumps(token).encode()
                self.send_response(answer.status_code)
                for name, value in answer.headers.multi_items():
                    if name.lower() not in ("content-length", "transfer-encoding", "connection"):
                        if name.lower() == "content-encoding":
                            continue  # httpx decoded the body
                        self.send_header(name, value)
                self.send_header("Content-Length", str(len(content)))
                self.end_headers()
                self.wfile.write(content)

            def do_GET(self) -> None:
                self._forward()

            def do_POST(self) -> None:
                self._forward()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        try:
            yield
        finally:
            server.shutdown()
            server.server_close()


_FORM_ACTION = re.compile(r'<form[^>]*action="([^"]+)"')
_CSRF = re.compile(r'name="csrf_token" value="([^"]+)"')


def _origin(url: str) -> str:
    parts = urllib.parse.urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


def start_sign_in(archive: httpx.Client, provider_key: str) -> str:
    """Press the provider's button on ``/signin`` (as a browser would): the provider's
    authorization URL the archive redirects to (the flow's cookie is now in *archive*)."""
    signin = archive.get("/signin")
    assert signin.status_code == 200, signin.text
    button = signin.text.find(f'action="/signin/oidc/{provider_key}"')
    match = _CSRF.search(signin.text, button)
    assert button >= 0 and match is not None, f"no button of {provider_key} on /signin"
    started = archive.post(
        f"/signin/oidc/{provider_key}",
        data={"csrf_token": html.unescape(match.group(1))},
        headers={"Origin": str(archive.base_url).rstrip("/")},
    )
    assert started.status_code == 303, started.text
    return started.headers["location"]


def sign_in_at_provider(authorization_url: str, login: str, *, abort: bool = False) -> str:
    """Go through the provider's login and consent pages (its own forms) as *login*; the
    URL it sends the browser back to (the archive's callback with ``code`` and ``state``)."""
    provider_origin = _origin(authorization_url)
    with httpx.Client(timeout=60) as browser:
        url = authorization_url
        answer = browser.get(url)
        for _ in range(20):
            if answer.is_redirect:
                url = urllib.parse.urljoin(url, answer.headers["location"])
                if _origin(url) != provider_origin:
                    return url  # back to the archive
                answer = browser.get(url)
                continue
            assert answer.status_code == 200, answer.text
            action = _FORM_ACTION.search(answer.text)
            assert action is not None, f"no form on the provider's page {url}: {answer.text}"
            submit = urllib.parse.urljoin(url, html.unescape(action.group(1)))
            if abort:
                answer = browser.get(submit.rstrip("/") + "/abort")
            elif 'name="login"' in answer.text:
                answer = browser.post(
                    submit, data={"prompt": "login", "login": login, "password": "any"}
                )
            else:
                answer = browser.post(submit, data={"prompt": "consent"})
            url = submit
    raise AssertionError("the provider did not send the browser back within 20 steps")
