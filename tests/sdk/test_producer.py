"""TransactionProducer end to end against a running coordinator."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
from typing import Any

import psycopg
import pytest

from coordinator.client import (
    CoordinatorUnavailable,
    InvalidRequest,
    LocalTransactionState,
    Message,
    ProducerGroupMismatch,
    SendStatus,
    TransactionListener,
    TransactionProducer,
)
from coordinator.client._protocol import end_call
from tests.conftest import LiveServer
from tests.sdk.conftest import eventually

GROUP = "sdk-producers"
COMMIT, ROLLBACK, UNKNOWN = (
    LocalTransactionState.COMMIT,
    LocalTransactionState.ROLLBACK,
    LocalTransactionState.UNKNOWN,
)


class ScriptedListener(TransactionListener):
    """Answers what it is told; records what it was asked."""

    def __init__(self, execute: Any = COMMIT, check: Any = COMMIT) -> None:
        self.execute = execute
        self.check = check
        self.executed: list[str] = []
        self.checked: list[str] = []
        self.lock = threading.Lock()

    def execute_local_transaction(self, msg: Message, arg: Any) -> LocalTransactionState | None:
        self.executed.append(msg.transaction_id or "")
        if isinstance(self.execute, Exception):
            raise self.execute
        return self.execute

    def check_local_transaction(self, msg: Message) -> LocalTransactionState | None:
        with self.lock:
            self.checked.append(msg.transaction_id or "")
        return self.check


def _state(db: psycopg.Connection, transaction_id: str) -> tuple[str, str | None]:
    return db.execute(
        "SELECT state, resolution_source FROM messages WHERE transaction_id = %s",
        (transaction_id,),
    ).fetchone()


@pytest.mark.parametrize(("answer", "state"), [(COMMIT, "committed"), (ROLLBACK, "rolled_back")])
def test_the_local_transactions_answer_ends_the_transaction(
    server: LiveServer, db: psycopg.Connection, answer: LocalTransactionState, state: str
) -> None:
    listener = ScriptedListener(execute=answer)
    with TransactionProducer(GROUP, listener, server.url) as producer:
        msg = Message("orders", "order 1", tags="created", keys=["o-1"], properties={"p": "1"})
        result = producer.send_message_in_transaction(msg, "arg")

    assert result.send_status is SendStatus.SEND_OK and result.local_state is answer
    assert result.transaction_id == msg.transaction_id == listener.executed[0]
    assert result.offset > 0 and result.message_id == msg.message_id
    assert _state(db, result.transaction_id) == (state, "client")
    assert listener.checked == []


@pytest.mark.parametrize("execute", [UNKNOWN, None, RuntimeError("local transaction blew up")])
def test_unknown_none_or_an_exception_is_resolved_by_check_back(
    server: LiveServer, db: psycopg.Connection, execute: Any
) -> None:
    listener = ScriptedListener(execute=execute, check=COMMIT)
    with TransactionProducer(GROUP, listener, server.url, check_wait_seconds=1) as producer:
        result = producer.send_message_in_transaction(Message("orders", "order 2"))
        assert result.local_state is UNKNOWN
        eventually(lambda: _state(db, result.transaction_id)[0] == "committed")
    assert _state(db, result.transaction_id) == ("committed", "check")
    assert result.transaction_id in listener.checked


def test_a_failed_half_send_never_runs_the_local_transaction(server: LiveServer) -> None:
    listener = ScriptedListener()
    with (
        TransactionProducer(GROUP, listener, server.url) as producer,
        pytest.raises(InvalidRequest, match="topic"),
    ):
        producer.send_message_in_transaction(Message("bad topic!", "x"))
    assert listener.executed == []


def test_an_unreachable_coordinator_is_a_typed_error_after_retries() -> None:
    from coordinator.client import RetryPolicy

    producer = TransactionProducer(
        GROUP,
        ScriptedListener(),
        "http://127.0.0.1:9",  # discard port: nothing listens
        retry=RetryPolicy(retry_seconds=0.5, initial_delay=0.01),
        timeout=1,
    )
    with pytest.raises(CoordinatorUnavailable):
        producer.start()


def test_a_start_that_failed_is_tried_again_by_the_next_start() -> None:
    """Not a producer that looks started but has no heartbeat or check-back threads."""
    from coordinator.client import RetryPolicy

    producer = TransactionProducer(
        GROUP, ScriptedListener(), "http://127.0.0.1:9", retry=RetryPolicy(retry_seconds=0)
    )
    for _ in range(2):
        with pytest.raises(CoordinatorUnavailable):
            producer.start()


def test_api_refusals_are_typed_errors(server: LiveServer, db: psycopg.Connection) -> None:
    with TransactionProducer(GROUP, ScriptedListener(execute=UNKNOWN), server.url) as producer:
        result = producer.send_message_in_transaction(Message("orders", "x"))
    call = end_call("other-group", result.transaction_id, COMMIT, message_id=None, from_check=False)
    with (
        TransactionProducer("other-group", ScriptedListener(), server.url) as other,
        pytest.raises(ProducerGroupMismatch),
    ):
        other._client.call(call)  # ending someone else's transaction is refused


PRODUCER_THAT_DIES = textwrap.dedent(
    """
    import os, sys
    from coordinator.client import (
        LocalTransactionState, Message, TransactionListener, TransactionProducer,
    )

    class DiesMidTransaction(TransactionListener):
        def execute_local_transaction(self, msg, arg):
            print(msg.transaction_id, flush=True)
            os._exit(17)  # the process dies: no end request, no clean shutdown
        def check_local_transaction(self, msg):
            return LocalTransactionState.UNKNOWN

    producer = TransactionProducer(sys.argv[2], DiesMidTransaction(), sys.argv[1]).start()
    producer.send_message_in_transaction(Message("orders", "order from a dying producer"))
    """
)


def test_a_dead_producers_transaction_is_resolved_by_another_instance_of_its_group(
    server: LiveServer, db: psycopg.Connection
) -> None:
    dying = subprocess.run(
        [sys.executable, "-c", PRODUCER_THAT_DIES, server.url, GROUP],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert dying.returncode == 17, dying.stderr
    transaction_id = dying.stdout.strip()
    assert _state(db, transaction_id)[0] == "prepared"

    survivor = ScriptedListener(check=ROLLBACK)
    with TransactionProducer(
        GROUP, survivor, server.url, check_wait_seconds=1, heartbeat_interval=0.5
    ):
        eventually(lambda: _state(db, transaction_id)[0] == "rolled_back")
    assert _state(db, transaction_id) == ("rolled_back", "check")
    assert transaction_id in survivor.checked
