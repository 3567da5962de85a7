"""The load's HTTP clients: producers of transactions and consumers of one group.

A producer mints a message id, sends the half message, and ends it with
commit or rollback; each request is sent again on 503 or no answer, the
same message id, the same end, as the SDK does. A consumer long-polls its
group and acks what it receives.
"""

from __future__ import annotations

import time
from typing import Any

import httpx

from bench.failover.ledger import Answer, Door, Kind
from bench.failover.workers import Consumer, Producer
from bench.soak.verdict import Ack
from coordinator.core.ids import new_message_id

_ACK_OUTCOMES = {200: Ack.ACKED, 404: Ack.NOT_FOUND, 409: Ack.STALE}


def request(
    client: httpx.Client,
    kind: Kind,
    path: str,
    body: dict[str, Any],
    *,
    waited: float = 0.0,
    timeout: float | None = None,
    method: str = "POST",
) -> tuple[Answer, Any]:
    """One attempt: its answer, and the JSON body (None without one)."""
    sent_at = time.monotonic()
    try:
        response = client.request(
            method,
            path,
            json=body,
            timeout=timeout if timeout is not None else httpx.USE_CLIENT_DEFAULT,
        )
    except httpx.TransportError as error:
        answer = Answer(
            door=Door.HTTP,
            kind=kind,
            ok=False,
            status=0,
            error=type(error).__name__,
            sent_at=sent_at,
            answered_at=time.monotonic(),
            retryable=True,
            waited=waited,
            detail=str(error),
        )
        return answer, None
    answered_at = time.monotonic()
    try:
        payload = response.json()
    except ValueError:
        payload = None
    status = response.status_code
    ok = 200 <= status < 300
    said = payload if isinstance(payload, dict) and not ok else {}
    answer = Answer(
        door=Door.HTTP,
        kind=kind,
        ok=ok,
        status=status,
        error=None if ok else said.get("error", "not JSON"),
        sent_at=sent_at,
        answered_at=answered_at,
        retryable=status == 503,
        waited=waited,
        detail=None if ok else said.get("message", response.text[:200]),
    )
    return answer, payload


def client(base_url: str, timeout: float, token: str | None) -> httpx.Client:
    headers = {"authorization": f"Bearer {token}"} if token else {}
    return httpx.Client(base_url=base_url, timeout=timeout, headers=headers)


class HttpProducer(Producer):
    door = Door.HTTP

    def run(self) -> None:
        config = self.config
        with client(config.http_url, config.request_timeout, config.token) as http:
            number = 0
            while self.running():
                number += 1
                self._transaction(http, number)

    def _transaction(self, http: httpx.Client, number: int) -> None:
        config = self.config
        message_id = new_message_id()
        resolution = self.resolution()
        self.ledger.minted(message_id, Door.HTTP)
        half = {
            "topic": config.topic,
            "producer_group": config.http_producer_group,
            "message_id": message_id,
            "body_text": f"http {self.index} {number}",
        }
        sent = self.retrier.until_answered(
            Door.HTTP, Kind.PREPARE, lambda: request(http, Kind.PREPARE, "/v1/transactions", half)
        )
        if sent is None or not sent[0].ok:
            return
        transaction_id = sent[1]["transaction_id"]
        self.ledger.prepared(message_id, transaction_id)
        end = {
            "producer_group": config.http_producer_group,
            "resolution": resolution,
            "message_id": message_id,
        }
        path = f"/v1/transactions/{transaction_id}/end"
        ended = self.retrier.until_answered(
            Door.HTTP, Kind.END, lambda: request(http, Kind.END, path, end)
        )
        if ended is None:
            return
        if ended[0].ok:
            self.ledger.ended(transaction_id, resolution)
        elif ended[0].status == 409:
            self.ledger.conflict(transaction_id, ended[0].error or "409")


class HttpConsumer(Consumer):
    door = Door.HTTP

    @property
    def group(self) -> str:
        return self.config.http_group

    def run(self) -> None:
        config = self.config
        receive = {
            "topic": config.topic,
            "max_messages": 16,
            "invisible_seconds": config.invisible_seconds,
            "wait_seconds": config.wait_seconds,
        }
        path = f"/v1/consumer-groups/{self.group}/receive"
        with client(config.http_url, config.request_timeout, config.token) as http:
            while self.running():
                answer, payload = request(
                    http,
                    Kind.RECEIVE,
                    path,
                    receive,
                    waited=config.wait_seconds,
                    timeout=config.wait_seconds + config.request_timeout,
                )
                self.ledger.answer(answer)
                if not answer.ok:
                    self.pause()
                    continue
                for message in payload["messages"]:
                    message_id, attempt = message["message_id"], message["delivery_attempt"]
                    self.ledger.delivered(self.group, message_id, attempt, time.monotonic())
                    outcome = self._ack(http, message["receipt_handle"])
                    self.ledger.acked(self.group, message_id, attempt, outcome)

    def _ack(self, http: httpx.Client, receipt_handle: str) -> Ack:
        path = f"/v1/consumer-groups/{self.group}/ack"
        body = {"receipt_handle": receipt_handle}
        acked = self.retrier.until_answered(
            Door.HTTP, Kind.ACK, lambda: request(http, Kind.ACK, path, body)
        )
        return Ack.FAILED if acked is None else _ACK_OUTCOMES.get(acked[0].status, Ack.FAILED)
