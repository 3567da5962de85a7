"""Input rules, checked in the core so every interface enforces the same ones.

Every bound a request is held to lives here once: names, ids, tags and tag
expressions, bodies and properties, receive and long-poll bounds, receipt
handles and producer instances. HTTP models and the CLI read their limits
from these constants instead of repeating them. Check URLs, and the
addresses the coordinator never calls, are in `check_urls`.

Names follow RocketMQ's Validators (letters, digits, %, |, _ and -, at most
127 characters). Strings must not hold NUL, which PostgreSQL text refuses:
catching it here turns a would-be server error into a clear 4xx.

Every bound in one module is what lets a reader (and a door) see all of
them at once; split by topic, a new door could miss one.
"""

from __future__ import annotations

import math
import re
from typing import Any, Protocol

from coordinator.domain.delivery import FilterType
from coordinator.domain.delivery_time import check_delivery_time
from coordinator.domain.errors import InvalidMessage
from coordinator.domain.immunity import check_immunity
from coordinator.domain.long_polls import LONGEST_POLL_SECONDS
from coordinator.domain.messages import NewMessage
from coordinator.domain.sql92 import parse_sql92
from coordinator.domain.trace import check_trace_context


class MessageLimits(Protocol):
    """The configurable bounds of a message; the coordinator's settings have them."""

    @property
    def max_body_bytes(self) -> int: ...

    @property
    def max_properties_bytes(self) -> int: ...

    @property
    def max_check_immunity_seconds(self) -> float: ...

    @property
    def max_delay_seconds(self) -> float: ...


# The *_PATTERN strings are also what the OpenAPI document states (JSON
# Schema `pattern`, ECMA-262): only character classes, `^` and `$`, which
# mean the same there and here. The rules apply them with fullmatch: Python's
# `$` also matches before a final newline, so `match` let "orders\n" through.
NAME_MAX_LENGTH = 127
NAME_PATTERN = r"^[%|a-zA-Z0-9_-]+$"
_NAME = re.compile(NAME_PATTERN)
ID_MAX_LENGTH = 128  # message and transaction ids
OFFSET_MAX = 2**63 - 1  # offsets and other ids are Postgres bigints
MESSAGE_ID_PATTERN = r"^[A-Za-z0-9_.:-]+$"
_MESSAGE_ID = re.compile(MESSAGE_ID_PATTERN)
# RocketMQ keeps these topics for itself; a producer writing to them would be
# mistaken for broker-internal traffic by any RocketMQ tooling reading ours.
RESERVED_TOPIC_PREFIXES = ("RMQ_SYS_", "rmq_sys_")
RESERVED_TOPICS = frozenset({"TRANS_CHECK_MAX_TIME_TOPIC", "TBW102", "SCHEDULE_TOPIC_XXXX"})
TAG_MAX_LENGTH = 255
KEY_MAX_LENGTH = 255
MAX_KEYS = 64
# What str.isspace() calls whitespace, spelled for a character class (the
# tests hold it to isspace over every code point): \s differs between engines.
WHITESPACE_CLASS = (
    r"\t\n\x0b\x0c\r\x1c-\x1f \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000"
)
# The text rules as patterns, for the OpenAPI document; check_tags, check_keys
# and storable() below are the rules themselves, with a sentence per refusal.
# Lone surrogates are refused too, but no pattern can say so portably.
TEXT_PATTERN = r"^[^\x00]*$"
TAG_PATTERN = rf"^[{WHITESPACE_CLASS}]*[^|\x00{WHITESPACE_CLASS}][^|\x00]*$"
KEY_PATTERN = rf"^[^\x00{WHITESPACE_CLASS}]+$"


def check_name(kind: str, value: str | None) -> str:
    if value is None or value == "":
        raise InvalidMessage(f"{kind} is required")
    if len(value) > NAME_MAX_LENGTH:
        raise InvalidMessage(
            f"{kind} {value[:40]!r}... is {len(value)} characters long; "
            f"at most {NAME_MAX_LENGTH} are allowed"
        )
    if not _NAME.fullmatch(value):
        raise InvalidMessage(
            f"{kind} {value!r} has characters that are not allowed; "
            "use letters, digits, '%', '|', '_' and '-'"
        )
    return value


def check_topic(topic: str | None) -> str:
    topic = check_name("topic", topic)
    if topic in RESERVED_TOPICS or topic.startswith(RESERVED_TOPIC_PREFIXES):
        raise InvalidMessage(f"topic {topic!r} is reserved for the system")
    return topic


def check_message_id(message_id: str, what: str = "message id") -> str:
    if len(message_id) > ID_MAX_LENGTH or not _MESSAGE_ID.fullmatch(message_id):
        raise InvalidMessage(
            f"{what} {message_id[:40]!r} is not valid; use 1 to {ID_MAX_LENGTH} letters, digits, "
            "'_', '.', ':' or '-'"
        )
    return message_id


def storable(value: str) -> bool:
    """Whether PostgreSQL can store the text: no NUL, and valid UTF-8.

    JSON can spell a lone UTF-16 surrogate (`"\\ud800"`) and Python holds it,
    but it has no UTF-8 form: the driver would fail on it (a 500).
    """
    if "\x00" in value:
        return False
    try:
        value.encode()
    except UnicodeEncodeError:
        return False
    return True


def _check_text(what: str, value: str, max_length: int) -> None:
    if not storable(value):
        raise InvalidMessage(f"{what} must be valid UTF-8 text without NUL characters")
    if len(value) > max_length:
        raise InvalidMessage(f"{what} is longer than {max_length} characters")


def check_tags(tags: str | None) -> str | None:
    if tags is None:
        return None
    if not tags.strip():
        raise InvalidMessage("tags must not be blank; leave them out instead")
    if "|" in tags:
        # '||' separates tags in subscription expressions, so it cannot be in a tag.
        raise InvalidMessage(f"tags {tags!r} must not contain '|'")
    _check_text("tags", tags, TAG_MAX_LENGTH)
    return tags


def check_keys(keys: tuple[str, ...]) -> tuple[str, ...]:
    if len(keys) > MAX_KEYS:
        raise InvalidMessage(f"a message has at most {MAX_KEYS} keys, got {len(keys)}")
    for key in keys:
        if not key or any(ch.isspace() for ch in key):
            # RocketMQ joins keys with spaces, so a key with one would split in two.
            raise InvalidMessage(f"key {key!r} must be non-empty and contain no whitespace")
        _check_text("a key", key, KEY_MAX_LENGTH)
    return keys


def check_properties(properties: dict[str, str], settings: MessageLimits) -> dict[str, str]:
    size = 0
    for name, value in properties.items():
        if not isinstance(name, str) or not isinstance(value, str):
            raise InvalidMessage("properties must map strings to strings")
        if not name:
            raise InvalidMessage("a property name must not be empty")
        if not (storable(name) and storable(value)):
            raise InvalidMessage(
                f"property {name!r} must be valid UTF-8 text without NUL characters"
            )
        size += len(name.encode()) + len(value.encode())
    if size > settings.max_properties_bytes:
        raise InvalidMessage(
            f"properties take {size} bytes; at most {settings.max_properties_bytes} are allowed"
        )
    return properties


def check_body(body: bytes, settings: MessageLimits) -> bytes:
    if len(body) == 0:
        raise InvalidMessage("the message body is empty")
    if len(body) > settings.max_body_bytes:
        raise InvalidMessage(
            f"the message body has {len(body)} bytes; at most {settings.max_body_bytes} are allowed"
        )
    return body


def check_new_message(message: NewMessage, settings: MessageLimits, *, transactional: bool) -> None:
    check_topic(message.topic)
    if transactional or message.producer_group is not None:
        check_name("producer group", message.producer_group)
    check_tags(message.tags)
    check_keys(message.keys)
    check_properties(message.properties, settings)
    check_body(message.body, settings)
    if message.message_id is not None:
        check_message_id(message.message_id)
    if message.message_group is not None:
        if not message.message_group:
            raise InvalidMessage("message group must not be empty")
        _check_text("message group", message.message_group, NAME_MAX_LENGTH)
    check_trace_context(message.trace_context)
    if message.deliver_at is not None:
        if message.message_group is not None:
            # A delayed message would hold back the rest of its group.
            raise InvalidMessage(
                "a FIFO message (with a message group) cannot have a delivery time"
            )
        check_delivery_time(message.deliver_at, settings.max_delay_seconds)
    if transactional:
        check_immunity(message.check_immunity_seconds, settings.max_check_immunity_seconds)
    elif message.check_immunity_seconds is not None:
        raise InvalidMessage("check immunity applies to transactional messages only")


# --- Tag expressions ---------------------------------------------------------
# RocketMQ tag filter expressions: `*`, `TagA`, `TagA || TagB`.
#
# A subscription stores the expression as given and the parsed tags (None for
# `*`, which matches every message, with or without a tag). A message with no
# tag matches only `*`, as in RocketMQ.

SUBSCRIBE_ALL = "*"
EXPRESSION_MAX_LENGTH = 4096


def parse_tag_expression(expression: str | None) -> tuple[str, ...] | None:
    """The tags an expression selects, or None when it selects every message."""
    if expression is None or expression.strip() in ("", SUBSCRIBE_ALL):
        return None
    if len(expression) > EXPRESSION_MAX_LENGTH:
        raise InvalidMessage(
            f"the tag expression is longer than {EXPRESSION_MAX_LENGTH} characters"
        )
    tags: list[str] = []
    for part in expression.split("||"):
        tag = part.strip()
        if not tag:
            raise InvalidMessage(
                f"tag expression {expression!r} has an empty tag; "
                "write '*' or tags separated by '||', e.g. 'TagA || TagB'"
            )
        if tag == SUBSCRIBE_ALL:
            raise InvalidMessage(
                f"tag expression {expression!r}: '*' selects every tag and cannot be combined"
            )
        try:
            check_tags(tag)
        except InvalidMessage as error:
            raise InvalidMessage(f"tag expression {expression!r}: {error.message}") from None
        if tag not in tags:
            tags.append(tag)
    return tuple(tags)


def check_filter_type(filter_type: str) -> FilterType:
    try:
        return FilterType(filter_type.lower() if isinstance(filter_type, str) else filter_type)
    except ValueError:
        raise InvalidMessage(
            f"filter type {str(filter_type)[:40]!r} is not known; use 'tag' or 'sql92'"
        ) from None


def parse_filter(
    expression: str | None, filter_type: str = FilterType.TAG
) -> tuple[FilterType, str, tuple[str, ...] | None, dict[str, Any] | None]:
    """A subscription's filter: its type, its text, its tags or its SQL92 tree.

    The text is trimmed ('' is '*' for tags); a SQL92 expression is parsed
    as given, so that the positions in its errors count from its start.
    """
    kind = check_filter_type(filter_type)
    if kind is FilterType.SQL92:
        text = expression or ""
        return kind, text.strip(), None, parse_sql92(text)
    text = (expression or "").strip() or SUBSCRIBE_ALL
    return kind, text, parse_tag_expression(text), None


# --- Delivery: receive, ack, invisible durations, dead letters ----------------
DEFAULT_MAX_MESSAGES = 16
MAX_MESSAGES_LIMIT = 1000
DEFAULT_INVISIBLE_SECONDS = 30.0
MAX_INVISIBLE_SECONDS = 12 * 3600.0  # RocketMQ's longest invisible duration
DEFAULT_MAX_DELIVERY_ATTEMPTS = 16  # RocketMQ's maxReconsumeTimes
MAX_DELIVERY_ATTEMPTS_LIMIT = 1000
MAX_ACK_BATCH = 1000
DEAD_LETTERS_PAGE_LIMIT = 1000

# "<delivery id>.<32 random hex digits>": the id finds the row by primary key,
# the random part makes handles unguessable and different on every receive.
# At most 18 digits, so that every id a handle names fits the bigint key (19
# digits reached past it, and PostgreSQL's error was a 500); ids get there
# after 10^18 deliveries, never.
RECEIPT_HANDLE_PATTERN = r"^[1-9][0-9]{0,17}\.[0-9a-f]{32}$"
_RECEIPT_HANDLE = re.compile(RECEIPT_HANDLE_PATTERN)


def check_consumer_group(consumer_group: str | None) -> str:
    return check_name("consumer group", consumer_group)


def check_seconds(what: str, value: float, *, low: float, high: float, allow_zero: bool) -> float:
    if not math.isfinite(value):
        raise InvalidMessage(f"{what} must be a finite number of seconds, got {value!r}")
    if value < low or (value == low and not allow_zero):
        bound = f"at least {low:g}" if allow_zero else f"more than {low:g}"
        raise InvalidMessage(f"{what} must be {bound} seconds, got {value!r}")
    if value > high:
        raise InvalidMessage(f"{what} must be at most {high:g} seconds, got {value:g}")
    return value


def check_invisible_seconds(value: float) -> float:
    return check_seconds(
        "invisible duration", value, low=0, high=MAX_INVISIBLE_SECONDS, allow_zero=False
    )


def check_count(what: str, value: int, high: int) -> int:
    if not 1 <= value <= high:
        raise InvalidMessage(f"{what} must be between 1 and {high}, got {value}")
    return value


def delivery_id_of(receipt_handle: str) -> int:
    if not _RECEIPT_HANDLE.fullmatch(receipt_handle):
        raise InvalidMessage(
            f"receipt handle {receipt_handle[:80]!r} is not one this coordinator issues"
        )
    return int(receipt_handle.partition(".")[0])


# --- Producer instances ----------------------------------------------------------
# RocketMQ instance names look like `192.168.0.7@12345`; allow that and ids.
INSTANCE_ID_MAX_LENGTH = 128
INSTANCE_ID_PATTERN = r"^[A-Za-z0-9_.:@-]+$"
_INSTANCE_ID = re.compile(INSTANCE_ID_PATTERN)


def check_instance(producer_group: str, instance_id: str) -> None:
    check_name("producer group", producer_group)
    if len(instance_id) > INSTANCE_ID_MAX_LENGTH or not _INSTANCE_ID.fullmatch(instance_id):
        raise InvalidMessage(
            f"instance id {instance_id[:40]!r} is not valid; use 1 to {INSTANCE_ID_MAX_LENGTH} "
            "letters, digits, '_', '.', ':', '@' or '-'"
        )


# --- Check-back long polls ------------------------------------------------------
MAX_POLL_REQUESTS = 1000


def check_poll(
    wait_seconds: float, max_requests: int, *, high: float = LONGEST_POLL_SECONDS
) -> None:
    """`high`: the server's bound on waits, at most LONGEST_POLL_SECONDS."""
    if not 0 <= wait_seconds <= high:
        raise InvalidMessage(f"wait_seconds must be between 0 and {high:g}")
    if not 1 <= max_requests <= MAX_POLL_REQUESTS:
        raise InvalidMessage(f"max_requests must be between 1 and {MAX_POLL_REQUESTS}")
