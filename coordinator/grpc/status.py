"""Core errors as RocketMQ status codes (the `status` every response carries).

RocketMQ answers in the response body, with gRPC itself reporting OK: the
clients read `status.code` (Code.OK = 20000) and raise on anything else.
Codes are named here and turned into numbers with the loaded stubs.
"""

from __future__ import annotations

from typing import Any

from coordinator.domain import errors
from coordinator.grpc.stubs import Stubs

CODE_BY_ERROR: dict[type[errors.CoordinatorError], str] = {
    # before InvalidMessage, which it is a kind of: the first match answers
    errors.InvalidFilterExpression: "ILLEGAL_FILTER_EXPRESSION",
    errors.InvalidMessage: "BAD_REQUEST",
    errors.NotFound: "NOT_FOUND",
    # the request is well formed but the transaction's state forbids it
    errors.StateConflict: "PRECONDITION_FAILED",
    errors.ProducerGroupMismatch: "PRECONDITION_FAILED",
    errors.MessageIdConflict: "PRECONDITION_FAILED",
    errors.ReceiptHandleStale: "INVALID_RECEIPT_HANDLE",
    errors.Unauthenticated: "UNAUTHORIZED",
    errors.PermissionDenied: "FORBIDDEN",
    errors.TransactionalMessagesRejected: "FORBIDDEN",
    errors.RateLimited: "TOO_MANY_REQUESTS",
    # the clients retry sends on it, as they would on a broker failing over
    errors.DatabaseUnavailable: "HA_NOT_AVAILABLE",
}


class DoorError(errors.CoordinatorError):
    """A refusal with a RocketMQ code of its own (ILLEGAL_TOPIC, UNSUPPORTED, ...)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.rocketmq_code = code


class Unreadable(DoorError):
    """A request that does not parse as its protobuf type, handed to the RPC in its place."""

    def __init__(self, message: str) -> None:
        super().__init__("BAD_REQUEST", message)


def code_name(error: errors.CoordinatorError) -> str:
    if isinstance(error, DoorError):
        return error.rocketmq_code
    return next(
        (name for kind, name in CODE_BY_ERROR.items() if isinstance(error, kind)), "BAD_REQUEST"
    )


def status(stubs: Stubs, name: str = "OK", message: str = "OK") -> Any:
    return stubs.definition.Status(code=stubs.code(name), message=message)


def error_status(stubs: Stubs, error: errors.CoordinatorError) -> Any:
    return status(stubs, code_name(error), error.message)
