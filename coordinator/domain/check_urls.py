"""Check URLs: which ones the coordinator accepts, and which addresses it never calls.

A check URL is called by the coordinator, from inside its network: a
producer that could register any address would make the coordinator fetch
what only it can reach (server-side request forgery). These rules run at
registration (`check_url`) and again before each push, on every address the
URL's name resolves to then (`forbidden_address`).
"""

from __future__ import annotations

import ipaddress
import socket
from urllib.parse import unquote

import httpx

from coordinator.domain.errors import InvalidMessage

CHECK_URL_MAX_LENGTH = 2048
# The most of a check URL's answer the coordinator reads, on the wire and
# decoded: the answer is a tiny JSON object (`max_check_answer_bytes`).
DEFAULT_MAX_CHECK_ANSWER_BYTES = 64 * 1024
# How old a signed check request a push producer still takes, by default
# (`check_push_max_age_seconds`; core/checkback/signing.py verifies).
DEFAULT_MAX_AGE_SECONDS = 300.0

# Loopback and private networks stay allowed: producers often run on the same
# host or network.
IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
_THIS_NETWORK = ipaddress.ip_network("0.0.0.0/8")  # Linux connects 0.0.0.0 to the host itself
_BROADCAST = ipaddress.ip_address("255.255.255.255")
# 169.254.169.254 and the ECS and Azure endpoints are link-local, refused as such.
_METADATA_ADDRESSES = frozenset(
    ipaddress.ip_address(a)
    for a in (
        "fd00:ec2::254",  # AWS instance metadata over IPv6
        "100.100.100.200",  # Alibaba Cloud instance metadata
    )
)
_METADATA_HOSTS = frozenset(
    {
        "metadata",
        "metadata.google.internal",
        "metadata.goog",
        "instance-data",
        "instance-data.ec2.internal",
    }
)
# IPv6 forms that carry an IPv4 address, which the host (or a gateway on the
# way) turns into a connection to that IPv4 address: each embedded address is
# held to the IPv4 rules, so no IPv6 spelling reaches a forbidden one.
_IPV4_TRANSLATED = ipaddress.ip_network("::ffff:0:0:0/96")  # SIIT, RFC 2765
_IPV4_COMPATIBLE = ipaddress.ip_network("::/96")  # deprecated, but still routed by some stacks
_NAT64 = ipaddress.ip_network("64:ff9b::/96")  # the well-known prefix: the last 32 bits
# The local-use NAT64 prefix (RFC 8215) is split by each network into prefixes
# of its own length; the IPv4 address sits where RFC 6052 puts it for that
# length, which a coordinator cannot know: every position is held to the rules.
_NAT64_LOCAL = ipaddress.ip_network("64:ff9b:1::/48")
_NAT64_LOCAL_LENGTHS = (48, 56, 64)  # and 96, the last 32 bits


def _rfc6052_address(value: int, prefix_length: int) -> ipaddress.IPv4Address:
    """The IPv4 address embedded after a NAT64 prefix of `prefix_length` (32 to 64 bits).

    RFC 6052 skips bits 64 to 71 (the "u" octet): without them the address
    is 120 bits long and the IPv4 address follows the prefix directly.
    """
    without_u = (value >> 64) << 56 | (value & ((1 << 56) - 1))
    return ipaddress.IPv4Address((without_u >> (120 - prefix_length - 32)) & 0xFFFFFFFF)


def _embedded_ipv4(address: ipaddress.IPv6Address) -> list[tuple[str, ipaddress.IPv4Address]]:
    """The IPv4 addresses an IPv6 address leads to, each with the form that carries it."""
    value = int(address)
    last_32 = ipaddress.IPv4Address(value & 0xFFFFFFFF)
    if address.ipv4_mapped is not None:
        return [("IPv4-mapped", address.ipv4_mapped)]
    if address in _IPV4_TRANSLATED:
        return [("IPv4-translated", last_32)]
    if address in _IPV4_COMPATIBLE:
        # :: and ::1 are themselves (unspecified, loopback), not IPv4 addresses
        return [] if value <= 1 else [("IPv4-compatible", last_32)]
    if address in _NAT64:
        return [("NAT64", last_32)]
    if address in _NAT64_LOCAL:
        candidates = [_rfc6052_address(value, n) for n in _NAT64_LOCAL_LENGTHS] + [last_32]
        # Zeros where one length puts the address are the padding of another,
        # not 0.0.0.0: the gateway, another machine, does not connect 0.0.0.0
        # to the coordinator's host as Linux does.
        return [("local-use NAT64", a) for a in candidates if a not in _THIS_NETWORK]
    if address.sixtofour is not None:
        return [("6to4", address.sixtofour)]
    if address.teredo is not None:
        return [("Teredo", address.teredo[1])]
    return []


def forbidden_address(address: str | IPAddress) -> str | None:
    """Why the coordinator must never call `address`, or None when it may.

    The one rule for check URLs: applied to the host of a URL at registration
    and to every address its host resolves to at each push. An IPv6 address
    that carries an IPv4 address (IPv4-mapped, -translated or -compatible,
    NAT64, 6to4, Teredo) is refused when the IPv4 address is.
    """
    if isinstance(address, str):
        try:
            address = ipaddress.ip_address(address)
        except ValueError:
            return "not an IP address"
    reason = _forbidden(address)
    if reason is not None or isinstance(address, ipaddress.IPv4Address):
        return reason
    for form, embedded in _embedded_ipv4(address):
        reason = _forbidden(embedded)
        if reason is not None:
            return f"{reason} ({form} form of {embedded})"
    return None


def _forbidden(address: IPAddress) -> str | None:
    if address in _METADATA_ADDRESSES:
        return "a cloud instance metadata service"
    if address.is_link_local:
        return "link-local, where cloud instance metadata services live"
    if address.is_unspecified or address in _THIS_NETWORK:
        return "unspecified"
    if address.is_multicast:
        return "multicast"
    if address == _BROADCAST:
        return "broadcast"
    return None


def _host_address(host: str) -> IPAddress | None:
    """The address a URL's host names by itself, without DNS (None: a host name)."""
    try:
        return ipaddress.ip_address(unquote(host))  # an IPv6 zone comes as %25
    except ValueError:
        pass
    try:
        # Resolvers also read 2852039166 or 0xa9.0xfe.0xa9.0xfe as IPv4 addresses.
        return ipaddress.IPv4Address(socket.inet_aton(host))
    except OSError:
        return None


def check_url(url: str | None) -> str | None:
    if url is None:
        return None
    if len(url) > CHECK_URL_MAX_LENGTH:
        raise InvalidMessage(f"check URL is longer than {CHECK_URL_MAX_LENGTH} characters")
    try:
        parsed = httpx.URL(url)
    except (httpx.InvalidURL, TypeError, ValueError):
        raise InvalidMessage(f"check URL {url[:80]!r} is not a URL") from None
    if parsed.scheme not in ("http", "https") or not parsed.host:
        raise InvalidMessage(f"check URL {url[:80]!r} must be an absolute http or https URL")
    if parsed.userinfo:
        # The URL is listed to operators and written to logs: no secrets in it.
        raise InvalidMessage(
            "check URL must not contain credentials (user:password@); "
            "check requests are signed with check_push_secret instead"
        )
    host = parsed.host.rstrip(".")
    if host in _METADATA_HOSTS:
        raise InvalidMessage(
            f"check URL host {host!r} is a cloud instance metadata service; "
            "the coordinator does not call it"
        )
    address = _host_address(host)
    reason = forbidden_address(address) if address is not None else None
    if reason is not None:
        raise InvalidMessage(
            f"check URL address {address} is {reason}; the coordinator does not call it"
        )
    return url


def forbidden_host(host: str) -> str | None:
    """Why the coordinator must never connect to `host` (a name or address), or None.

    The registration-time rule of any address the coordinator calls out to
    (check URLs, check sources): the name itself, before DNS.
    """
    host = host.rstrip(".")
    if host in _METADATA_HOSTS:
        return f"host {host!r} is a cloud instance metadata service"
    address = _host_address(host)
    reason = forbidden_address(address) if address is not None else None
    if reason is not None:
        return f"address {address} is {reason}"
    return None
