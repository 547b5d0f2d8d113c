"""The offline command line's built-in catalog (``service.catalog.offline``) is ``builtin_snapshot``'s.

It is read from the same files without the pydantic schemas, so nothing but these comparisons holds the two
alike: every spec field (the private, derived ones too, with their types), every lookup key, and every value a
lookup reads from an entry.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from typing import Any

import pytest

from service.catalog import offline
from service.catalog.builtin import builtin_snapshot
from service.catalog.offline import offline_snapshot
from service.catalog.resolve import resolve_model


def _fields(spec: object) -> list[tuple[str, object, type]]:
    return [(f.name, getattr(spec, f.name), type(getattr(spec, f.name))) for f in dataclasses.fields(spec)]  # type: ignore[arg-type]


def test_the_same_models_with_the_same_specs_in_the_same_order() -> None:
    ours, theirs = offline_snapshot(), builtin_snapshot()
    assert list(ours.models) == list(theirs.models)
    for name, model in ours.models.items():
        assert _fields(model.spec) == _fields(theirs.models[name].spec), name
        entry = theirs.models[name].entry
        assert (model.entry.name, model.entry.hf_id, list(model.entry.aliases)) == (
            entry.name,
            entry.hf_id,
            entry.aliases,
        )


def test_the_same_gpus_with_the_same_specs_in_the_same_order() -> None:
    ours, theirs = offline_snapshot(), builtin_snapshot()
    assert list(ours.gpus) == list(theirs.gpus)
    for name, gpu in ours.gpus.items():
        assert _fields(gpu.spec) == _fields(theirs.gpus[name].spec), name
        entry = theirs.gpus[name].entry
        assert (gpu.entry.display_name, list(gpu.entry.product_labels), gpu.entry.price_per_hour_usd) == (
            entry.display_name,
            entry.product_labels,
            entry.price_per_hour_usd,
        )


def test_the_same_lookup_keys() -> None:
    ours, theirs = offline_snapshot(), builtin_snapshot()
    assert ours._model_keys == theirs._model_keys
    assert ours._gpu_keys == theirs._gpu_keys
    assert ours.source == theirs.source == "builtin"


def test_reading_it_imports_no_pydantic() -> None:
    probe = (
        "import sys, json; from service.catalog.offline import offline_snapshot; offline_snapshot(); "
        "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules} & {'pydantic', 'pydantic_core'})))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True
    )
    assert json.loads(done.stdout) == []


REFS = [
    "llama-3.1-8b",  # a catalog name
    "meta-llama/Llama-3.1-8B",  # a Hugging Face id
    "meta-llama/Llama-3.1-8B-Instruct",  # variants of one architecture
    "neuralmagic/Meta-Llama-3.1-70B-Instruct-FP8",
    "Qwen/Qwen2.5-72B-Instruct-AWQ",
    "meta-llama/Llama-3.1-405B-Instruct-FP8",
    "neuralmagic/Meta-Llama-3.1-405B-Instruct-FP8",  # two entries share its core name: told apart by their specs
    "Qwen/Qwen3-30B-A3B-Instruct-2507",
    "no-such/model",
]


@pytest.mark.parametrize("ref", REFS)
def test_a_lookup_parses_only_the_configs_of_the_models_it_reads(
    ref: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    parsed: list[str] = []
    real = offline.parse_hf_config

    def counted(config: dict[str, object], **kwargs: Any) -> Any:
        parsed.append(str(config.get("model_type")))
        return real(config, **kwargs)

    monkeypatch.setattr(offline, "parse_hf_config", counted)
    offline_snapshot.cache_clear()
    try:
        snapshot = offline_snapshot()
        assert parsed == []  # the lookup keys come from the entries alone
        ours, theirs = resolve_model(snapshot, ref), resolve_model(builtin_snapshot(), ref)
        assert len(parsed) <= 4  # the match and any variants it was told apart from, never the whole catalog
    finally:
        offline_snapshot.cache_clear()
    if theirs is None:
        assert ours is None
    else:
        assert ours is not None
        assert (ours.model.name, ours.quantization, ours.how) == (
            theirs.model.name,
            theirs.quantization,
            theirs.how,
        )
        assert _fields(ours.model.spec) == _fields(theirs.model.spec)
