"""Where the HTTP door counts, times and logs each request it answers: here only.

Every answer of the door passes `record`: the app's (hot_routes.HotRoutes,
for the hot routes and FastAPI's alike) and the protocol's own (protocol.py:
a connection over the limit, a request not received in time), so the
request metrics (metrics.py) and the access log (logs.py) cannot disagree.
"""

from __future__ import annotations

import logging

from starlette.types import Scope

from coordinator.logs import ACCESS, access_line
from coordinator.metrics import RequestMeter

# The route label of requests no route took (404s), and of bodies refused for
# their declared size before any route was looked at.
UNMATCHED = "(unmatched)"
TOO_LARGE = "(too large)"
# ... of requests the gate refused (gate.py) before any route was looked at,
REFUSED = "(refused)"
# ... and of those the protocol answered itself, before any request was read whole.
TIMED_OUT = "(request timeout)"
TOO_MANY_CONNECTIONS = "(too many connections)"


def record(
    requests: RequestMeter | None,
    scope: Scope | None,
    route: str,
    status: int,
    seconds: float | None,
) -> None:
    """Count a request by its method, route template and status with the core's meter
    of HTTP requests (None: a protocol built without one counts nothing); time it and
    write its access line when it reached the app (`scope`), which the protocol's own
    answers never do."""
    if scope is None:
        if requests is not None:
            requests.observe(("-", route, status), 0, None)
        return
    method = scope["method"]
    if requests is not None:
        requests.observe((method, route, status), 2, seconds)
    if ACCESS.isEnabledFor(logging.INFO):
        path = scope["path"]
        if query := scope.get("query_string"):
            path = f"{path}?{query.decode('latin-1')}"
        client = scope.get("client")
        milliseconds = round((seconds or 0.0) * 1000, 3)
        access_line(
            "%s %s %d %.1f ms",
            (method, path, status, milliseconds),
            {
                "method": method,
                "path": path,
                "route": route,
                "status": status,
                "duration_ms": milliseconds,
                "client": client[0] if client else None,
            },
        )
