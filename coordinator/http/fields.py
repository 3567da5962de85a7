"""Request fields as the OpenAPI document states them: the core's rules, in JSON Schema.

The rules themselves are checked by the core (domain/rules.py), which
refuses a bad name with 400 `invalid_request` and a sentence. Pydantic
validating them too would turn that into a 422 with pydantic's wording, so
the types here only document: `WithJsonSchema` sets what /openapi.json says
of the field (pattern, lengths, bounds), built from the rules' own
constants, and validation stays as it was. tests/unit/test_openapi.py holds
each documented pattern to the rule it states.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Annotated, Any

from pydantic import WithJsonSchema

from coordinator.domain.check_urls import CHECK_URL_MAX_LENGTH
from coordinator.domain.delivery_time import RECALL_HANDLE_MAX_LENGTH
from coordinator.domain.long_polls import LONGEST_POLL_SECONDS
from coordinator.domain.rules import (
    DEAD_LETTERS_PAGE_LIMIT,
    EXPRESSION_MAX_LENGTH,
    ID_MAX_LENGTH,
    INSTANCE_ID_MAX_LENGTH,
    INSTANCE_ID_PATTERN,
    KEY_MAX_LENGTH,
    KEY_PATTERN,
    MAX_ACK_BATCH,
    MAX_DELIVERY_ATTEMPTS_LIMIT,
    MAX_INVISIBLE_SECONDS,
    MAX_KEYS,
    MAX_MESSAGES_LIMIT,
    MESSAGE_ID_PATTERN,
    NAME_MAX_LENGTH,
    NAME_PATTERN,
    RECEIPT_HANDLE_PATTERN,
    RESERVED_TOPIC_PREFIXES,
    RESERVED_TOPICS,
    TAG_MAX_LENGTH,
    TAG_PATTERN,
    TEXT_PATTERN,
)
from coordinator.domain.trace import TRACE_CONTEXT_MAX_LENGTH, TRACE_CONTEXT_PATTERN

JsonSchema = dict[str, Any]


def _string(pattern: str, max_length: int | None = None) -> JsonSchema:
    """A non-empty string matching `pattern`, at most `max_length` characters long."""
    schema: JsonSchema = {"type": "string", "minLength": 1}
    if max_length is not None:
        schema["maxLength"] = max_length
    return {**schema, "pattern": pattern}


def _alternatives(names: Iterable[str]) -> str:
    return "|".join(re.escape(name) for name in sorted(names))


NAME_SCHEMA = _string(NAME_PATTERN, NAME_MAX_LENGTH)
# A topic is a name that is not one RocketMQ keeps for itself.
RESERVED_TOPIC_PATTERN = (
    f"^(?:{_alternatives(RESERVED_TOPIC_PREFIXES)})|^(?:{_alternatives(RESERVED_TOPICS)})$"
)
TOPIC_SCHEMA = {**NAME_SCHEMA, "not": {"pattern": RESERVED_TOPIC_PATTERN}}
MESSAGE_ID_SCHEMA = _string(MESSAGE_ID_PATTERN, ID_MAX_LENGTH)
INSTANCE_ID_SCHEMA = _string(INSTANCE_ID_PATTERN, INSTANCE_ID_MAX_LENGTH)
TAG_SCHEMA = _string(TAG_PATTERN, TAG_MAX_LENGTH)
KEY_SCHEMA = _string(KEY_PATTERN, KEY_MAX_LENGTH)
RECEIPT_HANDLE_SCHEMA = _string(RECEIPT_HANDLE_PATTERN)
# A message group is free text, as long as a name.
MESSAGE_GROUP_SCHEMA = _string(TEXT_PATTERN, NAME_MAX_LENGTH)
# What base64.b64decode(validate=True) accepts: the standard alphabet, padded.
BASE64_PATTERN = r"^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$"


Topic = Annotated[str, WithJsonSchema(TOPIC_SCHEMA)]
GroupName = Annotated[str, WithJsonSchema(NAME_SCHEMA)]  # producer and consumer groups
MessageId = Annotated[str, WithJsonSchema(MESSAGE_ID_SCHEMA)]  # also transaction ids
InstanceId = Annotated[str, WithJsonSchema(INSTANCE_ID_SCHEMA)]
Tag = Annotated[str, WithJsonSchema(TAG_SCHEMA)]
Keys = Annotated[
    list[str], WithJsonSchema({"type": "array", "items": KEY_SCHEMA, "maxItems": MAX_KEYS})
]
MessageGroup = Annotated[str, WithJsonSchema(MESSAGE_GROUP_SCHEMA)]
Properties = Annotated[
    dict[str, str],
    WithJsonSchema(
        {
            "type": "object",
            "propertyNames": {"minLength": 1, "pattern": TEXT_PATTERN},
            "additionalProperties": {"type": "string", "pattern": TEXT_PATTERN},
        }
    ),
]
BodyBase64 = Annotated[
    str,
    WithJsonSchema({"type": "string", "minLength": 1, "pattern": BASE64_PATTERN, "format": "byte"}),
]
BodyText = Annotated[str, WithJsonSchema({"type": "string", "minLength": 1})]
ReceiptHandle = Annotated[str, WithJsonSchema(RECEIPT_HANDLE_SCHEMA)]
ReceiptHandles = Annotated[
    list[str],
    WithJsonSchema(
        {"type": "array", "items": RECEIPT_HANDLE_SCHEMA, "minItems": 1, "maxItems": MAX_ACK_BATCH}
    ),
]
Expression = Annotated[str, WithJsonSchema({"type": "string", "maxLength": EXPRESSION_MAX_LENGTH})]
CheckUrl = Annotated[
    str,
    WithJsonSchema({"type": "string", "format": "uri", "maxLength": CHECK_URL_MAX_LENGTH}),
]
TraceContext = Annotated[
    str, WithJsonSchema(_string(TRACE_CONTEXT_PATTERN, TRACE_CONTEXT_MAX_LENGTH))
]
RecallHandleField = Annotated[
    str, WithJsonSchema({"type": "string", "minLength": 1, "maxLength": RECALL_HANDLE_MAX_LENGTH})
]
DelaySeconds = Annotated[float, WithJsonSchema({"type": "number", "minimum": 0})]
PositiveSeconds = Annotated[float, WithJsonSchema({"type": "number", "exclusiveMinimum": 0})]
InvisibleSeconds = Annotated[
    float,
    WithJsonSchema({"type": "number", "exclusiveMinimum": 0, "maximum": MAX_INVISIBLE_SECONDS}),
]
WaitSeconds = Annotated[
    float, WithJsonSchema({"type": "number", "minimum": 0, "maximum": LONGEST_POLL_SECONDS})
]
MaxMessages = Annotated[
    int, WithJsonSchema({"type": "integer", "minimum": 1, "maximum": MAX_MESSAGES_LIMIT})
]
DeliveryAttempts = Annotated[
    int, WithJsonSchema({"type": "integer", "minimum": 1, "maximum": MAX_DELIVERY_ATTEMPTS_LIMIT})
]
PageLimit = Annotated[
    int, WithJsonSchema({"type": "integer", "minimum": 1, "maximum": DEAD_LETTERS_PAGE_LIMIT})
]
