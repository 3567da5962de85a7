"""Input rules, checked in the core so every interface enforces the same ones.

Every bound a request is held to lives here once: names, ids, tags and tag
expressions, bodies and properties, receive and long-poll bounds, receipt
handles, producer instances and check URLs. HTTP models and the CLI read
their limits from these constants instead of repeating them.

Names follow RocketMQ's Validators (letters, digits, %, |, _ and -, at most
127 characters). Strings must not hold NUL, which PostgreSQL text refuses:
catching it here turns a would-be server error into a clear 4xx.

Long on purpose: every bound in one module is what lets a reader (and a
door) see all of them at once; split by topic, a new door could miss one.
"""

from __future__ import annotations

import ipaddress
import math
import re
import socket
from typing import Any, Protocol
from urllib.parse import unquote

import httpx

from coordinator.domain.delivery import FilterType
from coordinator.domain.delivery_time import check_delivery_time
from coordinator.domain.errors import InvalidMessage
from coordinator.domain.immunity import check_immunity
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
MAX_WAIT_SECONDS = 60.0
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
CHECK_URL_MAX_LENGTH = 2048
# The most of a check URL's answer the coordinator reads, on the wire and
# decoded: the answer is a tiny JSON object (`max_check_answer_bytes`).
DEFAULT_MAX_CHECK_ANSWER_BYTES = 64 * 1024


def check_instance(producer_group: str, instance_id: str) -> None:
    check_name("producer group", producer_group)
    if len(instance_id) > INSTANCE_ID_MAX_LENGTH or not _INSTANCE_ID.fullmatch(instance_id):
        raise InvalidMessage(
            f"instance id {instance_id[:40]!r} is not valid; use 1 to {INSTANCE_ID_MAX_LENGTH} "
            "letters, digits, '_', '.', ':', '@' or '-'"
        )


# A check URL is called by the coordinator, from inside its network: a
# producer that could register any address would make the coordinator fetch
# what only it can reach (server-side request forgery). Loopback and private
# networks stay allowed, since producers often run on the same host or network.
IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
_THIS_NETWORK = ipaddress.ip_network("0.0.0.0/8")  # Linux connects 0.0.0.0 to the host itself
_BROADCAST = ipaddress.ip_address("255.255.255.255")
# 169.254.169.254 and the ECS and Azure endpoints are link-local, refused as such.
_METADATA_ADDRESSES = frozenset(
    ipaddress.ip_address(a)
    for a in (
        "fd00:ec2::254",  # AWS instance metadata over IPv6
        "100.100.100.200",  # Alibaba Cloud instance metadata
    )
)
_METADATA_HOSTS = frozenset(
    {
        "metadata",
        "metadata.google.internal",
        "metadata.goog",
        "instance-data",
        "instance-data.ec2.internal",
    }
)
# IPv6 forms that carry an IPv4 address, which the host (or a gateway on the
# way) turns into a connection to that IPv4 address: each embedded address is
# held to the IPv4 rules, so no IPv6 spelling reaches a forbidden one.
_IPV4_TRANSLATED = ipaddress.ip_network("::ffff:0:0:0/96")  # SIIT, RFC 2765
_IPV4_COMPATIBLE = ipaddress.ip_network("::/96")  # deprecated, but still routed by some stacks
_NAT64 = ipaddress.ip_network("64:ff9b::/96")  # the well-known prefix: the last 32 bits
# The local-use NAT64 prefix (RFC 8215) is split by each network into prefixes
# of its own length; the IPv4 address sits where RFC 6052 puts it for that
# length, which a coordinator cannot know: every position is held to the rules.
_NAT64_LOCAL = ipaddress.ip_network("64:ff9b:1::/48")
_NAT64_LOCAL_LENGTHS = (48, 56, 64)  # and 96, the last 32 bits


def _rfc6052_address(value: int, prefix_length: int) -> ipaddress.IPv4Address:
    """The IPv4 address embedded after a NAT64 prefix of `prefix_length` (32 to 64 bits).

    RFC 6052 skips bits 64 to 71 (the "u" octet): without them the address
    is 120 bits long and the IPv4 address follows the prefix directly.
    """
    without_u = (value >> 64) << 56 | (value & ((1 << 56) - 1))
    return ipaddress.IPv4Address((without_u >> (120 - prefix_length - 32)) & 0xFFFFFFFF)


def _embedded_ipv4(address: ipaddress.IPv6Address) -> list[tuple[str, ipaddress.IPv4Address]]:
    """The IPv4 addresses an IPv6 address leads to, each with the form that carries it."""
    value = int(address)
    last_32 = ipaddress.IPv4Address(value & 0xFFFFFFFF)
    if address.ipv4_mapped is not None:
        return [("IPv4-mapped", address.ipv4_mapped)]
    if address in _IPV4_TRANSLATED:
        return [("IPv4-translated", last_32)]
    if address in _IPV4_COMPATIBLE:
        # :: and ::1 are themselves (unspecified, loopback), not IPv4 addresses
        return [] if value <= 1 else [("IPv4-compatible", last_32)]
    if address in _NAT64:
        return [("NAT64", last_32)]
    if address in _NAT64_LOCAL:
        candidates = [_rfc6052_address(value, n) for n in _NAT64_LOCAL_LENGTHS] + [last_32]
        # Zeros where one length puts the address are the padding of another,
        # not 0.0.0.0: the gateway, another machine, does not connect 0.0.0.0
        # to the coordinator's host as Linux does.
        return [("local-use NAT64", a) for a in candidates if a not in _THIS_NETWORK]
    if address.sixtofour is not None:
        return [("6to4", address.sixtofour)]
    if address.teredo is not None:
        return [("Teredo", address.teredo[1])]
    return []


def forbidden_address(address: str | IPAddress) -> str | None:
    """Why the coordinator must never call `address`, or None when it may.

    The one rule for check URLs: applied to the host of a URL at registration
    and to every address its host resolves to at each push. An IPv6 address
    that carries an IPv4 address (IPv4-mapped, -translated or -compatible,
    NAT64, 6to4, Teredo) is refused when the IPv4 address is.
    """
    if isinstance(address, str):
        try:
            address = ipaddress.ip_address(address)
        except ValueError:
            return "not an IP address"
    reason = _forbidden(address)
    if reason is not None or isinstance(address, ipaddress.IPv4Address):
        return reason
    for form, embedded in _embedded_ipv4(address):
        reason = _forbidden(embedded)
        if reason is not None:
            return f"{reason} ({form} form of {embedded})"
    return None


def _forbidden(address: IPAddress) -> str | None:
    if address in _METADATA_ADDRESSES:
        return "a cloud instance metadata service"
    if address.is_link_local:
        return "link-local, where cloud instance metadata services live"
    if address.is_unspecified or address in _THIS_NETWORK:
        return "unspecified"
    if address.is_multicast:
        return "multicast"
    if address == _BROADCAST:
        return "broadcast"
    return None


def _host_address(host: str) -> IPAddress | None:
    """The address a URL's host names by itself, without DNS (None: a host name)."""
    try:
        return ipaddress.ip_address(unquote(host))  # an IPv6 zone comes as %25
    except ValueError:
        pass
    try:
        # Resolvers also read 2852039166 or 0xa9.0xfe.0xa9.0xfe as IPv4 addresses.
        return ipaddress.IPv4Address(socket.inet_aton(host))
    except OSError:
        return None


def check_url(url: str | None) -> str | None:
    if url is None:
        return None
    if len(url) > CHECK_URL_MAX_LENGTH:
        raise InvalidMessage(f"check URL is longer than {CHECK_URL_MAX_LENGTH} characters")
    try:
        parsed = httpx.URL(url)
    except (httpx.InvalidURL, TypeError, ValueError):
        raise InvalidMessage(f"check URL {url[:80]!r} is not a URL") from None
    if parsed.scheme not in ("http", "https") or not parsed.host:
        raise InvalidMessage(f"check URL {url[:80]!r} must be an absolute http or https URL")
    if parsed.userinfo:
        # The URL is listed to operators and written to logs: no secrets in it.
        raise InvalidMessage(
            "check URL must not contain credentials (user:password@); "
            "check requests are signed with check_push_secret instead"
        )
    host = parsed.host.rstrip(".")
    if host in _METADATA_HOSTS:
        raise InvalidMessage(
            f"check URL host {host!r} is a cloud instance metadata service; "
            "the coordinator does not call it"
        )
    address = _host_address(host)
    reason = forbidden_address(address) if address is not None else None
    if reason is not None:
        raise InvalidMessage(
            f"check URL address {address} is {reason}; the coordinator does not call it"
        )
    return url


# --- Check-back long polls ------------------------------------------------------
MAX_POLL_WAIT_SECONDS = 60.0
MAX_POLL_REQUESTS = 1000


def check_poll(
    wait_seconds: float, max_requests: int, *, high: float = MAX_POLL_WAIT_SECONDS
) -> None:
    """`high`: the server's bound on waits, at most MAX_POLL_WAIT_SECONDS."""
    if not 0 <= wait_seconds <= high:
        raise InvalidMessage(f"wait_seconds must be between 0 and {high:g}")
    if not 1 <= max_requests <= MAX_POLL_REQUESTS:
        raise InvalidMessage(f"max_requests must be between 1 and {MAX_POLL_REQUESTS}")
