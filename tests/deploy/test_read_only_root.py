"""kvcap runs on a read-only root filesystem, as the chart and deploy/kubernetes run it (readOnlyRootFilesystem:
true, an emptyDir at /tmp, HOME and the working directory in /tmp like the image sets them).

The check runs the installed kvcap in a private mount namespace (``unshare -m``) whose root is remounted read-only,
with a fresh tmpfs at /tmp: ``kvcap migrate``, ``kvcap catalog load`` (SQLite under /tmp) and ``kvcap serve``,
which must answer /healthz, /readyz and /metrics. Anything kvcap tried to write outside /tmp would fail with EROFS.

Needs ``unshare`` and the right to create a mount namespace (root, as CI runs). Without them the test skips, unless
``KVCAP_REQUIRE_TOOLS=1``, where it fails.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

from tests.deploy.tools import missing, require_tool, run

ROOT = Path(__file__).resolve().parents[2]
KVCAP = Path(sys.executable).with_name("kvcap")
STARTUP_SECONDS = 150  # migrate, catalog load and start-up on a busy two-core machine

# Inside the namespace: prove the root is read-only, give /tmp a tmpfs, then run kvcap as the image does.
SCRIPT = """
set -eu
mount --make-rprivate /
mount -o bind,remount,ro /
mount -t tmpfs -o size=64m tmpfs /tmp
if touch "$KVCAP_PROBE" 2>/dev/null; then echo "the root filesystem is still writable" >&2; exit 97; fi
cd /tmp
"$KVCAP_BIN" migrate
"$KVCAP_BIN" catalog load
exec "$KVCAP_BIN" serve --host 127.0.0.1 --port "$KVCAP_PORT"
"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def unshare() -> str:
    path = require_tool("unshare", "run kvcap on a read-only root filesystem")
    if run([path, "-m", "true"], timeout=30).returncode != 0:
        missing("unshare -m is not permitted here (needs root or CAP_SYS_ADMIN)")
    return path


def test_kvcap_migrates_loads_and_serves_with_a_read_only_root_and_a_writable_tmp() -> None:
    port = free_port()
    environment = {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": "/tmp",
        "PYTHONDONTWRITEBYTECODE": "1",
        "KVCAP_DATABASE_URL": "sqlite:////tmp/kvcap.db",
        "KVCAP_BIN": str(KVCAP),
        "KVCAP_PORT": str(port),
        "KVCAP_PROBE": str(ROOT / ".read-only-probe"),
    }
    process = subprocess.Popen(
        [unshare(), "-m", "sh", "-c", SCRIPT],
        env=environment,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    answered: httpx.Response | None = None
    responses: dict[str, httpx.Response] = {}
    try:
        deadline = time.monotonic() + STARTUP_SECONDS
        while time.monotonic() < deadline and process.poll() is None:
            try:
                answered = httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2)
                break
            except httpx.TransportError:
                time.sleep(0.5)
        if answered is not None:
            for path in ("/readyz", "/metrics"):
                responses[path] = httpx.get(f"http://127.0.0.1:{port}{path}", timeout=5)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)
        output, _ = process.communicate(timeout=30)
    assert answered is not None, f"kvcap did not start:\n{output[-4000:]}"
    assert answered.status_code == 200
    assert responses["/readyz"].status_code == 200
    assert responses["/metrics"].status_code == 200
    assert "kvcap_" in responses["/metrics"].text
    assert "Read-only file system" not in output, output
    assert not (ROOT / ".read-only-probe").exists()
