"""RocketMQ's `Message` to the core's `NewMessage`, and stored messages back to `Message`.

Also the other things the door translates: a producer's
`TransactionResolution` into the core's `Resolution`, a topic into the
producer group it stands for (`producer_group_of`), and a consumer's
`FilterExpression` into an expression and its filter type (`filter_of`).

What the clients check on a message they get: `body_encoding` IDENTITY (left
unset, the Python client drops the whole receive), `body_digest` as MD5 in
upper-case hex (what the proxy sends; Node reads a CRC32 digest as a decimal
string), and for a received message its `receipt_handle` and
`delivery_attempt`. Every message goes out on queue 0 of its topic, the
only queue the route lists.
"""

from __future__ import annotations

import functools
import hashlib
import math
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from google.protobuf.duration_pb2 import Duration
from google.protobuf.timestamp_pb2 import Timestamp

from coordinator.core.configs import GrpcDoorConfig
from coordinator.domain.delivery import FilterType
from coordinator.domain.errors import InvalidMessage
from coordinator.domain.messages import MessageFields, NewMessage
from coordinator.domain.rules import SUBSCRIBE_ALL
from coordinator.domain.states import Resolution
from coordinator.grpc.status import DoorError
from coordinator.grpc.stubs import Stubs

# RocketMQ's proxy refuses a longer orphaned-transaction recovery duration.
MAX_RECOVERY_SECONDS = 3600.0


@dataclass(frozen=True, slots=True)
class Incoming:
    message: NewMessage
    transactional: bool
    gzipped: bool  # message.body is still GZIP


def producer_group_of(topic: str) -> str:
    """The producer group of a topic's transactional messages: the topic itself.

    RocketMQ 5 has no producer group; its proxy lets the topic stand for one.
    Sends, ends, and the producer instances a Telemetry stream announces all
    name the group through this one rule.
    """
    return topic


def resolution_of(stubs: Stubs, number: int) -> Resolution:
    """The core's resolution for RocketMQ's `TransactionResolution` number.

    RocketMQ names COMMIT and ROLLBACK as the core does; anything else
    (UNSPECIFIED, what the Python client sends when its checker does not
    know yet) means check again later, as UNKNOWN does.
    """
    return _resolutions(stubs).get(number, Resolution.UNKNOWN)


@functools.cache
def _resolutions(stubs: Stubs) -> dict[int, Resolution]:
    values = stubs.definition.TransactionResolution.DESCRIPTOR.values
    return {
        value.number: Resolution[value.name]
        for value in values
        if value.name in Resolution.__members__
    }


def seconds_of(duration: Any) -> float:
    """A protobuf Duration in seconds."""
    return float(duration.seconds) + duration.nanos / 1e9


def duration_of(seconds: float) -> Duration:
    whole = math.floor(seconds)
    return Duration(seconds=whole, nanos=int((seconds - whole) * 1e9))


def timestamp_of(at: datetime) -> Timestamp:
    stamp = Timestamp()
    stamp.FromDatetime(at)
    return stamp


def _encoded_body(stubs: Stubs, message: Any) -> tuple[bytes, bool]:
    """The body as sent, and whether it is GZIP (unpacked later, by `bodies.gunzip`)."""
    encoding = message.system_properties.body_encoding
    definition = stubs.definition
    if encoding in (definition.ENCODING_UNSPECIFIED, definition.IDENTITY):
        return bytes(message.body), False
    if encoding != definition.GZIP:
        raise InvalidMessage(f"body encoding {encoding} is not IDENTITY or GZIP")
    return bytes(message.body), True


def incoming(stubs: Stubs, message: Any, config: GrpcDoorConfig) -> Incoming:
    """The core's message for a sent RocketMQ message (a transactional one's group: its topic).

    Only its metadata is looked at: a GZIP body stays packed (`Incoming.gzipped`)
    until the caller, once the sender may produce, unpacks it within its bounds.
    """
    definition = stubs.definition
    properties = message.system_properties
    kind = properties.message_type
    accepted = (definition.NORMAL, definition.FIFO, definition.DELAY, definition.TRANSACTION)
    if kind not in accepted:
        name = definition.MessageType.Name(kind) if kind in _names(definition) else str(kind)
        raise DoorError(
            "UNSUPPORTED",
            f"message type {name} is not supported: send NORMAL, FIFO, DELAY or TRANSACTION",
        )
    # Newer clients may set these on any message type; silently dropping them
    # would deliver a message its producer meant for a lite topic or a rank.
    if properties.HasField("lite_topic"):
        raise DoorError("UNSUPPORTED", "lite topics are not supported: send to the topic itself")
    if properties.HasField("priority"):
        raise DoorError("UNSUPPORTED", "message priority is not supported: send without one")
    transactional = kind == definition.TRANSACTION
    topic = message.topic.name
    body, gzipped = _encoded_body(stubs, message)
    message_group = properties.message_group if properties.HasField("message_group") else None
    if kind == definition.FIFO and not message_group:
        raise DoorError("ILLEGAL_MESSAGE_GROUP", "a FIFO message needs a message group")
    deliver_at = None
    if properties.HasField("delivery_timestamp"):
        # A TRANSACTION message may carry one too (RocketMQ refuses it):
        # receivable at that time once committed.
        deliver_at = _datetime_of(properties.delivery_timestamp)
    elif kind == definition.DELAY:
        raise InvalidMessage("a DELAY message needs its delivery_timestamp")
    immunity = None
    if transactional and properties.HasField("orphaned_transaction_recovery_duration"):
        seconds = seconds_of(properties.orphaned_transaction_recovery_duration)
        # The official clients set it on every half message (their own
        # default), so a coordinator with a short retention shortens it, as
        # the cap does, rather than refusing every send.
        longest = min(MAX_RECOVERY_SECONDS, config.max_check_immunity_seconds)
        immunity = min(seconds, longest) if seconds > 0 and longest > 0 else None
    return Incoming(
        NewMessage(
            topic=topic,
            body=body,
            producer_group=producer_group_of(topic) if transactional else None,
            tags=properties.tag if properties.HasField("tag") else None,
            keys=tuple(properties.keys),
            properties=dict(message.user_properties),
            message_id=properties.message_id or None,
            check_immunity_seconds=immunity,
            message_group=message_group,
            deliver_at=deliver_at,
            trace_context=properties.trace_context
            if properties.HasField("trace_context")
            else None,
        ),
        transactional=transactional,
        gzipped=gzipped,
    )


# Seconds beyond this (the year 5138) are milliseconds: the Python client
# (5.1.2) writes its delivery_timestamp, in milliseconds as documented, into
# the Timestamp's seconds.
_MILLISECONDS_AS_SECONDS = 10**11


def _datetime_of(stamp: Any) -> datetime:
    try:
        if stamp.seconds > _MILLISECONDS_AS_SECONDS:
            return datetime.fromtimestamp(stamp.seconds / 1000, tz=UTC)
        return stamp.ToDatetime(tzinfo=UTC)
    except (ValueError, OverflowError, OSError):
        raise InvalidMessage("the delivery_timestamp is not a valid time") from None


def _names(definition: Any) -> set[int]:
    return {value.number for value in definition.MessageType.DESCRIPTOR.values}


def body_digest(stubs: Stubs, body: bytes) -> Any:
    return stubs.definition.Digest(
        type=stubs.definition.MD5, checksum=hashlib.md5(body).hexdigest().upper()
    )


def outgoing(
    stubs: Stubs,
    fields: MessageFields,
    *,
    namespace: str,
    transactional: bool,
    receipt_handle: str | None = None,
    delivery_attempt: int | None = None,
    invisible_seconds: float | None = None,
    stored_at: datetime | None = None,
) -> Any:
    """A stored message as RocketMQ clients receive it (or are checked back about)."""
    definition = stubs.definition
    if transactional:
        kind = definition.TRANSACTION
    elif fields.message_group:
        kind = definition.FIFO
    elif getattr(fields, "deliver_at", None) is not None:
        kind = definition.DELAY
    else:
        kind = definition.NORMAL
    properties = definition.SystemProperties(
        keys=list(fields.keys),
        message_id=fields.message_id,
        body_digest=body_digest(stubs, fields.body),
        body_encoding=definition.IDENTITY,
        message_type=kind,
        born_timestamp=timestamp_of(fields.born_at),
        queue_id=0,
        queue_offset=fields.offset,
    )
    if fields.tags is not None:
        properties.tag = fields.tags
    if fields.message_group is not None:
        properties.message_group = fields.message_group
    deliver_at = getattr(fields, "deliver_at", None)
    if deliver_at is not None:
        properties.delivery_timestamp.CopyFrom(timestamp_of(deliver_at))
    trace_context = getattr(fields, "trace_context", None)
    if trace_context is not None:
        properties.trace_context = trace_context
    if receipt_handle is not None:
        properties.receipt_handle = receipt_handle
    if delivery_attempt is not None:
        properties.delivery_attempt = delivery_attempt
    if invisible_seconds is not None:
        properties.invisible_duration.CopyFrom(duration_of(invisible_seconds))
    if stored_at is not None:
        properties.store_timestamp.CopyFrom(timestamp_of(stored_at))
    return definition.Message(
        topic=definition.Resource(resource_namespace=namespace, name=fields.topic),
        user_properties=dict(fields.properties),
        system_properties=properties,
        body=fields.body,
    )


def filter_of(stubs: Stubs, expression: Any) -> tuple[str, FilterType]:
    """A `FilterExpression` as the core takes it: SQL for SQL92, anything else a tag filter."""
    if expression.type == stubs.definition.SQL:
        return expression.expression, FilterType.SQL92
    return expression.expression.strip() or SUBSCRIBE_ALL, FilterType.TAG
