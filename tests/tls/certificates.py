"""Test certificates made on the spot with ``cryptography``: a CA and leaves it signs, and Kubernetes-style
Secret volumes (files behind a ``..data`` symlink that is swapped atomically, as the kubelet's AtomicWriter
does when cert-manager renews the Secret)."""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
import ssl
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

NOW = dt.datetime.now(dt.UTC).replace(microsecond=0)


@dataclass(frozen=True)
class Issued:
    cert_pem: bytes
    key_pem: bytes
    serial: int
    not_after: dt.datetime


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


class CertificateAuthority:
    def __init__(self, name: str = "kvcap test CA") -> None:
        self.key = ec.generate_private_key(ec.SECP256R1())
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
        self.name = subject
        self.cert = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(subject)
            .public_key(self.key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(NOW - dt.timedelta(days=1))
            .not_valid_after(NOW + dt.timedelta(days=365))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    key_cert_sign=True,
                    crl_sign=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .sign(self.key, hashes.SHA256())
        )
        self.cert_pem = self.cert.public_bytes(serialization.Encoding.PEM)

    def issue(self, *, days: int, dns: str = "kvcap.kvcap.svc") -> Issued:
        """A serving certificate for 127.0.0.1 (by IP: clients send no SNI) and ``dns``."""
        key = ec.generate_private_key(ec.SECP256R1())
        serial = x509.random_serial_number()
        not_after = NOW + dt.timedelta(days=days)
        cert = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, dns)]))
            .issuer_name(self.name)
            .public_key(key.public_key())
            .serial_number(serial)
            .not_valid_before(NOW - dt.timedelta(hours=1))
            .not_valid_after(not_after)
            .add_extension(
                x509.SubjectAlternativeName(
                    [x509.DNSName(dns), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
                ),
                critical=False,
            )
            .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .sign(self.key, hashes.SHA256())
        )
        return Issued(
            cert_pem=cert.public_bytes(serialization.Encoding.PEM) + self.cert_pem,  # leaf, then its CA
            key_pem=_key_pem(key),
            serial=serial,
            not_after=not_after,
        )


def client_context(ca: CertificateAuthority) -> ssl.SSLContext:
    """Verify the server against ``ca`` only (hostname included: the leaf names 127.0.0.1)."""
    return ssl.create_default_context(cadata=ca.cert_pem.decode())


class SecretVolume:
    """``tls.crt`` and ``tls.key`` as the kubelet lays out a mounted Secret: ``tls.crt -> ..data/tls.crt``,
    ``..data -> ..<generation>``; an update writes a new generation directory and renames a new ``..data``
    symlink over the old one, so both files change in one atomic step."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.generation = 0
        root.mkdir(parents=True, exist_ok=True)

    @property
    def cert_file(self) -> Path:
        return self.root / "tls.crt"

    @property
    def key_file(self) -> Path:
        return self.root / "tls.key"

    def write(self, *, cert_pem: bytes, key_pem: bytes) -> None:
        self.generation += 1
        directory = self.root / f"..generation_{self.generation}"
        directory.mkdir()
        (directory / "tls.crt").write_bytes(cert_pem)
        (directory / "tls.key").write_bytes(key_pem)
        os.chmod(directory / "tls.key", 0o600)
        staging = self.root / "..data_tmp"
        staging.symlink_to(directory.name)
        os.replace(staging, self.root / "..data")
        for name in ("tls.crt", "tls.key"):
            link = self.root / name
            if not link.is_symlink():
                link.symlink_to(f"..data/{name}")

    def install(self, issued: Issued) -> None:
        self.write(cert_pem=issued.cert_pem, key_pem=issued.key_pem)
