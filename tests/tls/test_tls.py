"""HTTPS: ``kvcap serve --ssl-certfile/--ssl-keyfile`` (or KVCAP_TLS_*) answers real TLS handshakes, and a
rotated certificate is served to new connections while open keep-alive connections carry on, without a restart.

The certificates are made here (``tests/tls/certificates.py``) and laid out like a mounted Kubernetes Secret,
rotated the way the kubelet rotates it (an atomic swap of the ``..data`` symlink).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from cryptography import x509
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from service.exporter.service_metrics import ServiceMetrics
from service.tls import CertificateReloader
from tests.hardening.throwaway_postgres import free_port
from tests.tls.certificates import CertificateAuthority, SecretVolume, client_context


def served_serial(response: httpx.Response) -> int:
    """Serial number of the certificate the server presented on the connection that carried ``response``."""
    ssl_object = response.extensions["network_stream"].get_extra_info("ssl_object")
    der = ssl_object.getpeercert(True)  # the low-level _SSLSocket takes no keywords
    return x509.load_der_x509_certificate(der).serial_number


def sample(metrics_text: str, name: str, labels: dict[str, str] | None = None) -> float | None:
    for family in text_string_to_metric_families(metrics_text):
        for s in family.samples:
            if s.name == name and s.labels == (labels or {}):
                return s.value
    return None


@dataclass
class Server:
    url: str
    process: subprocess.Popen[bytes]
    log: Path


@pytest.fixture
def ca() -> CertificateAuthority:
    return CertificateAuthority()


@contextlib.contextmanager
def start_server(
    tmp_path: Path, arguments: list[str], extra_env: dict[str, str], ca: CertificateAuthority
) -> Iterator[Server]:
    port = free_port()
    log = tmp_path / "kvcap.log"
    env = {key: value for key, value in os.environ.items() if not key.startswith("KVCAP_")}
    env |= {
        "KVCAP_DATABASE_URL": f"sqlite+aiosqlite:///{tmp_path}/kvcap.db",
        "KVCAP_SCRAPE_ENABLED": "false",
        "KVCAP_TLS_RELOAD_INTERVAL_SECONDS": "0.2",
        "KVCAP_LOG_FORMAT": "json",
        **extra_env,
    }
    with log.open("wb") as out:
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "service.cli",
                "serve",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                *arguments,
            ],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=tmp_path,
        )
    url = f"https://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            if process.poll() is not None:
                pytest.fail(f"kvcap exited with {process.returncode}:\n{log.read_text()[-3000:]}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{url}/healthz", verify=client_context(ca), timeout=2).status_code == 200:
                    break
            if time.monotonic() > deadline:
                pytest.fail(f"kvcap did not answer over HTTPS:\n{log.read_text()[-3000:]}")
            time.sleep(0.2)
        yield Server(url=url, process=process, log=log)
    finally:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def wait_for_serial(server: Server, ca: CertificateAuthority, serial: int) -> httpx.Response:
    deadline = time.monotonic() + 15
    while True:
        with httpx.Client(verify=client_context(ca), timeout=5) as fresh:
            response = fresh.get(f"{server.url}/healthz")
            if served_serial(response) == serial:
                return response
        assert time.monotonic() < deadline, (
            f"the rotated certificate was not served:\n{server.log.read_text()}"
        )
        time.sleep(0.2)


def test_serve_answers_https_and_serves_a_rotated_certificate_without_dropping_connections(
    tmp_path: Path, ca: CertificateAuthority
) -> None:
    volume = SecretVolume(tmp_path / "tls")
    first, second = ca.issue(days=30), ca.issue(days=90)
    volume.install(first)
    arguments = ["--ssl-certfile", str(volume.cert_file), "--ssl-keyfile", str(volume.key_file)]
    with start_server(tmp_path, arguments, {}, ca) as server:
        with httpx.Client(verify=client_context(ca), timeout=10) as kept_alive:
            before = kept_alive.get(f"{server.url}/healthz")
            assert before.status_code == 200
            assert served_serial(before) == first.serial
            metrics = kept_alive.get(f"{server.url}/metrics").text
            expiry = "kvcap_tls_certificate_expiry_timestamp_seconds"
            assert sample(metrics, expiry) == first.not_after.timestamp()

            volume.install(second)
            rotated = wait_for_serial(server, ca, second.serial)
            assert rotated.status_code == 200

            # The connection opened before the rotation is still the same one, still answering.
            after = kept_alive.get(f"{server.url}/healthz")
            assert after.status_code == 200
            assert served_serial(after) == first.serial
            assert after.extensions["network_stream"].get_extra_info("ssl_object") is before.extensions[
                "network_stream"
            ].get_extra_info("ssl_object")
            metrics = kept_alive.get(f"{server.url}/metrics").text
        assert sample(metrics, expiry) == second.not_after.timestamp()
        assert sample(metrics, "kvcap_tls_certificate_reloads_total", {"result": "success"}) == 1
        assert server.process.poll() is None  # no restart


def test_plain_http_is_refused_while_serving_https(tmp_path: Path, ca: CertificateAuthority) -> None:
    volume = SecretVolume(tmp_path / "tls")
    volume.install(ca.issue(days=30))
    env = {"KVCAP_TLS_CERT_FILE": str(volume.cert_file), "KVCAP_TLS_KEY_FILE": str(volume.key_file)}
    with start_server(tmp_path, [], env, ca) as server:  # the settings alone turn HTTPS on
        with pytest.raises(httpx.HTTPError):
            httpx.get(server.url.replace("https://", "http://") + "/healthz", timeout=5)
        with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
            httpx.get(f"{server.url}/healthz", verify=client_context(CertificateAuthority()), timeout=5)


def test_serve_refuses_a_key_without_a_certificate_and_an_unreadable_certificate(tmp_path: Path) -> None:
    env = {key: value for key, value in os.environ.items() if not key.startswith("KVCAP_")}
    key_only = subprocess.run(
        [sys.executable, "-m", "service.cli", "serve", "--ssl-keyfile", str(tmp_path / "tls.key")],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        cwd=tmp_path,
    )
    assert key_only.returncode == 2
    assert "--ssl-keyfile (KVCAP_TLS_KEY_FILE) needs --ssl-certfile" in key_only.stderr
    missing = subprocess.run(
        [sys.executable, "-m", "service.cli", "serve", "--ssl-certfile", str(tmp_path / "absent.crt")],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        cwd=tmp_path,
    )
    assert missing.returncode == 2
    assert "cannot use the TLS certificate" in missing.stderr


def test_a_half_rotated_pair_keeps_the_previous_certificate_until_the_pair_is_consistent(
    tmp_path: Path, ca: CertificateAuthority
) -> None:
    volume = SecretVolume(tmp_path / "tls")
    first, second = ca.issue(days=30), ca.issue(days=60)
    volume.install(first)
    metrics = ServiceMetrics()
    reloader = CertificateReloader(cert_file=volume.cert_file, key_file=volume.key_file, observer=metrics)
    served = reloader.current
    assert reloader.check() is False  # nothing changed

    volume.write(cert_pem=second.cert_pem, key_pem=first.key_pem)  # new certificate, old key
    assert reloader.check() is False
    assert reloader.current is served
    assert reloader.check() is False  # the same broken pair is not retried on every poll

    volume.install(second)
    assert reloader.check() is True
    assert reloader.current.expiry_timestamp_seconds == second.not_after.timestamp()
    registry = CollectorRegistry(auto_describe=False)
    registry.register(metrics)
    text = generate_latest(registry).decode()
    assert sample(text, "kvcap_tls_certificate_reloads_total", {"result": "error"}) == 1
    assert sample(text, "kvcap_tls_certificate_reloads_total", {"result": "success"}) == 1
    assert sample(text, "kvcap_tls_certificate_expiry_timestamp_seconds") == second.not_after.timestamp()
