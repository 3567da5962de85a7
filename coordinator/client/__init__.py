"""The Python SDK: RocketMQ's programming model over the coordinator's HTTP API.

Importing it starts nothing and needs none of the server's machinery (only
httpx; the barrier and inbox helpers import psycopg or SQLAlchemy when used).
"""

from coordinator.client._retry import RetryPolicy
from coordinator.client.barrier import (
    AsyncBarrierTransactionListener,
    Barrier,
    BarrierTransactionListener,
)
from coordinator.client.consumer import (
    ROCKETMQ_RETRY_SCHEDULE,
    AsyncPushConsumer,
    AsyncSimpleConsumer,
    ConsumeResult,
    PushConsumer,
    RetrySchedule,
    SimpleConsumer,
)
from coordinator.client.errors import (
    Conflict,
    CoordinatorClientError,
    CoordinatorRequestError,
    CoordinatorUnavailable,
    InvalidRequest,
    MessageIdConflict,
    NotFound,
    PermissionDenied,
    ProducerGroupMismatch,
    RateLimited,
    StateConflict,
    TransactionalMessagesRejected,
    Unauthenticated,
)
from coordinator.client.filters import Sql92
from coordinator.client.inbox import AsyncInbox, Inbox
from coordinator.client.listener import AsyncTransactionListener, TransactionListener
from coordinator.client.message import (
    LocalTransactionState,
    Message,
    RecallResult,
    ReceivedMessage,
    SendResult,
    SendStatus,
)
from coordinator.client.producer import AsyncTransactionProducer, TransactionProducer

__all__ = [
    "ROCKETMQ_RETRY_SCHEDULE",
    "AsyncBarrierTransactionListener",
    "AsyncInbox",
    "AsyncPushConsumer",
    "AsyncSimpleConsumer",
    "AsyncTransactionListener",
    "AsyncTransactionProducer",
    "Barrier",
    "BarrierTransactionListener",
    "Conflict",
    "ConsumeResult",
    "CoordinatorClientError",
    "CoordinatorRequestError",
    "CoordinatorUnavailable",
    "Inbox",
    "InvalidRequest",
    "LocalTransactionState",
    "Message",
    "MessageIdConflict",
    "NotFound",
    "PermissionDenied",
    "ProducerGroupMismatch",
    "PushConsumer",
    "RateLimited",
    "RecallResult",
    "ReceivedMessage",
    "RetryPolicy",
    "RetrySchedule",
    "SendResult",
    "SendStatus",
    "SimpleConsumer",
    "Sql92",
    "StateConflict",
    "TransactionListener",
    "TransactionProducer",
    "TransactionalMessagesRejected",
    "Unauthenticated",
]
