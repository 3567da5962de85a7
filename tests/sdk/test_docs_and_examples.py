"""docs/sdk.md stays true: its SDK snippet and its example commands run as written.

The snippet is taken from the page and run against a live coordinator (only
its endpoint changed); the examples are run with the command the page gives
(`.venv/bin/python examples/...`, from the repository's root), given the live
coordinator's endpoint and a short run.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

import httpx
import psycopg

from tests.conftest import LiveServer
from tests.processes import stop_group
from tests.sdk.conftest import eventually

REPO = Path(__file__).resolve().parents[2]
SDK_PAGE = REPO / "docs" / "sdk.md"
DOCUMENTED_ENDPOINT = "http://127.0.0.1:8080"
RUN_SECONDS = 120


def _section(page: str, heading: str) -> str:
    start = page.index(f"\n{heading}\n")
    end = page.find("\n## ", start + len(heading) + 2)
    return page[start : end if end != -1 else len(page)]


def _blocks(text: str, language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", text, flags=re.DOTALL)


def documented_commands() -> dict[str, list[str]]:
    """The example commands of docs/sdk.md's Examples, by script name, as argv."""
    (block,) = _blocks(_section(SDK_PAGE.read_text(), "## Examples"), "sh")
    commands = {}
    for line in block.strip().splitlines():
        argv = shlex.split(line)
        commands[Path(argv[1]).name] = argv
    return commands


def _with(argv: list[str], **options: object) -> list[str]:
    """argv with each `--option value` set (replaced, or added)."""
    argv = list(argv)
    for name, value in options.items():
        flag = "--" + name.replace("_", "-")
        if flag in argv:
            argv[argv.index(flag) + 1] = str(value)
        else:
            argv += [flag, str(value)]
    return argv


def _run(argv: list[str], **options: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        _with(argv, **options), cwd=REPO, capture_output=True, text=True, timeout=RUN_SECONDS
    )


def test_the_examples_are_run_with_the_virtual_environments_python() -> None:
    commands = documented_commands()
    assert set(commands) == {
        "transaction_producer.py",
        "orders_service.py",
        "orders_consumer.py",
    }
    for script, argv in commands.items():
        assert argv[0] == ".venv/bin/python", argv
        assert (REPO / argv[1]).is_file(), argv
        # Each example's own docstring gives the same command.
        assert f".venv/bin/python {argv[1]}" in (REPO / argv[1]).read_text(), script
    assert (REPO / ".venv/bin/python").exists(), (
        "the documented commands need the virtual environment .venv (see README.md)"
    )


def test_the_sdk_snippet_runs_as_it_is(
    server: LiveServer, db: psycopg.Connection, tmp_path: Path
) -> None:
    snippet = _blocks(SDK_PAGE.read_text(), "python")[0]
    assert snippet.count(DOCUMENTED_ENDPOINT) == 1
    run = subprocess.run(
        [sys.executable, "-c", snippet.replace(DOCUMENTED_ENDPOINT, server.url)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=RUN_SECONDS,
    )
    assert run.returncode == 0, run.stderr
    status, message_id, transaction_id, local_state = run.stdout.split()
    assert (status, local_state) == ("SEND_OK", "commit")
    stored = db.execute(
        "SELECT message_id, state, tags, convert_from(body, 'UTF8') FROM messages "
        "WHERE transaction_id = %s",
        (transaction_id,),
    ).fetchone()
    assert stored == (message_id, "committed", "created", "order-1001 ada 1999")


def test_the_rocketmq_transaction_producer_example(
    server: LiveServer, db: psycopg.Connection
) -> None:
    run = _run(documented_commands()["transaction_producer.py"], endpoint=server.url, seconds=4)
    assert run.returncode == 0, run.stderr
    assert run.stdout.count("local state unknown") == 10
    time.sleep(0.5)
    states = dict(
        db.execute(
            "SELECT convert_from(body, 'UTF8'), state FROM messages WHERE topic = 'TopicTest'"
        ).fetchall()
    )
    # index % 3: 0 stays unknown (still prepared), 1 commits, 2 rolls back
    for i in range(10):
        expected = ["prepared", "committed", "rolled_back"][i % 3]
        assert states[f"Hello RocketMQ {i}"] == expected, (i, states)


def _send_the_readme_tour_message(url: str) -> None:
    """Steps 2 and 3 of the README's tour: the same topic and tag as the orders."""
    sent = httpx.post(
        f"{url}/v1/transactions",
        json={
            "topic": "orders",
            "producer_group": "order-svc",
            "tags": "created",
            "body_text": "order 1001 created",
        },
    ).json()
    ended = httpx.post(
        f"{url}/v1/transactions/{sent['transaction_id']}/end",
        json={"producer_group": "order-svc", "resolution": "commit"},
    )
    assert ended.json()["state"] == "committed"


def test_the_orders_examples_invoice_orders_and_skip_what_is_not_one(
    server: LiveServer, database_url: str, db: psycopg.Connection
) -> None:
    commands = documented_commands()
    consumer = subprocess.Popen(
        _with(commands["orders_consumer.py"], endpoint=server.url, seconds=15),
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        # It subscribes as it starts: messages committed from then on reach it.
        eventually(
            lambda: db.execute(
                "SELECT 1 FROM subscriptions WHERE consumer_group = 'invoicing'"
            ).fetchone(),
            timeout=60,
        )
        _send_the_readme_tour_message(server.url)
        service = _run(
            commands["orders_service.py"],
            orders=3,
            endpoint=server.url,
            database_url=database_url,
        )
        assert service.returncode == 0, service.stderr
        out, err = consumer.communicate(timeout=RUN_SECONDS)
    finally:
        stop_group(consumer)  # type: ignore[arg-type]
    assert consumer.returncode == 0, err
    placed = sorted(line.split(":")[0] for line in service.stdout.splitlines())
    invoiced = sorted(line.split()[1] for line in out.splitlines())
    assert invoiced == placed and len(invoiced) == 3
    (skipped,) = [line for line in err.splitlines() if "skipped message" in line]
    assert "its body is not an order (b'order 1001 created')" in skipped
    assert "Traceback" not in err
    # Acked, every one of them, at the first attempt: nothing waits for a
    # redelivery, nothing was dead-lettered.
    assert db.execute(
        "SELECT count(*) FROM deliveries WHERE consumer_group = 'invoicing'"
    ).fetchone() == (0,)
    assert db.execute(
        "SELECT count(*) FROM dead_letters WHERE consumer_group = 'invoicing'"
    ).fetchone() == (0,)
