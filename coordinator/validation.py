"""Input rules, checked in the core so every interface enforces the same ones.

Names follow RocketMQ's Validators (letters, digits, %, |, _ and -, at most
127 characters). Strings must not hold NUL, which PostgreSQL text refuses:
catching it here turns a would-be server error into a clear 4xx.
"""

from __future__ import annotations

import math
import re

from coordinator.config import Settings
from coordinator.errors import InvalidMessage
from coordinator.models import NewMessage

NAME_MAX_LENGTH = 127
_NAME = re.compile(r"^[%|a-zA-Z0-9_-]+$")
ID_MAX_LENGTH = 128  # message and transaction ids
_MESSAGE_ID = re.compile(rf"^[A-Za-z0-9_.:-]{{1,{ID_MAX_LENGTH}}}$")
# RocketMQ keeps these topics for itself; a producer writing to them would be
# mistaken for broker-internal traffic by any RocketMQ tooling reading ours.
_RESERVED_TOPIC_PREFIXES = ("RMQ_SYS_", "rmq_sys_")
_RESERVED_TOPICS = frozenset({"TRANS_CHECK_MAX_TIME_TOPIC", "TBW102", "SCHEDULE_TOPIC_XXXX"})
TAG_MAX_LENGTH = 255
KEY_MAX_LENGTH = 255
MAX_KEYS = 64


def check_name(kind: str, value: str | None) -> str:
    if value is None or value == "":
        raise InvalidMessage(f"{kind} is required")
    if len(value) > NAME_MAX_LENGTH:
        raise InvalidMessage(
            f"{kind} {value[:40]!r}... is {len(value)} characters long; "
            f"at most {NAME_MAX_LENGTH} are allowed"
        )
    if not _NAME.match(value):
        raise InvalidMessage(
            f"{kind} {value!r} has characters that are not allowed; "
            "use letters, digits, '%', '|', '_' and '-'"
        )
    return value


def check_topic(topic: str | None) -> str:
    topic = check_name("topic", topic)
    if topic in _RESERVED_TOPICS or topic.startswith(_RESERVED_TOPIC_PREFIXES):
        raise InvalidMessage(f"topic {topic!r} is reserved for the system")
    return topic


def check_message_id(message_id: str, what: str = "message id") -> str:
    if not _MESSAGE_ID.match(message_id):
        raise InvalidMessage(
            f"{what} {message_id[:40]!r} is not valid; use 1 to {ID_MAX_LENGTH} letters, digits, "
            "'_', '.', ':' or '-'"
        )
    return message_id


def _check_text(what: str, value: str, max_length: int) -> None:
    if "\x00" in value:
        raise InvalidMessage(f"{what} must not contain NUL characters")
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


def check_properties(properties: dict[str, str], settings: Settings) -> dict[str, str]:
    size = 0
    for name, value in properties.items():
        if not isinstance(name, str) or not isinstance(value, str):
            raise InvalidMessage("properties must map strings to strings")
        if not name:
            raise InvalidMessage("a property name must not be empty")
        if "\x00" in name or "\x00" in value:
            raise InvalidMessage(f"property {name!r} must not contain NUL characters")
        size += len(name.encode()) + len(value.encode())
    if size > settings.max_properties_bytes:
        raise InvalidMessage(
            f"properties take {size} bytes; at most {settings.max_properties_bytes} are allowed"
        )
    return properties


def check_body(body: bytes, settings: Settings) -> bytes:
    if len(body) == 0:
        raise InvalidMessage("the message body is empty")
    if len(body) > settings.max_body_bytes:
        raise InvalidMessage(
            f"the message body has {len(body)} bytes; at most {settings.max_body_bytes} are allowed"
        )
    return body


def check_immunity(seconds: float | None, settings: Settings) -> float | None:
    if seconds is None:
        return None
    if not math.isfinite(seconds) or seconds <= 0:
        raise InvalidMessage("check immunity must be a positive number of seconds")
    if seconds > settings.max_check_immunity_seconds:
        raise InvalidMessage(
            f"check immunity of {seconds:g} s is longer than retention "
            f"({settings.max_check_immunity_seconds:g} s)"
        )
    return seconds


def check_new_message(message: NewMessage, settings: Settings, *, transactional: bool) -> None:
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
    if transactional:
        check_immunity(message.check_immunity_seconds, settings)
    elif message.check_immunity_seconds is not None:
        raise InvalidMessage("check immunity applies to transactional messages only")
