"""The ``kvcap`` command line: serve, migrate, load the catalog, and plan/check without a server.

Exit codes: 0 success; 1 the answer is "no" (a deployment that will not start, a denied manifest); 2 bad input
or an environment problem (unreadable file, database unreachable).
"""

from __future__ import annotations

import shutil
import ssl
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from service.admission.cli import check as check_command
from service.cli_fast import (
    CommandError,
    PlanOptions,
    post_json,
    run_plan,
    validation_message,
)
from service.cli_fast import capacity_lengths as capacity_lengths  # public: the capacity table's lengths
from service.deployments.replan_cli import replan_command
from service.planning.simulate_cli import simulate_command

if TYPE_CHECKING:
    from pydantic import ValidationError
    from rich.console import Console


# Each command imports what it needs when it runs (pipelines call `kvcap check` once per manifest, so start-up is
# the cost): an offline plan never loads the web, HTTP or database stack. tests/test_cli_imports.py holds this.

app = typer.Typer(
    no_args_is_help=True,
    add_completion=True,  # --install-completion / --show-completion for bash, zsh, fish and PowerShell
    help="kvcap: KV-cache capacity planning for vLLM",
)
catalog_app = typer.Typer(no_args_is_help=True, help="Built-in model and GPU catalog")
app.add_typer(catalog_app, name="catalog")


def _err() -> Console:
    from rich.console import Console

    return Console(stderr=True)


def _out() -> Console:
    from rich.console import Console

    return Console(width=shutil.get_terminal_size((150, 24)).columns)


def _print_version(value: bool) -> None:
    if value:
        from service.version import kvcap_revision, kvcap_version

        revision = kvcap_revision()
        print(f"kvcap {kvcap_version()}" + (f" ({revision})" if revision != "unknown" else ""))
        raise typer.Exit(0)


@app.callback()
def _options(
    version: Annotated[
        bool,
        typer.Option("--version", callback=_print_version, is_eager=True, help="print the version and exit"),
    ] = False,
) -> None:
    """kvcap: KV-cache capacity planning for vLLM."""


def _fail(message: str, code: int = 2) -> typer.Exit:
    _err().print(f"[red]error:[/red] {message}", highlight=False)
    return typer.Exit(code)


@app.command()
def serve(
    host: Annotated[str, typer.Option(help="interface to bind")] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=1, max=65535, help="TCP port")] = 8000,
    ssl_certfile: Annotated[
        Path | None,
        typer.Option(help="PEM certificate chain: serve HTTPS (default: KVCAP_TLS_CERT_FILE)"),
    ] = None,
    ssl_keyfile: Annotated[
        Path | None, typer.Option(help="PEM private key (default: KVCAP_TLS_KEY_FILE)")
    ] = None,
) -> None:
    """Run the HTTP(S) service (one process; scale out with replicas).

    With a certificate, kvcap serves HTTPS only, and re-reads the certificate and key when their files change
    (every KVCAP_TLS_RELOAD_INTERVAL_SECONDS): new connections get the new certificate, open ones carry on.
    """
    import uvicorn

    from service.app import create_app
    from service.settings import get_settings
    from service.tls import CertificateReloader

    settings = get_settings()
    cert_file = ssl_certfile or (Path(settings.tls_cert_file) if settings.tls_cert_file else None)
    key_file = ssl_keyfile or (Path(settings.tls_key_file) if settings.tls_key_file else None)
    if key_file is not None and cert_file is None:
        raise _fail("--ssl-keyfile (KVCAP_TLS_KEY_FILE) needs --ssl-certfile (KVCAP_TLS_CERT_FILE)")
    application = create_app(settings)
    config = uvicorn.Config(
        application,
        host=host,
        port=port,
        ssl_certfile=cert_file,
        ssl_keyfile=key_file,
        log_config=None,  # create_app configured logging: uvicorn's loggers go through the same handler
        proxy_headers=True,
    )
    if cert_file is not None:
        try:
            reloader = CertificateReloader(
                cert_file=cert_file, key_file=key_file, observer=application.state.service_metrics
            )
            config.load()  # builds uvicorn's SSLContext, the one its listening socket will use
        except (OSError, ssl.SSLError, ValueError) as exc:
            raise _fail(f"cannot use the TLS certificate {cert_file}: {type(exc).__name__}: {exc}") from None
        assert config.ssl is not None
        reloader.install(config.ssl)
        application.state.tls_reloader = reloader
    uvicorn.Server(config).run()


@app.command()
def migrate(
    database_url: Annotated[str | None, typer.Option(help="defaults to KVCAP_DATABASE_URL")] = None,
) -> None:
    """Apply database migrations (Alembic upgrade head)."""
    from service.db.migrate import upgrade
    from service.settings import get_settings

    url = database_url or get_settings().database_url
    try:
        upgrade(url)
    except Exception as exc:
        raise _fail(f"migration failed: {type(exc).__name__}: {exc}") from None
    _err().print("database is at the newest schema revision")


@catalog_app.command("load")
def catalog_load(
    database_url: Annotated[str | None, typer.Option(help="defaults to KVCAP_DATABASE_URL")] = None,
) -> None:
    """Insert or refresh the built-in GPUs and models (idempotent; entries edited through the API are kept)."""
    import asyncio

    from service.catalog.builtin import load_builtin
    from service.db.session import create_engine, create_sessionmaker
    from service.settings import get_settings, normalize_database_url

    async def _run() -> str:
        engine = create_engine(normalize_database_url(database_url or get_settings().database_url))
        try:
            async with create_sessionmaker(engine)() as session:
                result = await load_builtin(session)
                await session.commit()
        finally:
            await engine.dispose()
        return (
            f"catalog loaded: {result.inserted} inserted, {result.updated} updated, "
            f"{result.unchanged} unchanged, {result.kept_user_edits} kept (edited through the API)"
        )

    try:
        message = asyncio.run(_run())
    except Exception as exc:
        raise _fail(
            f"catalog load failed: {type(exc).__name__}: {exc} (did you run `kvcap migrate`?)"
        ) from None
    _err().print(message)


def _validation_message(exc: ValidationError) -> str:
    return validation_message(exc)


def _post(server: str, path: str, body: dict[str, object]) -> dict[str, object]:
    """Ask a kvcap server; its 4xx become exit 2 with the server's message."""
    try:
        return post_json(server, path, body)
    except CommandError as exc:
        raise _fail(exc.message) from None


@app.command()
def plan(
    model: Annotated[
        str | None, typer.Option("--model", "-m", help="catalog name or Hugging Face id")
    ] = None,
    hf_config: Annotated[Path | None, typer.Option(help="a config.json instead of --model")] = None,
    num_parameters: Annotated[
        int | None, typer.Option(help="parameter count for --hf-config (derived when absent)")
    ] = None,
    gpu: Annotated[
        str | None, typer.Option("--gpu", "-g", help="catalog name or nvidia.com/gpu.product label")
    ] = None,
    gpu_memory_bytes: Annotated[
        int | None, typer.Option(help="an uncatalogued GPU: total device memory in bytes")
    ] = None,
    engine: Annotated[str | None, typer.Option(help="'ideal' or vllm-X.Y (default: newest known)")] = None,
    tensor_parallel_size: Annotated[int, typer.Option("--tensor-parallel-size", "-tp")] = 1,
    pipeline_parallel_size: Annotated[int, typer.Option("--pipeline-parallel-size", "-pp")] = 1,
    pipeline_layer_partition: Annotated[
        str | None, typer.Option(help="VLLM_PP_LAYER_PARTITION: layers per stage, e.g. 16,32")
    ] = None,
    pipeline_stage_gpus: Annotated[
        str | None, typer.Option(help="one catalog GPU per pipeline stage, e.g. rtx-4090,rtx-5090")
    ] = None,
    max_model_len: Annotated[str | None, typer.Option(help="tokens, or 'auto'")] = None,
    kv_cache_dtype: Annotated[str | None, typer.Option()] = None,
    quantization: Annotated[str | None, typer.Option("--quantization", "-q")] = None,
    dtype: Annotated[str | None, typer.Option()] = None,
    gpu_memory_utilization: Annotated[float | None, typer.Option()] = None,
    kv_cache_memory_bytes: Annotated[int | None, typer.Option()] = None,
    block_size: Annotated[int | None, typer.Option()] = None,
    max_num_seqs: Annotated[int | None, typer.Option()] = None,
    max_num_batched_tokens: Annotated[int | None, typer.Option()] = None,
    enforce_eager: Annotated[bool, typer.Option("--enforce-eager")] = False,
    disable_sliding_window: Annotated[
        bool,
        typer.Option(
            "--disable-sliding-window",
            help="sliding layers as full attention, max_model_len capped at the window",
        ),
    ] = False,
    device: Annotated[str, typer.Option(help="cuda, rocm or cpu")] = "cuda",
    mamba_cache_dtype: Annotated[str | None, typer.Option(help="auto, float32, bfloat16 or float16")] = None,
    mamba_ssm_cache_dtype: Annotated[
        str | None, typer.Option(help="auto, float32, bfloat16 or float16")
    ] = None,
    cpu_avx512_bf16: Annotated[
        bool, typer.Option(help="--device cpu: the host has AVX512-BF16 (SSM state then float32)")
    ] = True,
    prompt_tokens: Annotated[
        int | None, typer.Option(help="with --output-tokens: K/V projection counts")
    ] = None,
    output_tokens: Annotated[int | None, typer.Option()] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print the plan as JSON")] = False,
    server: Annotated[
        str | None, typer.Option(help="ask a kvcap server instead of the built-in catalog")
    ] = None,
    speculative_config: Annotated[
        str | None, typer.Option(help='JSON, e.g. \'{"method": "ngram", "num_speculative_tokens": 4}\'')
    ] = None,
    enable_lora: Annotated[bool, typer.Option("--enable-lora")] = False,
    max_loras: Annotated[int | None, typer.Option()] = None,
    max_lora_rank: Annotated[int | None, typer.Option()] = None,
    max_cpu_loras: Annotated[int | None, typer.Option()] = None,
    lora_extra_vocab_size: Annotated[int | None, typer.Option(help="vLLM ≤ 0.11")] = None,
    cpu_offload_gb: Annotated[float | None, typer.Option(help="GiB of weights per GPU moved to CPU")] = None,
    kv_transfer_config: Annotated[str | None, typer.Option(help="JSON, e.g. LMCacheConnectorV1")] = None,
    kv_offloading_size: Annotated[float | None, typer.Option(help="GiB of CPU KV in total (0.12+)")] = None,
    kv_offloading_backend: Annotated[str | None, typer.Option(help="native or lmcache")] = None,
    data_parallel_size: Annotated[int | None, typer.Option("--data-parallel-size", "-dp")] = None,
    enable_expert_parallel: Annotated[bool, typer.Option("--enable-expert-parallel")] = False,
    no_flashinfer_sampler: Annotated[
        bool,
        typer.Option(
            "--no-flashinfer-sampler",
            help="FlashInfer not installed or VLLM_USE_FLASHINFER_SAMPLER=0 (V1 0.8 – 0.11 then sorts the vocabulary)",
        ),
    ] = False,
    shared_prefix_tokens: Annotated[
        int | None, typer.Option(help="prompt tokens every request shares (prefix caching)")
    ] = None,
    limit_mm_per_prompt: Annotated[
        str | None, typer.Option(help="JSON, e.g. '{\"image\": 0}' for text-only")
    ] = None,
    mm_processor_kwargs: Annotated[
        str | None, typer.Option(help="JSON, e.g. '{\"max_pixels\": 1003520}' (Qwen-VL)")
    ] = None,
) -> None:
    """Predict vLLM's KV cache for a model on a GPU. Exit 1 when vLLM would not start, 2 for bad input."""
    from service.planning.cli_args import (
        FlagError,
        feature_fields,
        json_object_value,
        layer_partition_value,
        stage_gpus_value,
    )

    try:
        partition = layer_partition_value(pipeline_layer_partition)
        stage_gpus = stage_gpus_value(pipeline_stage_gpus)
        features = feature_fields(
            speculative_config=json_object_value("--speculative-config", speculative_config),
            enable_lora=enable_lora,
            max_loras=max_loras,
            max_lora_rank=max_lora_rank,
            max_cpu_loras=max_cpu_loras,
            lora_extra_vocab_size=lora_extra_vocab_size,
            cpu_offload_gb=cpu_offload_gb,
            kv_transfer_config=json_object_value("--kv-transfer-config", kv_transfer_config),
            kv_offloading_size=kv_offloading_size,
            kv_offloading_backend=kv_offloading_backend,
            data_parallel_size=data_parallel_size,
            enable_expert_parallel=enable_expert_parallel,
            shared_prefix_tokens=shared_prefix_tokens,
            limit_mm_per_prompt=json_object_value("--limit-mm-per-prompt", limit_mm_per_prompt),
            mm_processor_kwargs=json_object_value("--mm-processor-kwargs", mm_processor_kwargs),
        )
        if no_flashinfer_sampler:
            features["flashinfer_sampler"] = False
    except FlagError as exc:
        raise _fail(str(exc)) from None
    options = PlanOptions(
        model=model,
        hf_config=hf_config,
        num_parameters=num_parameters,
        gpu=gpu,
        gpu_memory_bytes=gpu_memory_bytes,
        engine=engine,
        tensor_parallel_size=tensor_parallel_size,
        pipeline_parallel_size=pipeline_parallel_size,
        pipeline_layer_partition=partition,
        pipeline_stage_gpus=stage_gpus,
        max_model_len=max_model_len,
        kv_cache_dtype=kv_cache_dtype,
        quantization=quantization,
        dtype=dtype,
        gpu_memory_utilization=gpu_memory_utilization,
        kv_cache_memory_bytes=kv_cache_memory_bytes,
        block_size=block_size,
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=max_num_batched_tokens,
        enforce_eager=enforce_eager,
        disable_sliding_window=disable_sliding_window,
        device=device,
        mamba_cache_dtype=mamba_cache_dtype,
        mamba_ssm_cache_dtype=mamba_ssm_cache_dtype,
        cpu_avx512_bf16=cpu_avx512_bf16,
        features=features,
        prompt_tokens=prompt_tokens,
        output_tokens=output_tokens,
        as_json=as_json,
        server=server,
    )
    raise typer.Exit(run_plan(options))  # the body is typer-free: `kvcap plan` runs it before typer loads


def _workload(
    requests_per_second: float | None,
    concurrent_users: int | None,
    prompt_tokens: int,
    output_tokens: int,
    prompt_tokens_p95: int | None,
    output_tokens_p95: int | None,
    ttft_slo: float | None,
    tpot_slo: float | None,
    headroom: float,
    slo_percentile: str = "p99",
    spec_mean_acceptance_length: float | None = None,
) -> dict[str, object]:
    return {
        "slo_percentile": slo_percentile,
        "spec_mean_acceptance_length": spec_mean_acceptance_length,
        "requests_per_second": requests_per_second,
        "concurrent_users": concurrent_users,
        "prompt_tokens": prompt_tokens,
        "output_tokens": output_tokens,
        "prompt_tokens_p95": prompt_tokens_p95,
        "output_tokens_p95": output_tokens_p95,
        "ttft_p95_seconds": ttft_slo,
        "tpot_seconds": tpot_slo,
        "headroom_ratio": headroom,
    }


def _int_list(text: str | None, option: str) -> list[int] | None:
    if not text:
        return None
    try:
        return [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise _fail(f"{option} must be a comma-separated list of integers, got {text!r}") from None


RpsOpt = Annotated[float | None, typer.Option("--requests-per-second", "--rps", help="arrival rate")]
UsersOpt = Annotated[
    int | None, typer.Option("--concurrent-users", help="requests in flight (instead of a rate)")
]
PromptOpt = Annotated[int, typer.Option(help="mean prompt tokens")]
OutputOpt = Annotated[int, typer.Option(help="mean output tokens")]
P95Opt = Annotated[int | None, typer.Option()]
SloOpt = Annotated[float | None, typer.Option()]
PercentileOpt = Annotated[
    str, typer.Option(help="where the SLOs are checked in the simulated distribution: p50, p99 or mean")
]
SpecConfigOpt = Annotated[
    str | None,
    typer.Option(
        help='JSON as vllm serve takes it, e.g. \'{"method": "eagle3", "model": ..., "num_speculative_tokens": 3}\''
    ),
]
AcceptanceOpt = Annotated[
    float | None,
    typer.Option(
        help="with --speculative-config: vLLM's 'Mean acceptance length' of the traffic (1 to 1 + "
        "num_speculative_tokens); default: the method's"
    ),
]


def _speculative_fields(speculative_config: str | None) -> dict[str, object]:
    from service.planning.cli_args import FlagError, json_object_value

    try:
        speculative = json_object_value("--speculative-config", speculative_config)
    except FlagError as exc:
        raise _fail(str(exc)) from None
    return {} if speculative is None else {"speculative_config": speculative}


@app.command()
def recommend(
    model: Annotated[str, typer.Option("--model", "-m")],
    gpu: Annotated[str, typer.Option("--gpu", "-g")],
    requests_per_second: RpsOpt = None,
    concurrent_users: UsersOpt = None,
    prompt_tokens: PromptOpt = 1024,
    output_tokens: OutputOpt = 256,
    prompt_tokens_p95: P95Opt = None,
    output_tokens_p95: P95Opt = None,
    ttft_slo: Annotated[float | None, typer.Option(help="p95 time-to-first-token SLO, seconds")] = None,
    tpot_slo: Annotated[float | None, typer.Option(help="time-per-output-token SLO, seconds")] = None,
    headroom: Annotated[float, typer.Option(help="capacity above demand (0.2 = 20 %)")] = 0.2,
    slo_percentile: PercentileOpt = "p99",
    tensor_parallel_sizes: Annotated[str | None, typer.Option("--tp", help="candidates, e.g. 1,2,4")] = None,
    engine: Annotated[str | None, typer.Option()] = None,
    max_model_len: Annotated[int | None, typer.Option()] = None,
    kv_cache_dtype: Annotated[str | None, typer.Option()] = None,
    quantization: Annotated[str | None, typer.Option("--quantization", "-q")] = None,
    max_num_seqs: Annotated[int | None, typer.Option(help="cap above vLLM's default only when given")] = None,
    speculative_config: SpecConfigOpt = None,
    spec_mean_acceptance_length: AcceptanceOpt = None,
    as_json: Annotated[bool, typer.Option("--json")] = False,
    server: Annotated[str | None, typer.Option()] = None,
) -> None:
    """Tensor-parallel size, max_num_seqs, replicas and cost for a workload. Exit 1 when nothing fits."""
    from pydantic import ValidationError

    from service.catalog.builtin import builtin_snapshot
    from service.errors import ServiceError
    from service.planning.recommendations import make_recommendation
    from service.planning.schemas import RecommendationOut, RecommendRequestBody
    from service.render import render_recommendation

    fields = {
        "model": model,
        "gpu": gpu,
        "engine": engine,
        "max_model_len": max_model_len,
        "kv_cache_dtype": kv_cache_dtype,
        "quantization": quantization,
        "max_num_seqs": max_num_seqs,
        "tensor_parallel_sizes": _int_list(tensor_parallel_sizes, "--tp"),
        "workload": _workload(
            requests_per_second,
            concurrent_users,
            prompt_tokens,
            output_tokens,
            prompt_tokens_p95,
            output_tokens_p95,
            ttft_slo,
            tpot_slo,
            headroom,
            slo_percentile,
            spec_mean_acceptance_length,
        ),
        **_speculative_fields(speculative_config),
    }
    try:
        body = RecommendRequestBody.model_validate(fields)
    except ValidationError as exc:
        raise _fail(_validation_message(exc)) from None
    if server:
        result = RecommendationOut.model_validate(
            _post(server, "/v1/plans/recommend", body.model_dump(mode="json", exclude_none=True))
        )
    else:
        try:
            result = make_recommendation(builtin_snapshot(), body)
        except ServiceError as exc:
            raise _fail(exc.message) from None
    if as_json:
        print(result.model_dump_json(indent=2))
    else:
        render_recommendation(_out(), result)
    raise typer.Exit(0 if result.recommended else 1)


@app.command()
def sweep(
    model: Annotated[str, typer.Option("--model", "-m")],
    requests_per_second: RpsOpt = None,
    concurrent_users: UsersOpt = None,
    prompt_tokens: PromptOpt = 1024,
    output_tokens: OutputOpt = 256,
    prompt_tokens_p95: P95Opt = None,
    output_tokens_p95: P95Opt = None,
    ttft_slo: SloOpt = None,
    tpot_slo: SloOpt = None,
    headroom: Annotated[float, typer.Option()] = 0.2,
    slo_percentile: PercentileOpt = "p99",
    gpus: Annotated[str | None, typer.Option(help="comma-separated catalog GPUs (default: all)")] = None,
    tensor_parallel_sizes: Annotated[str | None, typer.Option("--tp")] = None,
    engine: Annotated[str | None, typer.Option()] = None,
    max_model_len: Annotated[int | None, typer.Option()] = None,
    limit: Annotated[int, typer.Option(help="rows to show")] = 25,
    speculative_config: SpecConfigOpt = None,
    spec_mean_acceptance_length: AcceptanceOpt = None,
    as_json: Annotated[bool, typer.Option("--json")] = False,
    server: Annotated[str | None, typer.Option()] = None,
) -> None:
    """Rank every GPU × TP × KV dtype × quantization option by cost. Exit 1 when none serves the workload."""
    from pydantic import ValidationError

    from service.catalog.builtin import builtin_snapshot
    from service.errors import ServiceError
    from service.planning.recommendations import make_sweep
    from service.planning.schemas import SweepOut, SweepRequestBody
    from service.render import render_options

    fields = {
        "model": model,
        "engine": engine,
        "max_model_len": max_model_len,
        "limit": limit,
        "gpus": [g.strip() for g in gpus.split(",") if g.strip()] if gpus else None,
        "tensor_parallel_sizes": _int_list(tensor_parallel_sizes, "--tp"),
        "workload": _workload(
            requests_per_second,
            concurrent_users,
            prompt_tokens,
            output_tokens,
            prompt_tokens_p95,
            output_tokens_p95,
            ttft_slo,
            tpot_slo,
            headroom,
            slo_percentile,
            spec_mean_acceptance_length,
        ),
        **_speculative_fields(speculative_config),
    }
    try:
        body = SweepRequestBody.model_validate(fields)
    except ValidationError as exc:
        raise _fail(_validation_message(exc)) from None
    if server:
        result = SweepOut.model_validate(
            _post(server, "/v1/plans/sweep", body.model_dump(mode="json", exclude_none=True))
        )
    else:
        try:
            result = make_sweep(builtin_snapshot(), body)
        except ServiceError as exc:
            raise _fail(exc.message) from None
    if as_json:
        print(result.model_dump_json(indent=2))
    else:
        render_options(
            _out(),
            result.options,
            title=f"{result.model.name}: {result.feasible} of {result.evaluated} options serve the workload",
        )
    raise typer.Exit(0 if result.feasible else 1)


app.command("check")(check_command)
app.command("simulate")(simulate_command)
app.command("replan")(replan_command)


def main() -> None:
    try:
        app()
    except KeyboardInterrupt:
        sys.exit(130)


if __name__ == "__main__":
    main()
