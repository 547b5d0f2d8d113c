"""Runtime settings, read from the environment (prefix ``KVCAP_``) and an optional ``.env`` file.

Built lazily by ``get_settings()`` — never at import — so tests and the CLI can set the environment first.
Lists accept JSON (``["a","b"]``) or comma-separated text (``a,b``).
"""

from __future__ import annotations

import hashlib
import ipaddress
import json
from functools import lru_cache
from typing import Annotated, Literal

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from service.db.session import DatabaseTimeouts

DEFAULT_DATABASE_URL = "sqlite+aiosqlite:///./kvcap.db"


def normalize_database_url(url: str) -> str:
    """Pick the async driver kvcap uses for each backend (``postgresql://`` → psycopg 3, ``sqlite://`` → aiosqlite)."""
    url = url.strip()
    for prefix in ("postgresql+psycopg2://", "postgresql+asyncpg://", "postgresql://", "postgres://"):
        if url.startswith(prefix):
            return "postgresql+psycopg://" + url[len(prefix) :]
    if url.startswith("sqlite://") and not url.startswith("sqlite+aiosqlite://"):
        return "sqlite+aiosqlite://" + url[len("sqlite://") :]
    return url


def sync_database_url(url: str) -> str:
    """The same database through a synchronous driver (Alembic runs migrations synchronously)."""
    url = normalize_database_url(url)
    if url.startswith("sqlite+aiosqlite://"):
        return "sqlite://" + url[len("sqlite+aiosqlite://") :]
    return url  # psycopg 3 serves both sync and async


def hash_token(token: str) -> str:
    """SHA-256 hex digest under which an API token is kept in memory and compared."""
    return hashlib.sha256(token.encode()).hexdigest()


def _split_list(value: object) -> object:
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("["):
            return json.loads(text)
        return [item.strip() for item in text.split(",") if item.strip()]
    return value


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="KVCAP_", env_file=".env", extra="ignore", frozen=True)

    database_url: str = Field(
        default=DEFAULT_DATABASE_URL, description="SQLAlchemy URL; SQLite file by default"
    )
    database_pool_size: int = Field(default=5, ge=1, le=100)
    # PostgreSQL time limits (``service.db.session.DatabaseTimeouts``): a frozen or unreachable server turns a
    # request into a 503 within about ping + connect timeout (3.5 s by default), never a hang.
    database_connect_timeout_seconds: float = Field(
        default=2.0, ge=2, le=60, description="libpq connect_timeout (at least 2 s)"
    )
    database_statement_timeout_seconds: float = Field(
        default=5.0, gt=0, le=3600, description="PostgreSQL statement_timeout of kvcap's sessions"
    )
    database_lock_timeout_seconds: float = Field(
        default=2.0, gt=0, le=3600, description="PostgreSQL lock_timeout: a write queued behind a row lock"
    )
    database_ping_timeout_seconds: float = Field(
        default=1.5, gt=0, le=60, description="health check of a pooled connection before each use"
    )
    database_pool_timeout_seconds: float = Field(
        default=3.0, gt=0, le=300, description="wait for a free pooled connection"
    )

    api_tokens: Annotated[list[SecretStr], NoDecode] = Field(
        default_factory=list, description="Bearer tokens allowed to write; empty = writes are open"
    )
    api_token_sha256: Annotated[list[str], NoDecode] = Field(
        default_factory=list, description="SHA-256 hex digests of tokens, so plaintext need not be configured"
    )

    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    log_format: Literal["text", "json"] = "text"

    catalog_refresh_seconds: float = Field(
        default=30.0, gt=0, description="poll for catalog changes by other replicas"
    )
    max_request_body_bytes: int = Field(default=1_048_576, ge=1024)
    # Bounds on one POST /v1/simulations (larger runs are refused with a 422 naming benchmark.num_prompts).
    simulation_max_total_tokens: int = Field(default=40_000_000, ge=1)
    simulation_max_steps: int = Field(default=200_000, ge=1)

    scrape_interval_seconds: float = Field(default=15.0, gt=0)
    scrape_timeout_seconds: float = Field(default=5.0, gt=0)
    scrape_max_body_bytes: int = Field(default=8 * 1024 * 1024, ge=1024)
    scrape_concurrency: int = Field(default=32, ge=1, le=1024)
    scrape_allowed_hosts: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="hosts, *.domain suffixes or CIDRs that may be scraped; empty = any non-link-local host",
    )
    scrape_enabled: bool = True
    live_worker: Literal["auto", "process", "thread"] = Field(
        default="auto",
        description="where the live loop runs: a worker process (auto: where the database allows it) or a thread",
    )

    tls_cert_file: str | None = Field(
        default=None, description="PEM certificate chain: serve HTTPS (required for the admission webhook)"
    )
    tls_key_file: str | None = Field(
        default=None, description="PEM private key (omit when the certificate file also holds the key)"
    )
    tls_reload_interval_seconds: float = Field(
        default=10.0, gt=0, le=3600, description="how often the certificate files are checked for a rotation"
    )

    ui_grafana_url: str | None = Field(
        default=None, description="Grafana dashboard URL the plan explorer links registered deployments to"
    )

    admission_mode: Literal["enforce", "audit"] = "enforce"
    admission_failure_policy: Literal["fail-open", "fail-closed"] = "fail-closed"
    admission_low_headroom_ratio: float = Field(default=0.1, ge=0, le=1)

    @field_validator("api_tokens", "api_token_sha256", "scrape_allowed_hosts", mode="before")
    @classmethod
    def _lists(cls, value: object) -> object:
        return _split_list(value)

    @field_validator("database_url")
    @classmethod
    def _database_url(cls, value: str) -> str:
        return normalize_database_url(value)

    @field_validator("api_token_sha256")
    @classmethod
    def _hashes(cls, value: list[str]) -> list[str]:
        for digest in value:
            if len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest.lower()):
                raise ValueError("each entry must be a 64-character SHA-256 hex digest")
        return [digest.lower() for digest in value]

    @field_validator("scrape_allowed_hosts")
    @classmethod
    def _allowed_hosts(cls, value: list[str]) -> list[str]:
        for entry in value:
            if "/" in entry:
                try:
                    ipaddress.ip_network(entry, strict=False)
                except ValueError as exc:
                    raise ValueError(f"{entry!r} is not a valid CIDR: {exc}") from None
        return value

    @model_validator(mode="after")
    def _keep_only_digests(self) -> Settings:
        """Fold plaintext ``api_tokens`` into ``api_token_sha256`` and drop them: once loaded, the settings
        (and everything that logs, dumps or copies them) hold no token in plaintext."""
        if self.api_tokens:
            plain = {hash_token(token.get_secret_value()) for token in self.api_tokens}
            # frozen model: set once, during validation
            object.__setattr__(self, "api_token_sha256", sorted(set(self.api_token_sha256) | plain))
            object.__setattr__(self, "api_tokens", [])
        return self

    @property
    def database_timeouts(self) -> DatabaseTimeouts:
        return DatabaseTimeouts(
            connect_seconds=self.database_connect_timeout_seconds,
            statement_seconds=self.database_statement_timeout_seconds,
            lock_seconds=self.database_lock_timeout_seconds,
            ping_seconds=self.database_ping_timeout_seconds,
            pool_seconds=self.database_pool_timeout_seconds,
        )

    @property
    def token_hashes(self) -> frozenset[str]:
        """Every accepted token as a SHA-256 digest (plaintext tokens were hashed at load)."""
        return frozenset(self.api_token_sha256)

    @property
    def auth_enabled(self) -> bool:
        return bool(self.api_token_sha256)


@lru_cache
def get_settings() -> Settings:
    return Settings()
