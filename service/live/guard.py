"""Which URLs kvcap may read live metrics from — the boundary that keeps a registered URL from turning kvcap
into a proxy for internal services (server-side request forgery).

Anyone who may register a deployment chooses the URLs kvcap will fetch, from inside the cluster, every
``KVCAP_SCRAPE_INTERVAL_SECONDS``. The guard decides, from ``KVCAP_SCRAPE_ALLOWED_HOSTS``:

- only ``http`` and ``https``, and never credentials in the URL;
- an empty allowlist allows any host except the addresses that are never a vLLM server but are valuable to an
  attacker: cloud metadata services (169.254.169.254, fd00:ec2::254, metadata.google.internal, …), the rest of
  link-local (169.254.0.0/16, fe80::/10) and the unspecified address (0.0.0.0 connects to the local host);
- a non-empty allowlist allows only hosts that match an entry — an exact host name, a ``*.suffix``, an IP
  address or a CIDR (applied to IP literals and to the addresses a name resolves to) — and the sensitive
  addresses above stay refused unless an entry names them explicitly (the exact address, the exact metadata
  host name, or a CIDR inside link-local); a broad ``0.0.0.0/0`` does not count as naming them.

``check`` is synchronous and needs no DNS: the deployments API calls it at registration, so a bad URL is a
422 at once. ``check_resolved`` adds what only DNS can tell — a harmless-looking name may resolve to
169.254.169.254 — and runs before every scrape, because the allowlist and DNS both change after registration.
``check_peer`` finally checks the address the HTTP connection actually reached, which closes the window
between our resolution and httpx's own (DNS rebinding).
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Awaitable, Callable, Iterable, Sequence
from urllib.parse import urlsplit

from service.live.schemas import LiveSource, source_urls

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
Resolver = Callable[[str, int], Awaitable[Sequence[str]]]

LINK_LOCAL_NETWORKS: tuple[IPNetwork, ...] = (
    ipaddress.ip_network("169.254.0.0/16"),
    ipaddress.ip_network("fe80::/10"),
)
UNSPECIFIED_NETWORKS: tuple[IPNetwork, ...] = (
    ipaddress.ip_network("0.0.0.0/8"),  # "this network": 0.0.0.0 reaches the local host on Linux
    ipaddress.ip_network("::/128"),
)
# Instance-metadata and platform endpoints that hand out credentials or configuration.
METADATA_ADDRESSES: frozenset[IPAddress] = frozenset(
    ipaddress.ip_address(a)
    for a in (
        "169.254.169.254",  # AWS, GCP, Azure, OpenStack, DigitalOcean, Oracle, Hetzner, …
        "169.254.170.2",  # AWS ECS task metadata and credentials
        "169.254.170.23",  # AWS EKS pod identity agent
        "fd00:ec2::254",  # AWS IMDS over IPv6
        "fd00:ec2::23",  # AWS EKS pod identity agent over IPv6
        "100.100.100.200",  # Alibaba Cloud
        "192.0.0.192",  # Oracle Cloud (legacy)
        "168.63.129.16",  # Azure WireServer
    )
)
METADATA_HOSTNAMES: frozenset[str] = frozenset(
    {
        "metadata",
        "metadata.google.internal",
        "metadata.goog",
        "metadata.azure.com",
        "metadata.azure.internal",
        "instance-data",
        "instance-data.ec2.internal",
        "metadata.tencentyun.com",
        "metadata.packet.net",
    }
)
_NAT64 = ipaddress.ip_network("64:ff9b::/96")


class TargetRefused(Exception):
    """The guard refuses a URL; ``reason`` says why in words an operator can act on."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class ResolutionError(Exception):
    """The host name did not resolve (a connect failure, not a policy decision)."""


async def system_resolver(host: str, port: int) -> list[str]:
    """Resolve like the HTTP client will (the event loop's ``getaddrinfo``)."""
    loop = asyncio.get_running_loop()
    try:
        infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError as exc:
        raise ResolutionError(f"{host} did not resolve: {exc}") from None
    return sorted({str(info[4][0]) for info in infos})


def _canonical(ip: IPAddress) -> IPAddress:
    """The IPv4 address hidden in an IPv6 form (mapped, NAT64, compatible) and no zone id, so
    ``::ffff:169.254.169.254`` cannot slip past the IPv4 rules."""
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.scope_id:
            ip = ipaddress.IPv6Address(str(ip).split("%", 1)[0])
        if ip.ipv4_mapped is not None:
            return ip.ipv4_mapped
        if ip in _NAT64:
            return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
        if 1 < int(ip) < 2**32:  # deprecated IPv4-compatible ::a.b.c.d
            return ipaddress.IPv4Address(int(ip))
    return ip


def _normal_host(host: str) -> str:
    return host.strip().lower().rstrip(".")


def ip_literal(host: str) -> IPAddress | None:
    """The address when ``host`` is an IP literal; refuses the legacy forms (``0x7f.1``, ``2130706433``,
    ``0251.0376.0251.0376``) that ``getaddrinfo`` accepts but that hide an address from a reader."""
    host = host.strip("[]")
    try:
        return _canonical(ipaddress.ip_address(host))
    except ValueError:
        pass
    try:
        socket.inet_aton(host)
    except OSError:
        return None
    raise TargetRefused(f"{host!r} is a non-canonical IPv4 literal; write the address as a.b.c.d")


class TargetGuard:
    """Decides whether kvcap may fetch a URL (see the module docstring for the policy)."""

    def __init__(self, allowed_hosts: Iterable[str] = (), *, resolver: Resolver | None = None) -> None:
        self._hosts: set[str] = set()
        self._suffixes: list[str] = []
        self._ips: set[IPAddress] = set()
        self._networks: list[IPNetwork] = []
        for raw in allowed_hosts:
            self._add_entry(raw)
        self._resolver: Resolver = resolver or system_resolver

    def _add_entry(self, raw: str) -> None:
        entry = _normal_host(raw)
        if not entry:
            return
        if "/" in entry:
            self._networks.append(ipaddress.ip_network(entry, strict=False))
            return
        try:
            self._ips.add(_canonical(ipaddress.ip_address(entry.strip("[]"))))
            return
        except ValueError:
            pass
        if entry.startswith(("*.", ".")):
            self._suffixes.append("." + entry.lstrip("*."))
        elif ":" in entry or "://" in entry:
            raise ValueError(
                f"allowlist entry {raw!r}: give a host, *.suffix, IP or CIDR, without scheme or port"
            )
        else:
            self._hosts.add(entry)

    @property
    def restricted(self) -> bool:
        """True when an allowlist is configured (only listed hosts may be scraped)."""
        return bool(self._hosts or self._suffixes or self._ips or self._networks)

    # -- decisions ------------------------------------------------------------------------------------------

    def check(self, url: str) -> None:
        """Refuse ``url`` by scheme, credentials, host name or IP literal; DNS is left to ``check_resolved``."""
        host, _port = self._split(url)
        ip = ip_literal(host)
        if ip is not None:
            self._check_ip(ip, hostname=None)
            return
        if host in METADATA_HOSTNAMES and host not in self._hosts:
            raise TargetRefused(f"{host} is a cloud metadata service")
        if not self.restricted or self._host_listed(host):
            return
        if self._ips or self._networks:
            return  # an IP/CIDR entry may still admit it once resolved; check_resolved decides
        raise TargetRefused(f"{host} is not in KVCAP_SCRAPE_ALLOWED_HOSTS")

    async def check_resolved(self, url: str) -> None:
        """``check``, then the IP rules on every address the host name resolves to."""
        self.check(url)
        host, port = self._split(url)
        if ip_literal(host) is not None:
            return
        addresses = await self._resolver(host, port)
        if not addresses:
            raise ResolutionError(f"{host} resolved to no address")
        for address in addresses:
            self._check_ip(self._parse_address(address), hostname=host)

    def check_peer(self, url: str, address: str) -> None:
        """The IP rules on the address a connection for ``url`` actually reached."""
        host, _port = self._split(url)
        self._check_ip(self._parse_address(address), hostname=None if ip_literal(host) else host)

    def check_source(self, source: LiveSource) -> None:
        """Registration-time check of every URL a ``live`` source names (pod addresses are checked per scrape)."""
        for url in source_urls(source):
            self.check(url)

    # -- helpers --------------------------------------------------------------------------------------------

    @staticmethod
    def _split(url: str) -> tuple[str, int]:
        try:
            parts = urlsplit(url.strip())
            port = parts.port
        except ValueError as exc:
            raise TargetRefused(f"not a valid URL: {exc}") from None
        if parts.scheme not in ("http", "https"):
            raise TargetRefused(f"scheme {parts.scheme or '(none)'!r} is not allowed; use http or https")
        if parts.username is not None or parts.password is not None or "@" in parts.netloc:
            raise TargetRefused("credentials in the URL are not allowed")
        if not parts.hostname:
            raise TargetRefused("the URL names no host")
        return _normal_host(parts.hostname), port or (443 if parts.scheme == "https" else 80)

    @staticmethod
    def _parse_address(address: str) -> IPAddress:
        try:
            return _canonical(ipaddress.ip_address(address.strip("[]")))
        except ValueError:
            raise TargetRefused(f"{address!r} is not an IP address") from None

    def _host_listed(self, host: str) -> bool:
        return host in self._hosts or any(host.endswith(suffix) for suffix in self._suffixes)

    def _in_networks(self, ip: IPAddress) -> bool:
        return ip in self._ips or any(ip.version == net.version and ip in net for net in self._networks)

    def _named_explicitly(self, ip: IPAddress, sensitive: Sequence[IPNetwork]) -> bool:
        """An entry that is the address itself, or a CIDR lying inside the sensitive range (so a broad
        ``0.0.0.0/0`` or ``169.0.0.0/8`` never counts as naming link-local or metadata addresses)."""
        if ip in self._ips:
            return True
        return any(
            ip.version == net.version and ip in net and any(_subnet_of(net, s) for s in sensitive)
            for net in self._networks
        )

    def _check_ip(self, ip: IPAddress, *, hostname: str | None) -> None:
        ip = _canonical(ip)
        listed_metadata_host = (
            hostname is not None and hostname in METADATA_HOSTNAMES and hostname in self._hosts
        )
        if ip in METADATA_ADDRESSES:
            exact = ipaddress.ip_network(ip)
            if not (listed_metadata_host or self._named_explicitly(ip, (exact,))):
                raise TargetRefused(f"{ip} is a cloud metadata address")
            return
        for kind, networks in (("link-local", LINK_LOCAL_NETWORKS), ("unspecified", UNSPECIFIED_NETWORKS)):
            if any(ip.version == net.version and ip in net for net in networks):
                if not (listed_metadata_host or self._named_explicitly(ip, networks)):
                    raise TargetRefused(f"{ip} is a {kind} address")
                return
        if not self.restricted or self._in_networks(ip):
            return
        if hostname is not None and self._host_listed(hostname):
            return
        where = f"{hostname} resolves to {ip}, which" if hostname else f"{ip}"
        raise TargetRefused(f"{where} is not in KVCAP_SCRAPE_ALLOWED_HOSTS")


def _subnet_of(net: IPNetwork, other: IPNetwork) -> bool:
    if isinstance(net, ipaddress.IPv4Network) and isinstance(other, ipaddress.IPv4Network):
        return net.subnet_of(other)
    if isinstance(net, ipaddress.IPv6Network) and isinstance(other, ipaddress.IPv6Network):
        return net.subnet_of(other)
    return False
