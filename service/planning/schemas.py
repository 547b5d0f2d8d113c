"""``POST /v1/plans`` request and response: the public contract (names are kept; additions only)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, model_validator

from service.api.text import SafeText
from service.core import bounds

Positive = Annotated[int, Field(ge=1, le=2**31 - 1)]
# The core's plausible ranges (``service.core.bounds``), declared so the document and the core agree.
ContextTokens = Annotated[int, Field(ge=1, le=bounds.MAX_CONTEXT_TOKENS)]
ParallelSize = Annotated[int, Field(ge=1, le=bounds.MAX_PARALLEL_SIZE)]
ByteCount = Annotated[int, Field(ge=0, le=2**62)]
RefName = Annotated[str, StringConstraints(min_length=1, max_length=200, strip_whitespace=True)]


class Schema(SafeText):
    # Validators are built on first use, not at import: a command line that plans never builds the sweep's.
    model_config = ConfigDict(extra="forbid", defer_build=True)


class InlineModel(Schema):
    """A model not in the catalog: its Hugging Face config.json (parameter count derived when absent)."""

    hf_config: dict[str, Any]
    num_parameters: Annotated[int, Field(gt=0, le=bounds.MAX_PARAMETERS)] | None = None
    name: RefName | None = None


class InlineGpu(Schema):
    """An accelerator not in the catalog. ``memory_bytes`` is the total the runtime reports for the device."""

    memory_bytes: Annotated[int, Field(gt=0, le=2**62)]
    name: RefName = "custom"
    memory_bandwidth_bytes_per_second: Annotated[int, Field(gt=0, le=2**62)] | None = None
    bf16_dense_flops_per_second: Annotated[int, Field(gt=0, le=2**62)] | None = None
    fp8_dense_flops_per_second: Annotated[int, Field(gt=0, le=2**62)] | None = None
    interconnect_bandwidth_bytes_per_second: Annotated[int, Field(gt=0, le=2**62)] | None = None
    price_per_hour_usd: Annotated[float, Field(ge=0, le=100_000)] | None = None
    compute_capability: Annotated[str, StringConstraints(max_length=32)] | None = None
    supports_fp8: bool = True
    supports_bf16: bool = True


class SpeculativeConfigIn(Schema):
    """``--speculative-config`` (vLLM's JSON keys); ``model`` names the draft model or EAGLE/MTP head."""

    method: Annotated[str, StringConstraints(min_length=1, max_length=32, strip_whitespace=True)] | None = (
        Field(default=None, examples=["ngram", "eagle3", "deepseek_mtp", "draft_model"])
    )
    model: RefName | InlineModel | None = Field(
        default=None, description="the draft model / EAGLE head: catalog name, HF id or {'hf_config': ...}"
    )
    num_speculative_tokens: Annotated[int, Field(ge=1, le=64)] | None = None
    draft_tensor_parallel_size: ParallelSize | None = None

    @model_validator(mode="after")
    def _method_or_model(self) -> SpeculativeConfigIn:
        if self.method is None and self.model is None:
            raise ValueError("speculative_config needs a method or a draft model")
        return self


class KvTransferConfigIn(Schema):
    """``--kv-transfer-config``: the connector and its ``kv_connector_extra_config``."""

    kv_connector: Annotated[str, StringConstraints(min_length=1, max_length=64, strip_whitespace=True)]
    kv_role: Literal["kv_producer", "kv_consumer", "kv_both"] | None = None
    kv_connector_extra_config: dict[str, Any] = Field(
        default_factory=dict,
        description="num_cpu_blocks / cpu_bytes_to_use (OffloadingConnector), max_local_cpu_size GiB (LMCache)",
    )


_LORA_RANK = Literal[1, 8, 16, 32, 64, 128, 256, 320, 512]  # vllm/config/lora.py possible_max_ranks


class PlanSettings(Schema):
    """vLLM settings that decide memory (``vllm serve`` flag names). Unset → the release's default."""

    tensor_parallel_size: ParallelSize = 1
    pipeline_parallel_size: ParallelSize = 1
    pipeline_layer_partition: list[Annotated[int, Field(ge=0, le=bounds.MAX_LAYERS)]] | None = Field(
        default=None,
        max_length=bounds.MAX_PARALLEL_SIZE,
        description=(
            "VLLM_PP_LAYER_PARTITION: layers per pipeline stage, one count per stage, adding up to the "
            "model's layers (default: get_pp_indices' even split)"
        ),
        examples=[[16, 32]],
    )
    pipeline_stage_gpus: list[RefName | InlineGpu] | None = Field(
        default=None,
        max_length=bounds.MAX_PARALLEL_SIZE,
        description=(
            "one GPU per pipeline stage when the stages run on different GPUs (each stage budgeted on its own "
            "GPU's memory); catalog names or {'memory_bytes': ...}; gpu, when given, must be the first"
        ),
        examples=[["rtx-5070-ti", "rtx-5090-d"]],
    )
    max_model_len: ContextTokens | Literal["auto"] | None = Field(
        default=None, description="tokens; 'auto' fits the largest (0.15+)"
    )
    kv_cache_dtype: Annotated[str, StringConstraints(max_length=32)] | None = Field(
        default=None, examples=["auto", "fp8"]
    )
    quantization: Annotated[str, StringConstraints(max_length=32)] | None = Field(
        default=None, examples=["awq", "fp8"]
    )
    dtype: Literal["auto", "bfloat16", "float16", "float32", "half", "bf16", "fp16"] | None = None
    gpu_memory_utilization: Annotated[float, Field(gt=0, le=1)] | None = None
    kv_cache_memory_bytes: ByteCount | None = Field(
        default=None, description="--kv-cache-memory-bytes: exact KV budget per GPU"
    )
    num_gpu_blocks_override: Positive | None = None
    block_size: Annotated[int, Field(ge=1, le=bounds.MAX_BLOCK_SIZE)] | None = None
    max_num_seqs: Annotated[int, Field(ge=1, le=bounds.MAX_NUM_SEQS)] | None = None
    max_num_batched_tokens: Annotated[int, Field(ge=1, le=bounds.MAX_BATCHED_TOKENS)] | None = None
    enable_chunked_prefill: bool | None = Field(
        default=None,
        description="--enable-chunked-prefill; default: the release's (V1 always, V0 above 32K tokens)",
    )
    enable_prefix_caching: bool | None = Field(
        default=None,
        description="--enable-prefix-caching; default: the release's (on in V1); off, hybrids keep one Mamba state page",
    )
    enforce_eager: bool = False
    disable_sliding_window: bool = Field(
        default=False,
        description="--disable-sliding-window: sliding layers served as full attention, the default "
        "max_model_len capped at the window",
    )
    async_scheduling: bool | None = None
    device: Literal["cuda", "rocm", "cpu"] = "cuda"
    mamba_cache_dtype: Literal["auto", "float32", "bfloat16", "float16"] | None = Field(
        default=None,
        description="--mamba-cache-dtype: Mamba/linear-attention conv state (auto: the model dtype)",
    )
    mamba_ssm_cache_dtype: Literal["auto", "float32", "bfloat16", "float16"] | None = Field(
        default=None, description="--mamba-ssm-cache-dtype: the SSM state (auto: the model's default)"
    )
    cpu_avx512_bf16: bool = Field(
        default=True,
        description="device cpu: the host has AVX512-BF16 (vLLM 0.32+ then keeps SSM state in float32)",
    )
    engine: Annotated[str, StringConstraints(max_length=32)] | None = Field(
        default=None,
        description=(
            "'ideal' or 'vllm-<major>.<minor>' (0.5+; 0.8 – 0.10 are V1, 'vllm-0.10-v0' their V0 engine); "
            "default: the newest release kvcap knows"
        ),
    )
    # Serving features (service.core.planner.features): unset changes nothing.
    speculative_config: SpeculativeConfigIn | None = None
    enable_lora: bool | None = Field(default=None, description="--enable-lora (default off)")
    max_loras: Annotated[int, Field(ge=1, le=1024)] | None = Field(default=None, description="default 1")
    max_lora_rank: _LORA_RANK | None = Field(default=None, description="default 16")
    max_cpu_loras: Annotated[int, Field(ge=1, le=65_536)] | None = None
    lora_extra_vocab_size: Annotated[int, Field(ge=0, le=65_536)] | None = Field(
        default=None, description="up to vLLM 0.11 (default 256); removed in 0.12"
    )
    cpu_offload_gb: Annotated[float, Field(ge=0, le=1_000_000)] | None = None
    kv_transfer_config: KvTransferConfigIn | None = None
    kv_offloading_size: Annotated[float, Field(gt=0, le=1_000_000)] | None = Field(
        default=None, description="GiB of CPU KV in total over the TP × PP ranks (0.12+)"
    )
    kv_offloading_backend: Literal["native", "lmcache"] | None = None
    data_parallel_size: ParallelSize | None = Field(default=None, description="default 1")
    enable_expert_parallel: bool | None = Field(default=None, description="default off")
    shared_prefix_tokens: ContextTokens | None = Field(
        default=None, description="prompt tokens every request shares (prefix caching): effective concurrency"
    )
    limit_mm_per_prompt: (
        dict[Literal["image", "video", "audio"], Annotated[int, Field(ge=0, le=1024)]] | None
    ) = Field(default=None, description="items per prompt by modality; all 0: text-only (tower not loaded)")
    mm_processor_kwargs: dict[str, Any] | None = Field(
        default=None, description="passed to the HF processor; max_pixels sizes Qwen-VL images"
    )
    flashinfer_sampler: bool | None = Field(
        default=None,
        description="FlashInfer installed and VLLM_USE_FLASHINFER_SAMPLER not 0 (default true, as in the "
        "vllm/vllm-openai images); false: the V1 sampler of 0.8 – 0.11 sorts the vocabulary at start-up",
    )

    @model_validator(mode="after")
    def _lora_flags_need_enable_lora(self) -> PlanSettings:
        for name in ("max_loras", "max_lora_rank", "max_cpu_loras", "lora_extra_vocab_size"):
            if getattr(self, name) is not None and not self.enable_lora:
                raise ValueError(f"{name} needs enable_lora")
        if self.kv_offloading_backend is not None and self.kv_offloading_size is None:
            raise ValueError("kv_offloading_backend needs kv_offloading_size")
        return self


class PlanRequestBody(PlanSettings):
    model: RefName | InlineModel = Field(description="catalog name, Hugging Face id, or {'hf_config': {...}}")
    gpu: RefName | InlineGpu | None = Field(
        default=None, description="catalog name / product label, or {'memory_bytes': ...}"
    )
    prompt_tokens: ContextTokens | None = Field(
        default=None, description="with output_tokens: the cache-reuse example"
    )
    output_tokens: ContextTokens | None = None

    @model_validator(mode="after")
    def _gpu_defaults_to_the_first_stage(self) -> PlanRequestBody:
        first_stage_gpu(self)
        return self


def first_stage_gpu(body: Any) -> None:
    """A body with ``pipeline_stage_gpus`` and no ``gpu`` plans on the first stage's GPU (the core reads the
    release's capability checks from it); a ``gpu`` that is given is checked against it by the core."""
    if body.gpu is None and body.pipeline_stage_gpus:
        body.gpu = body.pipeline_stage_gpus[0]


def no_stage_gpus(body: PlanSettings, search: str) -> None:
    """A search that times or prices one GPU kind cannot take a pipeline over several."""
    if body.pipeline_stage_gpus is not None:
        raise ValueError(
            f"pipeline_stage_gpus: {search} times and prices one GPU kind; plan a pipeline over different "
            "GPUs with /v1/plans"
        )


class KvCacheOut(BaseModel):
    bytes_per_token: int
    bytes_per_block: int
    page_size_bytes: int
    block_size: int
    num_gpu_blocks: int
    usable_blocks: int
    kv_cache_size_tokens: int
    max_concurrency: float
    max_concurrent_sequences: int
    blocks_per_request: int
    bytes_per_sequence: int
    bytes_for_max_num_seqs: int
    num_groups: int
    group_size: int
    padding_layers: int
    num_gpu_blocks_low: int
    num_gpu_blocks_high: int


class MemoryOut(BaseModel):
    total_bytes: int
    budget_bytes: int
    weights_bytes: int
    activation_bytes: int
    non_torch_bytes: int
    cudagraph_bytes: int
    kv_cache_bytes: int
    kv_cache_used_bytes: int
    kv_cache_bytes_low: int
    kv_cache_bytes_high: int


class MessageOut(BaseModel):
    level: Literal["error", "warning", "info"]
    code: str
    text: str


class SuggestionOut(BaseModel):
    setting: str
    value: int | float | str
    text: str


class TermOut(BaseModel):
    name: str
    formula: str
    value: float
    unit: str


class StageOut(BaseModel):
    stage: int
    layers: tuple[int, int]
    weights_bytes: int
    kv_cache_bytes: int
    num_gpu_blocks: int


class ProjectionsOut(BaseModel):
    prompt_tokens: int
    output_tokens: int
    without_cache_per_layer: int
    with_cache_per_layer: int
    ratio: float


class SettingsOut(BaseModel):
    engine: str
    profile: str
    device: str
    tensor_parallel_size: int
    pipeline_parallel_size: int
    max_model_len: int
    kv_cache_dtype: str
    kv_cache_element_bytes: int
    quantization: str | None
    dtype: str
    gpu_memory_utilization: float | None
    kv_cache_memory_bytes: int | None
    block_size: int
    max_num_seqs: int
    max_num_batched_tokens: int
    enforce_eager: bool
    async_scheduling: bool
    enable_chunked_prefill: bool = True
    enable_prefix_caching: bool = True
    disable_sliding_window: bool = False
    pipeline_layer_partition: list[int] | None = None
    pipeline_stage_gpus: list[str] | None = None


class Subject(BaseModel):
    name: str
    source: Literal["catalog", "inline"]
    matched_by: str | None = None


class FeaturesOut(BaseModel):
    speculative_method: str | None
    num_speculative_tokens: int
    speculative_weights_bytes: int
    speculative_kv_layers: int
    blocks_per_request_with_lookahead: int
    lora_bytes: int
    cpu_offload_bytes: int
    data_parallel_size: int
    enable_expert_parallel: bool
    experts_per_gpu: int | None
    total_gpus: int
    max_concurrency_all_ranks: float
    cpu_kv_cache_bytes: int
    cpu_kv_cache_tokens: int
    shared_prefix_tokens: int
    effective_max_concurrency: float


class CalibrationOut(BaseModel):
    """Set when observed vLLM start-ups of the same configuration corrected the prediction (live metrics)."""

    applied: bool
    observed_num_gpu_blocks: int | None = None
    uncalibrated_num_gpu_blocks: int | None = None
    samples: int = 0
    key: str | None = None


class PlanResponse(BaseModel):
    model: Subject
    gpu: Subject | None
    settings: SettingsOut
    kv_cache: KvCacheOut
    memory: MemoryOut
    fits: bool = Field(description="vLLM will start with these settings")
    exact: bool = Field(description="block counts are exact (KV budget given), not estimates")
    max_model_len_that_fits: int
    messages: list[MessageOut]
    suggestions: list[SuggestionOut]
    breakdown: list[TermOut]
    stages: list[StageOut]
    projections: ProjectionsOut | None = None
    calibration: CalibrationOut | None = None
    features: FeaturesOut | None = Field(
        default=None, description="set when the request names serving features (speculative, LoRA, DP …)"
    )


class WorkloadIn(Schema):
    """Traffic to serve: a request rate or a number of concurrent users, token lengths, optional SLOs."""

    requests_per_second: Annotated[float, Field(gt=0, le=1_000_000)] | None = None
    concurrent_users: Annotated[int, Field(ge=1, le=10_000_000)] | None = None
    prompt_tokens: Annotated[int, Field(ge=1, le=10_000_000)] = Field(
        default=1024, description="mean prompt length"
    )
    output_tokens: Annotated[int, Field(ge=1, le=10_000_000)] = Field(
        default=256, description="mean output length"
    )
    prompt_tokens_p95: Annotated[int, Field(ge=1, le=10_000_000)] | None = None
    output_tokens_p95: Annotated[int, Field(ge=1, le=10_000_000)] | None = None
    ttft_p95_seconds: Annotated[float, Field(gt=0, le=3600)] | None = Field(
        default=None, description="SLO: time to first token"
    )
    tpot_seconds: Annotated[float, Field(gt=0, le=60)] | None = Field(
        default=None, description="SLO: time per output token"
    )
    headroom_ratio: Annotated[float, Field(ge=0, le=10)] = Field(
        default=0.2, description="capacity above demand"
    )
    slo_percentile: Literal["p50", "p99", "mean"] = Field(
        default="p99", description="where the TTFT and TPOT SLOs are checked in the simulated distribution"
    )
    spec_mean_acceptance_length: Annotated[float, Field(ge=1, le=1_000)] | None = Field(
        default=None,
        description="speculative decoding only: vLLM's 'Mean acceptance length' of this traffic (1 + accepted "
        "draft tokens per draft, bonus token included), at most 1 + num_speculative_tokens; null: the method's "
        "default; ignored (with a note in the assumptions) for a plan without speculative_config",
    )

    @model_validator(mode="after")
    def _one_demand(self) -> WorkloadIn:
        if (self.requests_per_second is None) == (self.concurrent_users is None):
            raise ValueError("give exactly one of requests_per_second or concurrent_users")
        for name in ("prompt_tokens", "output_tokens"):
            p95 = getattr(self, f"{name}_p95")
            if p95 is not None and p95 < getattr(self, name):
                raise ValueError(f"{name}_p95 cannot be below the mean {name}")
        return self


class RecommendRequestBody(PlanSettings):
    model: RefName | InlineModel
    gpu: RefName | InlineGpu
    workload: WorkloadIn
    tensor_parallel_sizes: list[ParallelSize] | None = Field(
        default=None,
        max_length=16,
        description="candidates (default: powers of two up to 8 that divide the attention heads)",
    )
    simulate: bool = Field(
        default=True,
        description="size replicas with the serving simulator; false: the roofline bound only (optimistic, fast)",
    )

    @model_validator(mode="after")
    def _one_gpu_kind(self) -> RecommendRequestBody:
        no_stage_gpus(self, "a recommendation")
        return self


class SpeculativeAcceptanceOut(BaseModel):
    """The speculative decoding an option is sized with (``service.core.serving.speculative.SpecDecoding``)."""

    model_config = ConfigDict(defer_build=True)

    method: str
    num_speculative_tokens: int
    mean_acceptance_length: float = Field(
        description="vLLM's 'Mean acceptance length' the simulations assume (1 when nothing is proposed)"
    )
    source: Literal["given", "method default"] = Field(
        description="given: workload.spec_mean_acceptance_length; method default: the method's assumed acceptance"
    )
    position_acceptance: float = Field(description="the per-position acceptance α of the chain behind it")
    proposes: bool = Field(
        description="false: the proposer finds nothing to propose (ngram/suffix by default)"
    )


class OptionOut(BaseModel):
    model_config = ConfigDict(defer_build=True)  # built on first use: `kvcap plan` never needs it

    gpu: str
    tensor_parallel_size: int
    pipeline_parallel_size: int
    kv_cache_dtype: str
    quantization: str | None
    feasible: bool
    rejection: str | None
    reasons: list[str]
    max_model_len: int
    max_num_seqs: int
    kv_concurrency: int
    slo_batch: int | None
    default_max_num_seqs: int
    tpot_seconds: float | None
    ttft_seconds: float | None
    tokens_per_second_per_replica: float | None
    requests_per_second_per_replica: float | None
    replicas: int
    gpus: int
    cost_per_hour_usd: float | None
    cost_per_million_output_tokens_usd: float | None
    num_gpu_blocks: int | None = None
    assumptions: list[str] = Field(default_factory=list)
    roofline_requests_per_second_per_replica: float | None = Field(
        default=None, description="the roofline's optimistic bound (no queueing): the sanity ceiling"
    )
    simulated_requests_per_second_per_replica: float | None = Field(
        default=None, description="largest rate one replica sustains within the SLOs in the serving simulator"
    )
    simulations: int = 0
    sizing: Literal["simulated", "roofline", "kv-cache"] = Field(
        default="simulated",
        description="simulated; roofline (a sweep option not simulated, optimistic); kv-cache (GPU lacks figures)",
    )
    speculative: SpeculativeAcceptanceOut | None = Field(
        default=None,
        description="the acceptance the option is sized with (null for a plan without speculative_config)",
    )


class RecommendationOut(BaseModel):
    model_config = ConfigDict(defer_build=True)  # built on first use: `kvcap plan` never needs it

    model: Subject
    gpu: Subject
    recommended: OptionOut | None = Field(description="null when no option starts and meets the SLO")
    options: list[OptionOut]


class SweepRequestBody(PlanSettings):
    model: RefName | InlineModel
    workload: WorkloadIn
    gpus: list[RefName] | None = Field(
        default=None, max_length=256, description="catalog GPUs to consider (default: all)"
    )
    # Each list multiplies the options a sweep plans: bounded so one request stays cheap.
    tensor_parallel_sizes: list[ParallelSize] | None = Field(default=None, max_length=16)
    kv_cache_dtypes: list[Annotated[str, StringConstraints(max_length=32)]] = Field(
        default_factory=lambda: ["auto", "fp8"], max_length=16
    )
    quantizations: list[Annotated[str, StringConstraints(max_length=32)] | None] = Field(
        default_factory=lambda: [None, "fp8", "awq"],
        max_length=16,
        description="null = the checkpoint's own precision",
    )
    limit: Annotated[int, Field(ge=1, le=10_000)] = 50

    @model_validator(mode="after")
    def _one_gpu_kind(self) -> SweepRequestBody:
        no_stage_gpus(self, "a sweep")
        return self


class SweepOut(BaseModel):
    model_config = ConfigDict(defer_build=True)  # built on first use: `kvcap plan` never needs it

    model: Subject
    evaluated: int
    feasible: int
    options: list[OptionOut] = Field(
        description="ranked: cheapest feasible first, then rejected with reasons"
    )


class BenchmarkIn(Schema):
    """One ``vllm bench serve`` run (flag names as fields: ``--random-input-len`` → ``random_input_len``)."""

    dataset_name: Literal["random", "sharegpt", "explicit"] = Field(
        default="random", description="'explicit' takes per-request lengths from ``requests``"
    )
    num_prompts: Annotated[int, Field(ge=1, le=20_000)] = 1000
    request_rate: Annotated[float, Field(gt=0, le=1_000_000)] | Literal["inf"] = Field(
        default="inf", description="requests/s; 'inf' sends every request at once"
    )
    burstiness: Annotated[float, Field(gt=0, le=1_000)] = Field(
        default=1.0, description="gamma shape of the arrival gaps; 1 = Poisson"
    )
    max_concurrency: Annotated[int, Field(ge=1, le=1_000_000)] | None = None
    random_input_len: Annotated[int, Field(ge=1, le=10_000_000)] = 1024
    random_output_len: Annotated[int, Field(ge=1, le=10_000_000)] = 128
    random_range_ratio: Annotated[float, Field(ge=0, lt=1)] = 0.0
    random_prefix_len: Annotated[int, Field(ge=0, le=10_000_000)] = 0
    seed: Annotated[int, Field(ge=0, le=2**32 - 1)] = 0
    ready_check_timeout_sec: Annotated[int, Field(ge=0, le=86_400)] | None = Field(
        default=None,
        description="> 0: the client sends the first prompt once before the timed run (its readiness probe), "
        "so the prefix cache holds it; 0: skipped; null: the release's default (sent before vLLM 0.14)",
    )
    num_warmups: Annotated[int, Field(ge=0, le=10_000)] = Field(
        default=0, description="--num-warmups: the first prompt sent that many times before the timed run"
    )
    spec_mean_acceptance_length: Annotated[float, Field(ge=1, le=1_000)] | None = Field(
        default=None,
        description="speculative decoding only: vLLM's 'Mean acceptance length' of this workload (1 + accepted "
        "draft tokens per draft, bonus token included), at most 1 + num_speculative_tokens; null: the method's "
        "default (EAGLE-3 0.8 per position, EAGLE 0.7, MTP 0.85, draft model 0.6; ngram/suffix propose nothing)",
    )
    requests: (
        list[tuple[Annotated[int, Field(ge=1, le=10_000_000)], Annotated[int, Field(ge=1, le=10_000_000)]]]
        | None
    ) = Field(default=None, max_length=20_000, description="[prompt_tokens, output_tokens] per request")

    @model_validator(mode="after")
    def _explicit_needs_requests(self) -> BenchmarkIn:
        if self.dataset_name == "explicit" and not self.requests:
            raise ValueError("dataset_name 'explicit' needs requests: [[prompt_tokens, output_tokens], ...]")
        if self.dataset_name != "explicit" and self.requests is not None:
            raise ValueError("requests are only read with dataset_name 'explicit'")
        return self


class SimulationRequestBody(PlanRequestBody):
    """Every ``/v1/plans`` field, plus the benchmark to simulate against that replica."""

    benchmark: BenchmarkIn = Field(default_factory=BenchmarkIn)
    # False when the TP GPUs cannot reach each other peer-to-peer (vLLM's start-up log then warns "Custom
    # allreduce is disabled because your platform lacks GPU P2P capability"): all-reduces via host memory.
    gpu_peer_to_peer: bool = True

    @model_validator(mode="after")
    def _one_gpu_kind(self) -> SimulationRequestBody:
        no_stage_gpus(self, "the serving simulator")
        return self


class BenchmarkResultOut(BaseModel):
    """The scalar keys of vLLM's ``vllm bench serve --save-result`` JSON, same names and units."""

    duration: float
    completed: int
    failed: int
    total_input_tokens: int
    total_output_tokens: int
    request_throughput: float
    output_throughput: float
    total_token_throughput: float
    max_output_tokens_per_s: float
    max_concurrent_requests: int
    mean_ttft_ms: float
    median_ttft_ms: float
    std_ttft_ms: float
    p99_ttft_ms: float
    mean_tpot_ms: float
    median_tpot_ms: float
    std_tpot_ms: float
    p99_tpot_ms: float
    mean_itl_ms: float
    median_itl_ms: float
    std_itl_ms: float
    p99_itl_ms: float
    mean_e2el_ms: float
    median_e2el_ms: float
    std_e2el_ms: float
    p99_e2el_ms: float


class TimelinePointOut(BaseModel):
    time_seconds: float
    running: int
    waiting: int
    kv_cache_usage_ratio: float
    tokens_per_step: float


class ErrorBandOut(BaseModel):
    """± ``ratio`` around the headline figures: the simulator's held-back median error, rounded up."""

    ratio: float
    output_throughput: tuple[float, float]
    request_throughput: tuple[float, float]
    mean_ttft_ms: tuple[float, float]
    mean_tpot_ms: tuple[float, float]


class PlanSummaryOut(BaseModel):
    """The replica the simulation ran against (``POST /v1/plans`` has the full plan)."""

    model: Subject
    gpu: Subject | None
    fits: bool
    num_gpu_blocks: int
    block_size: int
    kv_cache_size_tokens: int
    max_concurrency: float
    settings: SettingsOut


class SpeculativeSimulationOut(BaseModel):
    """What the simulated engine's spec-decode counters read (``vllm/v1/spec_decode/metrics.py``' names)."""

    method: str
    num_speculative_tokens: int
    assumed_mean_acceptance_length: float = Field(
        description="given in the benchmark, or the method's default"
    )
    mean_acceptance_length: float | None = Field(
        description="1 + accepted / drafts over the run, as vLLM logs it (null when no step had drafts)"
    )
    draft_acceptance_rate: float | None = Field(
        description="accepted / drafted tokens (a ratio, not percent)"
    )
    num_drafts: int
    num_draft_tokens: int
    num_accepted_tokens: int


class SimulationOut(BaseModel):
    result: BenchmarkResultOut
    timeline: list[TimelinePointOut] = Field(description="about 200 points evenly spread over the run")
    assumptions: list[str]
    error_band: ErrorBandOut
    messages: list[str]
    num_preemptions: int
    num_steps: int = Field(description="engine steps simulated")
    step_time_scale: float = Field(
        description="multiplier on the modelled step time (1 unless this configuration was fitted from live data)"
    )
    benchmark: BenchmarkIn
    plan: PlanSummaryOut
    speculative: SpeculativeSimulationOut | None = Field(
        default=None,
        description="speculative decoding as simulated (null for a plan without speculative_config)",
    )
