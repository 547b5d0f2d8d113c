"""kvcap runs on a read-only root filesystem, as the chart and deploy/kubernetes run it (readOnlyRootFilesystem:
true, one writable emptyDir; the image points HOME and its working directory at it).

The check runs the installed kvcap in a private mount namespace (``unshare -m``) in which every mount is remounted
read-only except one writable directory, which stands for the pod's /tmp volume and is HOME, TMPDIR and the working
directory: ``kvcap migrate``, ``kvcap catalog load`` (SQLite in that directory) and ``kvcap serve``, which must
answer /healthz, /readyz and /metrics. Anything kvcap tried to write elsewhere would fail with EROFS.

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

# Inside the namespace: every mount read-only (the kernel's own /proc, /sys and /dev aside), the volume writable,
# a proof that the checkout is read-only, then kvcap as the image runs it.
SCRIPT = """
set -eu
mount --make-rprivate /
for mount_point in $(awk '{print $5}' /proc/self/mountinfo | sort -u); do
  case "$mount_point" in /proc*|/sys*|/dev*) continue ;; esac
  mount -o bind,remount,ro "$mount_point" 2>/dev/null || true
done
mount --bind "$KVCAP_VOLUME" "$KVCAP_VOLUME"
mount -o bind,remount,rw "$KVCAP_VOLUME"
if touch "$KVCAP_PROBE" 2>/dev/null; then echo "the checkout is still writable" >&2; exit 97; fi
cd "$KVCAP_VOLUME"
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


def test_kvcap_migrates_loads_and_serves_with_a_read_only_root_and_one_writable_volume(
    tmp_path: Path,
) -> None:
    port = free_port()
    volume = tmp_path / "volume"
    volume.mkdir()
    environment = {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": str(volume),
        "TMPDIR": str(volume),
        "PYTHONDONTWRITEBYTECODE": "1",
        "KVCAP_VOLUME": str(volume),
        "KVCAP_DATABASE_URL": f"sqlite:///{volume}/kvcap.db",
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
    assert (volume / "kvcap.db").is_file()  # the one place it wrote
