"""Throwaway certificates for loopback tests, made with the openssl command line."""

from __future__ import annotations

import subprocess
from pathlib import Path


def _openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True)


def make_ca(directory: Path, name: str) -> tuple[Path, Path]:
    cert, key = directory / f"{name}.crt", directory / f"{name}.key"
    _openssl(
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-days",
        "2",
        "-subj",
        f"/CN={name}",
        "-keyout",
        str(key),
        "-out",
        str(cert),
    )
    return cert, key


def make_cert(directory: Path, ca: tuple[Path, Path], name: str, san: str = "") -> tuple[Path, Path]:
    """A certificate signed by `ca`; `san` like "IP:127.0.0.1,DNS:localhost" for servers."""
    cert, key, request = directory / f"{name}.crt", directory / f"{name}.key", directory / f"{name}.csr"
    extra = ["-addext", f"subjectAltName={san}"] if san else []
    _openssl(
        "req",
        "-new",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-subj",
        f"/CN={name}",
        *extra,
        "-keyout",
        str(key),
        "-out",
        str(request),
    )
    _openssl(
        "x509",
        "-req",
        "-in",
        str(request),
        "-CA",
        str(ca[0]),
        "-CAkey",
        str(ca[1]),
        "-CAcreateserial",
        "-days",
        "2",
        "-copy_extensions",
        "copy",
        "-out",
        str(cert),
    )
    return cert, key


def make_signing_key(directory: Path, name: str) -> tuple[Path, Path]:
    """An RSA key pair (private, public), e.g. for service-account token signing."""
    private, public = directory / f"{name}.key", directory / f"{name}.pub"
    _openssl("genrsa", "-out", str(private), "2048")
    _openssl("rsa", "-in", str(private), "-pubout", "-out", str(public))
    return private, public
