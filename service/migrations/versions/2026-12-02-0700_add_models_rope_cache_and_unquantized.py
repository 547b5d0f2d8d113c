"""add models.rope_cache_bytes and models.unquantized_parameters

Revision ID: 5a1d8e3c9b72
Revises: 3c9e2f7a1d54
Create Date: 2026-12-02 07:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "5a1d8e3c9b72"
down_revision: str | None = "3c9e2f7a1d54"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("models") as batch:
        batch.add_column(sa.Column("rope_cache_bytes", sa.BigInteger(), nullable=False, server_default="0"))
        batch.add_column(
            sa.Column("unquantized_parameters", sa.BigInteger(), nullable=False, server_default="0")
        )


def downgrade() -> None:
    with op.batch_alter_table("models") as batch:
        batch.drop_column("unquantized_parameters")
        batch.drop_column("rope_cache_bytes")
