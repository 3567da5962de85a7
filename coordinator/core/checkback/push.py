"""Push dispatch: POST a check request to a producer instance's check URL.

The body is the check request's JSON (the same object a long poll returns),
signed with HMAC-SHA256 when `check_push_secret` is set. A 2xx answer means
delivered; its JSON may carry the answer at once (DTM style):
`{"resolution": "commit" | "rollback" | "unknown"}`. Without one, the
producer ends the transaction itself with `from_check: true`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import httpx

from coordinator import __version__
from coordinator.core.checkback.signing import SIGNATURE_HEADER, sign
from coordinator.domain.checkback import CheckRequest
from coordinator.domain.states import Resolution


@dataclass(frozen=True, slots=True)
class PushOutcome:
    delivered: bool
    resolution: Resolution | None = None  # commit or rollback carried by the answer
    detail: str | None = None  # why it failed, or what the answer said


def encode(request: CheckRequest) -> bytes:
    return json.dumps(request.to_json(), separators=(",", ":"), ensure_ascii=False).encode()


def headers_for(body: bytes, secret: str | None) -> dict[str, str]:
    headers = {"content-type": "application/json", "user-agent": f"coordinator/{__version__}"}
    if secret:
        headers[SIGNATURE_HEADER] = sign(body, secret)
    return headers


async def push(
    client: httpx.AsyncClient, url: str, request: CheckRequest, secret: str | None
) -> PushOutcome:
    body = encode(request)
    try:
        response = await client.post(url, content=body, headers=headers_for(body, secret))
    except httpx.HTTPError as error:
        return PushOutcome(False, detail=f"{type(error).__name__}: {error}"[:500])
    if not response.is_success:
        return PushOutcome(False, detail=f"HTTP {response.status_code} from the check URL")
    return _answer(response)


def _answer(response: httpx.Response) -> PushOutcome:
    if not response.content:
        return PushOutcome(True)
    try:
        answer = response.json()
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
        return PushOutcome(True, detail="answered unknown")
    return PushOutcome(True, resolution=resolution, detail=f"answered {resolution.value}")
