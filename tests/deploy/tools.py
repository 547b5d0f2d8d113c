"""External tools the deployment tests run (helm 3 and 4, kubectl, promtool, hadolint, docker compose).

A missing tool skips the test that needs it, except with ``KVCAP_REQUIRE_TOOLS=1`` (CI), where it fails it. Besides
PATH, tools are looked up in the folder ``.ci/install-tools`` installs them into, so a developer who ran it once
needs no PATH change.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Sequence
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def tools_bin() -> Path:
    """bin/ of .ci/install-tools' cache folder (same defaults as the script)."""
    if os.environ.get("KVCAP_TOOLS_DIR"):
        return Path(os.environ["KVCAP_TOOLS_DIR"]) / "bin"
    cache_home = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache_home) / "kvcap" / "ci-tools" / "bin"


def missing(message: str) -> None:
    """Skip, or fail when KVCAP_REQUIRE_TOOLS=1 (never returns)."""
    if os.environ.get("KVCAP_REQUIRE_TOOLS") == "1":
        pytest.fail(f"{message}; KVCAP_REQUIRE_TOOLS=1 makes a missing tool an error")
    pytest.skip(message)


def find(*names: str) -> str | None:
    for name in names:
        path = shutil.which(name) or shutil.which(name, path=str(tools_bin()))
        if path:
            return path
    return None


def require_tool(name: str, purpose: str) -> str:
    path = find(name)
    if path is None:
        missing(f"{name} is not installed (needed to {purpose}; .ci/install-tools installs it)")
    assert path is not None
    return path


def run(
    args: Sequence[str | Path], *, cwd: Path = ROOT, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(a) for a in args], cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False
    )


@cache
def _helm_major(path: str) -> int | None:
    result = run([path, "version", "--short"], timeout=30)
    match = re.match(r"v(\d+)\.", result.stdout.strip())
    return int(match.group(1)) if result.returncode == 0 and match else None


def helm(major: int) -> str:
    """A helm binary of this major version: `helm3`/`helm4` as .ci/install-tools names them, or a plain `helm`."""
    for name in (f"helm{major}", "helm"):
        path = find(name)
        if path and _helm_major(path) == major:
            return path
    missing(
        f"helm {major} is not installed (needed to lint and render helm/kvcap; .ci/install-tools installs it)"
    )
    raise AssertionError("unreachable")
