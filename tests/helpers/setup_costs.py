"""Setup costs paid once per test process instead of once per test (``tests/conftest.py``).

Two costs of *making* clients, paid hundreds of times in ``make test`` and proving nothing:

- **botocore's data loader.**  Each botocore session reads and parses the S3 service model
  (a megabyte of JSON) again: 0.1-0.2 s per client.  The archive's own stores share one
  loader per process (``zarrchive.storage.objects._data_loader``); the boto3 clients the
  tests make themselves (fixtures, oracles) did not.  :func:`share_botocore_loader` gives
  every session of the test process one loader (the files are static data).
- **httpx's default TLS context.**  Each ``httpx.Client()`` loads a CA bundle (certifi's, or
  ``SSL_CERT_FILE``'s): 20-40 ms, more on a loaded machine, though the tests speak plain HTTP
  to their servers.  :func:`share_default_tls_context` makes that default context once (only the
  default one: ``verify=True``, no client certificate; once per value of ``SSL_CERT_FILE``
  and ``SSL_CERT_DIR``; any other asks httpx as before).  Nothing in the process asks for
  HTTP/2, so no client changes the shared context's ALPN protocols.

Only the test process is affected: the servers and CLIs the tests start as processes make
their clients as in production (the costs are the product's, once per process there).
"""

from __future__ import annotations

import functools
import os
import ssl
from typing import Any

import botocore.loaders
import botocore.session
import httpx
import httpx._config
import httpx._transports.default


def share_botocore_loader() -> None:
    """Every botocore session of this process reads botocore's data files through one
    loader per search path."""
    original = botocore.loaders.create_loader
    botocore.session.create_loader = functools.lru_cache(maxsize=None)(original)


def share_default_tls_context() -> None:
    """httpx's default client TLS context made once in this process (per value of
    ``SSL_CERT_FILE`` and ``SSL_CERT_DIR``, which httpx reads for it)."""
    original = httpx._config.create_ssl_context
    shared: dict[tuple[str, str], ssl.SSLContext] = {}

    def create_ssl_context(
        verify: ssl.SSLContext | str | bool = True, cert: Any = None, trust_env: bool = True
    ) -> ssl.SSLContext:
        if not (verify is True and cert is None and trust_env):
            return original(verify=verify, cert=cert, trust_env=trust_env)
        key = (os.environ.get("SSL_CERT_FILE", ""), os.environ.get("SSL_CERT_DIR", ""))
        context = shared.get(key)
        if context is None:
            context = shared[key] = original()
        return context

    httpx._transports.default.create_ssl_context = create_ssl_context  # type: ignore[attr-defined]
    httpx.create_ssl_context = create_ssl_context
