"""create step_time_calibrations table

Revision ID: 3c9e2f7a1d54
Revises: fbfd7a7c6b3c
Create Date: 2026-12-01 23:59:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "3c9e2f7a1d54"
down_revision: str | None = "fbfd7a7c6b3c"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "step_time_calibrations",
        sa.Column("key", sa.String(length=64), nullable=False),
        sa.Column("model", sa.String(length=200), nullable=False),
        sa.Column("gpu", sa.String(length=200), nullable=False),
        sa.Column("configuration", sa.JSON(), nullable=False),
        sa.Column("observations", sa.JSON(), nullable=False),
        sa.Column("samples", sa.Integer(), nullable=False),
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_step_time_calibrations")),
        sa.UniqueConstraint("key", name=op.f("uq_step_time_calibrations_key")),
    )


def downgrade() -> None:
    op.drop_table("step_time_calibrations")
