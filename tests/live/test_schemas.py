"""The ``live`` field: exactly one of three shapes, and URLs/selectors that cannot smuggle anything else."""

from __future__ import annotations

import pydantic
import pytest
from pydantic import BaseModel

from service.live.schemas import (
    KubernetesSource,
    LiveSource,
    PrometheusSource,
    ScrapeUrlsSource,
    parse_live_source,
    source_urls,
)


class Deployment(BaseModel):
    live: LiveSource | None = None


def test_each_shape_parses_to_its_own_model() -> None:
    assert isinstance(parse_live_source({"scrape_urls": ["http://10.0.0.5:8000/metrics"]}), ScrapeUrlsSource)
    k8s = parse_live_source({"kubernetes": {"namespace": "llm", "label_selector": "app=vllm"}})
    assert isinstance(k8s, KubernetesSource)
    assert (k8s.kubernetes.port, k8s.kubernetes.path, k8s.kubernetes.scheme) == (8000, "/metrics", "http")
    prom = parse_live_source({"prometheus": {"url": "http://prometheus:9090", "match": '{namespace="llm"}'}})
    assert isinstance(prom, PrometheusSource)


def test_live_source_works_as_an_optional_field_and_round_trips_through_json() -> None:
    body = {"live": {"kubernetes": {"namespace": "llm", "label_selector": "app in (vllm),tier!=cpu"}}}
    model = Deployment.model_validate(body)
    assert Deployment.model_validate_json(model.model_dump_json()) == model
    assert Deployment.model_validate({}).live is None


@pytest.mark.parametrize(
    "live",
    [
        {},
        {"scrape_urls": []},
        {"scrape_urls": ["http://a:8000/metrics"], "kubernetes": {"namespace": "x", "label_selector": "a=b"}},
        {"scrape_urls": ["http://a:8000/metrics"], "extra": 1},
        {"kubernetes": {"namespace": "LLM", "label_selector": "app=vllm"}},
        {"kubernetes": {"namespace": "llm", "label_selector": "  "}},
        {"kubernetes": {"namespace": "llm", "label_selector": "app=vllm", "port": 0}},
        {"kubernetes": {"namespace": "llm", "label_selector": "app=vllm", "path": "metrics"}},
        {"kubernetes": {"namespace": "llm", "label_selector": "app=vllm", "scheme": "ftp"}},
        {"kubernetes": {"namespace": "llm", "label_selector": "app=vllm&x=1"}},
        {"prometheus": {"url": "http://prom:9090", "match": 'namespace="llm"'}},
        {"prometheus": {"url": "http://prom:9090", "match": "{}"}},
        {"prometheus": {"url": "http://prom:9090", "match": '{a="b"} or up{b="c"}'}},
        {"prometheus": {"url": "http://prom:9090", "match": '{__name__="up"}'}},
        {"prometheus": {"url": "http://prom:9090", "match": '{a="b"}', "extra": True}},
    ],
    ids=[
        "empty",
        "no-urls",
        "two-sources",
        "unknown-key",
        "namespace-uppercase",
        "blank-selector",
        "port-0",
        "relative-path",
        "bad-scheme",
        "selector-with-query-characters",
        "match-without-braces",
        "match-without-matchers",
        "match-with-promql-injection",
        "match-on-name",
        "prometheus-extra-key",
    ],
)
def test_rejects_shapes_that_are_not_exactly_one_valid_source(live: object) -> None:
    with pytest.raises(pydantic.ValidationError):
        parse_live_source(live)


@pytest.mark.parametrize(
    "url",
    [
        "ftp://a/metrics",
        "file:///etc/passwd",
        "http://user:pass@a:8000/metrics",
        "http://user@a:8000/metrics",
        "http:///metrics",
        "/metrics",
        "http://a:99999/metrics",
        "http://a:8000/metrics#frag",
        "gopher://a:70/",
    ],
)
def test_rejects_urls_that_are_not_plain_http_with_a_host(url: str) -> None:
    with pytest.raises(pydantic.ValidationError):
        parse_live_source({"scrape_urls": [url]})
    with pytest.raises(pydantic.ValidationError):
        parse_live_source({"prometheus": {"url": url, "match": '{a="b"}'}})


def test_rejects_a_repeated_scrape_url_and_more_than_64() -> None:
    with pytest.raises(pydantic.ValidationError):
        parse_live_source({"scrape_urls": ["http://a:8000/metrics", "http://a:8000/metrics"]})
    with pytest.raises(pydantic.ValidationError):
        parse_live_source({"scrape_urls": [f"http://a{i}:8000/metrics" for i in range(65)]})


def test_accepts_promql_matchers_of_every_operator_and_quote() -> None:
    match = """{namespace="llm", app=~"vllm-.*",tier!='cpu', model!~`test.*`,}"""
    source = parse_live_source({"prometheus": {"url": "https://prom.example.com/prometheus", "match": match}})
    assert isinstance(source, PrometheusSource)


def test_one_error_message_names_the_three_shapes() -> None:
    with pytest.raises(pydantic.ValidationError) as info:
        Deployment.model_validate({"live": {"scrape": ["http://a/metrics"]}})
    assert "scrape_urls" in str(info.value)
    assert "kubernetes" in str(info.value)


def test_source_urls_lists_what_the_guard_must_check() -> None:
    assert source_urls(parse_live_source({"scrape_urls": ["http://a:1/m", "http://b:2/m"]})) == [
        "http://a:1/m",
        "http://b:2/m",
    ]
    prom = parse_live_source({"prometheus": {"url": "http://prom:9090", "match": '{a="b"}'}})
    assert source_urls(prom) == ["http://prom:9090"]
    k8s = parse_live_source({"kubernetes": {"namespace": "llm", "label_selector": "app=vllm"}})
    assert source_urls(k8s) == []
