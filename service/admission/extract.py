"""Kubernetes manifest → what vLLM will run with: model, capacity flags, GPUs, GPU type, replicas, promises.

The boundary: a manifest as parsed from JSON or YAML (plain dicts) goes in; ``ExtractedWorkload`` comes out, with
one ``ExtractedServing`` per vLLM container. Nothing here knows the catalog or the planner, so names stay as the
user wrote them (``meta-llama/Llama-3.1-8B-Instruct``, ``NVIDIA-L4``); ``policy`` resolves them.

What is read, and where it comes from:

* **The command line.** Kubernetes runs ``command + args`` (``args`` alone follow the image's entrypoint, which is
  ``vllm serve`` in ``vllm/vllm-openai``). ``$(VAR)`` references are expanded from the container's ``env`` the
  way the kubelet does; values from ``valueFrom``/``envFrom`` are invisible here and make the flags that use them
  *unresolved* (kvcap says so instead of guessing). ``sh -c "…"`` scripts are split with ``shlex``; ``$VAR`` and
  ``${VAR:-default}`` are expanded from the same env and from ``export VAR=…`` earlier in the script. vLLM is
  found as ``vllm serve [MODEL]``, ``python -m vllm.entrypoints.openai.api_server`` or KServe's
  ``huggingfaceserver``; flags are read in both ``--flag=value`` and ``--flag value`` forms, with ``_`` or ``-``
  (vLLM's ``FlexibleArgumentParser`` accepts both), ``-tp``/``-pp``/``-dp``/``-q`` short forms and vLLM's
  human-readable integers (``32k`` = 32,000, ``32K`` = 32,768); the last occurrence wins, as with argparse.
* **GPUs per replica.** The vLLM container's ``nvidia.com/gpu`` or ``amd.com/gpu`` limits (requests when no
  limits): a process sees only its own container's devices. A LeaderWorkerSet group is one replica: leader +
  (size − 1) × the worker pod's GPUs, because tensor × pipeline parallelism spans the group through Ray.
* **GPU type.** ``nvidia.com/gpu.product`` (or AMD's / GKE's / Karpenter's equivalent) in the node selector, or
  in a required node-affinity term with ``In``; several values are all kept (policy checks the smallest). The
  annotation ``kvcap.io/gpu`` fills the gap when no label pins the type.
* **Engine.** ``vllm/vllm-openai:vX.Y.Z`` → ``vllm-X.Y``; ``kvcap.io/engine`` overrides; otherwise the newest
  release kvcap knows.
* **Annotations** (on the object, falling back to its pod template): ``kvcap.io/model``, ``kvcap.io/gpu``,
  ``kvcap.io/engine``, ``kvcap.io/min-concurrency`` (concurrent requests promised *per replica*),
  ``kvcap.io/context-tokens`` (the request length that promise is about) and ``kvcap.io/skip`` (annotation or
  label). A **traffic promise** is checked with the serving simulator: ``kvcap.io/requests-per-second`` (the
  whole workload's rate, shared by its replicas), ``kvcap.io/prompt-tokens`` and ``kvcap.io/output-tokens``
  (mean lengths; 1,024 and 256 when not given), ``kvcap.io/ttft-slo-ms``, ``kvcap.io/tpot-slo-ms`` and
  ``kvcap.io/slo-percentile`` (``p50``, ``p99`` — the default — or ``mean``).
"""

from __future__ import annotations

import json
import math
import posixpath
import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import Any

from service.core.bounds import MAX_CONTEXT_TOKENS, MAX_PARALLEL_SIZE

ANNOTATION_MODEL = "kvcap.io/model"
ANNOTATION_GPU = "kvcap.io/gpu"
ANNOTATION_ENGINE = "kvcap.io/engine"
ANNOTATION_MIN_CONCURRENCY = "kvcap.io/min-concurrency"
ANNOTATION_CONTEXT_TOKENS = "kvcap.io/context-tokens"
ANNOTATION_SKIP = "kvcap.io/skip"
ANNOTATION_REQUESTS_PER_SECOND = "kvcap.io/requests-per-second"
ANNOTATION_PROMPT_TOKENS = "kvcap.io/prompt-tokens"
ANNOTATION_OUTPUT_TOKENS = "kvcap.io/output-tokens"
ANNOTATION_TTFT_SLO_MS = "kvcap.io/ttft-slo-ms"
ANNOTATION_TPOT_SLO_MS = "kvcap.io/tpot-slo-ms"
ANNOTATION_SLO_PERCENTILE = "kvcap.io/slo-percentile"
# Speculative decoding: the traffic's mean acceptance length (1 + accepted drafts per step, as vLLM's
# ``vllm:spec_decode_num_accepted_tokens`` / ``vllm:spec_decode_num_drafts`` + 1 reads on the running fleet).
ANNOTATION_SPEC_ACCEPTANCE = "kvcap.io/spec-mean-acceptance-length"
TRAFFIC_ANNOTATIONS = (
    ANNOTATION_REQUESTS_PER_SECOND,
    ANNOTATION_PROMPT_TOKENS,
    ANNOTATION_OUTPUT_TOKENS,
    ANNOTATION_TTFT_SLO_MS,
    ANNOTATION_TPOT_SLO_MS,
    ANNOTATION_SLO_PERCENTILE,
    ANNOTATION_SPEC_ACCEPTANCE,
)

# The largest promise kvcap checks: ``concurrent_users`` on ``/v1/plans/recommend`` has the same ceiling.
MAX_MIN_CONCURRENCY = 10_000_000
# The largest traffic promise (requests/s for the whole workload) and SLO (ms) kvcap checks.
MAX_REQUESTS_PER_SECOND = 1_000_000.0
MAX_SLO_MS = 3_600_000.0
SLO_PERCENTILES = ("p50", "p99", "mean")

GPU_RESOURCES = ("nvidia.com/gpu", "amd.com/gpu")
# Node labels that name the GPU model: the NVIDIA GPU operator's GPU feature discovery, AMD's device-plugin
# labeller, GKE, and Karpenter on AWS.
GPU_PRODUCT_LABELS = (
    "nvidia.com/gpu.product",
    "amd.com/gpu.product-name",
    "cloud.google.com/gke-accelerator",
    "karpenter.k8s.aws/instance-gpu-name",
)

# Labels set by controllers whose own object kvcap reviews with the whole picture (the LWS group size, the
# InferenceService's replicas): their pods and deployments are not judged a second time out of context.
_OWNER_LABELS = {
    "leaderworkerset.sigs.k8s.io/name": "LeaderWorkerSet",
    "serving.kserve.io/inferenceservice": "InferenceService",
}
_REVIEWED_OWNERS = frozenset({"ReplicaSet", "StatefulSet", "LeaderWorkerSet"})

_POD_TEMPLATE_KINDS = frozenset({"Deployment", "StatefulSet", "ReplicaSet", "DaemonSet", "Job"})
_SHELLS = frozenset({"sh", "bash", "dash", "ash", "zsh", "ksh"})
_TRUE = frozenset({"true", "yes", "1", "on"})
_FALSE = frozenset({"false", "no", "0", "off"})

# Marks a value the kubelet or the shell fills in from somewhere kvcap cannot see.
_HOLE = "\x00"


# --- results -------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class ExtractedServing:
    """One vLLM server as the manifest configures it (names unresolved, values typed as vLLM parses them)."""

    container: str
    image: str | None = None
    model: str | None = None
    model_source: str | None = None  # "--model", "positional", "storageUri", "--model_id"
    # ``PlanSettings`` field names → typed values (int, float, bool, str or "auto").
    flags: Mapping[str, Any] = field(default_factory=dict)
    data_parallel_size: int = 1
    gpus: int | None = None  # GPUs one replica can use; None: the container requests none
    gpu_resource: str | None = None
    gpus_detail: str = ""  # "the pod requests 2 nvidia.com/gpu"
    gpu_products: tuple[str, ...] = ()
    gpu_product_source: str | None = None
    engine: str | None = None  # "vllm-0.10" from the image tag
    allow_long_max_model_len: bool = False  # VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 in the env
    unresolved: tuple[str, ...] = ()  # "--tensor-parallel-size $(TP)": values kvcap cannot see
    problems: tuple[str, ...] = ()  # flags vLLM would refuse to parse, GPU counts Kubernetes would reject
    notes: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class TrafficPromise:
    """``kvcap.io/requests-per-second`` and its SLOs: the rate the whole workload (all replicas) must sustain."""

    requests_per_second: float
    prompt_tokens: int = 1024
    output_tokens: int = 256
    ttft_seconds: float | None = None
    tpot_seconds: float | None = None
    slo_percentile: str = "p99"
    spec_mean_acceptance_length: float | None = None  # None: the speculative method's default

    @property
    def text(self) -> str:
        """``12 req/s of 1,024-token prompts and 256-token outputs within p99 TTFT ≤ 500 ms``."""
        slos = []
        if self.ttft_seconds is not None:
            slos.append(f"TTFT ≤ {self.ttft_seconds * 1e3:g} ms")
        if self.tpot_seconds is not None:
            slos.append(f"TPOT ≤ {self.tpot_seconds * 1e3:g} ms")
        within = f" within {self.slo_percentile} " + " and ".join(slos) if slos else ""
        accepted = self.spec_mean_acceptance_length
        drafts = f" at mean acceptance length {accepted:g}" if accepted is not None else ""
        return (
            f"{self.requests_per_second:g} req/s of {self.prompt_tokens:,}-token prompts and "
            f"{self.output_tokens:,}-token outputs{drafts}{within}"
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class ExtractedWorkload:
    kind: str
    api_version: str
    namespace: str | None
    name: str | None
    replicas: int | None
    servings: tuple[ExtractedServing, ...] = ()
    skip: str | None = None  # why nothing is checked (kvcap.io/skip, not a vLLM workload, …)
    model_annotation: str | None = None
    gpu_annotation: str | None = None
    engine_annotation: str | None = None
    min_concurrency: float | None = None  # promised concurrent requests per replica
    context_tokens: int | None = None  # … of this many tokens each (default: the effective max_model_len)
    traffic: TrafficPromise | None = None  # requests/s within SLOs, checked with the serving simulator
    problems: tuple[str, ...] = ()  # malformed kvcap.io/* annotations
    notes: tuple[str, ...] = ()

    @property
    def ref(self) -> str:
        name = self.name or "(unnamed)"
        return f"{self.kind} {self.namespace}/{name}" if self.namespace else f"{self.kind} {name}"


# --- small readers -------------------------------------------------------------------------------------------


def _map(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _list(value: object) -> list[Any]:
    return value if isinstance(value, list) else []


def _strings(value: object) -> list[str]:
    return [str(v) for v in _list(value) if isinstance(v, str | int | float)]


_HUMAN_INT = re.compile(r"(\d+(?:\.\d+)?)([kKmMgGtT])")


def parse_human_int(text: str) -> int:
    """vLLM's ``human_readable_int``: ``25.6k`` → 25,600 (decimal k/m/g/t), ``32K`` → 32,768 (binary K/M/G/T).

    Thousands separators (``131,072``, ``131_072``) are accepted too: annotations are written by people.
    """
    value = text.strip().replace(",", "").replace("_", "")
    match = _HUMAN_INT.fullmatch(value)
    if match:
        number, suffix = match.groups()
        if suffix.islower():
            scaled = float(number) * 10 ** (3 * ("kmgt".index(suffix) + 1))
            if not math.isfinite(scaled):  # "9999…9k" with hundreds of digits: inf, not a number of tokens
                raise ValueError(f"{text!r} is too large")
            return int(scaled)
        if "." in number:
            raise ValueError(f"binary suffix {suffix} needs a whole number, got {text!r}")
        return int(number) * (1 << (10 * ("KMGT".index(suffix) + 1)))
    return int(value)


# --- vLLM command lines --------------------------------------------------------------------------------------

# flag (dashes, no "=") → (PlanSettings field or a pseudo field, value type)
_VALUE_FLAGS: dict[str, tuple[str, str]] = {
    "--model": ("model", "str"),
    "--model-id": ("model", "str"),  # KServe huggingfaceserver
    "--tensor-parallel-size": ("tensor_parallel_size", "int"),
    "-tp": ("tensor_parallel_size", "int"),
    "--pipeline-parallel-size": ("pipeline_parallel_size", "int"),
    "-pp": ("pipeline_parallel_size", "int"),
    "--data-parallel-size": ("data_parallel_size", "int"),
    "-dp": ("data_parallel_size", "int"),
    "--max-model-len": ("max_model_len", "len"),
    "--gpu-memory-utilization": ("gpu_memory_utilization", "float"),
    "--kv-cache-dtype": ("kv_cache_dtype", "str"),
    "--quantization": ("quantization", "str"),
    "-q": ("quantization", "str"),
    "--max-num-seqs": ("max_num_seqs", "int"),
    "--max-num-batched-tokens": ("max_num_batched_tokens", "int"),
    "--block-size": ("block_size", "int"),
    "--kv-cache-memory-bytes": ("kv_cache_memory_bytes", "int"),
    "--num-gpu-blocks-override": ("num_gpu_blocks_override", "int"),
    "--dtype": ("dtype", "dtype"),
    "--device": ("device", "str"),
    # Serving features that change what vLLM allocates (``vllm/engine/arg_utils.py`` flag names)
    "--speculative-config": ("speculative_config", "json"),
    "--max-loras": ("max_loras", "int"),
    "--max-lora-rank": ("max_lora_rank", "int"),
    "--max-cpu-loras": ("max_cpu_loras", "int"),
    "--lora-extra-vocab-size": ("lora_extra_vocab_size", "int"),
    "--cpu-offload-gb": ("cpu_offload_gb", "float"),
    "--kv-transfer-config": ("kv_transfer_config", "json"),
    "--kv-offloading-size": ("kv_offloading_size", "float"),
    "--kv-offloading-backend": ("kv_offloading_backend", "str"),
    "--limit-mm-per-prompt": ("limit_mm_per_prompt", "json"),
    "--mm-processor-kwargs": ("mm_processor_kwargs", "json"),
    "--mamba-cache-dtype": ("mamba_cache_dtype", "str"),
    "--mamba-ssm-cache-dtype": ("mamba_ssm_cache_dtype", "str"),
    "--backend": ("backend", "str"),  # KServe huggingfaceserver: vllm | huggingface | auto
    "--config": ("config", "str"),  # a YAML of flags kvcap cannot read
}
_BOOL_FLAGS: dict[str, str] = {
    "--enforce-eager": "enforce_eager",
    "--disable-sliding-window": "disable_sliding_window",
    "--async-scheduling": "async_scheduling",
    "--enable-prefix-caching": "enable_prefix_caching",
    "--enable-chunked-prefill": "enable_chunked_prefill",
    "--enable-lora": "enable_lora",
    "--enable-expert-parallel": "enable_expert_parallel",
    "-ep": "enable_expert_parallel",
}
# The keys of vLLM's JSON-valued flags that change memory; the others (``prompt_lookup_max``, ``kv_port`` …)
# are dropped with a note, since they change nothing kvcap plans.
_JSON_KEYS: dict[str, frozenset[str] | None] = {
    "speculative_config": frozenset(
        {"method", "model", "num_speculative_tokens", "draft_tensor_parallel_size"}
    ),
    "kv_transfer_config": frozenset({"kv_connector", "kv_role", "kv_connector_extra_config"}),
    "limit_mm_per_prompt": None,  # every key (a modality) counts
    "mm_processor_kwargs": None,
}
_JSON_FLAGS = {flag: target for flag, (target, kind) in _VALUE_FLAGS.items() if kind == "json"}
# Flags that take several values (argparse nargs="+"): they swallow words up to the next flag.
_MULTI_VALUE_FLAGS = frozenset({"--served-model-name", "--lora-modules", "--prompt-adapters"})
# Known switches without a value; with the --enable-/--disable-/--no- prefixes this keeps a positional model
# after a switch from being mistaken for the switch's value.
_SWITCHES = frozenset(
    {
        "--trust-remote-code",
        "--headless",
        "--skip-tokenizer-init",
        "--use-tqdm-on-load",
        "--return-tokens-as-token-ids",
        "--allow-credentials",
        "--kv-sharing-fast-prefill",
        "--worker-use-ray",
        "--use-v2-block-manager",
    }
)
_DTYPES = {"auto": "auto", "half": "half", "float16": "float16", "fp16": "fp16", "bfloat16": "bfloat16"}
_DTYPES |= {"bf16": "bf16", "float": "float32", "float32": "float32"}


@dataclass(slots=True)
class _Flags:
    values: dict[str, Any] = field(default_factory=dict)
    positional: str | None = None
    unresolved: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _show(text: str) -> str:
    """A value as the user wrote it: unresolved holes back in ``$(VAR)`` form."""
    return re.sub(f"{_HOLE}([^{_HOLE}]*){_HOLE}", r"$(\1)", text)


def _typed(flag: str, kind: str, raw: str) -> object:
    text = raw.strip()
    if kind == "int":
        return parse_human_int(text)
    if kind == "len":
        if text.lower() == "auto" or text == "-1":
            return "auto"
        return parse_human_int(text)
    if kind == "float":
        return float(text)
    if kind == "json":
        try:
            value = json.loads(text)
        except json.JSONDecodeError:
            raise ValueError(f"{flag} {text!r} is not valid JSON") from None
        if not isinstance(value, dict):
            raise ValueError(f"{flag} {text!r} is not a JSON object")
        return value
    if kind == "dtype":
        try:
            return _DTYPES[text.lower()]
        except KeyError:
            raise ValueError(f"{flag} {text!r} is not one of {', '.join(sorted(_DTYPES))}") from None
    return text


def _flag_value(
    out: _Flags, name: str, inline: str | None, tokens: Sequence[str], i: int
) -> tuple[str | None, int]:
    """A value flag's value (``--name=value`` or the next word, a negative number included) and where reading
    goes on; ``None`` with the problem or the unresolved reference recorded when there is no value to read."""
    raw = inline
    if raw is None:
        following = tokens[i] if i < len(tokens) else None
        if following is None or (following.startswith("-") and not _is_number(following)):
            out.problems.append(f"vLLM would refuse {name} without a value")
            return None, i
        raw, i = following, i + 1
    if _HOLE in raw or "$" in raw:
        out.unresolved.append(f"{name} {_show(raw)}")
        return None, i
    return raw, i


def _keep_modelled_keys(values: dict[str, Any], notes: list[str]) -> None:
    """Drop the keys of JSON-valued flags that change nothing kvcap plans, with a note naming them."""
    for target, keys in _JSON_KEYS.items():
        config = values.get(target)
        if not isinstance(config, dict) or keys is None:
            continue
        ignored = sorted(str(k) for k in config if k not in keys)
        if ignored:
            values[target] = {k: v for k, v in config.items() if k in keys}
            flag = "--" + target.replace("_", "-")
            notes.append(f"{flag}: {', '.join(ignored)} change nothing kvcap plans (not checked)")


def _takes_value(flag: str, following: str | None) -> bool:
    """Whether an unknown flag consumes the next word (argparse semantics without the parser's table)."""
    if following is None or following.startswith("-"):
        return False
    if flag in _SWITCHES or flag.startswith(("--no-", "--enable-", "--disable-")):
        return following.lower() in _TRUE | _FALSE
    return True


def parse_vllm_args(tokens: Sequence[str], *, positional_model: bool = True) -> _Flags:
    """Read vLLM's capacity flags from the words after ``vllm serve`` (or the api_server module)."""
    out = _Flags()
    i = 0
    while i < len(tokens):
        token = tokens[i]
        i += 1
        if not token.startswith("-") or token == "-":
            if positional_model and out.positional is None and "model" not in out.values:
                out.positional = token
            continue
        name, eq, inline = token.partition("=")
        if name.startswith("--"):
            name = "--" + name[2:].replace("_", "-")
        following = tokens[i] if i < len(tokens) else None
        if name in _BOOL_FLAGS or (name.startswith("--no-") and "--" + name[5:] in _BOOL_FLAGS):
            negated = name.startswith("--no-")
            target = _BOOL_FLAGS[name if not negated else "--" + name[5:]]
            value = True
            if eq:
                word = inline.strip().lower()
                if word not in _TRUE | _FALSE:
                    out.problems.append(f"vLLM would refuse {name}={_show(inline)}: not true or false")
                    continue
                value = word in _TRUE
            elif following is not None and following.lower() in _TRUE | _FALSE:
                value = following.lower() in _TRUE
                i += 1
            out.values[target] = value != negated
            continue
        if name in _VALUE_FLAGS:
            target, kind = _VALUE_FLAGS[name]
            raw, i = _flag_value(out, name, inline if eq else None, tokens, i)
            if raw is None:
                out.values.pop(target, None)
                continue
            try:
                out.values[target] = _typed(name, kind, raw)
            except ValueError:
                out.problems.append(f"vLLM would refuse {name} {raw!r}: not a valid {_KIND_WORDS[kind]}")
            continue
        head, dot, key = name.partition(".")
        if dot and head in _JSON_FLAGS and key:
            # vLLM's dotted form of a JSON flag: ``--speculative-config.num_speculative_tokens 3``
            raw, i = _flag_value(out, name, inline if eq else None, tokens, i)
            if raw is None:
                continue
            target = _JSON_FLAGS[head]
            merged = out.values.get(target)
            merged = dict(merged) if isinstance(merged, dict) else {}
            try:
                merged[key.replace("-", "_")] = json.loads(raw)
            except json.JSONDecodeError:
                merged[key.replace("-", "_")] = raw
            out.values[target] = merged
            continue
        if name in _MULTI_VALUE_FLAGS and not eq:
            while i < len(tokens) and not tokens[i].startswith("-"):
                i += 1
            continue
        if not eq and _takes_value(name, following):
            i += 1
    return out


_KIND_WORDS = {
    "int": "integer",
    "len": "length",
    "float": "number",
    "dtype": "dtype",
    "str": "value",
    "json": "JSON object",
}


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


@dataclass(frozen=True, slots=True)
class _Invocation:
    style: str  # "serve" | "api_server" | "kserve"
    args: tuple[str, ...]


def find_invocation(tokens: Sequence[str]) -> _Invocation | None:
    """Where vLLM starts in a word list: ``vllm serve``, ``-m vllm.entrypoints.openai.api_server``, KServe."""
    for i, token in enumerate(tokens):
        base = posixpath.basename(token)
        rest = tuple(tokens[i + 1 :])
        if base == "vllm" and rest[:1] == ("serve",):
            return _Invocation("serve", rest[1:])
        if token in ("vllm.entrypoints.openai.api_server", "vllm.entrypoints.api_server") or token.endswith(
            "vllm/entrypoints/openai/api_server.py"
        ):
            return _Invocation("api_server", rest)
        if token in ("huggingfaceserver", "huggingfaceserver.__main__"):
            return _Invocation("kserve", rest)
    return None


# --- Kubernetes and shell expansion --------------------------------------------------------------------------

_K8S_REF = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.\-]*)\)")
_SHELL_REF = re.compile(r"\$(?:\{([A-Za-z_][A-Za-z0-9_]*)(?::?-([^}]*))?\}|([A-Za-z_][A-Za-z0-9_]*))")


@dataclass(frozen=True, slots=True)
class _Env:
    values: Mapping[str, str]
    hidden: frozenset[str]  # names set from valueFrom (ConfigMap, Secret, field refs)
    has_env_from: bool


def _container_env(container: Mapping[str, Any]) -> _Env:
    """The container's literal env values, expanded in order as the kubelet does (``$(A)`` in B's value)."""
    values: dict[str, str] = {}
    hidden: set[str] = set()
    for item in _list(container.get("env")):
        entry = _map(item)
        name = entry.get("name")
        if not isinstance(name, str):
            continue
        if "valueFrom" in entry:
            hidden.add(name)
            values.pop(name, None)
            continue
        raw = entry.get("value")
        values[name] = _expand_k8s("" if raw is None else str(raw), values)
        hidden.discard(name)
    return _Env(values, frozenset(hidden), bool(_list(container.get("envFrom"))))


def _expand_k8s(text: str, values: Mapping[str, str]) -> str:
    def repl(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        name = match.group(1)
        return values.get(name, f"{_HOLE}{name}{_HOLE}")

    return _K8S_REF.sub(repl, text)


def _expand_shell(token: str, values: Mapping[str, str]) -> str:
    def repl(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(3)
        if name in values:
            return values[name]
        if match.group(2) is not None:
            return match.group(2)
        return f"{_HOLE}{name}{_HOLE}"

    return _SHELL_REF.sub(repl, token)


_SEPARATORS = frozenset({";", "&&", "||", "|", "&", "\n", "(", ")"})


def _shell_commands(script: str, env: Mapping[str, str]) -> list[list[str]]:
    """Simple commands of a ``sh -c`` script, variables expanded (``export X=…`` earlier counts)."""
    return [list(words) for words in _shell_commands_memo(script, tuple(sorted(env.items())))]


@lru_cache(maxsize=512)
def _shell_commands_memo(script: str, env: tuple[tuple[str, str], ...]) -> tuple[tuple[str, ...], ...]:
    """``shlex`` is slow (about a millisecond per script); the same scripts come back on every re-apply."""
    return tuple(tuple(words) for words in _split_script(script, dict(env)))


def _split_script(script: str, env: Mapping[str, str]) -> list[list[str]]:
    lexer = shlex.shlex(script.replace("\\\n", " "), posix=True, punctuation_chars=";&|()<>\n")
    lexer.whitespace = " \t\r"
    lexer.whitespace_split = True
    lexer.commenters = "#"
    scope = dict(env)
    commands: list[list[str]] = [[]]
    try:
        words = list(lexer)
    except ValueError:  # unbalanced quotes: the shell would fail too; read what splits cleanly
        words = script.split()
    for word in words:
        if word in _SEPARATORS or set(word) <= set(";&|()<>\n"):
            commands.append([])
            continue
        commands[-1].append(word)
    out: list[list[str]] = []
    for words_ in commands:
        words_ = [w for w in words_ if w not in ("exec", "export", "env", "nohup", "time")]
        assignments = [w for w in words_ if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", w)]
        rest = words_[len(assignments) :] if words_[: len(assignments)] == assignments else words_
        for assignment in assignments:
            name, _, value = assignment.partition("=")
            scope[name] = _expand_shell(value, scope)
        if rest:
            out.append([_expand_shell(w, scope) for w in rest])
    return out


def _argv_candidates(container: Mapping[str, Any], env: _Env) -> tuple[list[list[str]], bool]:
    """Word lists that may start vLLM, and whether the container overrides the image's entrypoint."""
    command = [_expand_k8s(w, env.values) for w in _strings(container.get("command"))]
    args = [_expand_k8s(w, env.values) for w in _strings(container.get("args"))]
    argv = command + args
    if argv and posixpath.basename(argv[0]) in _SHELLS:
        for i, word in enumerate(argv[1:], start=1):
            if word.startswith("-") and not word.startswith("--") and "c" in word[1:]:
                if i + 1 < len(argv):
                    return _shell_commands(argv[i + 1], env.values), True
                break
    return [argv], bool(command)


_IMAGE_VLLM = re.compile(r"(?:^|/)vllm-openai(?:-rocm)?(?::([^@/]+))?(?:@.*)?$")
_TAG_VERSION = re.compile(r"v?(\d+)\.(\d+)(?:[.\-+].*)?")


def _vllm_image(image: str | None) -> tuple[bool, str | None]:
    """(is a vLLM serving image, ``vllm-X.Y`` from a release tag such as ``v0.11.0``; None for ``latest``)."""
    if not image:
        return False, None
    match = _IMAGE_VLLM.search(image.strip())
    if not match:
        return False, None
    version = _TAG_VERSION.fullmatch(match.group(1) or "")
    if version is None:
        return True, None
    return True, f"vllm-{int(version.group(1))}.{int(version.group(2))}"


# --- pods, GPUs and node selection ---------------------------------------------------------------------------


def container_gpus(container: Mapping[str, Any]) -> tuple[int, str | None, list[str]]:
    """(count, resource name, problems) from limits, falling back to requests (extended resources)."""
    resources = _map(container.get("resources"))
    problems: list[str] = []
    for section in ("limits", "requests"):
        table = _map(resources.get(section))
        total, which = 0, None
        found = False
        for resource in GPU_RESOURCES:
            if resource not in table:
                continue
            found = True
            raw = str(table[resource]).strip()
            try:
                count = int(raw)
            except ValueError:
                problems.append(f"resources.{section}.{resource} {raw!r} is not a whole number of GPUs")
                continue
            total += count
            which = which or resource
        if found:
            return total, which, problems
    return 0, None, problems


def _mig_resources(container: Mapping[str, Any]) -> list[str]:
    resources = _map(container.get("resources"))
    names = {*_map(resources.get("limits")), *_map(resources.get("requests"))}
    return sorted(n for n in names if str(n).startswith("nvidia.com/mig-"))


def _pod_gpus(pod_spec: Mapping[str, Any]) -> int:
    return sum(container_gpus(_map(c))[0] for c in _list(pod_spec.get("containers")))


def gpu_products(pod_spec: Mapping[str, Any]) -> tuple[tuple[str, ...], str | None]:
    """GPU product labels the pod is pinned to: node selector first, else required node affinity (``In``)."""
    selector = _map(pod_spec.get("nodeSelector"))
    for label in GPU_PRODUCT_LABELS:
        value = selector.get(label)
        if isinstance(value, str) and value.strip():
            return (value.strip(),), f"nodeSelector {label}"
    affinity = _map(_map(_map(pod_spec.get("affinity")).get("nodeAffinity")))
    required = _map(affinity.get("requiredDuringSchedulingIgnoredDuringExecution"))
    values: list[str] = []
    key_seen: str | None = None
    for term in _list(required.get("nodeSelectorTerms")):
        for expression in _list(_map(term).get("matchExpressions")):
            expr = _map(expression)
            if expr.get("key") in GPU_PRODUCT_LABELS and expr.get("operator") == "In":
                key_seen = str(expr.get("key"))
                values.extend(v for v in _strings(expr.get("values")) if v not in values)
    if values:
        return tuple(values), f"node affinity {key_seen}"
    return (), None


# --- containers → servings -----------------------------------------------------------------------------------


def _serving_from_container(
    container: Mapping[str, Any], *, forced_style: str | None = None
) -> ExtractedServing | None:
    """An ``ExtractedServing`` (GPUs not yet filled in) when the container runs vLLM, else None."""
    name = str(container.get("name") or "container")
    image = container.get("image") if isinstance(container.get("image"), str) else None
    is_vllm_image, engine = _vllm_image(image)
    env = _container_env(container)
    candidates, overrides_entrypoint = _argv_candidates(container, env)
    first = candidates[0] if candidates else []
    invocation: _Invocation | None = None
    for words in candidates:
        invocation = find_invocation(words)
        if invocation is not None:
            break
    if invocation is None:
        if forced_style is not None:
            invocation = _Invocation(forced_style, tuple(first))
        elif is_vllm_image and not overrides_entrypoint:
            # args only: the image's entrypoint (`vllm serve`, older images the api_server module) runs them
            invocation = _Invocation("serve", tuple(first))
        elif is_vllm_image:
            # a wrapper script around vLLM: the serving is real, its flags are out of sight
            return ExtractedServing(
                container=name,
                image=image,
                engine=engine,
                unresolved=(f"the command {_show(' '.join(first))[:80]!r} (a wrapper hides vLLM's flags)",),
            )
        else:
            return None
    flags = parse_vllm_args(invocation.args, positional_model=invocation.style == "serve")
    notes = list(flags.notes)
    model, source = None, None
    if "model" in flags.values:
        model, source = str(flags.values.pop("model")), "--model"
    elif flags.positional is not None:
        model, source = flags.positional, "positional"
    for hole in re.findall(f"{_HOLE}([^{_HOLE}]*){_HOLE}", model or ""):
        hidden = hole in env.hidden or env.has_env_from
        flags.unresolved.append(
            f"model $({hole})" + (" (from valueFrom/envFrom)" if hidden else " (not set in env)")
        )
        model, source = None, None
    backend = str(flags.values.pop("backend", "vllm")).lower()
    if invocation.style == "kserve" and backend in ("huggingface", "hf"):
        return None
    if flags.values.pop("config", None) is not None:
        notes.append("flags in a --config file are not visible to kvcap; only the command line was checked")
    data_parallel = flags.values.pop("data_parallel_size", 1)
    if isinstance(data_parallel, int) and not 1 <= data_parallel <= MAX_PARALLEL_SIZE:
        flags.problems.append(
            f"--data-parallel-size {data_parallel} is outside 1–{MAX_PARALLEL_SIZE:,}: not a GPU count kvcap checks"
        )
        data_parallel = 1
    if isinstance(data_parallel, int) and data_parallel > 1:
        flags.values["data_parallel_size"] = data_parallel  # the plan's ranks (experts per GPU under EP)
    _keep_modelled_keys(flags.values, notes)
    allow_long = env.values.get("VLLM_ALLOW_LONG_MAX_MODEL_LEN", "").strip().lower() in _TRUE
    # vllm/envs.py: VLLM_USE_FLASHINFER_SAMPLER is bool(int(value)) when set; the V1 sampler uses FlashInfer
    # unless it is False (``TopKTopPSampler``, vllm/v1/sample/ops/topk_topp_sampler.py, 0.8 – 0.11).
    if env.values.get("VLLM_USE_FLASHINFER_SAMPLER", "").strip() == "0":
        flags.values["flashinfer_sampler"] = False
    partition = _layer_partition(env.values.get("VLLM_PP_LAYER_PARTITION"), flags.problems)
    if partition is not None:
        flags.values["pipeline_layer_partition"] = partition
    mig = _mig_resources(container)
    if mig:
        notes.append(f"MIG slices ({', '.join(mig)}) are not modelled: kvcap checks whole GPUs only")
    return ExtractedServing(
        container=name,
        image=image,
        model=model,
        model_source=source,
        flags=dict(flags.values),
        data_parallel_size=int(data_parallel) if isinstance(data_parallel, int) else 1,
        engine=engine,
        allow_long_max_model_len=allow_long,
        unresolved=tuple(flags.unresolved),
        problems=tuple(flags.problems),
        notes=tuple(notes),
    )


def _layer_partition(text: str | None, problems: list[str]) -> list[int] | None:
    """``VLLM_PP_LAYER_PARTITION`` as ``vllm/distributed/utils.py::get_pp_indices`` reads it: unset or empty is
    the even split; otherwise each comma-separated part through ``int`` (anything else: "Invalid partition
    string", vLLM does not start). The counts are checked against the model's layers by the planner."""
    if not text:
        return None
    try:
        return [int(part) for part in text.split(",")]
    except ValueError:
        problems.append(f"VLLM_PP_LAYER_PARTITION={text!r}: vLLM refuses it (Invalid partition string)")
        return None


def _with_gpus(
    serving: ExtractedServing,
    container: Mapping[str, Any],
    pod_spec: Mapping[str, Any],
    *,
    worker_pod: Mapping[str, Any] | None = None,
    workers: int = 0,
    unit: str = "pod",
) -> ExtractedServing:
    count, resource, problems = container_gpus(container)
    detail = f"the {unit} requests {count} {resource}" if resource else ""
    if workers > 0 and worker_pod is not None:
        per_worker = _pod_gpus(worker_pod)
        worker_resource = next(
            (
                r
                for c in _list(worker_pod.get("containers"))
                for r in (container_gpus(_map(c))[1],)
                if r is not None
            ),
            None,
        )
        resource = resource or worker_resource
        total = count + workers * per_worker
        noun = "worker" if workers == 1 else "workers"
        detail = f"the group requests {total} {resource or 'GPUs'} (leader {count} + {workers} {noun} × {per_worker})"
        count = total
    products, source = gpu_products(pod_spec)
    if not products and worker_pod is not None:
        products, source = gpu_products(worker_pod)
    return replace(
        serving,
        gpus=count if resource else None,
        gpu_resource=resource,
        gpus_detail=detail,
        gpu_products=products,
        gpu_product_source=source,
        problems=serving.problems + tuple(problems),
    )


def _servings_of_pod(pod_spec: Mapping[str, Any]) -> list[tuple[ExtractedServing, Mapping[str, Any]]]:
    found = []
    for item in _list(pod_spec.get("containers")):
        container = _map(item)
        serving = _serving_from_container(container)
        if serving is not None:
            found.append((serving, container))
    return found


# --- workloads -----------------------------------------------------------------------------------------------


def _replicas(value: object, default: int = 1) -> int | None:
    if value is None:
        return default
    try:
        return int(str(value))
    except ValueError:
        return None


def _annotations(obj: Mapping[str, Any], *templates: Mapping[str, Any]) -> dict[str, str]:
    merged: dict[str, str] = {}
    for template in reversed(templates):
        merged.update(
            {str(k): str(v) for k, v in _map(_map(template.get("metadata")).get("annotations")).items()}
        )
    merged.update({str(k): str(v) for k, v in _map(_map(obj.get("metadata")).get("annotations")).items()})
    return merged


def _promises(annotations: Mapping[str, str]) -> tuple[float | None, int | None, list[str]]:
    """``kvcap.io/min-concurrency`` and ``kvcap.io/context-tokens``, each finite and in range, or a problem.

    ``float()`` reads ``"inf"``, ``"Infinity"``, ``"nan"`` and ``"1e309"`` (infinity) without complaint; none of
    them is a promise kvcap can check, so they are malformed annotations (a denial in enforce mode), never
    silently admitted. The ceilings match ``/v1/plans/recommend``'s ``concurrent_users`` and the longest context
    kvcap accepts (``service.core.bounds``).
    """
    problems: list[str] = []
    min_concurrency: float | None = None
    context: int | None = None
    raw = annotations.get(ANNOTATION_MIN_CONCURRENCY)
    if raw is not None:
        try:
            min_concurrency = float(raw.replace(",", "").replace("_", ""))
            if not min_concurrency > 0:  # NaN compares false too
                raise ValueError
        except ValueError:
            problems.append(
                f"{ANNOTATION_MIN_CONCURRENCY}: {raw[:40]!r} is not a positive number of requests"
            )
            min_concurrency = None
        if min_concurrency is not None and not min_concurrency <= MAX_MIN_CONCURRENCY:  # inf, 1e309, 1e30
            problems.append(
                f"{ANNOTATION_MIN_CONCURRENCY}: {raw[:40]!r} is not a finite number of requests up to "
                f"{MAX_MIN_CONCURRENCY:,}"
            )
            min_concurrency = None
    raw = annotations.get(ANNOTATION_CONTEXT_TOKENS)
    if raw is not None:
        try:
            context = parse_human_int(raw)
            if context < 1:
                raise ValueError
        except ValueError:
            problems.append(f"{ANNOTATION_CONTEXT_TOKENS}: {raw[:40]!r} is not a positive number of tokens")
            context = None
        if context is not None and context > MAX_CONTEXT_TOKENS:
            problems.append(
                f"{ANNOTATION_CONTEXT_TOKENS}: {raw[:40]!r} is above the {MAX_CONTEXT_TOKENS:,} tokens kvcap checks"
            )
            context = None
    return min_concurrency, context, problems


def _positive(raw: str, name: str, ceiling: float, what: str, problems: list[str]) -> float | None:
    """A finite number in (0, ceiling], or None with the problem recorded (``inf``/``nan`` are problems)."""
    try:
        value = float(raw.strip().replace(",", "").replace("_", ""))
    except ValueError:
        value = math.nan
    if not 0 < value <= ceiling:  # NaN compares false too
        problems.append(f"{name}: {raw[:40]!r} is not a positive number of {what} up to {ceiling:,.0f}")
        return None
    return value


def _tokens(raw: str | None, name: str, default: int, problems: list[str]) -> int:
    if raw is None:
        return default
    try:
        tokens = parse_human_int(raw)
    except ValueError:
        tokens = 0
    if not 1 <= tokens <= MAX_CONTEXT_TOKENS:
        problems.append(f"{name}: {raw[:40]!r} is not a number of tokens from 1 to {MAX_CONTEXT_TOKENS:,}")
        return default
    return tokens


MAX_ACCEPTANCE_LENGTH = (
    64.0  # 1 + accepted drafts per step: above any num_speculative_tokens vLLM serves with
)


def _acceptance(raw: str | None, problems: list[str]) -> float | None:
    if raw is None:
        return None
    try:
        value = float(raw.strip())
    except ValueError:
        value = math.nan
    if not 1 <= value <= MAX_ACCEPTANCE_LENGTH:  # NaN compares false too
        problems.append(
            f"{ANNOTATION_SPEC_ACCEPTANCE}: {raw[:40]!r} is not a mean acceptance length from 1 to "
            f"{MAX_ACCEPTANCE_LENGTH:g} (1 + accepted draft tokens per step)"
        )
        return None
    return value


def _traffic(annotations: Mapping[str, str]) -> tuple[TrafficPromise | None, list[str]]:
    """The traffic promise, when ``kvcap.io/requests-per-second`` is given; SLOs alone promise nothing."""
    problems: list[str] = []
    raw_rate = annotations.get(ANNOTATION_REQUESTS_PER_SECOND)
    if raw_rate is None:
        given = [name for name in TRAFFIC_ANNOTATIONS if name in annotations]
        if given:
            problems.append(
                f"{', '.join(given)} without {ANNOTATION_REQUESTS_PER_SECOND}: give the rate the SLOs are "
                "promised at"
            )
        return None, problems
    rate = _positive(
        raw_rate, ANNOTATION_REQUESTS_PER_SECOND, MAX_REQUESTS_PER_SECOND, "requests/s", problems
    )
    prompt = _tokens(annotations.get(ANNOTATION_PROMPT_TOKENS), ANNOTATION_PROMPT_TOKENS, 1024, problems)
    output = _tokens(annotations.get(ANNOTATION_OUTPUT_TOKENS), ANNOTATION_OUTPUT_TOKENS, 256, problems)
    slos: dict[str, float | None] = {}
    for name in (ANNOTATION_TTFT_SLO_MS, ANNOTATION_TPOT_SLO_MS):
        raw = annotations.get(name)
        ms = None if raw is None else _positive(raw, name, MAX_SLO_MS, "milliseconds", problems)
        slos[name] = None if ms is None else ms / 1e3
    percentile = (annotations.get(ANNOTATION_SLO_PERCENTILE) or "p99").strip().lower()
    if percentile not in SLO_PERCENTILES:
        problems.append(
            f"{ANNOTATION_SLO_PERCENTILE}: {percentile[:40]!r} is not one of {', '.join(SLO_PERCENTILES)}"
        )
    acceptance = _acceptance(annotations.get(ANNOTATION_SPEC_ACCEPTANCE), problems)
    if rate is None or problems:
        return None, problems
    return (
        TrafficPromise(
            spec_mean_acceptance_length=acceptance,
            requests_per_second=rate,
            prompt_tokens=prompt,
            output_tokens=output,
            ttft_seconds=slos[ANNOTATION_TTFT_SLO_MS],
            tpot_seconds=slos[ANNOTATION_TPOT_SLO_MS],
            slo_percentile=percentile,
        ),
        problems,
    )


def _owner_skip(obj: Mapping[str, Any], kind: str) -> str | None:
    labels = _map(_map(obj.get("metadata")).get("labels"))
    for label, owner in _OWNER_LABELS.items():
        if label in labels and kind != owner:
            return f"created by {owner} {labels[label]}, which kvcap reviews as a whole"
    if kind == "Pod":
        for ref in _list(_map(obj.get("metadata")).get("ownerReferences")):
            owner_ref = _map(ref)
            if owner_ref.get("controller") and owner_ref.get("kind") in _REVIEWED_OWNERS:
                return f"created by {owner_ref.get('kind')} {owner_ref.get('name')}, which kvcap reviews"
    return None


def _is_true(value: object) -> bool:
    return isinstance(value, str) and value.strip().lower() in _TRUE


def extract(obj: Mapping[str, Any]) -> ExtractedWorkload:
    """The vLLM servings a Kubernetes object would run, with what kvcap needs to check them."""
    kind = str(obj.get("kind") or "")
    api_version = str(obj.get("apiVersion") or "")
    metadata = _map(obj.get("metadata"))
    name = metadata.get("name") or metadata.get("generateName")
    namespace = metadata.get("namespace")
    spec = _map(obj.get("spec"))
    base = ExtractedWorkload(
        kind=kind,
        api_version=api_version,
        namespace=str(namespace) if namespace else None,
        name=str(name) if name else None,
        replicas=None,
    )

    templates: list[Mapping[str, Any]] = []
    replicas: int | None = 1
    pairs: list[tuple[ExtractedServing, Mapping[str, Any]]] = []
    servings: list[ExtractedServing] = []
    notes: list[str] = []
    if kind == "Pod":
        pod_spec = spec
        servings = [_with_gpus(s, c, pod_spec) for s, c in _servings_of_pod(pod_spec)]
    elif kind in _POD_TEMPLATE_KINDS or kind == "CronJob":
        template = _map(spec.get("template"))
        if kind == "CronJob":
            template = _map(_map(_map(spec.get("jobTemplate")).get("spec")).get("template"))
        templates.append(template)
        pod_spec = _map(template.get("spec"))
        if kind in ("Deployment", "StatefulSet", "ReplicaSet"):
            replicas = _replicas(spec.get("replicas"))
        elif kind == "Job":
            replicas = _replicas(spec.get("parallelism"))
        else:
            replicas = None  # a DaemonSet runs one per matching node
        servings = [_with_gpus(s, c, pod_spec) for s, c in _servings_of_pod(pod_spec)]
    elif kind == "LeaderWorkerSet":
        lws = _map(spec.get("leaderWorkerTemplate"))
        worker = _map(lws.get("workerTemplate"))
        leader = _map(lws.get("leaderTemplate")) or worker
        templates.extend([leader, worker])
        replicas = _replicas(spec.get("replicas"))
        size = _replicas(lws.get("size")) or 1
        leader_spec, worker_spec = _map(leader.get("spec")), _map(worker.get("spec"))
        pairs = _servings_of_pod(leader_spec)
        servings = [
            _with_gpus(s, c, leader_spec, worker_pod=worker_spec, workers=max(size - 1, 0), unit="group")
            for s, c in pairs
        ]
    elif kind == "InferenceService":
        servings, replicas, notes = _inference_service(spec)
    else:
        return replace(base, skip="not a vLLM workload")

    annotations = _annotations(obj, *templates)
    labels = _map(metadata.get("labels"))
    if _is_true(annotations.get(ANNOTATION_SKIP)) or _is_true(labels.get(ANNOTATION_SKIP)):
        return replace(base, replicas=replicas, skip=f"{ANNOTATION_SKIP}: true")
    owner = _owner_skip(obj, kind)
    if owner:
        return replace(base, replicas=replicas, skip=owner)
    if not servings:
        return replace(base, replicas=replicas, skip="not a vLLM workload", notes=tuple(notes))
    min_concurrency, context, problems = _promises(annotations)
    traffic, traffic_problems = _traffic(annotations)
    return replace(
        base,
        replicas=replicas,
        servings=tuple(servings),
        model_annotation=annotations.get(ANNOTATION_MODEL) or None,
        gpu_annotation=annotations.get(ANNOTATION_GPU) or None,
        engine_annotation=annotations.get(ANNOTATION_ENGINE) or None,
        min_concurrency=min_concurrency,
        context_tokens=context,
        traffic=traffic,
        problems=tuple(problems + traffic_problems),
        notes=tuple(notes),
    )


def _inference_service(
    spec: Mapping[str, Any],
) -> tuple[list[ExtractedServing], int | None, list[str]]:
    """KServe ``v1beta1`` InferenceService: ``spec.predictor.model`` (huggingface / vLLM runtime) or containers.

    The predictor carries the pod-level fields (``nodeSelector``, ``affinity``) next to ``model``; replicas are
    ``minReplicas`` (the capacity always running). A ``workerSpec`` (multi-node) adds
    ``pipelineParallelSize − 1`` worker pods to each replica and gives TP/PP when the args do not.
    """
    predictor = _map(spec.get("predictor"))
    replicas = _replicas(predictor.get("minReplicas"))
    notes: list[str] = []
    worker_spec = _map(predictor.get("workerSpec"))
    pp = _replicas(worker_spec.get("pipelineParallelSize"), default=1) or 1
    tp = _replicas(worker_spec.get("tensorParallelSize"), default=0) or 0
    workers = max(pp - 1, 0) if worker_spec else 0
    worker_pod: Mapping[str, Any] | None = worker_spec if worker_spec else None
    servings: list[ExtractedServing] = []

    model = _map(predictor.get("model"))
    if model:
        model_format = str(_map(model.get("modelFormat")).get("name") or "").lower()
        runtime = str(model.get("runtime") or "").lower()
        is_vllm = model_format in ("huggingface", "vllm") or "vllm" in runtime
        if is_vllm:
            has_command = bool(_strings(model.get("command")))
            serving = _serving_from_container(model, forced_style=None if has_command else "kserve")
            if serving is not None:
                if serving.model is None:
                    storage = str(model.get("storageUri") or "")
                    if storage.startswith("hf://"):
                        repo = storage[len("hf://") :].split(":", 1)[0].strip("/")
                        serving = replace(serving, model=repo, model_source="storageUri")
                serving = replace(serving, container=str(model.get("name") or "kserve-container"))
                servings.append(
                    _with_gpus(
                        serving,
                        model,
                        predictor,
                        worker_pod=worker_pod if workers else None,
                        workers=workers,
                        unit="group" if workers else "predictor",
                    )
                )
        elif model_format:
            return [], replicas, notes
    for item in _list(predictor.get("containers")):
        container = _map(item)
        found = _serving_from_container(container)
        if found is not None:
            servings.append(
                _with_gpus(
                    found,
                    container,
                    predictor,
                    worker_pod=worker_pod if workers else None,
                    workers=workers,
                    unit="group" if workers else "pod",
                )
            )
    if worker_spec:
        filled = []
        for serving in servings:
            flags = dict(serving.flags)
            if tp and "tensor_parallel_size" not in flags:
                flags["tensor_parallel_size"] = tp
            if pp > 1 and "pipeline_parallel_size" not in flags:
                flags["pipeline_parallel_size"] = pp
            filled.append(replace(serving, flags=flags))
        servings = filled
    return servings, replicas, notes
