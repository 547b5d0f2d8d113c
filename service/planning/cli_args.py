"""The plan flags shared by ``kvcap plan`` and ``kvcap simulate``, read the same way for both.

Standard library only, so a command that has not run yet pays nothing for it. Each reader raises ``FlagError``
with the message the command prints (with its own prefix) before exiting 2.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


class FlagError(ValueError):
    """A flag value that cannot be used; ``str(exc)`` names the flag."""


def model_reference(
    model: str | None, hf_config: Path | None, num_parameters: int | None
) -> str | dict[str, Any]:
    """``--model`` as given, or ``--hf-config`` as ``{"hf_config": …, "num_parameters": …}`` (the API's inline
    model); exactly one of the two."""
    if (model is None) == (hf_config is None):
        raise FlagError("give exactly one of --model or --hf-config")
    if hf_config is None:
        assert model is not None
        return model
    try:
        config = json.loads(hf_config.read_text())
    except (OSError, ValueError) as exc:
        raise FlagError(f"cannot read {hf_config}: {exc}") from None
    return {"hf_config": config, "num_parameters": num_parameters}


def max_model_len_value(text: str | None) -> int | str | None:
    """``--max-model-len``: tokens (``131,072`` and ``131_072`` read as 131072) or ``auto``."""
    if text is None or text == "auto":
        return text
    try:
        return int(text.replace(",", "").replace("_", ""))
    except ValueError:
        raise FlagError(f"--max-model-len must be an integer or 'auto', got {text!r}") from None


def layer_partition_value(text: str | None) -> list[int] | None:
    """``--pipeline-layer-partition``: layers per stage, comma-separated as ``VLLM_PP_LAYER_PARTITION`` is
    ("16,32"; ``vllm/distributed/utils.py::get_pp_indices`` reads each with ``int``)."""
    if text is None:
        return None
    try:
        return [int(part) for part in text.split(",")]
    except ValueError:
        raise FlagError(
            f"--pipeline-layer-partition must be layer counts separated by commas, got {text!r}"
        ) from None


def stage_gpus_value(text: str | None) -> list[str] | None:
    """``--pipeline-stage-gpus``: one catalog GPU per pipeline stage, comma-separated ("rtx-4090,rtx-5090")."""
    if text is None:
        return None
    names = [part.strip() for part in text.split(",")]
    if not all(names):
        raise FlagError(f"--pipeline-stage-gpus must be GPU names separated by commas, got {text!r}")
    return names


def json_object_value(flag: str, text: str | None) -> dict[str, Any] | None:
    """``--speculative-config`` / ``--kv-transfer-config``: a JSON object, as ``vllm serve`` takes them."""
    if text is None:
        return None
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise FlagError(f"{flag} must be a JSON object: {exc}") from None
    if not isinstance(value, dict):
        raise FlagError(f"{flag} must be a JSON object, got {type(value).__name__}")
    return value


def feature_fields(**flags: object) -> dict[str, object]:
    """The serving-feature flags of ``kvcap plan`` that were given (unset flags stay out of the request)."""
    return {name: value for name, value in flags.items() if value is not None and value is not False}
