"""Helpers for running a real vLLM server against a shrunk, locally built model.

The harness imports with the standard library only.  It writes a model folder
(``config.json`` plus a hand-written WordLevel ``tokenizer.json``), starts the
OpenAI-compatible API server of a separate vLLM virtual environment with random
("dummy") weights, waits until ``/health`` answers, and parses the KV-cache
figures vLLM reports at start-up and on ``/metrics``.

The vLLM interpreter is taken from ``$KVCAP_VLLM_PYTHON`` when set, otherwise
from ``<repo>/.vllm-venv/bin/python``.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "REPO_ROOT",
    "StartupReport",
    "VllmServer",
    "VllmStartupError",
    "default_vllm_python",
    "kv_cache_log_lines",
    "make_model_dir",
    "parse_cache_config_info",
    "parse_startup_log",
    "start_vllm",
]

REPO_ROOT = Path(__file__).resolve().parents[2]

_SPECIAL_TOKENS = ("<pad>", "<s>", "</s>", "<unk>")


def default_vllm_python() -> Path:
    """Return the interpreter of the vLLM virtual environment."""
    override = os.environ.get("KVCAP_VLLM_PYTHON")
    if override:
        return Path(override)
    return REPO_ROOT / ".vllm-venv" / "bin" / "python"


# --------------------------------------------------------------------------- model folder


def _tokenizer_json(vocab_size: int) -> dict[str, Any]:
    """Build a WordLevel tokenizer with ``vocab_size`` entries (4 special + words)."""
    if vocab_size < len(_SPECIAL_TOKENS) + 1:
        raise ValueError(f"vocab_size must be at least {len(_SPECIAL_TOKENS) + 1}")
    vocab: dict[str, int] = {tok: i for i, tok in enumerate(_SPECIAL_TOKENS)}
    for i in range(len(_SPECIAL_TOKENS), vocab_size):
        vocab[f"w{i}"] = i
    added = [
        {
            "id": i,
            "content": tok,
            "single_word": False,
            "lstrip": False,
            "rstrip": False,
            "normalized": False,
            "special": True,
        }
        for i, tok in enumerate(_SPECIAL_TOKENS)
    ]
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": None,
        "pre_tokenizer": {"type": "Whitespace"},
        "post_processor": None,
        "decoder": None,
        "model": {"type": "WordLevel", "vocab": vocab, "unk_token": "<unk>"},
    }


def make_model_dir(path: os.PathLike[str] | str, hf_config: Mapping[str, Any], vocab_size: int) -> Path:
    """Write ``config.json`` and tokenizer files for a weightless model into ``path``.

    ``hf_config`` is written verbatim (its ``vocab_size`` should match
    ``vocab_size``).  The tokenizer maps ``<pad>``, ``<s>``, ``</s>``, ``<unk>``
    to ids 0-3 and ``w4`` ... ``w{vocab_size-1}`` to the remaining ids.
    Returns the folder as a :class:`Path`.
    """
    folder = Path(path)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(dict(hf_config), indent=2) + "\n")
    (folder / "tokenizer.json").write_text(json.dumps(_tokenizer_json(vocab_size)))
    tok_cfg = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "pad_token": "<pad>",
        "bos_token": "<s>",
        "eos_token": "</s>",
        "unk_token": "<unk>",
        "model_max_length": 1_000_000,
        "clean_up_tokenization_spaces": False,
    }
    (folder / "tokenizer_config.json").write_text(json.dumps(tok_cfg, indent=2) + "\n")
    special = {"pad_token": "<pad>", "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}
    (folder / "special_tokens_map.json").write_text(json.dumps(special, indent=2) + "\n")
    gen_cfg = {"bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0}
    (folder / "generation_config.json").write_text(json.dumps(gen_cfg, indent=2) + "\n")
    return folder


# --------------------------------------------------------------------------- log parsing


def _num(text: str) -> float:
    return float(text.replace(",", ""))


_RE_ONE_LINE = re.compile(
    r"(?P<dev>GPU|CPU|XPU|TPU|HPU)\s+KV cache size:\s*(?P<tokens>[\d,]+)\s+tokens,\s*"
    r"Maximum concurrency for\s+(?P<len>[\d,]+)\s+tokens per request:\s*(?P<conc>[\d,.]+)x"
)
_RE_SIZE = re.compile(r"(?P<dev>GPU|CPU|XPU|TPU|HPU)\s+KV cache size:\s*(?P<tokens>[\d,]+)\s+tokens")
_RE_CONC = re.compile(r"Maximum concurrency for\s+(?P<len>[\d,]+)\s+tokens per request:\s*(?P<conc>[\d,.]+)x")
_RE_V0_BLOCKS = re.compile(
    r"#\s*(?:GPU|cuda|CUDA|gpu)\s+blocks:\s*(?P<gpu>\d+),\s*#\s*(?:CPU|cpu)\s+blocks:\s*(?P<cpu>\d+)"
)
_RE_NUM_BLOCKS = re.compile(r"(?:num_gpu_blocks|# GPU blocks|num_blocks)\s*(?:is|=|:)\s*(?P<n>\d+)")
_RE_AVAILABLE = re.compile(r"Available KV cache memory:\s*(?P<gib>[\d.]+)\s*GiB")
_RE_V0_REST = re.compile(r"reserved for KV Cache is\s*(?P<gib>[\d.]+)\s*GiB")
_RE_PADDING = re.compile(r"Add (?P<n>\d+) padding layers?")

# Lines worth keeping verbatim when recording a start-up.
_KV_LINE_MARKERS = (
    "KV cache size:",
    "Maximum concurrency for",
    "Available KV cache memory",
    "reserved for KV Cache",
    "GiB for KV cache on node",
    "# GPU blocks",
    "# CPU blocks",
    "# cuda blocks",
    "padding layers",
    "kv cache group sizes",
    "kv lcm block sizes",
    "page sizes cannot be unified",
    "page alignment wastes",
    "Hybrid KV cache manager is disabled",
    "hybrid kv cache manager",
    "Overriding num_gpu_blocks",
    "Auto-fit max_model_len",
    "requires block_size=",
    "prefers block_size",
    "data type to store kv cache",
    "KV cache layout",
    "attention block size",
    "mamba page size",
    "Downcasting",
    "Mamba cache mode",
    "Upcasting",
)


@dataclass
class StartupReport:
    """KV-cache facts parsed from a vLLM start-up log (``None`` when absent)."""

    num_gpu_blocks: int | None = None
    num_cpu_blocks: int | None = None
    kv_cache_size_tokens: int | None = None
    max_concurrency: float | None = None
    max_concurrency_len: int | None = None
    available_kv_gib: float | None = None
    device: str | None = None
    padding_layers: int | None = None
    lines: list[str] = field(default_factory=list)


def kv_cache_log_lines(text: str, extra_markers: Iterable[str] = ()) -> list[str]:
    """Return the log lines that describe the KV cache, verbatim and in order."""
    markers = tuple(_KV_LINE_MARKERS) + tuple(extra_markers)
    out: list[str] = []
    for line in text.splitlines():
        if any(m in line for m in markers):
            out.append(line.rstrip())
    return out


def parse_startup_log(text: str) -> StartupReport:
    """Parse the KV-cache figures from a vLLM start-up log.

    Accepts the one-line V1 form (``CPU KV cache size: 1,048,576 tokens, Maximum
    concurrency for 2,048 tokens per request: 512.00x``; device word GPU, CPU,
    ...), the older V1 form where the two facts are on separate lines, and V0's
    ``# GPU blocks: N, # CPU blocks: M``.  The last occurrence of each fact wins.
    """
    rep = StartupReport(lines=kv_cache_log_lines(text))
    for line in text.splitlines():
        m = _RE_ONE_LINE.search(line)
        if m:
            rep.device = m.group("dev")
            rep.kv_cache_size_tokens = int(_num(m.group("tokens")))
            rep.max_concurrency_len = int(_num(m.group("len")))
            rep.max_concurrency = _num(m.group("conc"))
            continue
        m = _RE_SIZE.search(line)
        if m:
            rep.device = m.group("dev")
            rep.kv_cache_size_tokens = int(_num(m.group("tokens")))
        m = _RE_CONC.search(line)
        if m:
            rep.max_concurrency_len = int(_num(m.group("len")))
            rep.max_concurrency = _num(m.group("conc"))
        m = _RE_V0_BLOCKS.search(line)
        if m:
            rep.num_gpu_blocks = int(m.group("gpu"))
            rep.num_cpu_blocks = int(m.group("cpu"))
            continue
        m = _RE_NUM_BLOCKS.search(line)
        if m:
            rep.num_gpu_blocks = int(m.group("n"))
        m = _RE_AVAILABLE.search(line) or _RE_V0_REST.search(line)
        if m:
            rep.available_kv_gib = float(m.group("gib"))
        m = _RE_PADDING.search(line)
        if m:
            rep.padding_layers = int(m.group("n"))
    return rep


_RE_METRIC_LINE = re.compile(r"^(?P<name>[A-Za-z_:][A-Za-z0-9_:]*)\{(?P<labels>.*)\}\s+(?P<value>\S+)\s*$")
_RE_LABEL = re.compile(r'(?P<k>[A-Za-z_][A-Za-z0-9_]*)="(?P<v>(?:[^"\\]|\\.)*)"')


def parse_cache_config_info(metrics_text: str) -> dict[str, str]:
    """Return the labels of ``vllm:cache_config_info`` from a Prometheus exposition."""
    for line in metrics_text.splitlines():
        m = _RE_METRIC_LINE.match(line)
        if m and m.group("name") == "vllm:cache_config_info":
            return {
                lm.group("k"): lm.group("v").replace('\\"', '"').replace("\\\\", "\\")
                for lm in _RE_LABEL.finditer(m.group("labels"))
            }
    return {}


# --------------------------------------------------------------------------- server


class VllmStartupError(RuntimeError):
    """The server exited or did not become healthy in time; ``log`` holds its output."""

    def __init__(self, message: str, log: str) -> None:
        super().__init__(message)
        self.log = log


@dataclass
class VllmServer:
    """A running vLLM API server started by :func:`start_vllm`."""

    process: subprocess.Popen[bytes]
    port: int
    log_path: Path
    args: list[str]
    env: dict[str, str]

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def log_text(self) -> str:
        """The server's combined stdout/stderr so far."""
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def get(self, path: str, timeout_s: float = 10.0) -> str:
        """GET ``path`` from the server and return the body as text."""
        with urllib.request.urlopen(self.base_url + path, timeout=timeout_s) as resp:
            body: bytes = resp.read()
        return body.decode("utf-8", errors="replace")

    def metrics(self) -> str:
        """The Prometheus exposition of ``/metrics``."""
        return self.get("/metrics")

    def cache_config_info(self) -> dict[str, str]:
        """Labels of ``vllm:cache_config_info``."""
        return parse_cache_config_info(self.metrics())

    def startup_report(self) -> StartupReport:
        """KV-cache facts parsed from the log so far."""
        return parse_startup_log(self.log_text())

    def alive(self) -> bool:
        return self.process.poll() is None

    def stop(self, grace_s: float = 15.0) -> None:
        """Terminate the server's process group (SIGTERM, then SIGKILL)."""
        pgid = self.process.pid  # started with start_new_session=True: pgid == pid
        for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
            try:
                os.killpg(pgid, sig)
            except ProcessLookupError:
                break
            try:
                self.process.wait(timeout=wait_s)
            except subprocess.TimeoutExpired:
                continue
            # The leader is gone; make sure no child of the group survives.
            try:
                os.killpg(pgid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.5)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGKILL)
        if self.process.poll() is None:
            self.process.wait(timeout=5.0)

    def __enter__(self) -> VllmServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _format_gib(value: float) -> str:
    text = repr(float(value))
    return text[:-2] if text.endswith(".0") else text


def start_vllm(
    model_dir: os.PathLike[str] | str,
    *,
    port: int,
    kv_cache_space_gib: float | None = None,
    kv_cache_memory_bytes: int | None = None,
    extra_args: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
    timeout_s: float = 300.0,
    log_path: os.PathLike[str] | str | None = None,
    python: os.PathLike[str] | str | None = None,
) -> VllmServer:
    """Start vLLM's OpenAI API server on ``model_dir`` with dummy weights.

    ``kv_cache_space_gib`` sets ``VLLM_CPU_KVCACHE_SPACE`` (an inherited value is
    dropped; the CPU backend reads it as a whole number of GiB and lets it override
    the CLI); ``kv_cache_memory_bytes`` passes ``--kv-cache-memory-bytes``.  ``env`` entries are added to (and override)
    the inherited environment.  Blocks until ``/health`` answers 200; on failure the
    process group is killed and :class:`VllmStartupError` is raised with the log.
    """
    model_dir = Path(model_dir)
    py = Path(python) if python is not None else default_vllm_python()
    if log_path is None:
        log_path = model_dir / f"vllm-{port}.log"
    log_file = Path(log_path)
    log_file.parent.mkdir(parents=True, exist_ok=True)

    args = [
        str(py),
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        str(model_dir),
        "--load-format",
        "dummy",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
    ]
    if kv_cache_memory_bytes is not None:
        args += ["--kv-cache-memory-bytes", str(int(kv_cache_memory_bytes))]
    args += list(extra_args)

    run_env = dict(os.environ)
    run_env["HF_HUB_OFFLINE"] = "1"
    run_env["TRANSFORMERS_OFFLINE"] = "1"
    run_env.setdefault("VLLM_NO_USAGE_STATS", "1")
    run_env.setdefault("DO_NOT_TRACK", "1")
    # On the CPU backend VLLM_CPU_KVCACHE_SPACE overrides --kv-cache-memory-bytes,
    # so an inherited value is never passed through.
    run_env.pop("VLLM_CPU_KVCACHE_SPACE", None)
    if kv_cache_space_gib is not None:
        run_env["VLLM_CPU_KVCACHE_SPACE"] = _format_gib(kv_cache_space_gib)
    if env:
        run_env.update(env)

    with open(log_file, "wb") as fh:
        proc = subprocess.Popen(
            args,
            stdout=fh,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=run_env,
            start_new_session=True,
        )
    server = VllmServer(process=proc, port=port, log_path=log_file, args=args, env=run_env)

    deadline = time.monotonic() + timeout_s
    try:
        while True:
            if proc.poll() is not None:
                raise VllmStartupError(
                    f"vLLM exited with code {proc.returncode} before becoming healthy", server.log_text()
                )
            try:
                server.get("/health", timeout_s=2.0)
                return server
            except (urllib.error.URLError, ConnectionError, OSError):
                pass
            if time.monotonic() > deadline:
                raise VllmStartupError(f"vLLM not healthy after {timeout_s:.0f} s", server.log_text())
            time.sleep(1.0)
    except BaseException:
        server.stop()
        raise
