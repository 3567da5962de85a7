"""What every HTTP request passes before any route, hot or not.

HotRoutes (hot_routes.py), the app uvicorn serves, asks `Gate.refusal` of
every request before it answers a hot route itself or hands the request to
FastAPI, so both kinds of route apply the same three rules:

- **One Authorization header.** Two would let the hot routes and FastAPI's
  routes read different ones (the last, the first); neither is picked.
- **A Host this server answers** (domain/hosts.py: DNS rebinding). With
  authentication off, loopback names and allowed_hosts only. With it on, a
  rebound page still has no token, so any Host is answered unless
  allowed_hosts is set, which then restricts it as well. `/health` answers
  any Host: it tells nothing, and probes call it by address.
- **No cross-origin browser write.** A browser marks the requests a page
  makes: `Origin` (the page's scheme, host and port) and `Sec-Fetch-Site`.
  A request that may change something (any method but GET, HEAD, OPTIONS),
  and any request to the API (`/v1/`, `/metrics`: a long poll for check
  requests is a GET that hands them over), from another site's page, or
  another port's on this host (`same-site`), is refused, tokens or not: the
  coordinator serves no cross-origin client (it sends no CORS headers), so
  only an attack sends one. The pages (`/`, `/docs`, ...) may be linked to
  from anywhere. Clients other than browsers send neither header.

The headers are read in one pass over the raw ASGI list (`request_heads`),
which the hot routes reuse for the headers they need.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import NamedTuple

from coordinator.domain.errors import CoordinatorError, InvalidMessage
from coordinator.domain.hosts import ANY_HOST, host_name, is_loopback
from coordinator.http.errors import CrossOriginWrite, HostNotAllowed

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
# Where even a GET is the API's, not a page a link may open.
API_PREFIXES = ("/v1/", "/metrics")
ANY_HOST_PATHS = frozenset({"/health"})
# What Sec-Fetch-Site says of a request a page of this server made, or one the
# user made (typed address, bookmark); `cross-site` and `same-site` come from
# another site's page, or another port's of this host.
_OWN_FETCH_SITES = frozenset({b"same-origin", b"none"})
_DEFAULT_PORTS = {"http": ":80", "https": ":443"}
_MOST_REMEMBERED_HOSTS = 64


class RequestHeads(NamedTuple):
    """The request headers the door reads before any route (ASGI names them in lower case)."""

    content_length: bytes | None = None
    content_type: bytes | None = None
    authorization: bytes | None = None
    authorizations: int = 0
    host: bytes | None = None
    hosts: int = 0
    origin: bytes | None = None
    origins: int = 0
    fetch_site: bytes | None = None


def request_heads(headers: Iterable[tuple[bytes, bytes]]) -> RequestHeads:
    content_length = content_type = authorization = host = origin = fetch_site = None
    authorizations = hosts = origins = 0
    for name, value in headers:
        if name == b"content-length":
            content_length = value
        elif name == b"content-type":
            content_type = value
        elif name == b"authorization":
            authorization = value
            authorizations += 1
        elif name == b"host":
            host = value
            hosts += 1
        elif name == b"origin":
            origin = value
            origins += 1
        elif name == b"sec-fetch-site":
            fetch_site = value
    return RequestHeads(
        content_length,
        content_type,
        authorization,
        authorizations,
        host,
        hosts,
        origin,
        origins,
        fetch_site,
    )


def duplicate_authorization(count: int) -> InvalidMessage | None:
    """The refusal (400) of a request with `count` Authorization headers, if more than one."""
    if count > 1:
        return InvalidMessage(f"send one Authorization header (this request has {count})")
    return None


@dataclass(frozen=True, slots=True)
class Gate:
    """The rules above, for one server's allowed_hosts."""

    exact: frozenset[str] = frozenset()
    suffixes: tuple[str, ...] = ()  # from `*.example.com`: ".example.com"
    any_host: bool = False
    listed: bool = False  # allowed_hosts is set: Host is checked with authentication on too
    # Host values answered already, raw: a server hears the same few on every
    # request, and parsing one costs more than the lookup. Bounded, and only
    # answered ones are kept, so that made-up names cannot grow it.
    _answered: set[bytes] = field(default_factory=set, compare=False)

    @classmethod
    def of(cls, allowed_hosts: Iterable[str]) -> Gate:
        patterns = tuple(allowed_hosts)
        return cls(
            exact=frozenset(p for p in patterns if not p.startswith("*")),
            suffixes=tuple(p[1:] for p in patterns if p.startswith("*.")),
            any_host=ANY_HOST in patterns,
            listed=bool(patterns),
        )

    def refusal(
        self, method: str, path: str, scheme: str, heads: RequestHeads, authenticating: bool
    ) -> CoordinatorError | None:
        """Why the request is refused before any route, or None."""
        if heads.authorizations > 1:
            return duplicate_authorization(heads.authorizations)
        if heads.hosts > 1:
            return InvalidMessage(f"send one Host header (this request has {heads.hosts})")
        checks_host = not self.any_host and (self.listed or not authenticating)
        host = heads.host
        if (
            checks_host
            and host is not None
            and host not in self._answered
            and path not in ANY_HOST_PATHS
        ):
            refused = self._host_refusal(host.decode("latin-1"))
            if refused is not None:
                return refused
            if len(self._answered) < _MOST_REMEMBERED_HOSTS:
                self._answered.add(host)
        if heads.fetch_site is None and heads.origins == 0:
            return None  # not a browser's request, or a page's own that needs no mark
        if method not in SAFE_METHODS or path.startswith(API_PREFIXES):
            return _cross_origin_refusal(scheme, heads)
        return None

    def allows(self, name: str) -> bool:
        return (
            is_loopback(name)
            or name in self.exact
            or any(name.endswith(suffix) for suffix in self.suffixes)
        )

    def _host_refusal(self, header: str) -> HostNotAllowed | None:
        name = host_name(header)
        if name is None:
            return HostNotAllowed(f"the Host header {header!r} is not a host name")
        if self.allows(name):
            return None
        why = (
            "it answers loopback names (localhost, 127.0.0.1, [::1]) and allowed_hosts only"
            if self.listed
            else "without authentication it answers loopback names "
            "(localhost, 127.0.0.1, [::1]) only"
        )
        return HostNotAllowed(
            f"this coordinator does not answer to the host name {name!r}: {why}; "
            "if it is this server's name, add it to allowed_hosts (COORDINATOR_ALLOWED_HOSTS)"
        )


def _cross_origin_refusal(scheme: str, heads: RequestHeads) -> CrossOriginWrite | None:
    fetch_site = heads.fetch_site
    if fetch_site is not None and fetch_site.lower() not in _OWN_FETCH_SITES:
        site = fetch_site.decode("latin-1")
        return CrossOriginWrite(
            f"a page of another site may not call this API (Sec-Fetch-Site: {site}); "
            "call the coordinator from a service, not from a browser page"
        )
    if heads.origins == 0:
        return None
    origin = (heads.origin or b"").decode("latin-1").strip()
    if heads.origins > 1 or not _same_origin(origin, scheme, heads.host):
        return CrossOriginWrite(
            f"a page of another origin may not call this API (Origin: {origin}); "
            "call the coordinator from a service, not from a browser page"
        )
    return None


def _same_origin(origin: str, scheme: str, host: bytes | None) -> bool:
    """Whether `Origin` names this server as the request reached it: its Host.

    Host and port are compared, not the scheme: behind a TLS proxy the page is
    https while the request arrives over http, and no other page can be
    served from the same host and port.
    """
    if host is None:
        return False
    origin_scheme, separator, netloc = origin.lower().partition("://")
    if not separator or origin_scheme not in _DEFAULT_PORTS:
        return False  # "null" (a sandboxed page, a file) and other schemes
    own = host.decode("latin-1").strip().lower().removesuffix(_DEFAULT_PORTS.get(scheme, ""))
    return netloc.removesuffix(_DEFAULT_PORTS[origin_scheme]) == own
