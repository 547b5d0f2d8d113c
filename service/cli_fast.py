"""The ``kvcap`` entry point: offline ``kvcap plan`` and ``kvcap check`` answered before typer is imported.

Pipelines run ``kvcap check`` once per manifest, so a command's start-up is its cost, and importing typer (with
click and rich's traceback machinery) costs several times what the interpreter does. ``main`` reads the command
line itself when it is one of the plain forms of those two commands, offline: every option spelled as declared
in ``service.cli`` (``--name value``, ``--name=value`` for long names, ``-m value`` for short ones), values of
the declared types. It then runs the same command body the typer command runs (``run_plan``;
``service.admission.check_command.run_check``), so the output and the exit code are the command's own. Anything else — ``--help``, ``--server``, a typo, a
value typer would refuse, shell completion — goes to the typer app unchanged, which answers it as it always
has (its messages, help text and exit codes).

Exit codes (as ``service.cli``): 0 success; 1 the answer is "no"; 2 bad input or an environment problem.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pydantic import ValidationError
    from rich.console import Console

    from service.planning.schemas import PlanRequestBody, PlanResponse


class CommandError(Exception):
    """A command's refusal: ``message`` printed as ``error: …`` on stderr, then exit ``code``."""

    def __init__(self, message: str, code: int = 2) -> None:
        super().__init__(message)
        self.message = message
        self.code = code


def err_console() -> Console:
    from rich.console import Console

    return Console(stderr=True)


def out_console() -> Console:
    import shutil  # with bz2 and lzma: here only, for a plan's tables (``kvcap check`` never loads it)

    from rich.console import Console

    return Console(width=shutil.get_terminal_size((150, 24)).columns)


def print_error(message: str) -> None:
    err_console().print(f"[red]error:[/red] {message}", highlight=False)


def validation_message(exc: ValidationError) -> str:
    parts = []
    for error in exc.errors():
        loc = ".".join(str(p) for p in error["loc"])
        parts.append(f"{loc}: {error['msg']}")
    return "; ".join(parts)


def post_json(server: str, path: str, body: dict[str, object]) -> dict[str, object]:
    """Ask a kvcap server; its 4xx become a ``CommandError`` (exit 2) with the server's message."""
    import httpx

    try:
        response = httpx.post(server.rstrip("/") + path, json=body, timeout=30)
    except httpx.HTTPError as exc:
        raise CommandError(f"cannot reach {server}: {exc}") from None
    if response.status_code >= 400:
        try:
            detail = response.json().get("detail")
        except ValueError:
            detail = response.text[:500]
        raise CommandError(f"{server} answered {response.status_code}: {detail}")
    data: dict[str, object] = response.json()
    return data


# --- kvcap plan -------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class PlanOptions:
    """``kvcap plan``'s options, with typer's defaults (``service.cli.plan`` declares them)."""

    model: str | None = None
    hf_config: Path | None = None
    num_parameters: int | None = None
    gpu: str | None = None
    gpu_memory_bytes: int | None = None
    engine: str | None = None
    tensor_parallel_size: int = 1
    pipeline_parallel_size: int = 1
    pipeline_layer_partition: Sequence[int] | None = None
    pipeline_stage_gpus: Sequence[str] | None = None
    max_model_len: str | None = None
    kv_cache_dtype: str | None = None
    quantization: str | None = None
    dtype: str | None = None
    gpu_memory_utilization: float | None = None
    kv_cache_memory_bytes: int | None = None
    block_size: int | None = None
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    enforce_eager: bool = False
    disable_sliding_window: bool = False
    device: str = "cuda"
    mamba_cache_dtype: str | None = None
    mamba_ssm_cache_dtype: str | None = None
    cpu_avx512_bf16: bool = True
    features: Mapping[str, object] | None = None  # serving-feature fields (``cli_args.feature_fields``)
    prompt_tokens: int | None = None
    output_tokens: int | None = None
    as_json: bool = False
    server: str | None = None


def run_plan(options: PlanOptions) -> int:
    """``kvcap plan``: print the plan; the exit code (0 it starts, 1 it would not, 2 bad input).

    An offline plan whose every value is plainly valid is answered without the schemas (``offline_plan``);
    anything else, every refusal included, by the validated path (``_plan``), which words it."""
    try:
        code = offline_plan(options)
        return _plan(options) if code is None else code
    except CommandError as exc:
        print_error(exc.message)
        return exc.code


def _settings_fields(o: PlanOptions, length: int | str | None) -> dict[str, object]:
    """The plan settings a command line names, by their ``/v1/plans`` field names (both plan paths read them)."""
    return {
        "engine": o.engine,
        "tensor_parallel_size": o.tensor_parallel_size,
        "pipeline_parallel_size": o.pipeline_parallel_size,
        # The per-stage lists are read by the validated path only (``offline.PIPELINE_LIST_FIELDS``).
        "pipeline_layer_partition": o.pipeline_layer_partition,
        "pipeline_stage_gpus": o.pipeline_stage_gpus,
        "max_model_len": length,
        "kv_cache_dtype": o.kv_cache_dtype,
        "quantization": o.quantization,
        "dtype": o.dtype,
        "gpu_memory_utilization": o.gpu_memory_utilization,
        "kv_cache_memory_bytes": o.kv_cache_memory_bytes,
        "block_size": o.block_size,
        "max_num_seqs": o.max_num_seqs,
        "max_num_batched_tokens": o.max_num_batched_tokens,
        "enforce_eager": o.enforce_eager,
        "disable_sliding_window": o.disable_sliding_window,
        "device": o.device,
        "mamba_cache_dtype": o.mamba_cache_dtype,
        "mamba_ssm_cache_dtype": o.mamba_ssm_cache_dtype,
        "cpu_avx512_bf16": o.cpu_avx512_bf16,
    }


def offline_plan(o: PlanOptions) -> int | None:
    """``_plan``'s output and exit code for a plain offline plan, without pydantic; ``None`` for ``_plan``."""
    from service.planning.cli_args import FlagError, max_model_len_value
    from service.planning.offline import plain_reference, plain_settings, plain_tokens

    if o.server or o.hf_config is not None or o.gpu_memory_bytes is not None or o.features:
        return None
    model, gpu = plain_reference(o.model), plain_reference(o.gpu) if o.gpu is not None else None
    if model is None or (o.gpu is not None and gpu is None):
        return None
    try:
        length = max_model_len_value(o.max_model_len)
    except FlagError:
        return None
    settings = plain_settings(_settings_fields(o, length))
    if settings is None or not plain_tokens(o.prompt_tokens) or not plain_tokens(o.output_tokens):
        return None
    from service.catalog.offline import offline_snapshot
    from service.planning.offline import OfflinePlanner, dump_json

    planner = OfflinePlanner(snapshot=offline_snapshot(), model=model, gpu=gpu)
    first = planner.plan(settings, prompt_tokens=o.prompt_tokens, output_tokens=o.output_tokens)
    if first is None:
        return None
    if o.as_json:
        print(dump_json(first.data))  # noqa: T201 (the command's output)
    else:
        from service.planning.offline import view
        from service.render import render_capacity_curve, render_plan

        def at(length: int | None) -> Any:
            answer = planner.plan(dataclasses.replace(settings, max_model_len=length))
            return view(answer.data) if answer is not None else None

        result = view(first.data)
        console = out_console()
        render_plan(console, result)
        render_capacity_curve(console, _capacity_rows(result, settings.max_model_len is None, at))
    return 0 if first.fits else 1


def _plan(o: PlanOptions) -> int:
    from pydantic import ValidationError

    from service.catalog.builtin import builtin_snapshot
    from service.core.errors import CoreError
    from service.errors import ServiceError
    from service.planning.cli_args import FlagError, max_model_len_value, model_reference
    from service.planning.schemas import InlineGpu, PlanRequestBody, PlanResponse
    from service.planning.service import make_plan
    from service.render import render_capacity_curve, render_plan

    try:
        model_ref = model_reference(o.model, o.hf_config, o.num_parameters)
        length = max_model_len_value(o.max_model_len)
    except FlagError as exc:
        raise CommandError(str(exc)) from None
    gpu_ref: str | InlineGpu | None = o.gpu
    if o.gpu_memory_bytes is not None:
        gpu_ref = InlineGpu(memory_bytes=o.gpu_memory_bytes, name=o.gpu or "custom")
    fields: dict[str, object] = {
        "model": model_ref,
        "gpu": gpu_ref,
        **_settings_fields(o, length),
        "prompt_tokens": o.prompt_tokens,
        "output_tokens": o.output_tokens,
        **(o.features or {}),
    }
    try:
        body = PlanRequestBody.model_validate(fields)
    except ValidationError as exc:
        raise CommandError(validation_message(exc)) from None
    if o.server:
        result = PlanResponse.model_validate(
            post_json(o.server, "/v1/plans", body.model_dump(mode="json", exclude_none=True))
        )
    else:
        try:
            result = make_plan(builtin_snapshot(), body)
        except (ServiceError, CoreError) as exc:
            raise CommandError(str(exc.message if isinstance(exc, ServiceError) else exc)) from None
    if o.as_json:
        print(result.model_dump_json(indent=2))  # noqa: T201 (the command's output)
    else:
        console = out_console()
        render_plan(console, result)
        render_capacity_curve(console, capacity_rows(body, result, o.server))
    return 0 if result.fits else 1


def capacity_lengths(max_model_len: int, model_max: int) -> list[int]:
    """Context lengths for the capacity table: powers of two from 2,048 up to the model's maximum, and the
    current setting."""
    lengths = {max_model_len, model_max}
    length = 2048
    while length < model_max:
        lengths.add(length)
        length *= 2
    return sorted(lengths)[-8:]


def capacity_rows(
    body: PlanRequestBody, result: PlanResponse, server: str | None
) -> list[tuple[int, PlanResponse]]:
    """The same plan at other ``max_model_len`` values, as the planner answers each (offline or the server)."""
    from service.catalog.builtin import builtin_snapshot
    from service.core.errors import CoreError
    from service.errors import ServiceError
    from service.planning.schemas import PlanResponse
    from service.planning.service import make_plan

    def at(length: int | None) -> PlanResponse | None:
        changed = body.model_copy(
            update={"max_model_len": length, "prompt_tokens": None, "output_tokens": None}
        )
        try:
            if server:
                return PlanResponse.model_validate(
                    post_json(server, "/v1/plans", changed.model_dump(mode="json", exclude_none=True))
                )
            return make_plan(builtin_snapshot(), changed)
        except (ServiceError, CoreError, CommandError):
            return None

    return _capacity_rows(result, body.max_model_len is None, at)


def _capacity_rows(result: Any, at_default: bool, at: Callable[[int | None], Any]) -> list[tuple[int, Any]]:
    """``(max_model_len, plan)`` rows for the capacity table: ``at(length)`` plans at another length (``None``:
    the model's default), or ``None`` where that plan is refused; ``at_default``: ``result`` is that default."""
    default = result if at_default else at(None)
    model_max = default.settings.max_model_len if default is not None else result.settings.max_model_len
    rows: list[tuple[int, Any]] = []
    for length in capacity_lengths(result.settings.max_model_len, model_max):
        answer = result if length == result.settings.max_model_len else at(length)
        if answer is not None:
            rows.append((length, answer))
    return rows


# --- the command line, read before typer --------------------------------------------------------------------

_PLAN_VALUES: dict[str, tuple[str, Callable[[str], Any]]] = {
    "--model": ("model", str),
    "-m": ("model", str),
    "--hf-config": ("hf_config", Path),
    "--num-parameters": ("num_parameters", int),
    "--gpu": ("gpu", str),
    "-g": ("gpu", str),
    "--gpu-memory-bytes": ("gpu_memory_bytes", int),
    "--engine": ("engine", str),
    "--tensor-parallel-size": ("tensor_parallel_size", int),
    "-tp": ("tensor_parallel_size", int),
    "--pipeline-parallel-size": ("pipeline_parallel_size", int),
    "-pp": ("pipeline_parallel_size", int),
    "--max-model-len": ("max_model_len", str),
    "--kv-cache-dtype": ("kv_cache_dtype", str),
    "--quantization": ("quantization", str),
    "-q": ("quantization", str),
    "--dtype": ("dtype", str),
    "--gpu-memory-utilization": ("gpu_memory_utilization", float),
    "--kv-cache-memory-bytes": ("kv_cache_memory_bytes", int),
    "--block-size": ("block_size", int),
    "--max-num-seqs": ("max_num_seqs", int),
    "--max-num-batched-tokens": ("max_num_batched_tokens", int),
    "--device": ("device", str),
    "--mamba-cache-dtype": ("mamba_cache_dtype", str),
    "--mamba-ssm-cache-dtype": ("mamba_ssm_cache_dtype", str),
    "--prompt-tokens": ("prompt_tokens", int),
    "--output-tokens": ("output_tokens", int),
}
_PLAN_FLAGS = {
    "--enforce-eager": "enforce_eager",
    "--disable-sliding-window": "disable_sliding_window",
    "--json": "as_json",
}
_CHECK_FILES = ("--filename", "-f", "--file")


class _NotPlain(Exception):
    """The command line is not one the fast path reads: the typer app answers it."""


def _options(
    args: Sequence[str], values: Mapping[str, tuple[str, Callable[[str], Any]]], flags: Mapping[str, str]
) -> list[tuple[str, Any]]:
    """``[(field, value)]`` in the order given; ``_NotPlain`` for anything typer should judge."""
    out: list[tuple[str, Any]] = []
    i = 0
    while i < len(args):
        arg = args[i]
        name, inline = arg, None
        if arg.startswith("--") and "=" in arg:
            name, inline = arg.split("=", 1)
        if name in flags and inline is None:
            out.append((flags[name], True))
            i += 1
            continue
        if name not in values:
            raise _NotPlain(arg)
        if inline is None:
            if i + 1 >= len(args) or (args[i + 1].startswith("-") and args[i + 1] != "-"):
                raise _NotPlain(arg)
            inline, i = args[i + 1], i + 2
        else:
            i += 1
        field, convert = values[name]
        try:
            out.append((field, convert(inline)))
        except ValueError:
            raise _NotPlain(arg) from None
    return out


def _plain_plan(args: Sequence[str]) -> PlanOptions:
    given = _options(args, _PLAN_VALUES, _PLAN_FLAGS)
    fields = dict(given)
    if len(fields) != len(given):  # an option given twice: typer's rule (the last wins) is not re-stated here
        raise _NotPlain("repeated option")
    return PlanOptions(**fields)


def _plain_check(args: Sequence[str]) -> tuple[list[str], bool]:
    values = dict.fromkeys(_CHECK_FILES, ("filename", str))
    given = _options(args, values, {"--json": "as_json"})
    files = [value for field, value in given if field == "filename"]
    flags = [field for field, _ in given if field == "as_json"]
    if not files or len(flags) > 1:
        raise _NotPlain("no --filename")
    return files, bool(flags)


def fast_path(argv: Sequence[str]) -> int | None:
    """The exit code of an offline ``plan`` / ``check`` answered here, or ``None`` for the typer app."""
    if not argv or any(name.startswith("_KVCAP_COMPLETE") for name in os.environ):
        return None
    command, args = argv[0], argv[1:]
    if any(arg in ("--help", "-h", "--") for arg in args):
        return None
    try:
        if command == "plan":
            return run_plan(_plain_plan(args))
        if command == "check":
            from service.admission.check_command import run_check

            files, as_json = _plain_check(args)
            return run_check(files, as_json=as_json)
    except _NotPlain:
        return None
    return None


def main() -> None:
    """``kvcap``: the fast path for offline plan/check, the typer app for everything else."""
    try:
        code = fast_path(sys.argv[1:])
    except KeyboardInterrupt:
        sys.exit(130)
    if code is not None:
        sys.exit(code)
    from service.cli import main as typer_main

    typer_main()


if __name__ == "__main__":
    main()
