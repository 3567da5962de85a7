"""The official RocketMQ 5 Python client (`rocketmq-python-client`), unmodified, in a subprocess.

Two halves:

- run as `python -m tests.rocketmq_python_client producer|consumer|push-consumer ...`,
  a process that starts one client (a transactional `Producer` with a
  `TransactionChecker`, a `SimpleConsumer`, or a `PushConsumer` whose
  listener answers by a rule given on the command line), reads JSON commands
  on stdin, one a line, and writes JSON lines on stdout: the answer to each
  command (`{"id", "ok", ...}`) and events of its own (`started`, `check`,
  and `consumed` for each message the listener was given);
- `ClientProcess`, what a test uses to start and drive such a process.

The client runs in a process of its own because it writes its log under
$HOME/logs/rocketmq_python (the test gives it a HOME in a temporary
directory, so nothing lands in the real home), keeps threads and an asyncio
loop that nothing stops from outside, and because a test must be able to
SIGKILL a producer in the middle of a transaction. The test process never
imports `rocketmq`: importing it creates the log directory at once.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, suppress
from pathlib import Path
from typing import Any

from tests.processes import clean_environment, kill_group, stop_group

REPO = Path(__file__).resolve().parents[1]

# Generous bounds: the machine running these tests may be busy.
START_SECONDS = 60.0  # until the client process says it started
CALL_SECONDS = 60.0  # one command; a receive long-polls for at most await + 3 s
EXIT_SECONDS = 15.0  # a clean shutdown tells the server, within its 3 s request timeout


class ClientError(Exception):
    """A command failed in the client process: its exception, as the client raised it."""

    def __init__(self, op: str, answer: dict[str, Any], diagnostics: str) -> None:
        self.answer = answer
        super().__init__(
            f"{op} failed in the client: {answer.get('type')}: {answer.get('error')}\n"
            f"{answer.get('traceback', '')}\n{diagnostics}"
        )


# --- the client process ------------------------------------------------------------------


class _Output:
    """stdout as JSON lines, written whole by one thread at a time.

    The checker runs on the client's own thread, next to the command loop.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()

    def write(self, record: dict[str, Any]) -> None:
        line = json.dumps(record, default=str)
        with self._lock:
            sys.stdout.write(line + "\n")
            sys.stdout.flush()


def _message_record(message: Any) -> dict[str, Any]:
    body: bytes = message.body or b""
    return {
        "message_id": message.message_id,
        "topic": message.topic,
        "tag": message.tag,
        "keys": sorted(message.keys),
        "properties": dict(message.properties),
        "body": body.decode("utf-8", errors="replace"),
        "delivery_attempt": message.delivery_attempt,
        "receipt_handle": message.receipt_handle,
        "corrupted": message.corrupted,
        "delivery_timestamp": message.delivery_timestamp,
        "message_group": message.message_group,
    }


def _new_message(topic: str, command: dict[str, Any]) -> Any:
    from rocketmq import Message

    message = Message()
    message.topic = topic
    message.body = command["body"].encode()
    if command.get("tag"):
        message.tag = command["tag"]
    if command.get("message_group"):
        message.message_group = command["message_group"]
    for key in command.get("keys", []):
        message.keys = key
    for name, value in command.get("properties", {}).items():
        message.add_property(name, value)
    if command.get("delivery_timestamp"):
        message.delivery_timestamp = command["delivery_timestamp"]  # milliseconds
    return message


TOKEN_VARIABLE = "ROCKETMQ_TEST_TOKEN"


def _configuration(endpoint: str) -> Any:
    import os

    from rocketmq import ClientConfiguration, Credentials

    # Without a token no credentials: the client then still sends an
    # authorization header with an empty Credential, which a coordinator
    # without tokens accepts. A token is both keys (docs/security.md).
    token = os.environ.get(TOKEN_VARIABLE)
    return ClientConfiguration(endpoint, Credentials(token, token) if token else Credentials())


def _settings_acknowledged(client: Any, seconds: float) -> bool:
    """Whether the server answered the client's Settings on its Telemetry stream.

    The client sets this (private) event when the answer arrives; for a
    producer that is when the server knows it as a check-back target of its
    topics, for a consumer when its subscription was announced.
    """
    event = getattr(client, "_init_settings_event", None)
    return bool(event is not None and event.wait(seconds))


def _run_producer(args: argparse.Namespace, output: _Output) -> int:
    from rocketmq import Producer, TransactionChecker, TransactionResolution

    resolutions = {
        "commit": TransactionResolution.COMMIT,
        "rollback": TransactionResolution.ROLLBACK,
        "unknown": TransactionResolution.TRANSACTION_RESOLUTION_UNSPECIFIED,
    }
    answers: dict[str, str] = {}  # message_id -> answer, set by the test; else args.checker

    class Checker(TransactionChecker):
        def check(self, message: Any) -> Any:
            answer = answers.get(message.message_id, args.checker)
            output.write({"event": "check", "answer": answer, **_message_record(message)})
            return resolutions[answer]

    # The topics must be given here: the Settings the producer announces on its
    # Telemetry stream (what makes it a check-back target) list only the topics
    # it knows when the stream opens.
    producer = Producer(_configuration(args.endpoint), topics=args.topic, checker=Checker())
    if not _started(producer, output):
        return 1
    open_transactions: dict[str, Any] = {}

    def send(command: dict[str, Any]) -> dict[str, Any]:
        message = _new_message(command["topic"], command)
        how = command.get("transaction")  # None: a normal message
        if how is None:
            receipt = producer.send(message)
        else:
            transaction = producer.begin_transaction()
            receipt = producer.send(message, transaction)
            if how == "commit":
                transaction.commit()
            elif how == "rollback":
                transaction.rollback()
            else:
                open_transactions[receipt.message_id] = transaction
        return {
            "message_id": receipt.message_id,
            "transaction_id": receipt.transaction_id,
            "offset": receipt.offset,
            "recall_handle": receipt.recall_handle,
        }

    def end(command: dict[str, Any]) -> dict[str, Any]:
        transaction = open_transactions.pop(command["message_id"])
        if command["resolution"] == "commit":
            transaction.commit()
        else:
            transaction.rollback()
        return {}

    def answer(command: dict[str, Any]) -> dict[str, Any]:
        answers[command["message_id"]] = command["answer"]
        return {}

    def recall(command: dict[str, Any]) -> dict[str, Any]:
        try:
            return {"message_id": producer.recall_message(command["topic"], command["handle"])}
        except Exception as error:  # the test reads the refusal
            return {"error": str(error)}

    return _serve_commands(
        {"send": send, "end": end, "answer": answer, "recall": recall}, producer.shutdown, output
    )


def _started(client: Any, output: _Output) -> bool:
    """Start a client and report it (with whether the server answered its Settings)."""
    try:
        client.startup()
    except Exception as error:
        output.write({"event": "start_failed", "error": repr(error)})
        return False
    output.write(
        {
            "event": "started",
            "client_id": client.client_id,
            "settings_acknowledged": _settings_acknowledged(client, 10),
        }
    )
    return True


def _run_consumer(args: argparse.Namespace, output: _Output) -> int:
    from rocketmq import FilterExpression, SimpleConsumer
    from rocketmq.grpc_protocol import FilterType

    filter_type = FilterType.SQL if args.sql92 else FilterType.TAG
    consumer = SimpleConsumer(
        _configuration(args.endpoint),
        args.group,
        {args.topic: FilterExpression(args.expression, filter_type)},
        await_duration=args.await_seconds,
    )
    if not _started(consumer, output):
        return 1
    received: dict[str, Any] = {}  # message_id -> the Message last received

    def receive(command: dict[str, Any]) -> dict[str, Any]:
        messages = consumer.receive(command.get("max", 16), command.get("invisible", 30))
        received_at = time.time()  # the test compares it with delivery times
        for message in messages:
            received[message.message_id] = message
        return {
            "messages": [
                {**_message_record(message), "received_at": received_at} for message in messages
            ]
        }

    def ack(command: dict[str, Any]) -> dict[str, Any]:
        consumer.ack(received[command["message_id"]])
        return {}

    def change_invisible(command: dict[str, Any]) -> dict[str, Any]:
        message = received[command["message_id"]]
        consumer.change_invisible_duration(message, command["seconds"])
        # The client replaces the message's receipt handle with the new one.
        return {"receipt_handle": message.receipt_handle}

    return _serve_commands(
        {"receive": receive, "ack": ack, "change_invisible": change_invisible},
        consumer.shutdown,
        output,
    )


def _run_push_consumer(args: argparse.Namespace, output: _Output) -> int:
    """A PushConsumer whose listener fails the messages whose body starts with
    `--fail-prefix` on their first `--fail-times` delivery attempts (-1: always),
    and takes `--consume-ms` over each.

    By the attempt the server counts, not by what this process saw: a
    redelivery may go to another consumer of the group, which must not fail
    it again as if it were new to it.
    """
    from rocketmq import ConsumeResult, FilterExpression, MessageListener, PushConsumer

    class Listener(MessageListener):
        def consume(self, message: Any) -> Any:
            began = time.time()
            time.sleep(args.consume_ms / 1000)
            body = (message.body or b"").decode("utf-8", errors="replace")
            fail = bool(args.fail_prefix) and body.startswith(args.fail_prefix)
            fail = fail and (args.fail_times < 0 or message.delivery_attempt <= args.fail_times)
            output.write(
                {
                    "event": "consumed",
                    "result": "failure" if fail else "success",
                    "began": began,
                    "ended": time.time(),
                    **_message_record(message),
                }
            )
            return ConsumeResult.FAILURE if fail else ConsumeResult.SUCCESS

    consumer = PushConsumer(
        _configuration(args.endpoint),
        args.group,
        Listener(),
        {args.topic: FilterExpression(args.expression)},
        consumption_thread_count=4,
    )
    if not _started(consumer, output):
        return 1
    output.write({"event": "push_settings", "fifo": consumer.fifo})
    return _serve_commands({}, consumer.shutdown, output)


def _serve_commands(
    handlers: dict[str, Callable[[dict[str, Any]], dict[str, Any]]],
    shutdown: Callable[[], None],
    output: _Output,
) -> int:
    """Answer commands until stdin closes or says "shutdown", then shut the client down."""
    for line in sys.stdin:
        if not line.strip():
            continue
        command = json.loads(line)
        if command["op"] == "shutdown":
            break
        try:
            result = handlers[command["op"]](command)
        except Exception as error:
            output.write(
                {
                    "id": command["id"],
                    "ok": False,
                    "type": type(error).__name__,
                    "error": str(error),
                    "traceback": traceback.format_exc(),
                }
            )
        else:
            output.write({"id": command["id"], "ok": True, **result})
    shutdown()
    output.write({"event": "shut_down"})
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.rocketmq_python_client")
    kinds = parser.add_subparsers(dest="kind", required=True)
    producer = kinds.add_parser("producer")
    producer.add_argument("--endpoint", required=True)
    producer.add_argument("--topic", action="append", required=True)
    producer.add_argument("--checker", choices=["commit", "rollback", "unknown"], required=True)
    consumer = kinds.add_parser("consumer")
    consumer.add_argument("--endpoint", required=True)
    consumer.add_argument("--group", required=True)
    consumer.add_argument("--topic", required=True)
    consumer.add_argument("--expression", default="*")
    consumer.add_argument("--sql92", action="store_true", help="the expression is SQL92")
    consumer.add_argument("--await-seconds", type=int, default=2)
    push = kinds.add_parser("push-consumer")
    push.add_argument("--endpoint", required=True)
    push.add_argument("--group", required=True)
    push.add_argument("--topic", required=True)
    push.add_argument("--expression", default="*")
    push.add_argument("--fail-prefix", default="")
    push.add_argument("--fail-times", type=int, default=1)
    push.add_argument("--consume-ms", type=int, default=0)
    args = parser.parse_args(argv)
    output = _Output()
    if args.kind == "producer":
        return _run_producer(args, output)
    if args.kind == "push-consumer":
        return _run_push_consumer(args, output)
    return _run_consumer(args, output)


# --- the test's side ---------------------------------------------------------------------


class ClientProcess:
    """A running client process: send it commands, read its answers and events."""

    def __init__(self, process: subprocess.Popen[bytes], home: Path, stderr: Path) -> None:
        self.process = process
        self.home = home
        self.stderr = stderr
        self._records: list[dict[str, Any]] = []
        self._changed = threading.Condition()
        self._ids = iter(range(1, 1 << 62))
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self.started: dict[str, Any] = {}

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            try:
                record = json.loads(line)
            except ValueError:
                record = {"event": "garbage", "line": line.decode(errors="replace")}
            with self._changed:
                self._records.append(record)
                self._changed.notify_all()
        with self._changed:
            self._records.append({"event": "exited"})
            self._changed.notify_all()

    def wait_for(
        self, predicate: Callable[[dict[str, Any]], bool], timeout: float, what: str
    ) -> dict[str, Any]:
        """The first record `predicate` accepts, waiting at most `timeout` seconds for it."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while True:
                for record in self._records:
                    if predicate(record):
                        return record
                if any(record.get("event") == "exited" for record in self._records):
                    raise AssertionError(f"client exited before {what}\n{self.diagnostics()}")
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"no {what} within {timeout:g} s\n{self.diagnostics()}")
                self._changed.wait(left)

    def events(self, event: str) -> list[dict[str, Any]]:
        with self._changed:
            return [record for record in self._records if record.get("event") == event]

    def call(self, op: str, timeout: float = CALL_SECONDS, **arguments: Any) -> dict[str, Any]:
        """Run one command; its answer, or ClientError with the client's exception."""
        command_id = next(self._ids)
        self._write({"op": op, "id": command_id, **arguments})
        answer = self.wait_for(lambda r: r.get("id") == command_id, timeout, f"answer to {op}")
        if not answer["ok"]:
            raise ClientError(op, answer, self.diagnostics())
        return answer

    def _write(self, command: dict[str, Any]) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps(command).encode() + b"\n")
        self.process.stdin.flush()

    def kill(self) -> None:
        """SIGKILL: the client says goodbye to nobody, its streams just break."""
        kill_group(self.process)
        with suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=EXIT_SECONDS)

    def client_log(self) -> str:
        log = self.home / "logs" / "rocketmq_python" / "rocketmq_client.log"
        return log.read_text(errors="replace") if log.exists() else ""

    def diagnostics(self) -> str:
        """The process's stderr and the end of the client's own log, for failure messages."""
        stderr = self.stderr.read_text(errors="replace") if self.stderr.exists() else ""
        return (
            f"--- client stderr ---\n{stderr[-4000:]}\n"
            f"--- client log (end) ---\n{self.client_log()[-6000:]}"
        )

    def close(self) -> None:
        """Shut the client down cleanly (it tells the server), and make sure it is gone."""
        if self.process.poll() is None:
            with suppress(OSError, ValueError):
                assert self.process.stdin is not None
                self.process.stdin.close()
            with suppress(subprocess.TimeoutExpired):
                self.process.wait(timeout=EXIT_SECONDS)
        stop_group(self.process)
        if self.process.stdout is not None:
            self.process.stdout.close()
        self._reader.join(timeout=EXIT_SECONDS)


@contextmanager
def client_process(
    workdir: Path, name: str, *arguments: str, token: str | None = None
) -> Iterator[ClientProcess]:
    """`python -m tests.rocketmq_python_client ARGUMENTS`, started, stopped when the block ends.

    Its HOME is a directory of its own under `workdir`: the client's log is there.
    With `token`, the client's access key and secret key are that token.
    """
    variables = {TOKEN_VARIABLE: token} if token else {}
    home = workdir / f"home-{name}"
    home.mkdir(parents=True, exist_ok=True)
    stderr = workdir / f"{name}.stderr"
    with stderr.open("wb") as errors:
        process = subprocess.Popen(
            [sys.executable, "-m", "tests.rocketmq_python_client", *arguments],
            cwd=REPO,
            env=clean_environment({"HOME": str(home), "PYTHONUNBUFFERED": "1", **variables}),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=errors,
            start_new_session=True,
        )
    client = ClientProcess(process, home, stderr)
    try:
        client.started = client.wait_for(
            lambda r: r.get("event") in ("started", "start_failed"), START_SECONDS, "start"
        )
        if client.started["event"] != "started":
            raise AssertionError(f"client did not start: {client.started}\n{client.diagnostics()}")
        yield client
    finally:
        client.close()


def producer_process(
    workdir: Path,
    name: str,
    endpoint: str,
    topics: list[str],
    checker: str,
    token: str | None = None,
) -> AbstractContextManager[ClientProcess]:
    """A transactional producer of `topics` whose checker answers `checker` (see main)."""
    topic_arguments = [argument for topic in topics for argument in ("--topic", topic)]
    return client_process(
        workdir,
        name,
        "producer",
        "--endpoint",
        endpoint,
        *topic_arguments,
        "--checker",
        checker,
        token=token,
    )


def consumer_process(
    workdir: Path,
    name: str,
    endpoint: str,
    group: str,
    topic: str,
    expression: str = "*",
    await_seconds: int = 2,
    sql92: bool = False,
) -> AbstractContextManager[ClientProcess]:
    """A SimpleConsumer of `group` on `topic` with the filter `expression` (tag, or SQL92)."""
    return client_process(
        workdir,
        name,
        "consumer",
        "--endpoint",
        endpoint,
        "--group",
        group,
        "--topic",
        topic,
        "--expression",
        expression,
        "--await-seconds",
        str(await_seconds),
        *(["--sql92"] if sql92 else []),
    )


def push_consumer_process(
    workdir: Path,
    name: str,
    endpoint: str,
    group: str,
    topic: str,
    *,
    fail_prefix: str = "",
    fail_times: int = 1,
    consume_ms: int = 0,
) -> AbstractContextManager[ClientProcess]:
    """A PushConsumer of `group` on `topic` whose listener answers by the rule of main."""
    return client_process(
        workdir,
        name,
        "push-consumer",
        "--endpoint",
        endpoint,
        "--group",
        group,
        "--topic",
        topic,
        "--fail-prefix",
        fail_prefix,
        "--fail-times",
        str(fail_times),
        "--consume-ms",
        str(consume_ms),
    )


if __name__ == "__main__":
    sys.exit(main())
