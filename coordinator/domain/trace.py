"""A message's trace context: the producer's W3C `traceparent`, kept for its consumers.

RocketMQ 5 carries it as `system_properties.trace_context`; OpenTelemetry's
RocketMQ instrumentation writes a traceparent there, so one trace spans the
prepare, the commit and the consume. The coordinator keeps it as given once
it is a valid traceparent: version, trace id, parent id and flags in lower-
case hex, neither id all zeros, version ff refused; a later version may
append fields, hence the bound on the whole length.
"""

from __future__ import annotations

import re

from coordinator.domain.errors import InvalidMessage

TRACE_CONTEXT_MAX_LENGTH = 256
TRACE_CONTEXT_PATTERN = r"^[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}(-[\x21-\x7e]+)*$"
_TRACEPARENT = re.compile(TRACE_CONTEXT_PATTERN)


def check_trace_context(value: str | None) -> str | None:
    if value is None:
        return None
    if len(value) > TRACE_CONTEXT_MAX_LENGTH:
        raise InvalidMessage(
            f"the trace context is longer than {TRACE_CONTEXT_MAX_LENGTH} characters"
        )
    refused = InvalidMessage(
        f"the trace context {value[:60]!r} is not a W3C traceparent "
        "(00-<32 hex trace id>-<16 hex parent id>-<2 hex flags>)"
    )
    if not _TRACEPARENT.fullmatch(value):
        raise refused
    version, trace_id, parent_id, _ = value.split("-")[:4]
    if version == "ff" or set(trace_id) == {"0"} or set(parent_id) == {"0"}:
        raise refused
    if version == "00" and len(value) != 55:
        raise refused
    return value
