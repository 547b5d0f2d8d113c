"""The scrape guard: which URLs kvcap may fetch, with and without an allowlist, before and after DNS."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from service.live.guard import ResolutionError, TargetGuard, TargetRefused
from service.live.schemas import parse_live_source


def fake_resolver(table: dict[str, list[str]]):  # type: ignore[no-untyped-def]
    async def resolve(host: str, port: int) -> Sequence[str]:
        if host not in table:
            raise ResolutionError(f"{host} did not resolve")
        return table[host]

    return resolve


@pytest.mark.parametrize(
    "url",
    [
        "http://10.0.0.5:8000/metrics",
        "http://vllm.llm.svc.cluster.local:8000/metrics",
        "https://vllm.example.com/metrics",
        "http://127.0.0.1:8000/metrics",
        "http://[2001:db8::1]:8000/metrics",
    ],
)
def test_an_empty_allowlist_allows_ordinary_hosts(url: str) -> None:
    TargetGuard([]).check(url)


@pytest.mark.parametrize(
    "url",
    [
        "http://169.254.169.254/latest/meta-data/",
        "http://169.254.170.2/v2/credentials",
        "http://[fd00:ec2::254]/latest/meta-data/",
        "http://metadata.google.internal/computeMetadata/v1/",
        "http://METADATA.google.internal./computeMetadata/v1/",
        "http://metadata.azure.com/metadata/instance",
        "http://100.100.100.200/latest/meta-data/",
        "http://169.254.1.1:8000/metrics",
        "http://[fe80::1]:8000/metrics",
        "http://[fe80::1%25eth0]:8000/metrics",
        "http://0.0.0.0:8000/metrics",
        "http://[::]:8000/metrics",
        "http://[::ffff:169.254.169.254]/",
        "http://[64:ff9b::a9fe:a9fe]/",
    ],
)
def test_metadata_link_local_and_unspecified_addresses_are_refused_by_default(url: str) -> None:
    with pytest.raises(TargetRefused):
        TargetGuard([]).check(url)


@pytest.mark.parametrize(
    "url",
    ["http://2852039166/", "http://0xa9fea9fe/", "http://0251.0376.0251.0376/", "http://169.254.43518/"],
)
def test_legacy_numeric_host_forms_are_refused_rather_than_guessed(url: str) -> None:
    with pytest.raises(TargetRefused, match="non-canonical"):
        TargetGuard([]).check(url)


@pytest.mark.parametrize(
    "url",
    [
        "ftp://10.0.0.5/metrics",
        "file:///etc/passwd",
        "gopher://10.0.0.5:70/",
        "http://user:secret@10.0.0.5:8000/metrics",
        "http://user@10.0.0.5:8000/metrics",
        "http:///metrics",
    ],
)
def test_other_schemes_credentials_and_missing_hosts_are_refused(url: str) -> None:
    with pytest.raises(TargetRefused):
        TargetGuard([]).check(url)


ALLOWLIST = ["vllm.example.com", "*.llm.svc.cluster.local", "10.0.0.0/8", "192.168.1.7", "2001:db8::/32"]


@pytest.mark.parametrize(
    "url",
    [
        "http://vllm.example.com/metrics",
        "http://VLLM.example.com./metrics",
        "http://chat.llm.svc.cluster.local:8000/metrics",
        "http://10.20.30.40:8000/metrics",
        "http://192.168.1.7:8000/metrics",
        "http://[2001:db8::5]:8000/metrics",
    ],
)
def test_an_allowlist_admits_exact_hosts_suffixes_addresses_and_cidrs(url: str) -> None:
    TargetGuard(ALLOWLIST).check(url)


@pytest.mark.parametrize(
    "url",
    [
        "http://192.168.1.8:8000/metrics",
        "http://127.0.0.1:8000/metrics",
        "http://[2001:db9::1]/metrics",
        "http://169.254.169.254/",
    ],
)
def test_an_allowlist_refuses_addresses_outside_it(url: str) -> None:
    with pytest.raises(TargetRefused):
        TargetGuard(ALLOWLIST).check(url)


def test_a_suffix_entry_does_not_match_the_bare_domain_or_a_lookalike() -> None:
    guard = TargetGuard(["*.example.com"])
    guard.check("http://a.example.com/")
    for url in ("http://example.com/", "http://evilexample.com/", "http://a.example.com.evil.io/"):
        with pytest.raises(TargetRefused):
            guard.check(url)


def test_host_names_without_a_name_entry_are_refused_when_only_names_are_listed() -> None:
    with pytest.raises(TargetRefused, match="not in KVCAP_SCRAPE_ALLOWED_HOSTS"):
        TargetGuard(["vllm.example.com"]).check("http://other.example.com/metrics")


def test_a_broad_cidr_does_not_count_as_naming_link_local_or_metadata() -> None:
    guard = TargetGuard(["0.0.0.0/0", "::/0"])
    guard.check("http://8.8.8.8/")
    for url in ("http://169.254.169.254/", "http://169.254.1.1/", "http://[fe80::1]/", "http://0.0.0.0/"):
        with pytest.raises(TargetRefused):
            guard.check(url)


def test_link_local_and_metadata_can_be_allowed_by_naming_them_explicitly() -> None:
    TargetGuard(["169.254.0.0/16"]).check("http://169.254.1.1:8000/metrics")
    with pytest.raises(TargetRefused, match="metadata"):
        TargetGuard(["169.254.0.0/16"]).check("http://169.254.169.254/")
    TargetGuard(["169.254.169.254"]).check("http://169.254.169.254/")
    TargetGuard(["metadata.google.internal"]).check("http://metadata.google.internal/")
    with pytest.raises(TargetRefused):
        TargetGuard(["*.google.internal"]).check("http://metadata.google.internal/")


def test_invalid_allowlist_entries_fail_at_start_up() -> None:
    with pytest.raises(ValueError):
        TargetGuard(["http://vllm.example.com"])
    with pytest.raises(ValueError):
        TargetGuard(["vllm.example.com:8000"])


async def test_a_name_resolving_to_the_metadata_address_is_refused_after_resolution() -> None:
    guard = TargetGuard([], resolver=fake_resolver({"innocent.example.com": ["10.0.0.1", "169.254.169.254"]}))
    guard.check("http://innocent.example.com/metrics")  # the name alone looks fine
    with pytest.raises(TargetRefused, match="metadata"):
        await guard.check_resolved("http://innocent.example.com/metrics")


async def test_a_listed_name_still_may_not_resolve_to_link_local() -> None:
    guard = TargetGuard(["vllm.example.com"], resolver=fake_resolver({"vllm.example.com": ["169.254.7.7"]}))
    with pytest.raises(TargetRefused, match="link-local"):
        await guard.check_resolved("http://vllm.example.com/metrics")


async def test_cidr_entries_admit_names_by_the_addresses_they_resolve_to() -> None:
    table = {
        "chat.llm.svc": ["10.1.2.3"],
        "outside.example.com": ["203.0.113.9"],
        "mixed.example.com": ["10.0.0.1", "8.8.8.8"],
    }
    guard = TargetGuard(["10.0.0.0/8"], resolver=fake_resolver(table))
    await guard.check_resolved("http://chat.llm.svc:8000/metrics")
    with pytest.raises(TargetRefused, match=r"203\.0\.113\.9"):
        await guard.check_resolved("http://outside.example.com/metrics")
    with pytest.raises(TargetRefused):
        await guard.check_resolved("http://mixed.example.com/metrics")


async def test_a_name_that_does_not_resolve_is_a_resolution_error_not_a_refusal() -> None:
    guard = TargetGuard([], resolver=fake_resolver({}))
    with pytest.raises(ResolutionError):
        await guard.check_resolved("http://nowhere.invalid/metrics")


async def test_ip_literals_need_no_resolver() -> None:
    guard = TargetGuard([], resolver=fake_resolver({}))
    await guard.check_resolved("http://10.0.0.5:8000/metrics")


async def test_the_system_resolver_checks_localhost() -> None:
    guard = TargetGuard(["10.0.0.0/8"])
    with pytest.raises(TargetRefused):
        await guard.check_resolved("http://localhost:8000/metrics")


def test_the_peer_address_a_connection_reached_is_checked_too() -> None:
    guard = TargetGuard([])
    guard.check_peer("http://vllm.example.com/metrics", "10.0.0.5")
    with pytest.raises(TargetRefused):
        guard.check_peer("http://vllm.example.com/metrics", "169.254.169.254")


def test_check_source_checks_every_url_a_live_source_names() -> None:
    guard = TargetGuard([])
    guard.check_source(parse_live_source({"kubernetes": {"namespace": "llm", "label_selector": "app=vllm"}}))
    with pytest.raises(TargetRefused):
        guard.check_source(
            parse_live_source({"scrape_urls": ["http://10.0.0.5:8000/metrics", "http://169.254.169.254/"]})
        )
    with pytest.raises(TargetRefused):
        guard.check_source(
            parse_live_source({"prometheus": {"url": "http://metadata.google.internal", "match": '{a="b"}'}})
        )
