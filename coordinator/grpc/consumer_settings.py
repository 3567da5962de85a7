"""What the answer to a consumer's Settings carries: its group's FIFO flag and retry policy.

A PushConsumer takes from that answer (as from RocketMQ's proxy):
- `subscription.fifo`: FIFO consumption (one message of a message group at
  a time, retried locally in order) when the group's subscription is FIFO
  (`subscriptions.fifo`, set over HTTP or the CLI; a gRPC client cannot set it);
- `backoff_policy`: `max_attempts`, the subscription's max delivery attempts,
  and the delay before each redelivery. RocketMQ's default for a group, FIFO
  or not, is the customized backoff 1s 5s 10s 30s 1m 2m ... 2h; the Python
  client reads only that form. The Node client (1.0.8) reads only an
  exponential backoff, so it gets RocketMQ's default exponential one
  (5 s doubling to 2 h); without either it would dead-letter a FIFO message
  on its first failure;
- `subscription.long_polling_timeout` (the Python client long-polls 0 s
  without it) and `receive_batch_size`.
A SimpleConsumer gets the same; it uses none of it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from coordinator.domain.delivery import Subscription
from coordinator.domain.rules import DEFAULT_MAX_DELIVERY_ATTEMPTS
from coordinator.grpc import convert
from coordinator.grpc.stubs import Stubs

# RocketMQ's CustomizedRetryPolicy default: the delay before the Nth redelivery.
CUSTOMIZED_BACKOFF_SECONDS: tuple[float, ...] = (
    1, 5, 10, 30, 60, 120, 180, 240, 300, 360, 420, 480, 540, 600, 1200, 1800, 3600, 7200,
)  # fmt: skip
# RocketMQ's ExponentialRetryPolicy default, for clients that read only that form.
EXPONENTIAL_INITIAL_SECONDS = 5.0
EXPONENTIAL_MAX_SECONDS = 7200.0
EXPONENTIAL_MULTIPLIER = 2.0
# RocketMQ's proxy defaults (grpcClientConsumerMaxLongPollingTimeoutMillis,
# grpcClientConsumerLongPollingBatchSize).
LONG_POLLING_SECONDS = 30.0
RECEIVE_BATCH_SIZE = 32


def backoff_seconds(delivery_attempt: int) -> float:
    """The group's delay before redelivering a message whose `delivery_attempt` failed."""
    index = min(max(delivery_attempt, 1), len(CUSTOMIZED_BACKOFF_SECONDS)) - 1
    return float(CUSTOMIZED_BACKOFF_SECONDS[index])


def fill_consumer_answer(
    stubs: Stubs,
    answer: Any,
    subscriptions: Iterable[Subscription],
    topics: Sequence[str],
    *,
    longest_poll_seconds: float,
) -> None:
    """Set the group's FIFO flag, retry policy, long polling and batch size on `answer`.

    `subscriptions` are the group's; those of `topics` (the ones the client
    subscribes to) decide: FIFO if any is, the most attempts any allows.
    """
    definition = stubs.definition
    chosen = [s for s in subscriptions if s.topic in topics]
    subscription = answer.subscription
    subscription.fifo = any(s.fifo for s in chosen)
    subscription.receive_batch_size = RECEIVE_BATCH_SIZE
    subscription.long_polling_timeout.CopyFrom(
        convert.duration_of(max(1.0, min(LONG_POLLING_SECONDS, longest_poll_seconds)))
    )
    attempts = max((s.max_delivery_attempts for s in chosen), default=DEFAULT_MAX_DELIVERY_ATTEMPTS)
    if answer.user_agent.language == definition.NODE_JS:
        policy = definition.RetryPolicy(
            max_attempts=attempts,
            exponential_backoff=definition.ExponentialBackoff(
                initial=convert.duration_of(EXPONENTIAL_INITIAL_SECONDS),
                max=convert.duration_of(EXPONENTIAL_MAX_SECONDS),
                multiplier=EXPONENTIAL_MULTIPLIER,
            ),
        )
    else:
        policy = definition.RetryPolicy(
            max_attempts=attempts,
            customized_backoff=definition.CustomizedBackoff(
                next=[convert.duration_of(seconds) for seconds in CUSTOMIZED_BACKOFF_SECONDS]
            ),
        )
    answer.backoff_policy.CopyFrom(policy)
