"""kvcap's version (from the installed distribution's metadata) and the source revision it was built from."""

from __future__ import annotations

import os
import platform
from importlib.metadata import PackageNotFoundError, version

UNKNOWN_REVISION = "unknown"


def kvcap_version() -> str:
    """The installed distribution's version (``pyproject.toml``'s ``project.version``), one source of truth."""
    try:
        return version("kvcap")
    except PackageNotFoundError:  # running from a checkout that was never installed
        return "0+unknown"


def kvcap_revision() -> str:
    """The VCS revision the image was built from: ``KVCAP_REVISION``, set by the image build
    (``--build-arg REVISION=$(git rev-parse HEAD)``); ``unknown`` elsewhere."""
    return os.environ.get("KVCAP_REVISION", "").strip() or UNKNOWN_REVISION


def python_version() -> str:
    return platform.python_version()
