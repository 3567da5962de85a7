"""Request and response bodies of the HTTP API.

Message bodies travel as base64 (`body_base64`); `body_text` is a UTF-8
convenience for textual payloads. Responses carry both when the body is
valid UTF-8.

An answer model is read from the core's result (route_table.Route.respond:
from its attributes), so its fields are named once, here.
"""

from __future__ import annotations

import base64
import binascii
from datetime import datetime
from typing import TYPE_CHECKING, Annotated, Literal, Self

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    StrictBool,
    WithJsonSchema,
    model_validator,
)

from coordinator.domain.delivery_time import deliver_at_of
from coordinator.domain.errors import CoordinatorError
from coordinator.domain.messages import (
    EndRequest,
    EndResult,
    NewMessage,
)
from coordinator.domain.rules import ID_MAX_LENGTH
from coordinator.domain.states import Resolution
from coordinator.http.fields import (
    BodyBase64,
    BodyText,
    DelaySeconds,
    GroupName,
    Keys,
    MessageGroup,
    MessageId,
    PositiveSeconds,
    Properties,
    RecallHandleField,
    Tag,
    Topic,
    TraceContext,
)
from coordinator.http.message_schemas import RequestIn
from coordinator.views.consumers import ConsumerLagOut


class MessageIn(RequestIn):
    """A message to send. The field types document the core's rules (fields.py)."""

    # Exactly one body, which pydantic checks (422): said here for the document.
    model_config = ConfigDict(
        json_schema_extra={
            "oneOf": [
                {"required": ["body_base64"], "properties": {"body_base64": {"type": "string"}}},
                {"required": ["body_text"], "properties": {"body_text": {"type": "string"}}},
            ]
        }
    )

    topic: Topic = Field(examples=["orders"])
    producer_group: GroupName | None = Field(
        default=None, description="Required for transactional messages.", examples=["order-svc"]
    )
    tags: Tag | None = Field(default=None, examples=["created"])
    keys: Keys = Field(default_factory=list, examples=[["order-1001"]])
    properties: Properties = Field(
        default_factory=dict,
        description="At most max_properties_bytes (UTF-8 names and values), a server setting.",
    )
    body_base64: BodyBase64 | None = Field(
        default=None,
        description="The body, base64-encoded. At most max_body_bytes, a server setting.",
    )
    body_text: BodyText | None = Field(
        default=None,
        description="The body as UTF-8 text. At most max_body_bytes, a server setting.",
    )
    message_id: MessageId | None = Field(
        default=None, description="Your own id, for idempotent retries. Generated if absent."
    )
    check_immunity_seconds: PositiveSeconds | None = Field(
        default=None,
        description="First check-back no earlier than this after sending; "
        "transactional messages only, at most the retention less one check interval; "
        "the property CHECK_IMMUNITY_TIME_IN_SECONDS gives it too (this field wins).",
    )
    message_group: MessageGroup | None = Field(default=None, description="FIFO message group key.")
    deliver_at: datetime | None = Field(
        default=None,
        description="Not receivable before this time (a timer message), with its time zone; "
        "a time past means now; at most max_delay_seconds (a server setting, 3 days) ahead. "
        "On a half message: receivable at this time once committed, never before the commit. "
        "Not with delay_seconds nor message_group.",
        examples=["2030-01-01T12:00:00Z"],
    )
    delay_seconds: DelaySeconds | None = Field(
        default=None,
        description="Not receivable before this many seconds from now (a delay message); "
        "the same as deliver_at, counted from the send.",
    )
    trace_context: TraceContext | None = Field(
        default=None,
        description="A W3C traceparent (00-<trace id>-<parent id>-<flags>), handed to "
        "consumers with the message (RocketMQ's trace_context).",
        examples=["00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"],
    )

    # The decoded body, kept from validation so it is decoded once.
    _body: bytes = PrivateAttr(default=b"")

    @model_validator(mode="after")
    def _one_body(self) -> Self:
        if (self.body_base64 is None) == (self.body_text is None):
            raise ValueError("give the body as exactly one of body_base64 or body_text")
        if self.deliver_at is not None and self.delay_seconds is not None:
            raise ValueError("give at most one of deliver_at or delay_seconds")
        if self.body_base64 is not None:
            try:
                self._body = base64.b64decode(self.body_base64, validate=True)
            except (binascii.Error, ValueError):
                raise ValueError("body_base64 is not valid base64") from None
        else:
            self._body = (self.body_text or "").encode()
        return self

    def to_message(self) -> NewMessage:
        return NewMessage(
            topic=self.topic,
            body=self._body,
            producer_group=self.producer_group,
            tags=self.tags,
            keys=tuple(self.keys),
            properties=dict(self.properties),
            message_id=self.message_id,
            check_immunity_seconds=self.check_immunity_seconds,
            message_group=self.message_group,
            deliver_at=self.deliver_at or deliver_at_of(self.delay_seconds),
            trace_context=self.trace_context,
        )


class BatchIn(RequestIn):
    messages: Annotated[list[MessageIn], Field(json_schema_extra={"minItems": 1})] = Field(
        description="At most max_batch_size, a server setting."
    )


class SendResultOut(BaseModel):
    offset: int
    message_id: str
    transaction_id: str | None
    state: str
    created: bool = Field(
        description="False when an earlier send with this message id is returned."
    )
    recall_handle: str | None = Field(
        default=None,
        description="A message with a delivery time: recalls it until then "
        "(POST /v1/messages/recall).",
    )


class RecallIn(RequestIn):
    recall_handle: RecallHandleField = Field(description="What the send answered with.")
    topic: Topic | None = Field(default=None, description="If given, must be the message's.")


class RecallOut(BaseModel):
    offset: int
    message_id: str
    topic: str
    changed: bool = Field(description="False when it was recalled before.")


class BatchOut(BaseModel):
    results: list[SendResultOut]


# The core's resolutions by name: a Literal, so the JSON schema lists the
# strings in place (typed as the enum, it would be a $ref to a schema of its own).
if TYPE_CHECKING:
    ResolutionName = str  # the Literal is built at run time, out of a type checker's sight
else:
    ResolutionName = Literal[tuple(resolution.value for resolution in Resolution)]


class EndIn(RequestIn):
    producer_group: GroupName
    resolution: ResolutionName
    # Strict: only JSON true or false (not "yes", 0 or 1) says whether this
    # answers a check-back.
    from_check: StrictBool = Field(default=False, description="True when answering a check-back.")
    message_id: MessageId | None = Field(default=None, description="If given, must match.")

    @property
    def resolution_value(self) -> Resolution:
        return Resolution(self.resolution)


class EndBatchItemIn(EndIn):
    transaction_id: Annotated[MessageId, Field(max_length=ID_MAX_LENGTH)]


class EndBatchIn(RequestIn):
    requests: Annotated[list[EndBatchItemIn], Field(json_schema_extra={"minItems": 1})] = Field(
        description="At most max_batch_size, with no transaction id twice."
    )


class EndBatchItemOut(BaseModel):
    transaction_id: str
    ok: bool
    offset: int | None = None
    message_id: str | None = None
    state: str | None = None
    changed: bool | None = None
    error: str | None = Field(default=None, description="The error code when ok is false.")
    message: str | None = None

    @classmethod
    def of(cls, request: EndRequest, outcome: EndResult | CoordinatorError) -> EndBatchItemOut:
        if isinstance(outcome, CoordinatorError):
            return cls(
                transaction_id=request.transaction_id,
                ok=False,
                error=outcome.code,
                message=outcome.message,
            )
        return cls(
            transaction_id=outcome.transaction_id,
            ok=True,
            offset=outcome.offset,
            message_id=outcome.message_id,
            state=outcome.state,
            changed=outcome.changed,
        )


class EndBatchOut(BaseModel):
    results: list[EndBatchItemOut]


class EndResultOut(BaseModel):
    offset: int
    message_id: str
    transaction_id: str
    state: str
    changed: bool = Field(description="False for unknown and for a repeated resolution.")


class StateCountOut(BaseModel):
    producer_group: str | None
    topic: str
    state: str
    count: int
    oldest_born_at: datetime


class StatusOut(BaseModel):
    pending_total: int
    oldest_pending_transaction_id: str | None
    oldest_pending_age_seconds: float | None
    counts: list[StateCountOut]
    consumer_lag: list[ConsumerLagOut] = Field(
        default_factory=list, description="Per consumer group and topic (view consumer_lag)."
    )


class HealthOut(BaseModel):
    status: Literal["ok", "unavailable"]
    database: Literal["ok", "unreachable"]


class ErrorOut(BaseModel):
    """Every error answer: a stable code, a sentence, and what else applies."""

    error: str = Field(description="A stable code, e.g. state_conflict.")
    message: str = Field(description="What went wrong, for people.")
    # Sent only when it applies, never as null: documented as an optional string.
    current_state: Annotated[str | None, WithJsonSchema({"type": "string"})] = Field(
        default=None, description="On a state_conflict: the state the message is in."
    )
    position: Annotated[int | None, WithJsonSchema({"type": "integer"})] = Field(
        default=None,
        description="On an invalid_filter_expression: the 1-based character where it is wrong.",
    )


# What each error status means on any route; a route may say more of its own
# (openapi.described). docs/http-api.md lists the codes with the same meaning.
ERROR_DESCRIPTIONS: dict[int, str] = {
    400: "`invalid_request`: the request breaks a rule of the coordinator (a name, id, tag, "
    "key, size or limit, or two Authorization headers); the message says which; or "
    "`host_not_allowed`: its Host names a host this server does not answer (allowed_hosts)",
    401: "`unauthenticated`: no token, or one that is unknown or revoked",
    403: "`permission_denied`: the token's permissions do not cover the request; or "
    "`cross_origin_write`: a request from another site's page (Origin, Sec-Fetch-Site)",
    404: "`not_found`: nothing of that name or id",
    408: "`request_timeout`: the request did not arrive whole within "
    "request_read_timeout_seconds (the connection is closed)",
    409: "A conflict with the stored state; `error` says which",
    413: "`request_too_large`: the request's body is over max_request_bytes",
    415: "`unsupported_media_type`: a body not sent as application/json",
    422: "`invalid_request`: a malformed request: a body that is not JSON or has a missing, "
    "unknown or mistyped field, or a parameter of the wrong type or out of range",
    429: "`rate_limited`: over the token's request rate or long polls; or "
    "`too_many_connections`: the server holds max_connections (the connection is closed)",
    503: "`database_unavailable`: PostgreSQL is away; nothing was stored, so the same "
    "request can be sent again (after Retry-After seconds)",
}
