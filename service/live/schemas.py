"""The ``live`` field of a registered deployment: where kvcap reads the deployment's vLLM metrics from.

Exactly one of three shapes (``extra="forbid"`` on each, and a discriminator that looks at which key is
present, so a body with two sources or a typo is a 422 with one clear message, not three):

- ``{"scrape_urls": ["http://10.0.0.5:8000/metrics", ...]}`` — static vLLM ``/metrics`` endpoints;
- ``{"kubernetes": {"namespace": "llm", "label_selector": "app=vllm"}}`` — pods found through the Kubernetes
  API when kvcap runs in the cluster, scraped directly;
- ``{"prometheus": {"url": "http://prometheus:9090", "match": '{namespace="llm",app="vllm"}'}}`` — a
  Prometheus server that already scrapes the fleet, queried over its HTTP API.

These checks are about shape only. Whether kvcap may *reach* a URL is ``service.live.guard``'s decision,
made again at scrape time, because the allowlist can change after a deployment is registered.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import (
    AfterValidator,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    TypeAdapter,
    field_validator,
)

from service.api.text import SafeText

MAX_URL_LENGTH = 2048
MAX_SCRAPE_URLS = 64


def check_http_url(value: str) -> str:
    """Accept an absolute ``http``/``https`` URL with a host and without credentials or a fragment.

    Credentials in a URL would be stored in the database and echoed in API responses and metric labels, so
    they are refused rather than stripped; a fragment means nothing to a scrape and hints at a pasted link.
    """
    value = value.strip()
    try:
        parts = urlsplit(value)
        port = parts.port  # raises ValueError for a non-numeric or out-of-range port
    except ValueError as exc:
        raise ValueError(f"not a valid URL: {exc}") from None
    if parts.scheme not in ("http", "https"):
        raise ValueError("the URL scheme must be http or https")
    if not parts.hostname:
        raise ValueError("the URL must name a host")
    if parts.username is not None or parts.password is not None or "@" in parts.netloc:
        raise ValueError("credentials (user:password@) are not allowed in the URL")
    if parts.fragment:
        raise ValueError("the URL must not have a #fragment")
    if port == 0:
        raise ValueError("port 0 cannot be scraped")
    if any(ch.isspace() for ch in value):
        raise ValueError("the URL must not contain whitespace")
    return value


HttpUrlText = Annotated[str, Field(min_length=8, max_length=MAX_URL_LENGTH), AfterValidator(check_http_url)]

# RFC 1123 label, as Kubernetes requires for namespace names.
_DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
# Characters that can appear in a Kubernetes label selector (set- and equality-based forms).
_LABEL_SELECTOR_CHARS = re.compile(r"^[A-Za-z0-9_.\-/=!,() ]+$")


def _check_namespace(value: str) -> str:
    if not _DNS1123_LABEL.fullmatch(value):
        raise ValueError("must be a DNS-1123 label: lowercase letters, digits and '-', at most 63 characters")
    return value


def _check_label_selector(value: str) -> str:
    value = value.strip()
    if not value:
        raise ValueError("the label selector must not be empty (it would select every pod in the namespace)")
    if not _LABEL_SELECTOR_CHARS.fullmatch(value):
        raise ValueError("contains characters that cannot appear in a Kubernetes label selector")
    return value


def _check_path(value: str) -> str:
    if not value.startswith("/") or value.startswith("//"):
        raise ValueError("the path must start with a single '/'")
    if any(ch.isspace() or ch in "#@" for ch in value):
        raise ValueError("the path must not contain whitespace, '#' or '@'")
    return value


# One PromQL label matcher: name, operator, quoted value (double, single or back-quoted, with escapes).
_PROMQL_MATCHER = (
    r"""\s*[a-zA-Z_][a-zA-Z0-9_]*\s*(?:=~|!~|!=|=)\s*(?:"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|`[^`]*`)\s*"""
)
_PROMQL_SELECTOR = re.compile(rf"^\{{{_PROMQL_MATCHER}(?:,{_PROMQL_MATCHER})*,?\s*\}}$", re.DOTALL)


def check_promql_match(value: str) -> str:
    """Accept only a ``{label="value",...}`` selector, so ``match`` cannot inject other PromQL.

    kvcap appends it to its own metric names (``vllm:num_requests_running{...}``); anything beyond label
    matchers — a closing brace followed by an operator, a second selector — is refused. ``__name__`` is
    refused too: kvcap chooses the metric names.
    """
    value = value.strip()
    if not _PROMQL_SELECTOR.fullmatch(value):
        raise ValueError(
            'must be a PromQL label selector with at least one matcher, like \'{namespace="llm",app="vllm"}\''
        )
    if re.search(r"[{,]\s*__name__\s*(?:=~|!~|!=|=)", value):
        raise ValueError("must not match on __name__: kvcap chooses the metric names")
    return value


class _Strict(SafeText):
    model_config = ConfigDict(extra="forbid", frozen=True, str_strip_whitespace=True)


class ScrapeUrlsSource(_Strict):
    """Static vLLM ``/metrics`` URLs, one per replica."""

    scrape_urls: list[HttpUrlText] = Field(min_length=1, max_length=MAX_SCRAPE_URLS)

    @field_validator("scrape_urls")
    @classmethod
    def _unique(cls, value: list[str]) -> list[str]:
        # A repeated URL would be scraped twice and counted as two replicas.
        if len(set(value)) != len(value):
            raise ValueError("scrape_urls must not repeat a URL")
        return value


class KubernetesSelector(_Strict):
    namespace: Annotated[str, Field(min_length=1, max_length=63), AfterValidator(_check_namespace)]
    label_selector: Annotated[
        str, Field(min_length=1, max_length=1024), AfterValidator(_check_label_selector)
    ]
    port: int = Field(default=8000, ge=1, le=65535)
    path: Annotated[str, Field(max_length=512), AfterValidator(_check_path)] = "/metrics"
    scheme: Literal["http", "https"] = "http"


class KubernetesSource(_Strict):
    """Ready pods matching a label selector, found through the Kubernetes API (kvcap must run in-cluster)."""

    kubernetes: KubernetesSelector


class PrometheusQuery(_Strict):
    url: HttpUrlText
    match: Annotated[str, Field(min_length=2, max_length=1024), AfterValidator(check_promql_match)]


class PrometheusSource(_Strict):
    """A Prometheus server that already scrapes the deployment; kvcap runs instant queries against it."""

    prometheus: PrometheusQuery


def _live_kind(value: Any) -> str | None:
    """Pick the member by the key that is present, so errors name one shape instead of all three."""
    if isinstance(value, ScrapeUrlsSource):
        return "scrape_urls"
    if isinstance(value, KubernetesSource):
        return "kubernetes"
    if isinstance(value, PrometheusSource):
        return "prometheus"
    if isinstance(value, dict):
        for key in ("scrape_urls", "kubernetes", "prometheus"):
            if key in value:
                return key
    return None


LiveSource = Annotated[
    Annotated[ScrapeUrlsSource, Tag("scrape_urls")]
    | Annotated[KubernetesSource, Tag("kubernetes")]
    | Annotated[PrometheusSource, Tag("prometheus")],
    Discriminator(
        _live_kind,
        custom_error_type="live_source",
        custom_error_message=(
            'live must be one of {"scrape_urls": [...]}, {"kubernetes": {"namespace", "label_selector"}} '
            'or {"prometheus": {"url", "match"}}'
        ),
    ),
]

_LIVE_SOURCE: TypeAdapter[LiveSource] = TypeAdapter(LiveSource)


def parse_live_source(data: object) -> LiveSource:
    """Validate a stored or submitted ``live`` value (a dict, e.g. from a JSON column)."""
    return _LIVE_SOURCE.validate_python(data)


def source_urls(source: LiveSource) -> list[str]:
    """The URLs a source names directly (static scrape URLs, the Prometheus server), for the guard."""
    if isinstance(source, ScrapeUrlsSource):
        return list(source.scrape_urls)
    if isinstance(source, PrometheusSource):
        return [source.prometheus.url]
    return []
