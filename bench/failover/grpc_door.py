"""The load's gRPC clients, on the raw RocketMQ 5 stubs: transaction producers, and
SimpleConsumers of one group.

A producer sends a TRANSACTION message with a message id of its own, then
ends it COMMIT or ROLLBACK with the transaction id the send answered. It
sends each request again, unchanged, on HA_NOT_AVAILABLE (what the door
answers while PostgreSQL is away) and when gRPC itself fails (UNAVAILABLE,
DEADLINE_EXCEEDED): a send repeated with its message id is answered with
the first send's transaction id ("stored before"), an end repeated with its
resolution OK ("unchanged").

Every thread has a channel, so a connection, of its own (as separate client
processes would), which reconnects quickly after a failure: gRPC's default
reconnect backoff grows to two minutes.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import grpc
from rocketmq.grpc_protocol import definition_pb2 as d
from rocketmq.grpc_protocol import service_pb2_grpc

from bench.failover.ledger import Answer, Door, Kind
from bench.failover.workers import Consumer, Producer
from bench.rocketmq_requests import (
    OK,
    ack_request,
    code,
    code_name,
    end_request,
    message,
    metadata,
    receive_request,
    receive_status,
    received_messages,
    send_request,
)
from bench.soak.verdict import Ack
from coordinator.core.ids import new_message_id

UNAVAILABLE = code("HA_NOT_AVAILABLE")
NOTHING_TO_RECEIVE = code("MESSAGE_NOT_FOUND")
CONFLICT = code("PRECONDITION_FAILED")
RETRIED_BY_GRPC = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)
_ACK_OUTCOMES = {
    OK: Ack.ACKED,
    code("NOT_FOUND"): Ack.NOT_FOUND,
    code("INVALID_RECEIPT_HANDLE"): Ack.STALE,
}
_RESOLUTIONS = {"commit": d.COMMIT, "rollback": d.ROLLBACK}
CHANNEL_OPTIONS = [
    ("grpc.use_local_subchannel_pool", 1),
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.min_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 1000),
]


class _Stub:
    """One channel, and calls on it recorded as answers."""

    def __init__(self, target: str, token: str | None, client_id: str, timeout: float) -> None:
        self.channel = grpc.insecure_channel(target, options=CHANNEL_OPTIONS)
        self.stub = service_pb2_grpc.MessagingServiceStub(self.channel)
        self.token = token
        self.client_id = client_id
        self.timeout = timeout

    def call(
        self,
        kind: Kind,
        rpc: str,
        request: Any,
        status_of: Callable[[Any], Any],
        *,
        ok_codes: tuple[int, ...] = (OK,),
        waited: float = 0.0,
    ) -> tuple[Answer, Any]:
        """One attempt: its answer and the response (None when gRPC failed).

        A server-streaming call (ReceiveMessage) answers the list of its responses.
        """
        sent_at = time.monotonic()
        try:
            response = getattr(self.stub, rpc)(
                request,
                metadata=metadata(self.token, self.client_id),
                timeout=self.timeout + waited,
            )
            if rpc == "ReceiveMessage":
                response = list(response)
        except grpc.RpcError as error:
            status = error.code()  # type: ignore[attr-defined]
            answer = Answer(
                door=Door.GRPC,
                kind=kind,
                ok=False,
                status=0,
                error=status.name if status is not None else "UNKNOWN",
                sent_at=sent_at,
                answered_at=time.monotonic(),
                retryable=status in RETRIED_BY_GRPC,
                waited=waited,
                detail=error.details(),  # type: ignore[attr-defined]
            )
            return answer, None
        answered_at = time.monotonic()
        said = status_of(response)
        number = int(said.code)
        ok = number in ok_codes
        answer = Answer(
            door=Door.GRPC,
            kind=kind,
            ok=ok,
            status=number,
            error=None if ok else code_name(number),
            sent_at=sent_at,
            answered_at=answered_at,
            retryable=number == UNAVAILABLE,
            waited=waited,
            detail=None if ok else said.message,
        )
        return answer, response

    def close(self) -> None:
        self.channel.close()


def _entry_status(response: Any) -> Any:
    """A one-message send's status: its entry's (the response's own repeats it)."""
    return response.entries[0].status if response.entries else response.status


def _status(response: Any) -> Any:
    return response.status


class GrpcProducer(Producer):
    door = Door.GRPC

    def run(self) -> None:
        config = self.config
        assert config.grpc_target is not None
        stub = _Stub(config.grpc_target, config.token, f"{self.name}@load", config.request_timeout)
        try:
            number = 0
            while self.running():
                number += 1
                self._transaction(stub, number)
        finally:
            stub.close()

    def _transaction(self, stub: _Stub, number: int) -> None:
        topic = self.config.topic
        message_id = new_message_id()
        resolution = self.resolution()
        self.ledger.minted(message_id, Door.GRPC)
        half = message(
            topic,
            f"grpc {self.index} {number}".encode(),
            kind=d.TRANSACTION,
            message_id=message_id,
        )
        request = send_request(half)
        sent = self.retrier.until_answered(
            Door.GRPC,
            Kind.PREPARE,
            lambda: stub.call(Kind.PREPARE, "SendMessage", request, _entry_status),
        )
        if sent is None or not sent[0].ok:
            return
        entry = sent[1].entries[0]
        self.ledger.prepared(message_id, entry.transaction_id)
        end = end_request(topic, entry, _RESOLUTIONS[resolution])
        ended = self.retrier.until_answered(
            Door.GRPC, Kind.END, lambda: stub.call(Kind.END, "EndTransaction", end, _status)
        )
        if ended is None:
            return
        if ended[0].ok:
            self.ledger.ended(entry.transaction_id, resolution)
        elif ended[0].status == CONFLICT:
            self.ledger.conflict(entry.transaction_id, ended[0].error or "PRECONDITION_FAILED")


class GrpcConsumer(Consumer):
    door = Door.GRPC

    @property
    def group(self) -> str:
        return self.config.grpc_group

    def run(self) -> None:
        config = self.config
        assert config.grpc_target is not None
        stub = _Stub(config.grpc_target, config.token, f"{self.name}@load", config.request_timeout)
        request = receive_request(
            self.group,
            config.topic,
            wait=config.wait_seconds,
            invisible=config.invisible_seconds,
        )
        try:
            while self.running():
                answer, responses = stub.call(
                    Kind.RECEIVE,
                    "ReceiveMessage",
                    request,
                    receive_status,
                    ok_codes=(OK, NOTHING_TO_RECEIVE),
                    waited=config.wait_seconds,
                )
                self.ledger.answer(answer)
                if not answer.ok:
                    self.pause()
                    continue
                for received in received_messages(responses):
                    self._handle(stub, received)
        finally:
            stub.close()

    def _handle(self, stub: _Stub, received: Any) -> None:
        system = received.system_properties
        message_id, attempt = system.message_id, system.delivery_attempt
        self.ledger.delivered(self.group, message_id, attempt, time.monotonic())
        request = ack_request(self.group, self.config.topic, received)
        acked = self.retrier.until_answered(
            Door.GRPC,
            Kind.ACK,
            lambda: stub.call(Kind.ACK, "AckMessage", request, _status),
        )
        outcome = Ack.FAILED if acked is None else _ACK_OUTCOMES.get(acked[0].status, Ack.FAILED)
        self.ledger.acked(self.group, message_id, attempt, outcome)
