"""``kvcap simulate``: ``vllm bench serve`` against a simulated replica, printed the way vLLM prints it.

Only typer and the standard library are imported at module level; the catalog, the planner and the simulator
are imported when the command runs, so ``kvcap --help`` and the other commands do not pay for them.

Exit codes as for ``kvcap plan``: 0 a result, 2 bad input (a message naming the flag or field).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

Opt = typer.Option


def _rate(text: str) -> float | str:
    if text.strip().lower() == "inf":
        return "inf"
    try:
        return float(text)
    except ValueError:
        raise typer.BadParameter(f"a number of requests per second or 'inf', got {text!r}") from None


def _levels(text: str) -> list[int]:
    """``1,2,4,8`` → [1, 2, 4, 8]: each a --max-concurrency for one simulation of the load curve."""
    try:
        levels = [int(part) for part in text.replace(" ", "").split(",") if part]
    except ValueError:
        raise _fail(f"--sweep-concurrency: whole numbers separated by commas, got {text!r}") from None
    if not levels or any(level < 1 for level in levels) or len(levels) > 16:
        raise _fail(f"--sweep-concurrency: 1 to 16 values, each ≥ 1, got {text!r}")
    return sorted(set(levels))


def _fail(message: str, code: int = 2) -> typer.Exit:
    typer.echo(f"error: {message}", err=True)
    return typer.Exit(code)


def _validation_message(exc: Any) -> str:
    return "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors())


def _post(server: str, body: dict[str, Any]) -> dict[str, Any]:
    """Ask a kvcap server; its 4xx become exit 2 with the server's message."""
    import httpx

    try:
        response = httpx.post(server.rstrip("/") + "/v1/simulations", json=body, timeout=120)
    except httpx.HTTPError as exc:
        raise _fail(f"cannot reach {server}: {exc}") from None
    if response.status_code >= 400:
        try:
            detail = response.json().get("detail")
        except ValueError:
            detail = response.text[:500]
        raise _fail(f"{server} answered {response.status_code}: {detail}")
    data: dict[str, Any] = response.json()
    return data


def simulate_command(
    model: Annotated[str | None, Opt("--model", "-m", help="catalog name or Hugging Face id")] = None,
    hf_config: Annotated[Path | None, Opt(help="a config.json instead of --model")] = None,
    num_parameters: Annotated[int | None, Opt(help="parameter count for --hf-config")] = None,
    gpu: Annotated[
        str | None, Opt("--gpu", "-g", help="catalog name or nvidia.com/gpu.product label")
    ] = None,
    engine: Annotated[str | None, Opt(help="'ideal' or vllm-X.Y (default: newest known)")] = None,
    tensor_parallel_size: Annotated[int, Opt("--tensor-parallel-size", "-tp")] = 1,
    pipeline_parallel_size: Annotated[int, Opt("--pipeline-parallel-size", "-pp")] = 1,
    max_model_len: Annotated[str | None, Opt(help="tokens, or 'auto'")] = None,
    kv_cache_dtype: Annotated[str | None, Opt()] = None,
    quantization: Annotated[str | None, Opt("--quantization", "-q")] = None,
    dtype: Annotated[str | None, Opt()] = None,
    gpu_memory_utilization: Annotated[float | None, Opt()] = None,
    kv_cache_memory_bytes: Annotated[int | None, Opt()] = None,
    block_size: Annotated[int | None, Opt()] = None,
    max_num_seqs: Annotated[int | None, Opt()] = None,
    max_num_batched_tokens: Annotated[int | None, Opt()] = None,
    enforce_eager: Annotated[bool, Opt("--enforce-eager")] = False,
    disable_sliding_window: Annotated[bool, Opt("--disable-sliding-window")] = False,
    no_gpu_p2p: Annotated[
        bool, Opt("--no-gpu-p2p", help="the TP GPUs lack P2P (vLLM logs: custom allreduce is disabled)")
    ] = False,
    device: Annotated[str, Opt(help="cuda, rocm or cpu")] = "cuda",
    dataset_name: Annotated[str, Opt(help="random or sharegpt (as vllm bench serve)")] = "random",
    num_prompts: Annotated[int, Opt(help="requests to send")] = 1000,
    request_rate: Annotated[str, Opt(help="requests/s, or 'inf' for all at once")] = "inf",
    burstiness: Annotated[float, Opt(help="gamma shape of arrival gaps; 1 = Poisson")] = 1.0,
    max_concurrency: Annotated[int | None, Opt(help="client-side cap on requests in flight")] = None,
    random_input_len: Annotated[int, Opt()] = 1024,
    random_output_len: Annotated[int, Opt()] = 128,
    random_range_ratio: Annotated[float, Opt()] = 0.0,
    random_prefix_len: Annotated[int, Opt()] = 0,
    seed: Annotated[int, Opt()] = 0,
    ready_check_timeout_sec: Annotated[
        int | None,
        Opt(
            help="> 0: the first prompt is sent once before the run (primes the prefix cache); default: the release's"
        ),
    ] = None,
    num_warmups: Annotated[int, Opt(help="the first prompt sent this many times before the run")] = 0,
    speculative_config: Annotated[
        str | None,
        Opt(
            help='JSON as vllm serve takes it, e.g. \'{"method": "eagle3", "model": ..., "num_speculative_tokens": 3}\''
        ),
    ] = None,
    spec_mean_acceptance_length: Annotated[
        float | None,
        Opt(
            help="with --speculative-config: vLLM's 'Mean acceptance length' of the workload; default: the method's"
        ),
    ] = None,
    as_json: Annotated[bool, Opt("--json", help="print the whole simulation as JSON")] = False,
    save_result: Annotated[
        Path | None, Opt(help="write vLLM's --save-result JSON (diff it against a real run)")
    ] = None,
    server: Annotated[str | None, Opt(help="ask a kvcap server instead of the built-in catalog")] = None,
    sweep_concurrency: Annotated[
        str | None,
        Opt(help="comma-separated --max-concurrency values: draw the load curve, one simulation each"),
    ] = None,
) -> None:
    """Predict what `vllm bench serve` measures for a model on a GPU. Exit 2 for bad input."""
    from service.planning.cli_args import FlagError, json_object_value, max_model_len_value, model_reference

    try:
        model_ref = model_reference(model, hf_config, num_parameters)
        length = max_model_len_value(max_model_len)
        speculative = json_object_value("--speculative-config", speculative_config)
    except FlagError as exc:
        raise _fail(str(exc)) from None
    try:
        rate = _rate(request_rate)
    except typer.BadParameter as exc:
        raise _fail(f"--request-rate: {exc}") from None
    fields: dict[str, Any] = {
        "model": model_ref,
        "gpu": gpu,
        "engine": engine,
        "tensor_parallel_size": tensor_parallel_size,
        "pipeline_parallel_size": pipeline_parallel_size,
        "max_model_len": length,
        "kv_cache_dtype": kv_cache_dtype,
        "quantization": quantization,
        "dtype": dtype,
        "gpu_memory_utilization": gpu_memory_utilization,
        "kv_cache_memory_bytes": kv_cache_memory_bytes,
        "block_size": block_size,
        "max_num_seqs": max_num_seqs,
        "max_num_batched_tokens": max_num_batched_tokens,
        "enforce_eager": enforce_eager,
        "disable_sliding_window": disable_sliding_window,
        "device": device,
        "gpu_peer_to_peer": not no_gpu_p2p,
        "benchmark": {
            "dataset_name": dataset_name,
            "num_prompts": num_prompts,
            "request_rate": rate,
            "burstiness": burstiness,
            "max_concurrency": max_concurrency,
            "random_input_len": random_input_len,
            "random_output_len": random_output_len,
            "random_range_ratio": random_range_ratio,
            "random_prefix_len": random_prefix_len,
            "seed": seed,
            "ready_check_timeout_sec": ready_check_timeout_sec,
            "num_warmups": num_warmups,
            "spec_mean_acceptance_length": spec_mean_acceptance_length,
        },
    }
    if speculative is not None:
        fields["speculative_config"] = speculative
    from pydantic import ValidationError

    from service.planning.schemas import SimulationOut, SimulationRequestBody

    try:
        body = SimulationRequestBody.model_validate(fields)
    except ValidationError as exc:
        raise _fail(_validation_message(exc)) from None

    def run(request: SimulationRequestBody) -> SimulationOut:
        if server:
            return SimulationOut.model_validate(
                _post(server, request.model_dump(mode="json", exclude_none=True))
            )
        from service.catalog.builtin import builtin_snapshot
        from service.errors import ServiceError
        from service.planning.simulations import make_simulation

        try:
            return make_simulation(builtin_snapshot(), request)
        except ServiceError as exc:
            raise _fail(exc.message) from None

    if sweep_concurrency is not None:
        levels = _levels(sweep_concurrency)
        curve = [
            (
                level,
                run(
                    body.model_copy(
                        update={"benchmark": body.benchmark.model_copy(update={"max_concurrency": level})}
                    )
                ),
            )
            for level in levels
        ]
        if as_json:
            points = [{"max_concurrency": level, "result": out.result.model_dump()} for level, out in curve]
            sys.stdout.write(json.dumps(points, indent=2) + "\n")
            return
        from rich.console import Console

        from service.render import render_load_curve

        render_load_curve(Console(), curve, gpus=tensor_parallel_size * pipeline_parallel_size)
        return
    out = run(body)
    from service.planning.simulations import vllm_result_json, vllm_summary

    if save_result is not None:
        document = vllm_result_json(out, model_id=model or out.plan.model.name)
        try:
            save_result.write_text(json.dumps(document) + "\n")
        except OSError as exc:
            raise _fail(f"cannot write {save_result}: {exc}") from None
    if as_json:
        sys.stdout.write(out.model_dump_json(indent=2) + "\n")
        return
    notes = [f"note: {message}" for message in out.messages]
    band = f"predicted by kvcap's simulator, ±{out.error_band.ratio:.0%} (held-back median error)"
    sys.stdout.write("\n".join([vllm_summary(out), *notes, band]) + "\n")
