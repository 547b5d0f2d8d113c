"""create deployments table

Revision ID: 5e56aa04dcf1
Revises: 0d1b83ddca92
Create Date: 2026-11-29 15:31:51.249310
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "5e56aa04dcf1"
down_revision: str | None = "0d1b83ddca92"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "deployments",
        sa.Column("namespace", sa.String(length=63), nullable=False),
        sa.Column("name", sa.String(length=253), nullable=False),
        sa.Column("model", sa.JSON(), nullable=False),
        sa.Column("gpu", sa.JSON(none_as_null=True), nullable=True),
        sa.Column("settings", sa.JSON(), nullable=False),
        sa.Column("replicas", sa.Integer(), nullable=False),
        sa.Column("workload", sa.JSON(none_as_null=True), nullable=True),
        sa.Column("live", sa.JSON(none_as_null=True), nullable=True),
        sa.Column("labels", sa.JSON(), nullable=False),
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.CheckConstraint("replicas >= 0", name=op.f("ck_deployments_replicas_not_negative")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_deployments")),
        sa.UniqueConstraint("namespace", "name", name=op.f("uq_deployments_namespace_name")),
    )
    op.create_index(op.f("ix_deployments_namespace"), "deployments", ["namespace"], unique=False)


def downgrade() -> None:
    op.drop_index(op.f("ix_deployments_namespace"), table_name="deployments")

    op.drop_table("deployments")
