"""Catalog tables. Column names follow Hugging Face config keys (models) and datasheet terms (GPUs)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import JSON, BigInteger, Boolean, CheckConstraint, Float, Integer, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from service.db.base import Base, VersionedMixin


class GpuEntry(VersionedMixin, Base):
    __tablename__ = "gpus"
    __table_args__ = (
        CheckConstraint("memory_bytes > 0", name="memory_bytes_positive"),
        CheckConstraint("price_per_hour_usd IS NULL OR price_per_hour_usd >= 0", name="price_not_negative"),
    )

    name: Mapped[str] = mapped_column(String(64), unique=True, nullable=False)
    display_name: Mapped[str | None] = mapped_column(String(200))
    vendor: Mapped[str] = mapped_column(String(32), nullable=False, index=True)
    memory_bytes: Mapped[int] = mapped_column(BigInteger, nullable=False)
    usable_memory_bytes: Mapped[int | None] = mapped_column(BigInteger)
    usable_memory_source: Mapped[str | None] = mapped_column(Text)
    memory_bandwidth_bytes_per_second: Mapped[int | None] = mapped_column(BigInteger)
    bf16_dense_flops_per_second: Mapped[int | None] = mapped_column(BigInteger)
    fp8_dense_flops_per_second: Mapped[int | None] = mapped_column(BigInteger)
    interconnect: Mapped[dict[str, Any] | None] = mapped_column(JSON(none_as_null=True))
    compute_capability: Mapped[str | None] = mapped_column(String(32))
    supported_kv_cache_dtypes: Mapped[list[str]] = mapped_column(JSON, nullable=False, default=list)
    supported_weight_dtypes: Mapped[list[str]] = mapped_column(JSON, nullable=False, default=list)
    price_per_hour_usd: Mapped[float | None] = mapped_column(Float)
    price_source: Mapped[str | None] = mapped_column(Text)
    product_labels: Mapped[list[str]] = mapped_column(JSON, nullable=False, default=list)
    source: Mapped[str] = mapped_column(Text, nullable=False)
    notes: Mapped[str | None] = mapped_column(Text)
    origin: Mapped[str] = mapped_column(String(16), nullable=False, default="user")


class ModelEntry(VersionedMixin, Base):
    __tablename__ = "models"
    __table_args__ = (
        CheckConstraint("num_hidden_layers > 0", name="num_hidden_layers_positive"),
        CheckConstraint("num_parameters > 0", name="num_parameters_positive"),
    )

    name: Mapped[str] = mapped_column(String(64), unique=True, nullable=False)
    hf_id: Mapped[str | None] = mapped_column(String(200), index=True)
    aliases: Mapped[list[str]] = mapped_column(JSON, nullable=False, default=list)
    family: Mapped[str | None] = mapped_column(String(64), index=True)
    architecture: Mapped[str | None] = mapped_column(String(128))
    model_type: Mapped[str | None] = mapped_column(String(64))
    num_hidden_layers: Mapped[int] = mapped_column(Integer, nullable=False)
    hidden_size: Mapped[int] = mapped_column(Integer, nullable=False)
    num_attention_heads: Mapped[int] = mapped_column(Integer, nullable=False)
    num_key_value_heads: Mapped[int] = mapped_column(Integer, nullable=False)
    head_dim: Mapped[int] = mapped_column(Integer, nullable=False)
    vocab_size: Mapped[int] = mapped_column(Integer, nullable=False)
    intermediate_size: Mapped[int | None] = mapped_column(Integer)
    max_position_embeddings: Mapped[int | None] = mapped_column(Integer)
    max_model_len: Mapped[int | None] = mapped_column(Integer)
    torch_dtype: Mapped[str] = mapped_column(String(16), nullable=False)
    num_parameters: Mapped[int] = mapped_column(BigInteger, nullable=False)
    num_active_parameters: Mapped[int | None] = mapped_column(BigInteger)
    layer_types: Mapped[list[str]] = mapped_column(JSON, nullable=False, default=list)
    sliding_window: Mapped[int | None] = mapped_column(Integer)
    attention_chunk_size: Mapped[int | None] = mapped_column(Integer)
    kv_lora_rank: Mapped[int | None] = mapped_column(Integer)
    qk_rope_head_dim: Mapped[int | None] = mapped_column(Integer)
    qk_nope_head_dim: Mapped[int | None] = mapped_column(Integer)
    v_head_dim: Mapped[int | None] = mapped_column(Integer)
    q_lora_rank: Mapped[int | None] = mapped_column(Integer)
    num_experts: Mapped[int | None] = mapped_column(Integer)
    num_experts_per_tok: Mapped[int | None] = mapped_column(Integer)
    moe_intermediate_size: Mapped[int | None] = mapped_column(Integer)
    num_shared_experts: Mapped[int | None] = mapped_column(Integer)
    first_k_dense_replace: Mapped[int | None] = mapped_column(Integer)
    num_kv_shared_layers: Mapped[int] = mapped_column(Integer, nullable=False, default=0)
    rope_cache_bytes: Mapped[int] = mapped_column(BigInteger, nullable=False, default=0, server_default="0")
    unquantized_parameters: Mapped[int] = mapped_column(
        BigInteger, nullable=False, default=0, server_default="0"
    )
    num_nextn_predict_layers: Mapped[int] = mapped_column(
        Integer, nullable=False, default=0, server_default="0"
    )
    encoder_parameters: Mapped[int] = mapped_column(BigInteger, nullable=False, default=0, server_default="0")
    mm_tokens_per_item: Mapped[int | None] = mapped_column(Integer)
    mm_pixels_per_token: Mapped[int | None] = mapped_column(Integer)
    config_head_dim: Mapped[int | None] = mapped_column(Integer)
    full_attention_head_dim: Mapped[int | None] = mapped_column(Integer)
    full_attention_kv_heads: Mapped[int | None] = mapped_column(Integer)
    state: Mapped[dict[str, Any] | None] = mapped_column(JSON(none_as_null=True))
    quantization: Mapped[str | None] = mapped_column(String(32))
    tie_word_embeddings: Mapped[bool] = mapped_column(Boolean, nullable=False, default=False)
    source: Mapped[str] = mapped_column(Text, nullable=False)
    notes: Mapped[str | None] = mapped_column(Text)
    hf_config: Mapped[dict[str, Any] | None] = mapped_column(JSON(none_as_null=True))
    origin: Mapped[str] = mapped_column(String(16), nullable=False, default="user")
