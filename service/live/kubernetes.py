"""Finding a deployment's vLLM pods through the Kubernetes API, with httpx only.

kvcap does not depend on the Kubernetes client library for one list call. In a pod, the API server's address
comes from ``KUBERNETES_SERVICE_HOST``/``KUBERNETES_SERVICE_PORT`` and the credentials from the projected
service-account volume (``token`` and ``ca.crt`` under /var/run/secrets/kubernetes.io/serviceaccount) — the
same "in-cluster config" client-go uses (k8s.io/client-go/rest.InClusterConfig). Projected tokens rotate, so
the token file is re-read every minute rather than once.

Only pods that can answer are returned: phase ``Running``, condition ``Ready`` true, a pod IP, and not being
deleted. kvcap's service account needs ``list`` on ``pods`` in each namespace it reads.
"""

from __future__ import annotations

import asyncio
import json
import os
import ssl
import time
from collections.abc import Generator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from service.live.schemas import KubernetesSelector
from service.live.scraper import USER_AGENT, FetchError, classify, fetch_capped

SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
TOKEN_REREAD_SECONDS = 60.0
MAX_PAGES = 20
PAGE_SIZE = 500


class DiscoveryError(Exception):
    """Pods could not be listed: not in a cluster, no permission, API unreachable or an odd answer."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ClusterConfig:
    api_url: str
    token_path: Path
    ca_path: Path | None

    @classmethod
    def in_cluster(
        cls, *, environ: Mapping[str, str] | None = None, service_account_dir: Path = SERVICE_ACCOUNT_DIR
    ) -> ClusterConfig:
        """The API server and credentials a pod gets; ``DiscoveryError`` outside a cluster."""
        env = os.environ if environ is None else environ
        host = env.get("KUBERNETES_SERVICE_HOST", "").strip()
        port = env.get("KUBERNETES_SERVICE_PORT", "443").strip() or "443"
        if not host:
            raise DiscoveryError(
                "kvcap is not running in a Kubernetes cluster (KUBERNETES_SERVICE_HOST is not set); "
                "'kubernetes' live sources need in-cluster access — use scrape_urls or prometheus instead"
            )
        token = service_account_dir / "token"
        if not token.is_file():
            raise DiscoveryError(
                f"no service-account token at {token}; is automountServiceAccountToken disabled for kvcap?"
            )
        ca = service_account_dir / "ca.crt"
        if ":" in host:
            host = f"[{host}]"
        return cls(api_url=f"https://{host}:{port}", token_path=token, ca_path=ca if ca.is_file() else None)


class ServiceAccountToken(httpx.Auth):
    """Bearer auth from the projected token file, re-read every minute (kubelet rotates it)."""

    def __init__(self, path: Path, *, reread_s: float = TOKEN_REREAD_SECONDS) -> None:
        self._path = path
        self._reread_s = reread_s
        self._token = ""
        self._read_at = float("-inf")

    def _current(self) -> str:
        now = time.monotonic()
        if now - self._read_at >= self._reread_s or not self._token:
            self._token = self._path.read_text().strip()
            self._read_at = now
        return self._token

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        request.headers["Authorization"] = f"Bearer {self._current()}"
        yield request


@dataclass(frozen=True, slots=True)
class DiscoveredPod:
    name: str
    url: str


def ready_pod_urls(pod_list: Mapping[str, Any], selector: KubernetesSelector) -> list[DiscoveredPod]:
    """The scrape URL of every pod in a ``PodList`` that can answer, sorted by pod name."""
    pods: list[DiscoveredPod] = []
    for item in pod_list.get("items") or []:
        if not isinstance(item, Mapping):
            continue
        metadata = item.get("metadata") or {}
        status = item.get("status") or {}
        if metadata.get("deletionTimestamp"):
            continue  # terminating: about to stop answering
        if status.get("phase") != "Running":
            continue
        conditions = status.get("conditions") or []
        ready = any(
            isinstance(c, Mapping) and c.get("type") == "Ready" and c.get("status") == "True"
            for c in conditions
        )
        ip = status.get("podIP")
        name = metadata.get("name")
        if not ready or not isinstance(ip, str) or not ip or not isinstance(name, str):
            continue
        host = f"[{ip}]" if ":" in ip else ip
        pods.append(
            DiscoveredPod(name=name, url=f"{selector.scheme}://{host}:{selector.port}{selector.path}")
        )
    return sorted(pods, key=lambda p: p.name)


class KubernetesDiscovery:
    """Lists ready pods by label selector. One instance (and one HTTP client) per kvcap process."""

    def __init__(
        self,
        config: ClusterConfig,
        *,
        timeout_s: float = 5.0,
        max_bytes: int = 32 * 1024 * 1024,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self._timeout_s = timeout_s
        self._max_bytes = max_bytes
        verify: ssl.SSLContext | bool = True
        if config.ca_path is not None and transport is None:
            verify = ssl.create_default_context(cafile=str(config.ca_path))
        self._client = httpx.AsyncClient(
            base_url=config.api_url,
            auth=ServiceAccountToken(config.token_path),
            verify=verify,
            transport=transport,
            trust_env=False,
            follow_redirects=False,
            timeout=None,
            headers={"User-Agent": USER_AGENT},
        )

    @classmethod
    def from_environment(cls, *, timeout_s: float = 5.0) -> KubernetesDiscovery:
        """In-cluster discovery; raises ``DiscoveryError`` outside a cluster."""
        return cls(ClusterConfig.in_cluster(), timeout_s=timeout_s)

    async def aclose(self) -> None:
        await self._client.aclose()

    async def pods(self, selector: KubernetesSelector) -> list[DiscoveredPod]:
        """Ready pods matching ``selector``; ``DiscoveryError`` when the API cannot tell."""
        path = f"/api/v1/namespaces/{selector.namespace}/pods"
        params = {"labelSelector": selector.label_selector, "limit": str(PAGE_SIZE)}
        found: list[DiscoveredPod] = []
        try:
            async with asyncio.timeout(self._timeout_s):
                for _page in range(MAX_PAGES):
                    body = await fetch_capped(
                        self._client,
                        path,
                        max_bytes=self._max_bytes,
                        params=params,
                        headers={"Accept": "application/json"},
                        timeout_s=self._timeout_s,
                    )
                    pod_list = json.loads(body)
                    if not isinstance(pod_list, dict) or pod_list.get("kind") not in ("PodList", None):
                        raise DiscoveryError("the Kubernetes API did not answer with a PodList")
                    found.extend(ready_pod_urls(pod_list, selector))
                    token = (pod_list.get("metadata") or {}).get("continue")
                    if not token:
                        break
                    params = {**params, "continue": str(token)}
        except DiscoveryError:
            raise
        except FetchError as exc:
            hint = ""
            if "403" in exc.detail:
                hint = f" (kvcap's service account may not list pods in namespace {selector.namespace!r})"
            raise DiscoveryError(f"listing pods failed: {exc.detail}{hint}") from None
        except ValueError as exc:
            raise DiscoveryError(f"the Kubernetes API answered with invalid JSON: {exc}") from None
        except Exception as exc:
            _reason, detail = classify(exc)
            raise DiscoveryError(f"listing pods failed: {detail}") from None
        return sorted({p.name: p for p in found}.values(), key=lambda p: p.name)
