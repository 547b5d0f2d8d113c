"""``requirements.lock`` (what the image installs, ``make lock``) pins every dependency ``pyproject.toml``
declares, at a version the declaration allows, each with hashes."""

from __future__ import annotations

import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[2]
LOCK = ROOT / "requirements.lock"


def locked() -> dict[str, tuple[Version, list[str]]]:
    """name -> (pinned version, hashes), from pip's requirements format with ``\\`` continuations."""
    entries: dict[str, tuple[Version, list[str]]] = {}
    logical = LOCK.read_text().replace("\\\n", " ")
    for line in logical.splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        parts = line.split()
        hashes = [p.removeprefix("--hash=") for p in parts if p.startswith("--hash=")]
        requirement = Requirement(" ".join(p for p in parts if not p.startswith("--hash=")))
        (pin,) = requirement.specifier
        assert pin.operator == "==", line
        entries[canonicalize_name(requirement.name)] = (Version(pin.version), hashes)
    return entries


def declared() -> list[Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return [Requirement(text) for text in project["dependencies"]]


def test_every_declared_dependency_is_pinned_within_its_bounds() -> None:
    pins = locked()
    for requirement in declared():
        name = canonicalize_name(requirement.name)
        assert name in pins, f"{requirement.name} is declared in pyproject.toml but not in requirements.lock"
        version, _ = pins[name]
        assert requirement.specifier.contains(version, prereleases=True), (
            f"requirements.lock pins {name}=={version}, outside pyproject's {requirement.specifier}"
        )


def test_the_extras_kvcap_relies_on_are_locked_too() -> None:
    pins = locked()
    # sqlalchemy[asyncio] -> greenlet, psycopg[binary] -> psycopg-binary, uvicorn[standard] -> httptools, …
    assert {"greenlet", "psycopg-binary", "httptools", "uvloop", "watchfiles", "websockets"} <= set(pins)


def test_every_pin_carries_hashes_and_the_lock_says_how_to_remake_it() -> None:
    for name, (_, hashes) in locked().items():
        assert hashes and all(h.startswith("sha256:") for h in hashes), name
    assert "make lock" in LOCK.read_text()
