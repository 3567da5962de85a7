"""Typed errors for the coordinator's answers, so callers can catch what they mean."""

from __future__ import annotations


class CoordinatorClientError(Exception):
    """Base of every error the SDK raises."""


class CoordinatorUnavailable(CoordinatorClientError):
    """The coordinator could not be reached (after retries) or answered 5xx.

    `retry_after` is the seconds the last answer's Retry-After asked for, if it gave one.
    """

    def __init__(self, message: str, *, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class CoordinatorRequestError(CoordinatorClientError):
    """The coordinator refused the request (4xx). `code` is its stable error code."""

    status: int = 0

    def __init__(self, status: int, code: str, message: str, body: dict | None = None) -> None:
        super().__init__(f"{message} ({status} {code})")
        self.status = status
        self.code = code
        self.message = message
        self.body = body or {}


class InvalidRequest(CoordinatorRequestError):
    """400/413/422: the message or request is not valid."""


class TransactionalMessagesRejected(CoordinatorRequestError):
    """403: the coordinator is configured to refuse half messages."""


class NotFound(CoordinatorRequestError):
    """404: unknown transaction, message or receipt handle."""


class Conflict(CoordinatorRequestError):
    """409: the request conflicts with what is stored."""


class StateConflict(Conflict):
    """409 state_conflict: the opposite resolution was already stored."""


class ProducerGroupMismatch(Conflict):
    """409 producer_group_mismatch."""


class MessageIdConflict(Conflict):
    """409 message_id_conflict: the message id is used by a different message."""


class Unauthenticated(CoordinatorRequestError):
    """401: no token, or one the coordinator does not know (pass `token=`)."""


class PermissionDenied(CoordinatorRequestError):
    """403: the token's permissions do not cover this topic or group."""


class RateLimited(CoordinatorRequestError):
    """429: the token is over its request rate or holds too many long polls."""


_BY_CODE: dict[str, type[CoordinatorRequestError]] = {
    "state_conflict": StateConflict,
    "producer_group_mismatch": ProducerGroupMismatch,
    "message_id_conflict": MessageIdConflict,
    "transactional_messages_rejected": TransactionalMessagesRejected,
    "unauthenticated": Unauthenticated,
    "permission_denied": PermissionDenied,
    "rate_limited": RateLimited,
}
_BY_STATUS: dict[int, type[CoordinatorRequestError]] = {
    400: InvalidRequest,
    403: TransactionalMessagesRejected,
    404: NotFound,
    409: Conflict,
    401: Unauthenticated,
    413: InvalidRequest,
    415: InvalidRequest,
    422: InvalidRequest,
    429: RateLimited,
}


def error_for(status: int, body: dict) -> CoordinatorRequestError:
    code = str(body.get("error", "http_error"))
    message = str(body.get("message", "the coordinator refused the request"))
    kind = _BY_CODE.get(code) or _BY_STATUS.get(status, CoordinatorRequestError)
    return kind(status, code, message, body)
