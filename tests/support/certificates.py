"""Throw-away TLS certificates for the tests' loopback servers (made by ``openssl``)."""

from __future__ import annotations

import ssl
import subprocess
from pathlib import Path


def self_signed(folder: Path, name: str = "cert") -> tuple[Path, Path]:
    """A certificate for localhost, 127.0.0.1 and ::1 and its key: (certificate, key)."""
    cert, key = folder / f"{name}.pem", folder / f"{name}.key"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1,IP:::1",
         "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    return cert, key


def server_context(folder: Path) -> tuple[ssl.SSLContext, Path]:
    """A server context with a self-signed certificate (``self_signed``), and the
    certificate's file (for a client that is to trust it)."""
    cert, key = self_signed(folder)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    return context, cert
