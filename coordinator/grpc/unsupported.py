"""The RPCs the coordinator does not offer, each answered UNSUPPORTED with what to do instead.

They authenticate first, like every other RPC: without a valid token the
answer is UNAUTHORIZED, so that what the door offers is told only to callers.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
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


class Unsupported:
    """The RPCs in UNSUPPORTED, and PullMessage: each answers UNSUPPORTED to an accepted token."""

    def __init__(self, authenticator: Authenticator, stubs: Stubs) -> None:
        self.authenticator = authenticator
        self.stubs = stubs

    async def UpdateOffset(self, request: Any, context: Any) -> Any:
        return self._answer("UpdateOffset", context)

    async def GetOffset(self, request: Any, context: Any) -> Any:
        return self._answer("GetOffset", context)

    async def QueryOffset(self, request: Any, context: Any) -> Any:
        return self._answer("QueryOffset", context)

    async def SyncLiteSubscription(self, request: Any, context: Any) -> Any:
        return self._answer("SyncLiteSubscription", context)

    async def PullMessage(self, request: Any, context: Any) -> AsyncIterator[Any]:
        """PullMessage (a stream of responses): one answer, UNSUPPORTED."""
        refusal = _refusal(self.stubs, self.authenticator, context)
        if refusal is not None:
            yield self.stubs.service.PullMessageResponse(status=refusal)
            return
        yield self.stubs.service.PullMessageResponse(
            status=status(
                self.stubs,
                "UNSUPPORTED",
                "PullMessage (PullConsumer offsets) is not supported: consume with a "
                "PushConsumer or a SimpleConsumer",
            )
        )

    def _answer(self, name: str, context: Any) -> Any:
        kind = getattr(self.stubs.service, f"{name}Response")
        refusal = _refusal(self.stubs, self.authenticator, context)
        if refusal is not None:
            return kind(status=refusal)
        unsupported = UNSUPPORTED[name]
        return kind(
            status=status(
                self.stubs,
                "UNSUPPORTED",
                f"{name}: {unsupported.what} is not supported; {unsupported.instead}",
            )
        )


def _refusal(stubs: Stubs, authenticator: Authenticator, context: Any) -> Any | None:
    """The status refusing the caller, or None when its token is accepted."""
    try:
        caller_of(context, authenticator)
    except CoordinatorError as error:
        return error_status(stubs, error)
    return None
