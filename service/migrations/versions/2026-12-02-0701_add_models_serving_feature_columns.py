"""add models.num_nextn_predict_layers, encoder_parameters, mm_tokens_per_item, mm_pixels_per_token

Revision ID: 7d1a4b9e2c60
Revises: 5a1d8e3c9b72
Create Date: 2026-12-02 07:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "7d1a4b9e2c60"
down_revision: str | None = "5a1d8e3c9b72"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column(
        "models",
        sa.Column("num_nextn_predict_layers", sa.Integer(), nullable=False, server_default="0"),
    )
    op.add_column(
        "models", sa.Column("encoder_parameters", sa.BigInteger(), nullable=False, server_default="0")
    )
    op.add_column("models", sa.Column("mm_tokens_per_item", sa.Integer(), nullable=True))
    op.add_column("models", sa.Column("mm_pixels_per_token", sa.Integer(), nullable=True))


def downgrade() -> None:
    op.drop_column("models", "mm_pixels_per_token")
    op.drop_column("models", "mm_tokens_per_item")
    op.drop_column("models", "encoder_parameters")
    op.drop_column("models", "num_nextn_predict_layers")
