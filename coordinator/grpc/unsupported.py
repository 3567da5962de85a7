"""The RPCs the coordinator does not offer, each answered UNSUPPORTED with what to do instead.

They authenticate first, like every other RPC: without a valid token the
answer is UNAUTHORIZED, so that what the door offers is told only to callers.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from coordinator.core.auth import Authenticator
from coordinator.domain.errors import CoordinatorError
from coordinator.grpc.calls import caller_of
from coordinator.grpc.status import error_status, status
from coordinator.grpc.stubs import Stubs


@dataclass(frozen=True, slots=True)
class _Unsupported:
    what: str
    instead: str


_CONSUME = "consume with a PushConsumer or a SimpleConsumer"

UNSUPPORTED = {
    "UpdateOffset": _Unsupported("offsets (PullConsumer)", _CONSUME),
    "GetOffset": _Unsupported("offsets (PullConsumer)", _CONSUME),
    "QueryOffset": _Unsupported("offsets (PullConsumer)", _CONSUME),
    "SyncLiteSubscription": _Unsupported("lite topics", "subscribe to a topic"),
}


def unsupported_handlers(
    stubs: Stubs, authenticator: Authenticator
) -> dict[str, Callable[..., Awaitable[Any]]]:
    """A handler for each unary RPC in UNSUPPORTED, by the RPC's name."""
    return {
        name: _answer(stubs, authenticator, name, unsupported)
        for name, unsupported in UNSUPPORTED.items()
    }


def _refusal(stubs: Stubs, authenticator: Authenticator, context: Any) -> Any | None:
    """The status refusing the caller, or None when its token is accepted."""
    try:
        caller_of(context, authenticator)
    except CoordinatorError as error:
        return error_status(stubs, error)
    return None


def _answer(
    stubs: Stubs, authenticator: Authenticator, name: str, unsupported: _Unsupported
) -> Callable[..., Awaitable[Any]]:
    kind = getattr(stubs.service, f"{name}Response")

    async def answer(request: Any, context: Any) -> Any:
        refusal = _refusal(stubs, authenticator, context)
        if refusal is not None:
            return kind(status=refusal)
        return kind(
            status=status(
                stubs,
                "UNSUPPORTED",
                f"{name}: {unsupported.what} is not supported; {unsupported.instead}",
            )
        )

    return answer


def pull_message_handler(
    stubs: Stubs, authenticator: Authenticator
) -> Callable[..., AsyncIterator[Any]]:
    """PullMessage (a stream of responses): one answer, UNSUPPORTED."""

    async def PullMessage(request: Any, context: Any) -> AsyncIterator[Any]:
        refusal = _refusal(stubs, authenticator, context)
        if refusal is not None:
            yield stubs.service.PullMessageResponse(status=refusal)
            return
        yield stubs.service.PullMessageResponse(
            status=status(
                stubs,
                "UNSUPPORTED",
                "PullMessage (PullConsumer offsets) is not supported: consume with a "
                "PushConsumer or a SimpleConsumer",
            )
        )

    return PullMessage
