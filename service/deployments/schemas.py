"""``/v1/deployments`` schemas: the fields of a ``/v1/plans`` request plus identity, replicas, traffic, live source."""

from __future__ import annotations

import re
from datetime import datetime
from typing import Annotated, Any, ClassVar, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    field_validator,
    model_validator,
)

from service.api.text import SafeText
from service.live.schemas import LiveSource
from service.planning.schemas import (
    InlineGpu,
    InlineModel,
    PlanResponse,
    PlanSettings,
    RecommendationOut,
    RefName,
    Schema,
    SpeculativeAcceptanceOut,
    WorkloadIn,
    first_stage_gpu,
    no_stage_gpus,
)

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")
_LABEL_KEY = re.compile(r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
_LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$")


def _namespace(value: str) -> str:
    if not _DNS_LABEL.fullmatch(value):
        raise ValueError("must be a DNS-1123 label (lowercase letters, digits, '-'; at most 63 characters)")
    return value


def _name(value: str) -> str:
    if not _DNS_SUBDOMAIN.fullmatch(value):
        raise ValueError("must be a DNS-1123 subdomain (lowercase letters, digits, '-', '.')")
    return value


def check_labels(value: dict[str, str]) -> dict[str, str]:
    for key, label in value.items():
        if len(key) > 253 or not _LABEL_KEY.fullmatch(key):
            raise ValueError(f"label key {key!r} is not a valid Kubernetes label key")
        if len(label) > 63 or not _LABEL_VALUE.fullmatch(label):
            raise ValueError(f"label value {label!r} (key {key!r}) is not a valid Kubernetes label value")
    return value


Namespace = Annotated[str, StringConstraints(min_length=1, max_length=63), AfterValidator(_namespace)]
Name = Annotated[str, StringConstraints(min_length=1, max_length=253), AfterValidator(_name)]


class DeploymentFields(PlanSettings):
    model: RefName | InlineModel
    gpu: RefName | InlineGpu | None = None
    replicas: Annotated[int, Field(ge=0, le=100_000)] = 1
    workload: WorkloadIn | None = None
    live: LiveSource | None = Field(default=None, description="where live vLLM metrics come from")
    labels: dict[str, str] = Field(default_factory=dict, max_length=64)

    @field_validator("labels")
    @classmethod
    def _labels(cls, value: dict[str, str]) -> dict[str, str]:
        return check_labels(value)

    @model_validator(mode="after")
    def _gpu_defaults_to_the_first_stage(self) -> DeploymentFields:
        first_stage_gpu(self)
        if self.workload is not None:  # the workload is sized by the recommendation, over one GPU kind
            no_stage_gpus(self, "a deployment's workload recommendation")
        return self


class DeploymentCreate(DeploymentFields):
    namespace: Namespace
    name: Name


class DeploymentUpdate(SafeText):
    """Any subset of the fields; ``null`` resets an optional field to its default."""

    model_config = ConfigDict(extra="forbid")

    model: RefName | InlineModel | None = None
    gpu: RefName | InlineGpu | None = None
    replicas: Annotated[int, Field(ge=0, le=100_000)] | None = None
    workload: WorkloadIn | None = None
    live: LiveSource | None = None
    labels: dict[str, str] | None = None
    tensor_parallel_size: Annotated[int, Field(ge=1, le=1024)] | None = None
    pipeline_parallel_size: Annotated[int, Field(ge=1, le=1024)] | None = None
    max_model_len: Annotated[int, Field(ge=1, le=2**31 - 1)] | Literal["auto"] | None = None
    kv_cache_dtype: Annotated[str, StringConstraints(max_length=32)] | None = None
    quantization: Annotated[str, StringConstraints(max_length=32)] | None = None
    dtype: Literal["auto", "bfloat16", "float16", "float32", "half", "bf16", "fp16"] | None = None
    gpu_memory_utilization: Annotated[float, Field(gt=0, le=1)] | None = None
    kv_cache_memory_bytes: Annotated[int, Field(ge=0, le=2**62)] | None = None
    num_gpu_blocks_override: Annotated[int, Field(ge=1, le=2**31 - 1)] | None = None
    block_size: Annotated[int, Field(ge=1, le=1_048_576)] | None = None
    max_num_seqs: Annotated[int, Field(ge=1, le=2**31 - 1)] | None = None
    max_num_batched_tokens: Annotated[int, Field(ge=1, le=2**31 - 1)] | None = None
    enforce_eager: bool | None = None
    disable_sliding_window: bool | None = None
    async_scheduling: bool | None = None
    device: Literal["cuda", "rocm", "cpu"] | None = None
    engine: Annotated[str, StringConstraints(max_length=32)] | None = None


class DeploymentRead(DeploymentCreate):
    model_config = ConfigDict(extra="ignore")
    _check_text: ClassVar[bool] = False

    version: int
    created_at: datetime
    updated_at: datetime


class DeploymentPlan(BaseModel):
    deployment: DeploymentRead
    plan: PlanResponse
    recommendation: RecommendationOut | None = Field(description="present when the deployment has a workload")


SETTINGS_FIELDS: tuple[str, ...] = tuple(PlanSettings.model_fields)


def settings_of(data: dict[str, Any]) -> dict[str, Any]:
    return {key: data[key] for key in SETTINGS_FIELDS if key in data}


class SloChange(Schema):
    """New SLOs for every deployment with a workload; an unset field keeps each deployment's own."""

    ttft_p95_seconds: Annotated[float, Field(gt=0, le=3600)] | None = None
    tpot_seconds: Annotated[float, Field(gt=0, le=60)] | None = None
    slo_percentile: Literal["p50", "p99", "mean"] | None = None
    spec_mean_acceptance_length: Annotated[float, Field(ge=1, le=1_000)] | None = Field(
        default=None,
        description="vLLM's 'Mean acceptance length' for every deployment with speculative decoding (at most "
        "1 + its num_speculative_tokens, else that deployment is an error); ignored for the others",
    )


class ReplanRequest(Schema):
    """``POST /v1/deployments/replan``: one change applied to every matching deployment (nothing is stored)."""

    traffic_multiplier: Annotated[float, Field(gt=0, le=1000)] = Field(
        default=1.0,
        description="scales each workload's requests_per_second (or concurrent_users, rounded up)",
    )
    slo: SloChange | None = None
    engine: Annotated[str, StringConstraints(min_length=1, max_length=32)] | None = Field(
        default=None, description="another vLLM release for every deployment, e.g. 'vllm-0.11'"
    )
    gpu: RefName | None = Field(default=None, description="another catalog GPU type for every deployment")
    namespace: Namespace | None = None
    labels: Annotated[dict[str, str], AfterValidator(check_labels)] = Field(
        default_factory=dict, max_length=64, description="only deployments carrying all of these labels"
    )
    simulate: bool = Field(
        default=True, description="size replicas with the serving simulator; false: the roofline bound only"
    )


class ReplanSide(BaseModel):
    """One side of a deployment's delta: as registered (``current``) or under the change (``new``)."""

    gpu: str | None
    engine: str | None
    tensor_parallel_size: int
    pipeline_parallel_size: int
    replicas: int | None
    gpus: int | None
    cost_per_hour_usd: float | None
    fits: bool | None
    sizing: Literal["registered", "simulated", "roofline", "kv-cache", "scaled", "none"]
    reason: str | None
    speculative: SpeculativeAcceptanceOut | None = Field(
        default=None,
        description="new side: the speculative decoding acceptance the replicas are sized with (null without it)",
    )


class ReplanDelta(BaseModel):
    namespace: str
    name: str
    status: Literal["ok", "does_not_fit", "error"]
    changed: bool
    current: ReplanSide | None
    new: ReplanSide | None
    gpus_delta: int | None
    cost_per_hour_delta_usd: float | None
    error: str | None = Field(default=None, description="why the deployment could not be replanned")


class ReplanSummary(BaseModel):
    deployments: int
    ok: int
    does_not_fit: int
    errors: int
    changed: int
    gpus_current: int = Field(description="over the deployments with a delta on both sides")
    gpus_new: int
    gpus_added: int
    gpus_freed: int
    cost_per_hour_current_usd: float
    cost_per_hour_new_usd: float
    cost_per_hour_delta_usd: float
    configurations: int = Field(
        description="distinct configurations sized (deployments that share one share the work)"
    )
    plans_computed: int
    plans_reused: int
    recommendations_computed: int
    recommendations_reused: int
    simulate: bool
    elapsed_seconds: float


class ReplanResponse(BaseModel):
    change: ReplanRequest
    deployments: list[ReplanDelta] = Field(description="ordered by namespace and name")
    summary: ReplanSummary
