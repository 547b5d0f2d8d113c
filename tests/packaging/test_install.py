"""The package as users get it: ``uv build`` makes the sdist and, from it, the wheel; both carry the Alembic
migrations and the built-in catalog; the wheel installed into a fresh virtualenv (its dependencies from
``requirements.lock``, as the image installs them), run from a directory with no checkout in sight, migrates an
empty database, loads the catalog, reports its version and serves HTTPS.

One test on purpose: building and installing takes about a minute.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tarfile
import time
import tomllib
import zipfile
from pathlib import Path

import httpx
import pytest

from tests.hardening.throwaway_postgres import free_port
from tests.tls.certificates import CertificateAuthority, SecretVolume, client_context

ROOT = Path(__file__).resolve().parents[2]
VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
BUILTIN_MODELS = len(list((ROOT / "service" / "catalog" / "builtin" / "models").glob("*.json")))
MIGRATION_FILES = sorted(p.name for p in (ROOT / "service" / "migrations" / "versions").glob("*.py"))
BUILTIN_GPUS = len(json.loads((ROOT / "service" / "catalog" / "builtin" / "gpus.json").read_text()))
PACKAGED = [
    "service/migrations/env.py",
    "service/migrations/script.py.mako",
    *(f"service/migrations/versions/{name}" for name in MIGRATION_FILES),
    "service/catalog/builtin/gpus.json",
    "service/catalog/builtin/models/llama-3.1-8b.json",
]


def uv() -> str:
    found = shutil.which("uv") or str(Path(sys.executable).with_name("uv"))
    if not Path(found).exists():
        if os.environ.get("KVCAP_REQUIRE_TOOLS"):
            pytest.fail("uv not found (a dev dependency: pip install -e '.[dev]')")
        pytest.skip("uv not found")
    return found


def run(*args: str | Path, cwd: Path, env: dict[str, str], timeout: float = 600) -> str:
    result = subprocess.run(
        [str(a) for a in args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )
    assert result.returncode == 0, f"{args} exited {result.returncode}:\n{result.stdout}\n{result.stderr}"
    return result.stdout + result.stderr


@pytest.mark.packaging
def test_the_wheel_installed_alone_migrates_loads_the_catalog_reports_its_version_and_serves_https(
    tmp_path: Path,
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KVCAP_", "PYTHON", "VIRTUAL_ENV"))}
    dist = tmp_path / "dist"
    run(uv(), "build", "--quiet", "--out-dir", dist, ROOT, cwd=tmp_path, env=env)
    (sdist,) = dist.glob("kvcap-*.tar.gz")
    (wheel,) = dist.glob("kvcap-*.whl")

    with tarfile.open(sdist) as archive:
        in_sdist = {name.split("/", 1)[1] for name in archive.getnames() if "/" in name}
    with zipfile.ZipFile(wheel) as archive:
        in_wheel = set(archive.namelist())
        metadata = archive.read(f"kvcap-{VERSION}.dist-info/METADATA").decode()
    for path in PACKAGED:
        assert path in in_sdist, f"{path} missing from the sdist"
        assert path in in_wheel, f"{path} missing from the wheel"
    assert "LICENSE" in in_sdist
    assert f"kvcap-{VERSION}.dist-info/licenses/LICENSE" in in_wheel
    assert "License-Expression: Apache-2.0" in metadata

    venv = tmp_path / "venv"
    run(sys.executable, "-m", "venv", venv, cwd=tmp_path, env=env)
    pip = [venv / "bin" / "python", "-m", "pip", "--disable-pip-version-check", "--quiet"]
    run(*pip, "install", "--require-hashes", "-r", ROOT / "requirements.lock", cwd=tmp_path, env=env)
    run(*pip, "install", "--no-deps", wheel, cwd=tmp_path, env=env)
    run(*pip, "check", cwd=tmp_path, env=env)

    work = tmp_path / "elsewhere"  # nothing of the checkout here, and not on the path
    work.mkdir()
    kvcap = venv / "bin" / "kvcap"
    located = run(venv / "bin" / "python", "-c", "import service; print(service.__file__)", cwd=work, env=env)
    assert located.strip().startswith(str(venv)), located
    database = work / "kvcap.db"
    url = f"sqlite:///{database}"
    run(kvcap, "migrate", "--database-url", url, cwd=work, env=env)
    loaded = run(kvcap, "catalog", "load", "--database-url", url, cwd=work, env=env)
    assert "catalog loaded" in loaded
    with contextlib.closing(sqlite3.connect(database)) as conn:
        tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        assert {"gpus", "models", "deployments", "calibrations", "alembic_version"} <= tables
        assert conn.execute("SELECT count(*) FROM gpus").fetchone()[0] == BUILTIN_GPUS
        assert conn.execute("SELECT count(*) FROM models").fetchone()[0] == BUILTIN_MODELS
    assert run(kvcap, "--version", cwd=work, env=env).strip() == f"kvcap {VERSION}"

    ca = CertificateAuthority()
    volume = SecretVolume(work / "tls")
    volume.install(ca.issue(days=30))
    port = free_port()
    serve_env = env | {"KVCAP_DATABASE_URL": url, "KVCAP_SCRAPE_ENABLED": "false"}
    arguments = ["--port", str(port), "--ssl-certfile", volume.cert_file, "--ssl-keyfile", volume.key_file]
    process = subprocess.Popen(
        [kvcap, "serve", *map(str, arguments)],
        cwd=work,
        env=serve_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            assert process.poll() is None, process.stdout.read().decode() if process.stdout else ""
            with contextlib.suppress(httpx.HTTPError):
                ready = httpx.get(f"https://127.0.0.1:{port}/readyz", verify=client_context(ca), timeout=2)
                if ready.status_code == 200:
                    break
            assert time.monotonic() < deadline, "the installed kvcap did not answer over HTTPS"
            time.sleep(0.3)
        catalog = ready.json()["catalog"]
        assert catalog["source"] == "database" and catalog["gpus"] == BUILTIN_GPUS
    finally:
        process.terminate()
        process.wait(timeout=15)
