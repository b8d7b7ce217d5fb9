"""What keeps the embedded SeaweedFS's internal ports to the archive alone.

``weed mini`` opens, besides the S3 gateway, a master, a volume server and a filer, each
on an HTTP and a gRPC port of 127.0.0.1.  Left open, any local user could read embargoed
objects or write into the public bucket through them (skipping the archive's checks), or
delete a bucket's volumes through the master.  So the embedded server runs with:

- ``-disableHttp``: the master's and the filer's HTTP APIs are off (the S3 gateway talks
  to them over gRPC);
- JWT signing keys (``security.toml``): the volume server accepts reads and writes only
  with a token the master or filer signed (the filer's HTTP API too, were it on);
- gRPC mutual TLS: every gRPC port accepts only clients presenting a certificate signed
  by a private CA made at first start.  Its key is deleted once the one certificate the
  components share is signed, so no further certificate can ever be made;
- everything in a directory readable by its owner only.

The certificates are made with the ``openssl`` command (no extra Python dependency); the
JWT keys are new at every start (the components live in one process).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from zarrchive.config import make_private_dir
from zarrchive.errors import ConfigurationError

#: The components whose gRPC servers (and clients) use the shared certificate.
GRPC_COMPONENTS = ("master", "volume", "filer", "s3", "admin", "worker", "client")
#: How long the certificates last (days); remade when missing, unreadable or expired.
CERTIFICATE_DAYS = 3650
CERTIFICATE_NAME = "zarrchive-embedded-s3"

_OPENSSL_CONFIG = f"""\
[req]
distinguished_name = dn
prompt = no
[dn]
CN = {CERTIFICATE_NAME}
[ca]
basicConstraints = critical, CA:TRUE
keyUsage = critical, keyCertSign, cRLSign
subjectKeyIdentifier = hash
[node]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature, keyEncipherment
extendedKeyUsage = serverAuth, clientAuth
subjectAltName = IP:127.0.0.1, DNS:localhost
"""


@dataclass(frozen=True)
class Certificates:
    """The private CA's certificate and the components' certificate and key (PEM files)."""

    ca: Path
    cert: Path
    key: Path

    @classmethod
    def in_dir(cls, directory: Path) -> Certificates:
        return cls(directory / "ca.crt", directory / "node.crt", directory / "node.key")

    def usable(self) -> bool:
        """Whether the three files exist and the certificate is good for another day."""
        if not (self.ca.is_file() and self.cert.is_file() and self.key.is_file()):
            return False
        checked = _openssl(
            "x509", "-checkend", "86400", "-noout", "-in", str(self.cert), check=False
        )
        return checked.returncode == 0


def _openssl(*args: str, check: bool = True) -> subprocess.CompletedProcess[bytes]:
    program = shutil.which("openssl")
    if program is None:
        raise ConfigurationError(
            "the embedded S3 needs the 'openssl' command to make the certificates of its "
            "internal ports: install OpenSSL, or set ZARRCHIVE_S3_ENDPOINT_URL to an S3 service"
        )
    result = subprocess.run(
        [program, *args],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        preexec_fn=_private_umask,
        check=False,
    )
    if check and result.returncode != 0:
        raise ConfigurationError(
            f"openssl {args[0]} failed while making the embedded S3's certificates: "
            + result.stderr.decode(errors="replace").strip()
        )
    return result


def _private_umask() -> None:  # pragma: no cover - runs in the child
    os.umask(0o077)


def ensure_certificates(directory: Path) -> Certificates:
    """The certificates in *directory*, made first if missing or expiring."""
    make_private_dir(directory)
    certificates = Certificates.in_dir(directory)
    if certificates.usable():
        return certificates
    config = directory / "openssl.cnf"
    ca_key = directory / "ca.key"
    request = directory / "node.csr"
    config.write_text(_OPENSSL_CONFIG)
    days = str(CERTIFICATE_DAYS)
    try:
        _openssl(
            "req", "-x509", "-config", str(config), "-extensions", "ca", "-newkey", "rsa:2048",
            "-nodes", "-keyout", str(ca_key), "-out", str(certificates.ca), "-days", days,
            "-subj", f"/CN={CERTIFICATE_NAME} CA",
        )  # fmt: skip
        _openssl(
            "req", "-new", "-config", str(config), "-newkey", "rsa:2048", "-nodes",
            "-keyout", str(certificates.key), "-out", str(request),
        )  # fmt: skip
        _openssl(
            "x509", "-req", "-in", str(request), "-CA", str(certificates.ca),
            "-CAkey", str(ca_key), "-set_serial", str(secrets.randbits(63)),
            "-out", str(certificates.cert), "-days", days,
            "-extfile", str(config), "-extensions", "node",
        )  # fmt: skip
    finally:
        # without the CA's key nobody (not even this archive) can sign another certificate
        for leftover in (ca_key, request, config):
            with contextlib.suppress(FileNotFoundError):
                leftover.unlink()
    return certificates


def security_toml(certificates: Certificates) -> str:
    """A ``security.toml`` with new JWT signing keys and gRPC mutual TLS for every part."""

    def key() -> str:
        return secrets.token_hex(32)

    lines = []
    for section in (
        "jwt.signing",
        "jwt.signing.read",
        "jwt.filer_signing",
        "jwt.filer_signing.read",
    ):
        lines += [f"[{section}]", f'key = "{key()}"', "expires_after_seconds = 10", ""]
    lines += ["[access]", "ui = false", ""]
    lines += ["[filer.expose_directory_metadata]", "enabled = false", ""]
    lines += ["[grpc]", f'ca = "{_toml_path(certificates.ca)}"', ""]
    for component in GRPC_COMPONENTS:
        lines += [
            f"[grpc.{component}]",
            f'cert = "{_toml_path(certificates.cert)}"',
            f'key = "{_toml_path(certificates.key)}"',
            "",
        ]
    return "\n".join(lines)


def _toml_path(path: Path) -> str:
    """*path* as a TOML basic string's content."""
    return str(path).replace("\\", "\\\\").replace('"', '\\"')
