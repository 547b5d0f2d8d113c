"""Translation between catalog schemas and the core's specs (the only place that knows both)."""

from __future__ import annotations

from typing import Any

from service.catalog.schemas import GpuFields, ModelArchitecture, StateFields
from service.core.specs import GpuSpec, LayerType, ModelSpec, StateSpec

ARCHITECTURE_FIELDS = tuple(ModelArchitecture.model_fields)


def model_spec(fields: ModelArchitecture) -> ModelSpec:
    """The core ``ModelSpec`` for catalog fields; raises ``InvalidSpec`` naming the inconsistent field."""
    values: dict[str, Any] = {name: getattr(fields, name) for name in ARCHITECTURE_FIELDS}
    values["layer_types"] = tuple(LayerType(value) for value in fields.layer_types)
    values["state"] = StateSpec(**fields.state.model_dump()) if fields.state is not None else None
    return ModelSpec(**values)


def architecture_values(spec: ModelSpec) -> dict[str, Any]:
    """Catalog field values of a resolved spec (inverse of ``model_spec``)."""
    values: dict[str, Any] = {name: getattr(spec, name) for name in ARCHITECTURE_FIELDS}
    values["layer_types"] = [kind.value for kind in spec.layer_types]
    if spec.state is not None:
        values["state"] = StateFields(
            **{name: getattr(spec.state, name) for name in StateFields.model_fields}
        )
    return values


def gpu_spec(name: str, fields: GpuFields) -> GpuSpec:
    """Plans use the memory the runtime reports when the catalog knows it, the datasheet figure otherwise."""
    interconnect = fields.interconnect.bandwidth_bytes_per_second if fields.interconnect else None
    return GpuSpec(
        name=name,
        memory_bytes=fields.usable_memory_bytes or fields.memory_bytes,
        memory_bandwidth_bytes_per_second=fields.memory_bandwidth_bytes_per_second,
        bf16_dense_flops_per_second=fields.bf16_dense_flops_per_second,
        fp8_dense_flops_per_second=fields.fp8_dense_flops_per_second,
        interconnect_bandwidth_bytes_per_second=interconnect,
        price_per_hour_usd=fields.price_per_hour_usd,
        supports_fp8=any(d.startswith("fp8") for d in fields.supported_kv_cache_dtypes),
        supports_bf16="bfloat16" in fields.supported_weight_dtypes,
        compute_capability=fields.compute_capability,
    )
