"""Storing messages: half (prepared) messages and normal ones.

A batch is validated as a whole before anything is written, then stored in
one statement inside one transaction: either every message of a batch is
stored, or none is.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from psycopg import AsyncConnection
from psycopg.types.json import Jsonb

from coordinator.core.configs import TransactionsConfig
from coordinator.core.ids import new_message_id, new_transaction_id
from coordinator.db.queries import execute, fetch_all
from coordinator.domain.delivery_time import RecallHandle, check_delivery_time
from coordinator.domain.errors import (
    CoordinatorError,
    InvalidMessage,
    MessageIdConflict,
    TransactionalMessagesRejected,
)
from coordinator.domain.immunity import with_property_immunity
from coordinator.domain.messages import NewMessage, SendResult
from coordinator.domain.rules import check_new_message
from coordinator.domain.states import MessageKind, MessageState


def validate_batch(
    messages: Sequence[NewMessage], config: TransactionsConfig, *, transactional: bool
) -> list[NewMessage]:
    """The batch as it is stored (a half message's immunity read from its property
    too), or InvalidMessage naming the first message refused."""
    if not messages:
        raise InvalidMessage("a batch needs at least one message")
    if len(messages) > config.max_batch_size:
        raise InvalidMessage(
            f"a batch holds at most {config.max_batch_size} messages, got {len(messages)}"
        )
    if transactional and config.reject_transactional_messages:
        raise TransactionalMessagesRejected(
            "this coordinator is configured to reject transactional messages"
        )
    checked = []
    for position, message in enumerate(messages):
        try:
            if transactional:
                message = with_property_immunity(message)
            check_new_message(message, config, transactional=transactional)
            if message.deliver_at is not None:
                deliver_at = check_delivery_time(message.deliver_at, config.max_delay_seconds)
                message = replace(message, deliver_at=deliver_at)
        except InvalidMessage as error:
            if len(messages) == 1:
                raise
            raise InvalidMessage(f"message {position}: {error.message}") from None
        checked.append(message)
    return checked


async def store_messages(
    conn: AsyncConnection[Any],
    messages: Sequence[NewMessage],
    config: TransactionsConfig,
    *,
    transactional: bool,
) -> list[SendResult]:
    """Store a batch atomically: every message, or (on any error) none."""
    messages = validate_batch(messages, config, transactional=transactional)
    async with conn.transaction():
        outcomes = await insert_validated(conn, messages, config, transactional=transactional)
        for outcome in outcomes:
            if isinstance(outcome, CoordinatorError):
                raise outcome  # leaves the transaction: nothing is stored
        return [o for o in outcomes if isinstance(o, SendResult)]


async def insert_validated(
    conn: AsyncConnection[Any],
    messages: Sequence[NewMessage],
    config: TransactionsConfig,
    *,
    transactional: bool,
) -> list[SendResult | CoordinatorError]:
    """Insert validated messages with one statement (atomic by itself).

    Inside a transaction (store_messages) everything commits or rolls back
    together; on an autocommit connection (group commit) the statement is
    its own transaction.

    A message whose id is already stored is answered from the stored row
    (idempotent retry) or, if it is a different message, with a
    MessageIdConflict for that message alone.
    """
    message_ids = [m.message_id or new_message_id() for m in messages]
    kind = MessageKind.TRANSACTIONAL if transactional else MessageKind.NORMAL
    state = MessageState.PREPARED if transactional else MessageState.COMMITTED
    params = {
        "message_ids": message_ids,
        "transaction_ids": [new_transaction_id() if transactional else None for _ in messages],
        "producer_groups": [m.producer_group for m in messages],
        "topics": [m.topic for m in messages],
        "tags": [m.tags for m in messages],
        "keys": [" ".join(m.keys) for m in messages],
        "message_groups": [m.message_group for m in messages],
        "bodies": [m.body for m in messages],
        "properties": [Jsonb(m.properties) for m in messages],
        "immunity_seconds": [m.check_immunity_seconds for m in messages],
        "deliver_at": [m.deliver_at for m in messages],
        "trace_contexts": [m.trace_context for m in messages],
        "kind": kind.value,
        "state": state.value,
        "transaction_timeout_seconds": config.transaction_timeout_seconds,
    }
    inserted = await fetch_all(conn, "insert_messages", params)
    stored = {_id_key(row["message_id"], row): (row, True) for row in inserted}
    keys = [_id_key(i, m) for m, i in zip(messages, message_ids, strict=True)]
    retried = sorted(set(keys) - stored.keys(), key=repr)
    if retried:
        wanted = {
            "message_ids": [k[0] for k in retried],
            "producer_groups": [k[1] for k in retried],
            "topics": [k[2] for k in retried],
        }
        for row in await fetch_all(conn, "find_messages_by_message_id", wanted):
            stored[_id_key(row["message_id"], row)] = (row, False)
        # A repeat is answered from a row this statement did not write, which
        # may have been committed locally only (its first attempt was answered
        # 503 when the wait for the synchronous standby was cut): make sure the
        # standby has it before it is reported stored.
        await execute(conn, "confirm_durable")
    outcomes: list[SendResult | CoordinatorError] = []
    seen: dict[IdKey, tuple[str, str | None, str, bytes]] = {}
    for message, message_id, key in zip(messages, message_ids, keys, strict=True):
        row, created_now = stored[key]
        this = _fingerprint(message, kind)
        if created_now:
            # Inserted by this statement: only its first occurrence in the
            # batch created it; a repeat within the batch is a retry of it.
            earlier = seen.get(key)
        else:
            earlier = (
                row["kind"],
                row["producer_group"],
                row["topic"],
                bytes(row["body_sha256"]),
            )
        if earlier is not None and earlier != this:
            # Only a message of the same producer group (or, without one, the
            # same topic) can be the other one: this tells no other group's ids.
            outcomes.append(
                MessageIdConflict(
                    f"message id {message_id!r} is already used by a different message "
                    f"{_id_scope(message)} (another kind, topic or body)"
                )
            )
            continue
        seen.setdefault(key, this)
        outcomes.append(
            SendResult(
                offset=row["id"],
                message_id=message_id,
                transaction_id=row["transaction_id"],
                state=MessageState(row["state"]),
                created=earlier is None,
                recall_handle=_recall_handle(message, row["id"], message_id),
            )
        )
    return outcomes


# Where a message id is unique: (message id, producer group, None), or
# (message id, None, topic) for a message sent without a producer group.
IdKey = tuple[str, str | None, str | None]


def _id_key(message_id: str, message: NewMessage | dict[str, Any]) -> IdKey:
    if isinstance(message, NewMessage):
        group, topic = message.producer_group, message.topic
    else:
        group, topic = message["producer_group"], message["topic"]
    return (message_id, group, None) if group is not None else (message_id, None, topic)


def _id_scope(message: NewMessage) -> str:
    if message.producer_group is not None:
        return f"of producer group {message.producer_group!r}"
    return f"without a producer group in topic {message.topic!r}"


def _recall_handle(message: NewMessage, offset: int, message_id: str) -> str | None:
    if message.deliver_at is None:
        return None
    return RecallHandle(topic=message.topic, offset=offset, message_id=message_id).encode()


def _fingerprint(message: NewMessage, kind: MessageKind) -> tuple[str, str | None, str, bytes]:
    """What a retry must repeat: reusing a message id for another message is refused."""
    body_sha256 = hashlib.sha256(message.body).digest()
    return (kind.value, message.producer_group, message.topic, body_sha256)
