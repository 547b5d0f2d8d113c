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

from service.catalog.builtin import builtin_snapshot
from service.catalog.offline import offline_snapshot


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
