"""create calibrations table

Revision ID: fbfd7a7c6b3c
Revises: 5e56aa04dcf1
Create Date: 2026-11-29 15:39:36.829099
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "fbfd7a7c6b3c"
down_revision: str | None = "5e56aa04dcf1"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "calibrations",
        sa.Column("key", sa.String(length=64), nullable=False),
        sa.Column("model", sa.String(length=200), nullable=False),
        sa.Column("gpu", sa.String(length=200), nullable=False),
        sa.Column("configuration", sa.JSON(), nullable=False),
        sa.Column("observations", sa.JSON(), nullable=False),
        sa.Column("uncalibrated_num_gpu_blocks", sa.Integer(), nullable=False),
        sa.Column("samples", sa.Integer(), nullable=False),
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_calibrations")),
        sa.UniqueConstraint("key", name=op.f("uq_calibrations_key")),
    )


def downgrade() -> None:
    op.drop_table("calibrations")
