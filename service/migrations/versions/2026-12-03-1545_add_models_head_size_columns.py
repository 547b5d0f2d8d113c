"""add models.config_head_dim, full_attention_head_dim, full_attention_kv_heads

Revision ID: 9c3e5f7a1b24
Revises: 7d1a4b9e2c60
Create Date: 2026-12-03 15:45:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "9c3e5f7a1b24"
down_revision: str | None = "7d1a4b9e2c60"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("models", sa.Column("config_head_dim", sa.Integer(), nullable=True))
    op.add_column("models", sa.Column("full_attention_head_dim", sa.Integer(), nullable=True))
    op.add_column("models", sa.Column("full_attention_kv_heads", sa.Integer(), nullable=True))


def downgrade() -> None:
    op.drop_column("models", "full_attention_kv_heads")
    op.drop_column("models", "full_attention_head_dim")
    op.drop_column("models", "config_head_dim")
