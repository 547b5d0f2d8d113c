"""create catalog tables

Revision ID: 0d1b83ddca92
Revises:
Create Date: 2026-11-29 15:07:07.416115
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0d1b83ddca92"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "gpus",
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("display_name", sa.String(length=200), nullable=True),
        sa.Column("vendor", sa.String(length=32), nullable=False),
        sa.Column("memory_bytes", sa.BigInteger(), nullable=False),
        sa.Column("usable_memory_bytes", sa.BigInteger(), nullable=True),
        sa.Column("usable_memory_source", sa.Text(), nullable=True),
        sa.Column("memory_bandwidth_bytes_per_second", sa.BigInteger(), nullable=True),
        sa.Column("bf16_dense_flops_per_second", sa.BigInteger(), nullable=True),
        sa.Column("fp8_dense_flops_per_second", sa.BigInteger(), nullable=True),
        sa.Column("interconnect", sa.JSON(), nullable=True),
        sa.Column("compute_capability", sa.String(length=32), nullable=True),
        sa.Column("supported_kv_cache_dtypes", sa.JSON(), nullable=False),
        sa.Column("supported_weight_dtypes", sa.JSON(), nullable=False),
        sa.Column("price_per_hour_usd", sa.Float(), nullable=True),
        sa.Column("price_source", sa.Text(), nullable=True),
        sa.Column("product_labels", sa.JSON(), nullable=False),
        sa.Column("source", sa.Text(), nullable=False),
        sa.Column("notes", sa.Text(), nullable=True),
        sa.Column("origin", sa.String(length=16), nullable=False),
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.CheckConstraint("memory_bytes > 0", name=op.f("ck_gpus_memory_bytes_positive")),
        sa.CheckConstraint(
            "price_per_hour_usd IS NULL OR price_per_hour_usd >= 0", name=op.f("ck_gpus_price_not_negative")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_gpus")),
        sa.UniqueConstraint("name", name=op.f("uq_gpus_name")),
    )
    op.create_index(op.f("ix_gpus_vendor"), "gpus", ["vendor"], unique=False)

    op.create_table(
        "models",
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("hf_id", sa.String(length=200), nullable=True),
        sa.Column("aliases", sa.JSON(), nullable=False),
        sa.Column("family", sa.String(length=64), nullable=True),
        sa.Column("architecture", sa.String(length=128), nullable=True),
        sa.Column("model_type", sa.String(length=64), nullable=True),
        sa.Column("num_hidden_layers", sa.Integer(), nullable=False),
        sa.Column("hidden_size", sa.Integer(), nullable=False),
        sa.Column("num_attention_heads", sa.Integer(), nullable=False),
        sa.Column("num_key_value_heads", sa.Integer(), nullable=False),
        sa.Column("head_dim", sa.Integer(), nullable=False),
        sa.Column("vocab_size", sa.Integer(), nullable=False),
        sa.Column("intermediate_size", sa.Integer(), nullable=True),
        sa.Column("max_position_embeddings", sa.Integer(), nullable=True),
        sa.Column("max_model_len", sa.Integer(), nullable=True),
        sa.Column("torch_dtype", sa.String(length=16), nullable=False),
        sa.Column("num_parameters", sa.BigInteger(), nullable=False),
        sa.Column("num_active_parameters", sa.BigInteger(), nullable=True),
        sa.Column("layer_types", sa.JSON(), nullable=False),
        sa.Column("sliding_window", sa.Integer(), nullable=True),
        sa.Column("attention_chunk_size", sa.Integer(), nullable=True),
        sa.Column("kv_lora_rank", sa.Integer(), nullable=True),
        sa.Column("qk_rope_head_dim", sa.Integer(), nullable=True),
        sa.Column("qk_nope_head_dim", sa.Integer(), nullable=True),
        sa.Column("v_head_dim", sa.Integer(), nullable=True),
        sa.Column("q_lora_rank", sa.Integer(), nullable=True),
        sa.Column("num_experts", sa.Integer(), nullable=True),
        sa.Column("num_experts_per_tok", sa.Integer(), nullable=True),
        sa.Column("moe_intermediate_size", sa.Integer(), nullable=True),
        sa.Column("num_shared_experts", sa.Integer(), nullable=True),
        sa.Column("first_k_dense_replace", sa.Integer(), nullable=True),
        sa.Column("num_kv_shared_layers", sa.Integer(), nullable=False),
        sa.Column("state", sa.JSON(), nullable=True),
        sa.Column("quantization", sa.String(length=32), nullable=True),
        sa.Column("tie_word_embeddings", sa.Boolean(), nullable=False),
        sa.Column("source", sa.Text(), nullable=False),
        sa.Column("notes", sa.Text(), nullable=True),
        sa.Column("hf_config", sa.JSON(), nullable=True),
        sa.Column("origin", sa.String(length=16), nullable=False),
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.CheckConstraint("num_hidden_layers > 0", name=op.f("ck_models_num_hidden_layers_positive")),
        sa.CheckConstraint("num_parameters > 0", name=op.f("ck_models_num_parameters_positive")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_models")),
        sa.UniqueConstraint("name", name=op.f("uq_models_name")),
    )
    op.create_index(op.f("ix_models_family"), "models", ["family"], unique=False)
    op.create_index(op.f("ix_models_hf_id"), "models", ["hf_id"], unique=False)


def downgrade() -> None:
    op.drop_index(op.f("ix_models_hf_id"), table_name="models")
    op.drop_index(op.f("ix_models_family"), table_name="models")

    op.drop_table("models")
    op.drop_index(op.f("ix_gpus_vendor"), table_name="gpus")

    op.drop_table("gpus")
