"""Fuzzing the RocketMQ gRPC door: malformed and out-of-range requests to every RPC.

Requests are built from the protocol's own descriptors (any field, any
value its type allows, nested messages a few levels deep), mixed with
realistic values so that checks past the first are reached too. Every RPC
must answer with a RocketMQ status code other than INTERNAL_ERROR (gRPC
itself never fails the call), and the database must hold exactly the
messages whose sends were answered OK.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message_factory import GetMessageClass
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st
from rocketmq.grpc_protocol import definition_pb2 as d
from rocketmq.grpc_protocol import service_pb2 as s

from coordinator.config import Settings
from coordinator.domain.delivery_time import RecallHandle
from tests.grpc_door import OK, GrpcDoor, code, grpc_door, metadata
from tests.own_postgres import own_postgres

pytestmark = pytest.mark.slow

REALISTIC_STRINGS = ["orders", "billing", "*", "TagA || TagB", "", "1.abc", "MSG1", "x" * 200]
INTERNAL = {code("INTERNAL_ERROR"), code("INTERNAL_SERVER_ERROR")}
MAX_DEPTH = 3
TRACE = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def _near_now() -> st.SearchStrategy[int]:
    # Delivery times around now: past, soon, within and beyond the maximum.
    return st.integers(-10, 5 * 24 * 3600).map(lambda ahead: int(time.time()) + ahead)


_text = st.one_of(
    st.sampled_from(REALISTIC_STRINGS),
    st.text(st.characters(exclude_categories=("Cs",)), max_size=40),
)
_SCALARS: dict[int, st.SearchStrategy[Any]] = {
    FieldDescriptor.TYPE_STRING: _text,
    FieldDescriptor.TYPE_BYTES: st.binary(max_size=64),
    FieldDescriptor.TYPE_BOOL: st.booleans(),
    FieldDescriptor.TYPE_INT32: st.integers(-(2**31), 2**31 - 1),
    FieldDescriptor.TYPE_INT64: st.integers(-(2**63), 2**63 - 1),
    FieldDescriptor.TYPE_UINT32: st.integers(0, 2**32 - 1),
    FieldDescriptor.TYPE_UINT64: st.integers(0, 2**64 - 1),
    FieldDescriptor.TYPE_DOUBLE: st.floats(allow_nan=True, allow_infinity=True),
    FieldDescriptor.TYPE_FLOAT: st.floats(width=32, allow_nan=True, allow_infinity=True),
}


def _seconds(full_name: str) -> st.SearchStrategy[dict[str, int]]:
    # Durations and timestamps within what protobuf can serialize; small
    # values (the realistic ones) and large ones alike.
    high = 315_576_000_000 if full_name.endswith("Duration") else 253_402_300_799
    low = -high if full_name.endswith("Duration") else 0
    return st.fixed_dictionaries(
        {"seconds": st.one_of(st.integers(-2, 40), st.integers(low, high))}
    )


def _field(field: FieldDescriptor, depth: int) -> st.SearchStrategy[Any] | None:
    if field.message_type is not None:
        if field.message_type.GetOptions().map_entry:
            return st.dictionaries(_text, _text, max_size=3)
        if depth >= MAX_DEPTH:
            return None
        value = messages(field.message_type, depth + 1)
    elif field.enum_type is not None:
        numbers = [v.number for v in field.enum_type.values]
        value = st.one_of(st.sampled_from(numbers), st.integers(-5, 100_000))
    else:
        value = _SCALARS[field.type]
    if field.is_repeated:
        return st.lists(value, max_size=3)
    return value


def messages(descriptor: Descriptor, depth: int = 0) -> st.SearchStrategy[Any]:
    """Any instance of a protobuf message type, to MAX_DEPTH levels."""
    kind = GetMessageClass(descriptor)
    if descriptor.full_name in ("google.protobuf.Duration", "google.protobuf.Timestamp"):
        return _seconds(descriptor.full_name).map(lambda fields: kind(**fields))
    optional = {}
    for field in descriptor.fields:
        strategy = _field(field, depth)
        if strategy is not None:
            optional[field.name] = strategy
    return st.fixed_dictionaries({}, optional=optional).map(lambda fields: kind(**fields))


def _unary_status(door: GrpcDoor, rpc: str, request: Any) -> Any:
    return door.call(rpc, request, timeout=15).status


def _stream_statuses(door: GrpcDoor, rpc: str, request: Any) -> list[Any]:
    # The client's deadline bounds any long poll the request asks for.
    responses = getattr(door.stub, rpc)(request, metadata=metadata(), timeout=3)
    return [r.status for r in responses if r.HasField("status")]


UNARY = {
    method.name: method.input_type
    for method in s.DESCRIPTOR.services_by_name["MessagingService"].methods
    if not method.client_streaming and not method.server_streaming
}
SERVER_STREAMING = ["ReceiveMessage", "PullMessage"]


@pytest.fixture(scope="module")
def fuzzed(database_url_module: str) -> Iterator[GrpcDoor]:
    with grpc_door(database_url_module, Settings(database_url=None, max_body_bytes=4096)) as door:
        yield door


@pytest.fixture(scope="module")
def database_url_module() -> Iterator[str]:
    # One database for the module: a coordinator starts once for all examples.
    with own_postgres("coordinator-test-fuzz-grpc-") as server:
        yield server.migrated_database("fuzz")


_FUZZ = settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    database=None,
)


@pytest.mark.parametrize("rpc", sorted(UNARY))
def test_every_unary_rpc_answers_a_status_to_any_request(fuzzed: GrpcDoor, rpc: str) -> None:
    @seed(15)
    @_FUZZ
    @given(request=messages(UNARY[rpc]))
    def answer(request: Any) -> None:
        state = _unary_status(fuzzed, rpc, request)
        assert state.code != 0, f"{rpc} answered without a status code"
        assert state.code not in INTERNAL, f"{rpc}: {state.message}"
        assert state.message, f"{rpc} answered code {state.code} without a sentence"

    answer()


@pytest.mark.parametrize("rpc", SERVER_STREAMING)
def test_every_streaming_rpc_answers_a_status_to_any_request(fuzzed: GrpcDoor, rpc: str) -> None:
    kind = s.DESCRIPTOR.services_by_name["MessagingService"].methods_by_name[rpc].input_type

    @seed(15)
    @settings(_FUZZ, max_examples=15)
    @given(request=messages(kind))
    def answer(request: Any) -> None:
        statuses = _stream_statuses(fuzzed, rpc, request)
        assert len(statuses) == 1, f"{rpc} answered {len(statuses)} statuses"
        assert statuses[0].code not in INTERNAL | {0}, f"{rpc}: {statuses[0].message}"

    answer()


def test_telemetry_answers_any_settings_with_a_status(fuzzed: GrpcDoor) -> None:
    @seed(15)
    @_FUZZ
    @given(command=messages(s.TelemetryCommand.DESCRIPTOR))
    def answer(command: Any) -> None:
        replies = list(
            fuzzed.stub.Telemetry(iter([command]), metadata=metadata("", "fuzz@1"), timeout=10)
        )
        if command.WhichOneof("command") == "settings":
            assert len(replies) == 1
            assert replies[0].status.code not in INTERNAL | {0}, replies[0].status.message
        else:
            assert replies == []  # nothing asks for the others: no answer, no crash

    answer()


def test_sends_store_exactly_the_messages_answered_ok(
    fuzzed: GrpcDoor, database_url_module: str
) -> None:
    realistic = st.builds(
        lambda kind, tag, body, group, message_id, due, trace: d.Message(
            topic=d.Resource(name="fuzz"),
            system_properties=d.SystemProperties(
                message_type=kind,
                body_encoding=d.IDENTITY,
                message_id=message_id,
                **({"tag": tag} if tag is not None else {}),
                **({"message_group": group} if group is not None else {}),
                **({"delivery_timestamp": {"seconds": due}} if due is not None else {}),
                **({"trace_context": trace} if trace is not None else {}),
            ),
            body=body,
        ),
        st.sampled_from([0, d.NORMAL, d.FIFO, d.TRANSACTION, d.DELAY, 99]),
        st.one_of(st.none(), _text),
        st.binary(max_size=5000),
        st.one_of(st.none(), _text),
        st.one_of(st.uuids().map(lambda u: f"F{u.hex}"), _text),
        st.one_of(st.none(), st.integers(0, 253_402_300_799), _near_now()),
        st.one_of(st.none(), st.just(TRACE), _text),
    )
    stored_ok: set[str] = set()
    with psycopg.connect(database_url_module) as conn:
        before = {row[0] for row in conn.execute("SELECT message_id FROM messages")}

    @seed(15)
    @_FUZZ
    @given(batch=st.lists(st.one_of(realistic, messages(d.Message.DESCRIPTOR)), max_size=3))
    def send(batch: list[Any]) -> None:
        answer = fuzzed.call("SendMessage", s.SendMessageRequest(messages=batch), timeout=15)
        assert answer.status.code not in INTERNAL | {0}, answer.status.message
        if not batch:
            return
        assert len(answer.entries) == len(batch)
        for entry in answer.entries:
            assert entry.status.code not in INTERNAL | {0}, entry.status.message
            if entry.status.code == OK:
                stored_ok.add(entry.message_id)

    send()
    with psycopg.connect(database_url_module) as conn:
        after = {row[0] for row in conn.execute("SELECT message_id FROM messages")}
    assert stored_ok <= after  # every send answered OK is stored
    assert after - before <= stored_ok  # and nothing else


def test_recall_answers_any_handle_with_a_status(fuzzed: GrpcDoor) -> None:
    """RecallMessage with handles that decode (any topic, offset, message id) and that do not."""
    sent = fuzzed.send(
        d.Message(
            topic=d.Resource(name="fuzz"),
            system_properties=d.SystemProperties(
                message_type=d.DELAY,
                body_encoding=d.IDENTITY,
                message_id="FRECALL1",
                delivery_timestamp={"seconds": int(time.time()) + 3600},
            ),
            body=b"later",
        )
    )
    real = sent.entries[0].recall_handle
    assert real
    handles = st.one_of(
        st.just(real),
        st.builds(
            lambda topic, offset, message_id: RecallHandle(topic, offset, message_id).encode(),
            st.one_of(st.just("fuzz"), _text),
            st.integers(-5, 2**64),
            st.one_of(st.just("FRECALL1"), _text),
        ),
        _text,
    )

    @seed(15)
    @_FUZZ
    @given(handle=handles, topic=st.one_of(st.just("fuzz"), _text))
    def recall(handle: str, topic: str) -> None:
        request = s.RecallMessageRequest(topic=d.Resource(name=topic), recall_handle=handle)
        state = _unary_status(fuzzed, "RecallMessage", request)
        assert state.code not in INTERNAL | {0}, state.message
        assert state.message

    recall()


def test_a_request_that_is_no_protobuf_gets_a_sentence(fuzzed: GrpcDoor) -> None:
    for rpc, answer_type in [
        ("SendMessage", s.SendMessageResponse),
        ("ChangeInvisibleDuration", s.ChangeInvisibleDurationResponse),
    ]:
        raw = fuzzed.channel.unary_unary(
            f"/apache.rocketmq.v2.MessagingService/{rpc}",
            request_serializer=lambda value: value,
            response_deserializer=answer_type.FromString,
        )
        answer = raw(b"\xff\xff\xff\xff garbage", metadata=metadata(), timeout=5)
        assert answer.status.code == code("BAD_REQUEST")
        assert f"not a valid {rpc}Request" in answer.status.message
    receive = fuzzed.channel.unary_stream(
        "/apache.rocketmq.v2.MessagingService/ReceiveMessage",
        request_serializer=lambda value: value,
        response_deserializer=s.ReceiveMessageResponse.FromString,
    )
    (only,) = list(receive(b"\xff\xff", metadata=metadata(), timeout=5))
    assert only.status.code == code("BAD_REQUEST")
    answer = fuzzed.call("QueryRoute", s.QueryRouteRequest(topic=d.Resource(name="fuzz")))
    assert answer.status.code == OK
