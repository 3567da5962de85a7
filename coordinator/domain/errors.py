"""Errors of the core. Every interface maps them to its own status codes.

Each error carries a stable machine-readable `code` and a sentence for people.
"""

from __future__ import annotations


class CoordinatorError(Exception):
    code = "coordinator_error"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class InvalidMessage(CoordinatorError):
    """The request is malformed: a bad name, too large a body, and so on."""

    code = "invalid_request"


class InvalidFilterExpression(InvalidMessage):
    """A subscription's filter expression does not parse; `position` is its 1-based character."""

    code = "invalid_filter_expression"

    def __init__(self, message: str, position: int | None = None) -> None:
        super().__init__(message)
        self.position = position


class AmbiguousMessageId(InvalidMessage):
    """A lookup by message id alone matched messages of several producer groups or topics."""

    code = "ambiguous_message_id"


class NotFound(CoordinatorError):
    code = "not_found"


class StateConflict(CoordinatorError):
    """The message is in a state that forbids the requested change."""

    code = "state_conflict"

    def __init__(self, message: str, current_state: str | None = None) -> None:
        super().__init__(message)
        self.current_state = current_state


class ProducerGroupMismatch(CoordinatorError):
    code = "producer_group_mismatch"


class MessageIdConflict(CoordinatorError):
    """A producer reused a message id for a different message."""

    code = "message_id_conflict"


class TransactionalMessagesRejected(CoordinatorError):
    code = "transactional_messages_rejected"


class Unauthenticated(CoordinatorError):
    """No credentials, or credentials that match no live token."""

    code = "unauthenticated"


class PermissionDenied(CoordinatorError):
    """The token is valid but its permissions do not cover the request."""

    code = "permission_denied"


class RateLimited(CoordinatorError):
    """Too many requests or long polls at once for one token."""

    code = "rate_limited"


class ReceiptHandleStale(CoordinatorError):
    """The receipt handle was superseded by a later receive or change of invisible duration."""

    code = "receipt_handle_stale"


class DatabaseUnavailable(CoordinatorError):
    """PostgreSQL could not be reached, or gave no connection in time.

    Nothing was stored by the request that gets it (or, for a request whose
    connection broke after COMMIT, the same request sent again is answered
    as a repeat), so a client retries it unchanged.
    """

    code = "database_unavailable"


class DoorFailed(RuntimeError):
    """A door of the node (HTTP, gRPC) could not start serving; the message says why.

    Not a CoordinatorError: no request gets it, the process that starts the node does.
    """
