"""Push dispatch: POST a check request to a producer instance's check URL.

The body is the check request's JSON (the same object a long poll returns),
signed with HMAC-SHA256 over a timestamp and the body when
`check_push_secret` is set (`signing`). A 2xx answer means delivered; its
JSON may carry the answer at once (DTM style):
`{"resolution": "commit" | "rollback" | "unknown"}`. Without one, the
producer ends the transaction itself with `from_check: true`.

Registration refuses check URLs whose host is a forbidden address, but a
host name can resolve to one later (DNS rebinding, or a record changed since
registration): before each push the host is resolved and the push is not
sent when any of its addresses is forbidden (`check_urls.forbidden_address`).
httpx resolves the name again to connect, so a resolver answering
differently within that moment is not caught here.

The answer is read within `max_check_answer_bytes` (`answers`): a larger
one, on the wire or inflated, is a failed push like a refused connection.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import socket
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

import httpx
from psycopg import AsyncConnection

from coordinator import __version__
from coordinator.core.checkback.answers import ACCEPT_ENCODING, UnreadableAnswer, read_answer
from coordinator.core.checkback.signing import SIGNATURE_HEADER, TIMESTAMP_HEADER, sign
from coordinator.db.queries import execute, fetch_all
from coordinator.domain.check_urls import DEFAULT_MAX_CHECK_ANSWER_BYTES, forbidden_address
from coordinator.domain.checkback import CheckRequest, ClaimedCheck
from coordinator.domain.states import CheckStatus, DispatchMode, Resolution


@dataclass(frozen=True, slots=True)
class PushOutcome:
    delivered: bool
    resolution: Resolution | None = None  # commit or rollback carried by the answer
    detail: str | None = None  # why it failed, or what the answer said
    answered_unknown: bool = False  # an answer all the same, that changes nothing


async def start(conn: AsyncConnection[Any], claimed: ClaimedCheck) -> bool:
    """Mark the claimed push request `pushing`; False if it is no longer open to push.

    It is not when its message was resolved, or checked again, since the claim.
    """
    rows = await fetch_all(
        conn,
        "start_pushes",
        {
            "offsets": [claimed.offset],
            "check_counts": [claimed.check_count],
            "via": (claimed.via or DispatchMode.PUSH).value,
        },
    )
    return bool(rows)


async def finish(conn: AsyncConnection[Any], claimed: ClaimedCheck, outcome: PushOutcome) -> None:
    """Record how the push went on its check request (the message waits for its next check)."""
    status = CheckStatus.DELIVERED if outcome.delivered else CheckStatus.FAILED
    await execute(
        conn,
        "finish_push",
        {
            "offset": claimed.offset,
            "check_count": claimed.check_count,
            "status": status.value,
            "detail": outcome.detail,
        },
    )


def encode(request: CheckRequest) -> bytes:
    return json.dumps(request.to_json(), separators=(",", ":"), ensure_ascii=False).encode()


def headers_for(body: bytes, secret: str | None, *, timestamp: int | None = None) -> dict[str, str]:
    """The headers of a push; `timestamp` (unix seconds) defaults to now."""
    headers = {
        "content-type": "application/json",
        "user-agent": f"coordinator/{__version__}",
        "accept-encoding": ACCEPT_ENCODING,
    }
    if secret:
        sent_at = str(int(time.time()) if timestamp is None else timestamp)
        headers[TIMESTAMP_HEADER] = sent_at
        headers[SIGNATURE_HEADER] = sign(body, secret, sent_at)
    return headers


def forbidden_among(addresses: Iterable[str]) -> str | None:
    """The first of a host's addresses the coordinator must not call, and why; None if none."""
    for address in addresses:
        reason = forbidden_address(address)
        if reason is not None:
            return f"{address} ({reason})"
    return None


async def resolve(host: str) -> list[str]:
    """Every address `host` (a URL's host: a name or an IP literal) resolves to."""
    host = unquote(host)  # an IPv6 zone comes as %25
    try:
        return [str(ipaddress.ip_address(host))]
    except ValueError:
        pass
    infos = await asyncio.get_running_loop().getaddrinfo(host, None, type=socket.SOCK_STREAM)
    return [str(info[4][0]) for info in infos]


async def refusal(url: str) -> str | None:
    """Why a push to `url` must not be sent now, or None when it may."""
    host = httpx.URL(url).host
    try:
        addresses = await resolve(host)
    except OSError as error:
        return f"check URL host {host!r} does not resolve: {error}"[:500]
    forbidden = forbidden_among(addresses)
    if forbidden is not None:
        return f"check URL resolves to a forbidden address {forbidden}; not sent"[:500]
    return None


async def push(
    client: httpx.AsyncClient,
    url: str,
    request: CheckRequest,
    secret: str | None,
    *,
    max_answer_bytes: int = DEFAULT_MAX_CHECK_ANSWER_BYTES,
    timeout_seconds: float | None = None,
) -> PushOutcome:
    """POST the check request; an answer over `max_answer_bytes` is a failed push.

    `timeout_seconds` bounds the whole push, the answer's last byte included:
    httpx's own timeout bounds each read, which an answer trickling in a
    byte at a time would keep from ever firing.
    """
    refused = await refusal(url)
    if refused is not None:
        return PushOutcome(False, detail=refused)
    body = encode(request)
    try:
        async with (
            asyncio.timeout(timeout_seconds),
            client.stream("POST", url, content=body, headers=headers_for(body, secret)) as response,
        ):
            if not response.is_success:
                # the body is never read: closing the stream drops the connection
                return PushOutcome(False, detail=f"HTTP {response.status_code} from the check URL")
            content = await read_answer(response, max_answer_bytes)
    except TimeoutError:
        if timeout_seconds is None:
            raise  # not this bound's
        return PushOutcome(
            False,
            detail=f"no whole answer from the check URL within {timeout_seconds:g} s "
            "(check_push_timeout_seconds)",
        )
    except httpx.HTTPError as error:
        return PushOutcome(False, detail=f"{type(error).__name__}: {error}"[:500])
    except UnreadableAnswer as error:
        return PushOutcome(False, detail=str(error)[:500])
    return _answer(content)


def _answer(content: bytes) -> PushOutcome:
    if not content:
        return PushOutcome(True)
    try:
        answer = json.loads(content)
    except ValueError:
        return PushOutcome(True)  # a plain 200: the producer ends the transaction itself
    value = answer.get("resolution") if isinstance(answer, dict) else None
    if value is None:
        return PushOutcome(True)
    try:
        resolution = Resolution(str(value).lower())
    except ValueError:
        return PushOutcome(True, detail=f"answer resolution {str(value)[:40]!r} not understood")
    if resolution is Resolution.UNKNOWN:
        return PushOutcome(True, detail="answered unknown", answered_unknown=True)
    return PushOutcome(True, resolution=resolution, detail=f"answered {resolution.value}")
