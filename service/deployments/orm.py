"""The deployment registry table: one row per (namespace, name)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import JSON, CheckConstraint, Integer, String, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from service.db.base import Base, VersionedMixin


class DeploymentEntry(VersionedMixin, Base):
    __tablename__ = "deployments"
    __table_args__ = (
        UniqueConstraint("namespace", "name"),
        CheckConstraint("replicas >= 0", name="replicas_not_negative"),
    )

    namespace: Mapped[str] = mapped_column(String(63), nullable=False, index=True)
    name: Mapped[str] = mapped_column(String(253), nullable=False)
    model: Mapped[Any] = mapped_column(JSON, nullable=False)  # catalog name / HF id, or {"hf_config": …}
    gpu: Mapped[Any | None] = mapped_column(
        JSON(none_as_null=True), nullable=True
    )  # name / label / {"memory_bytes": …}
    settings: Mapped[dict[str, Any]] = mapped_column(JSON, nullable=False, default=dict)  # vLLM flags
    replicas: Mapped[int] = mapped_column(Integer, nullable=False, default=1)
    workload: Mapped[dict[str, Any] | None] = mapped_column(JSON(none_as_null=True))
    live: Mapped[dict[str, Any] | None] = mapped_column(JSON(none_as_null=True))
    labels: Mapped[dict[str, str]] = mapped_column(JSON, nullable=False, default=dict)
