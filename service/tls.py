"""HTTPS with certificates that are re-read when their files change, without a restart or a dropped connection.

cert-manager renews a certificate by rewriting the Secret; the kubelet then swaps the files of the mounted
volume atomically (a new timestamped directory behind the ``..data`` symlink). kvcap polls the files' identity
(inode, modification time, size, following symlinks) every few seconds. Polling rather than inotify: events on
symlinked Secret/ConfigMap volumes are easy to miss (the watched inode is replaced, not written), and two
``stat`` calls every ten seconds cost nothing.

The server's listening socket keeps the ``ssl.SSLContext`` it was created with; its ``sni_callback`` — which
OpenSSL calls for every ClientHello, with or without a server name — points each new handshake at the newest
context (``SSLObject.context = …``, the documented way to switch certificates per connection; Python's ``ssl``
docs, ``SSLContext.sni_callback``). Open connections keep the context of their handshake and carry on. A
rotation caught half-way (new certificate, old key) fails to load into a *fresh* context and the previous one
keeps serving until the next poll finds a consistent pair; the live context is never modified in place, so
there is no window in which it holds a certificate without its key.
"""

from __future__ import annotations

import asyncio
import logging
import os
import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from cryptography import x509

logger = logging.getLogger("kvcap.tls")


class CertificateObserver(Protocol):
    """``kvcap_tls_certificate_expiry_timestamp_seconds`` and ``kvcap_tls_certificate_reloads_total``."""

    def certificate_loaded(self, *, expiry_timestamp_seconds: float, reload: bool) -> None: ...

    def certificate_reload_failed(self) -> None: ...


@dataclass(frozen=True, slots=True, kw_only=True)
class FileIdentity:
    inode: int
    device: int
    mtime_ns: int
    size_bytes: int

    @classmethod
    def of(cls, path: Path) -> FileIdentity | None:
        try:
            stat = path.stat()  # follows the ..data symlink of a Kubernetes volume
        except OSError:
            return None
        return cls(inode=stat.st_ino, device=stat.st_dev, mtime_ns=stat.st_mtime_ns, size_bytes=stat.st_size)


@dataclass(frozen=True, slots=True, kw_only=True)
class LoadedCertificate:
    context: ssl.SSLContext
    identity: tuple[FileIdentity | None, FileIdentity | None]
    expiry_timestamp_seconds: float
    subject: str


class CertificateReloader:
    """Owns the certificate served to new TLS handshakes and re-reads it when its files change."""

    def __init__(
        self,
        *,
        cert_file: str | os.PathLike[str],
        key_file: str | os.PathLike[str] | None = None,
        password: str | None = None,
        observer: CertificateObserver | None = None,
    ) -> None:
        self.cert_file = Path(cert_file)
        self.key_file = Path(key_file) if key_file is not None else None
        self._password = password
        self._observer = observer
        self._failed_identity: tuple[FileIdentity | None, FileIdentity | None] | None = None
        self.current = self._load()  # raises at start-up: a server without a usable certificate must not run
        self._notify(reload=False)

    def _identity(self) -> tuple[FileIdentity | None, FileIdentity | None]:
        key = FileIdentity.of(self.key_file) if self.key_file is not None else None
        return FileIdentity.of(self.cert_file), key

    def _load(self) -> LoadedCertificate:
        identity = self._identity()
        pem = self.cert_file.read_bytes()
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        password = self._password
        context.load_cert_chain(self.cert_file, self.key_file, (lambda: password) if password else None)
        leaf = x509.load_pem_x509_certificates(pem)[0]
        return LoadedCertificate(
            context=context,
            identity=identity,
            expiry_timestamp_seconds=leaf.not_valid_after_utc.timestamp(),
            subject=leaf.subject.rfc4514_string(),
        )

    def _notify(self, *, reload: bool) -> None:
        if self._observer is not None:
            self._observer.certificate_loaded(
                expiry_timestamp_seconds=self.current.expiry_timestamp_seconds, reload=reload
            )

    def install(self, server_context: ssl.SSLContext) -> None:
        """Make ``server_context`` (the one the listening socket uses) hand every handshake the newest cert."""
        server_context.sni_callback = self._select

    def _select(
        self, connection: ssl.SSLObject | ssl.SSLSocket, _server_name: str | None, _ctx: object
    ) -> None:
        connection.context = self.current.context

    def check(self) -> bool:
        """Re-read the files if they changed; True when a new certificate is now served."""
        identity = self._identity()
        if identity == self.current.identity or identity == self._failed_identity:
            return False
        try:
            loaded = self._load()
        except (OSError, ssl.SSLError, ValueError) as exc:
            # Mid-rotation (certificate replaced, key not yet) or a broken file: keep serving the previous pair.
            self._failed_identity = identity
            if self._observer is not None:
                self._observer.certificate_reload_failed()
            logger.warning(
                "TLS certificate %s changed but cannot be loaded (%s: %s); still serving the previous one",
                self.cert_file,
                type(exc).__name__,
                exc,
            )
            return False
        self.current = loaded
        self._failed_identity = None
        self._notify(reload=True)
        logger.info(
            "TLS certificate reloaded from %s: %s, expires at %.0f",
            self.cert_file,
            loaded.subject,
            loaded.expiry_timestamp_seconds,
        )
        return True

    async def watch(self, interval_seconds: float) -> None:
        """Poll forever (a lifespan task); runs on the event loop, the thread that also runs the handshakes."""
        while True:
            await asyncio.sleep(interval_seconds)
            try:
                self.check()
            except Exception:  # never let the watcher die: the next poll tries again
                logger.exception("TLS certificate check failed")
