"""Serving HTTPS, optionally requiring client certificates (mTLS), with certificates reloaded
when their files change, as cert-manager rotates them, without dropping the listener."""

from __future__ import annotations

import asyncio
import hashlib
import logging
import ssl
from collections.abc import AsyncIterator, Callable

from loadext.config.serving import TLSFiles

log = logging.getLogger(__name__)


TLSServing = tuple[ssl.SSLContext, Callable[..., AsyncIterator[None]]]


def serving(files: TLSFiles, reload_interval: float) -> TLSServing | None:
    """The listener's SSLContext and the cleanup context that reloads it (tls reloader), or None
    without TLS flags. OSError when the flags are incomplete or the files do not load."""
    if not (files.cert or files.key or files.client_ca):
        return None
    if not (files.cert and files.key):
        raise OSError("--tls-cert and --tls-key go together (and --tls-client-ca needs them)")
    context = server_context(files.cert, files.key, files.client_ca)
    return context, reloader(context, files.cert, files.key, reload_interval)


def server_context(cert: str, key: str, client_ca: str | None) -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(cert, key)
    if client_ca:
        context.load_verify_locations(client_ca)
        context.verify_mode = ssl.CERT_REQUIRED  # no certificate from that CA: refused in the handshake
    return context


def _digest(*paths: str) -> str:
    hasher = hashlib.sha256()
    for path in paths:
        with open(path, "rb") as handle:
            hasher.update(handle.read())
    return hasher.hexdigest()


def reloader(context: ssl.SSLContext, cert: str, key: str, interval: float) -> Callable[..., AsyncIterator[None]]:
    """An aiohttp cleanup context that reloads the key pair into the live SSLContext when the
    files change: new handshakes get the new certificate, open connections keep theirs."""

    async def watch(_: object) -> AsyncIterator[None]:
        async def poll() -> None:
            seen = _digest(cert, key)
            while True:
                await asyncio.sleep(interval)
                try:
                    current = _digest(cert, key)
                    if current != seen:
                        context.load_cert_chain(cert, key)
                        seen = current
                        log.info("TLS certificate reloaded from %s", cert)
                except (OSError, ssl.SSLError) as exc:  # half-written files: keep the old pair, retry
                    log.warning("TLS certificate reload failed, keeping the current one: %s", exc)

        task = asyncio.create_task(poll(), name="tls-reload")
        yield
        task.cancel()

    return watch
