"""The RPCs the coordinator does not offer, each answered UNSUPPORTED with what to do instead."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from coordinator.grpc.status import status
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


def unsupported_handlers(stubs: Stubs) -> dict[str, Callable[..., Awaitable[Any]]]:
    """A handler for each unary RPC in UNSUPPORTED, by the RPC's name."""
    return {name: _answer(stubs, name, unsupported) for name, unsupported in UNSUPPORTED.items()}


def _answer(stubs: Stubs, name: str, unsupported: _Unsupported) -> Callable[..., Awaitable[Any]]:
    kind = getattr(stubs.service, f"{name}Response")

    async def answer(request: Any, context: Any) -> Any:
        return kind(
            status=status(
                stubs,
                "UNSUPPORTED",
                f"{name}: {unsupported.what} is not supported; {unsupported.instead}",
            )
        )

    return answer


def pull_message_handler(stubs: Stubs) -> Callable[..., AsyncIterator[Any]]:
    """PullMessage (a stream of responses): one answer, UNSUPPORTED."""

    async def PullMessage(request: Any, context: Any) -> AsyncIterator[Any]:
        yield stubs.service.PullMessageResponse(
            status=status(
                stubs,
                "UNSUPPORTED",
                "PullMessage (PullConsumer offsets) is not supported: consume with a "
                "PushConsumer or a SimpleConsumer",
            )
        )

    return PullMessage
