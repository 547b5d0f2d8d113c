"""Declarative base with a naming convention, so every constraint has a predictable name in migrations."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, ClassVar

from sqlalchemy import JSON, DateTime, Dialect, Integer, MetaData
from sqlalchemy.orm import DeclarativeBase, Mapped, declared_attr, mapped_column
from sqlalchemy.types import TypeDecorator

NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


def utcnow() -> datetime:
    return datetime.now(UTC)


class UtcDateTime(TypeDecorator[datetime]):
    """``DateTime(timezone=True)`` that always reads back an aware UTC value.

    SQLite keeps no offset, so without this the same row reads back naive there and aware on PostgreSQL, and
    the API would emit ``2025-01-01T12:00:00`` (not an RFC 3339 date-time) for SQLite-backed entries.
    """

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:  # noqa: ARG002
        if value is not None and value.tzinfo is not None:
            value = value.astimezone(UTC)
        return value

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:  # noqa: ARG002
        if value is not None and value.tzinfo is None:
            value = value.replace(tzinfo=UTC)
        return value


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)
    type_annotation_map: ClassVar[dict[Any, Any]] = {dict[str, Any]: JSON, list[str]: JSON, list[Any]: JSON}


class VersionedMixin:
    """Integer primary key, timestamps and an optimistic-concurrency version.

    SQLAlchemy's ``version_id_col`` adds ``AND version = :old`` to every UPDATE/DELETE, so of two writers that
    read the same version only the first succeeds; the second gets ``StaleDataError`` (rendered as 412 when
    the request carried ``If-Match``, else 409). Writers also lock the row they change before reading it
    (``for_update`` in the repositories), so this is the last line of defence, not the usual path.
    """

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    version: Mapped[int] = mapped_column(Integer, nullable=False, default=1)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime(), nullable=False, default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(
        UtcDateTime(), nullable=False, default=utcnow, onupdate=utcnow
    )

    @declared_attr.directive
    def __mapper_args__(cls) -> dict[str, Any]:
        return {"version_id_col": cls.__table__.c.version}  # type: ignore[attr-defined]

    @property
    def etag(self) -> str:
        """A strong entity tag: the row id (changes when a name is recreated) and its version."""
        return f'"{self.id}-{self.version}"'
