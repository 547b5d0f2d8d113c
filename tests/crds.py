"""Custom resources validated against the real CustomResourceDefinitions vendored in tests/data/crds.

Each CRD's ``openAPIV3Schema`` is used as JSON Schema (draft 4, which OpenAPI v3 schemas follow: boolean
``exclusiveMinimum``), adjusted only where OpenAPI and the API server differ from plain JSON Schema:

* ``nullable: true`` also admits null;
* ``x-kubernetes-int-or-string: true`` admits an integer or a string;
* an object schema with ``properties`` and neither ``additionalProperties`` nor
  ``x-kubernetes-preserve-unknown-fields`` refuses unknown fields, as the API server's strict field validation
  (``kubectl apply --validate=strict``) does, instead of pruning them silently.

CEL rules (``x-kubernetes-validations``) are not evaluated; tests check the ones that matter themselves.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import yaml

CRDS = Path(__file__).resolve().parent / "data" / "crds"

Schema = dict[str, Any]


def _structural(node: Any) -> Any:
    if isinstance(node, list):
        return [_structural(item) for item in node]
    if not isinstance(node, dict):
        return node
    out = {key: _structural(value) for key, value in node.items()}
    if out.get("x-kubernetes-int-or-string"):
        out.pop("type", None)
        out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    if out.pop("nullable", False) and "type" in out:
        out["type"] = [out["type"], "null"]
    if (
        "properties" in out
        and "additionalProperties" not in out
        and not out.get("x-kubernetes-preserve-unknown-fields")
    ):
        out["additionalProperties"] = False
    return out


@cache
def schemas() -> dict[tuple[str, str], Schema]:
    """(apiVersion, kind) → JSON Schema, for every served version of every vendored CRD."""
    found: dict[tuple[str, str], Schema] = {}
    for path in sorted(CRDS.glob("*.yaml")):
        for document in yaml.safe_load_all(path.read_text()):
            if not document or document.get("kind") != "CustomResourceDefinition":
                continue
            spec = document["spec"]
            for version in spec["versions"]:
                if version.get("served"):
                    schema = _structural(copy.deepcopy(version["schema"]["openAPIV3Schema"]))
                    found[(f"{spec['group']}/{version['name']}", spec["names"]["kind"])] = schema
    return found


def errors(obj: dict[str, Any]) -> Iterator[str]:
    """What the CRD of obj's apiVersion/kind finds wrong with it ("path: message"); KeyError for an unknown kind."""
    schema = schemas()[(obj["apiVersion"], obj["kind"])]
    validator = jsonschema.Draft4Validator(schema)
    for error in validator.iter_errors(obj):
        yield f"{'/'.join(str(p) for p in error.absolute_path) or '(root)'}: {error.message}"
    metadata = obj.get("metadata") or {}
    if not metadata.get("name"):
        yield "metadata/name: required"


def validate(obj: dict[str, Any]) -> None:
    """Raises AssertionError listing every problem the object's CRD schema finds."""
    problems = list(errors(obj))
    assert not problems, f"{obj['kind']} {obj.get('metadata', {}).get('name')}: " + "; ".join(problems)
