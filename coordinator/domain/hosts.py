"""Host names: which ones a request's Host header may name, and how more are configured.

A web page can make a browser send requests to a server on the user's own
machine under the page's own host name: it points its name at 127.0.0.1 once
the page is loaded (DNS rebinding). The browser then treats the server's
answers as the page's own, so the page reads them. What gives the attack away
is the Host header, which still names the attacker's site. Loopback names
cannot be rebound that way (browsers resolve `localhost` and `*.localhost`
themselves, and an address is no name), so a server that authenticates no one
answers those, and the names its operator lists (allowed_hosts), only.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable

ANY_HOST = "*"

# A DNS name as an operator writes one: labels of letters, digits, '-' and '_'.
_NAME = re.compile(r"^[a-z0-9_]([a-z0-9_-]*[a-z0-9_])?(\.[a-z0-9_]([a-z0-9_-]*[a-z0-9_])?)*$")


def host_name(header: str) -> str | None:
    """The name a Host header value gives (lower case, without port or final dot).

    An IPv6 address keeps its brackets, in its compressed form (`[::1]`).
    None if the value is no host name (empty, a bad port or address).
    """
    value = header.strip().lower()
    if value.startswith("["):
        end = value.find("]")
        rest = value[end + 1 :] if end > 0 else ""
        if end < 0 or (rest and not (rest[0] == ":" and rest[1:].isdigit())):
            return None
        try:
            return f"[{ipaddress.IPv6Address(value[1:end]).compressed}]"
        except ValueError:
            return None
    name, colon, port = value.partition(":")
    if colon and not port.isdigit():
        return None
    name = name.removesuffix(".")
    return name if _NAME.match(name) else None


def is_loopback(host: str) -> bool:
    """Whether a host can only mean this machine: the one rule for a Host header's name
    (as `host_name` gives it) and for a listen address (`127.0.0.1`, `::1`, `[::1]`).

    `localhost` and the names under it (RFC 6761 keeps them for loopback, and
    browsers resolve them so themselves), and loopback addresses, an IPv6
    address mapping an IPv4 loopback one included. Nothing else: not
    0.0.0.0 nor `::`, which listen on every interface.
    """
    name = host.strip().lower().removesuffix(".")
    if name == "localhost" or name.endswith(".localhost"):
        return True
    try:
        address = ipaddress.ip_address(name.removeprefix("[").removesuffix("]"))
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped.is_loopback
    return address.is_loopback


def host_pattern(entry: str) -> str:
    """One allowed_hosts entry, checked and in the form `host_name` gives.

    A name (`coord.example.com`), every name under a domain
    (`*.example.com`), an address (`10.0.0.5`, `2001:db8::1` or
    `[2001:db8::1]`), or `*` for any host. ValueError with a sentence otherwise.
    """
    pattern = entry.strip().lower()
    if pattern == ANY_HOST:
        return pattern
    if ":" in pattern:
        try:
            return f"[{ipaddress.IPv6Address(pattern.strip('[]')).compressed}]"
        except ValueError:
            raise ValueError(
                f"{entry!r} is not a host name: give a name without scheme or port "
                "(coord.example.com), *.example.com, an address, or *"
            ) from None
    name = pattern.removeprefix("*.").removesuffix(".")
    if not _NAME.match(name):
        raise ValueError(
            f"{entry!r} is not a host name: give a name without scheme or port "
            "(coord.example.com), *.example.com, an address, or *"
        )
    return pattern.removesuffix(".")


def host_patterns(value: object) -> tuple[str, ...]:
    """allowed_hosts from a comma-separated string or a list of entries."""
    if value is None:
        return ()
    entries = value.split(",") if isinstance(value, str) else value
    if not isinstance(entries, Iterable):
        raise ValueError("give host names as a list, or one string separated by commas")
    patterns = []
    for entry in entries:
        if not isinstance(entry, str):
            raise ValueError(f"{entry!r} is not a host name")
        if entry.strip():
            patterns.append(host_pattern(entry))
    return tuple(dict.fromkeys(patterns))
