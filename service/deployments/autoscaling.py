"""A KEDA ``ScaledObject`` whose thresholds come from the predicted capacity.

KEDA's Prometheus scaler compares a query with a threshold; with ``metricType: AverageValue`` the HPA divides
the query's value by the number of replicas, so the threshold is a *per-replica* target:

* ``requests`` trigger — ``sum(vllm:num_requests_running) + sum(vllm:num_requests_waiting)`` against
  ``floor(capacity / (1 + headroom))``, where capacity is the concurrent requests one replica holds: the KV
  cache's concurrency at the workload's context, capped by ``max_num_seqs`` (vLLM schedules no more);
* ``kv_usage`` trigger — ``avg(vllm:kv_cache_usage_perc)`` against ``1 / (1 + headroom)`` (metricType Value).

Replica bounds: ``minReplicaCount`` is what the workload needs without headroom (at least 1) and
``maxReplicaCount`` is ``max_factor`` × the recommended replicas (at least min + 1). Only metric names vLLM
exports are used (``vllm:num_requests_running``, ``vllm:num_requests_waiting``, ``vllm:kv_cache_usage_perc``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

VLLM_METRICS_USED = ("vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc")


@dataclass(frozen=True, slots=True, kw_only=True)
class AutoscalingInputs:
    namespace: str
    name: str
    target_kind: str  # Deployment | StatefulSet | LeaderWorkerSet
    target_api_version: str
    per_replica_capacity: float  # concurrent requests one replica holds
    headroom_ratio: float
    min_replicas: int
    recommended_replicas: int
    max_factor: float
    selector: str  # PromQL label selector, e.g. {namespace="llm",pod=~"llama-.*"}
    server_address: str
    trigger: str  # requests | kv_usage
    polling_interval_seconds: int = 15
    cooldown_period_seconds: int = 300


def scaled_object(inputs: AutoscalingInputs) -> dict[str, Any]:
    """The ScaledObject manifest (``keda.sh/v1alpha1``) for the inputs (see module docstring)."""
    min_replicas = max(1, inputs.min_replicas)
    max_replicas = max(min_replicas + 1, math.ceil(inputs.recommended_replicas * inputs.max_factor))
    if inputs.trigger == "kv_usage":
        query = f"avg(vllm:kv_cache_usage_perc{inputs.selector})"
        threshold = f"{1 / (1 + inputs.headroom_ratio):.3f}"
        metric_type = "Value"
    else:
        query = f"sum(vllm:num_requests_running{inputs.selector}) + sum(vllm:num_requests_waiting{inputs.selector})"
        threshold = str(max(1, math.floor(inputs.per_replica_capacity / (1 + inputs.headroom_ratio))))
        metric_type = "AverageValue"
    return {
        "apiVersion": "keda.sh/v1alpha1",
        "kind": "ScaledObject",
        "metadata": {
            "name": inputs.name,
            "namespace": inputs.namespace,
            "labels": {"app.kubernetes.io/managed-by": "kvcap"},
            "annotations": {
                "kvcap.io/per-replica-capacity": f"{inputs.per_replica_capacity:.2f}",
                "kvcap.io/headroom-ratio": f"{inputs.headroom_ratio:g}",
            },
        },
        "spec": {
            "scaleTargetRef": {
                "apiVersion": inputs.target_api_version,
                "kind": inputs.target_kind,
                "name": inputs.name,
            },
            "minReplicaCount": min_replicas,
            "maxReplicaCount": max_replicas,
            "pollingInterval": inputs.polling_interval_seconds,
            "cooldownPeriod": inputs.cooldown_period_seconds,
            "triggers": [
                {
                    "type": "prometheus",
                    "name": f"kvcap-{inputs.trigger.replace('_', '-')}",
                    "metricType": metric_type,
                    "metadata": {
                        "serverAddress": inputs.server_address,
                        "query": query,
                        "threshold": threshold,
                        "ignoreNullValues": "true",
                    },
                }
            ],
        },
    }
